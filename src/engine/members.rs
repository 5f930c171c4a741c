//! Sharing an aggregate (`client.share`, `client.acceptShare`, `client.unshare`,
//! `client.members`): the rules, apart from the `fetch` that carries them
//! (`crate::browser::members`), so they are tested natively.
//!
//! The gateway's members endpoint (`GET`/`PUT /v1/aggregates/{typeId}/{id}/members`, `POST
//! …/members/accept`: a share is an invitation the grantee accepts) is online
//! by nature: a grant decided offline could not be checked (only the owner may grant) and would
//! have to be queued and could then fail long after the app moved on. So these calls never
//! queue: offline they fail at once (`OFFLINE`), and every refusal of the gateway becomes one
//! typed code ([`refusal`]).

use celeriant_sync_protocol::codes::gateway as g;

use super::errors::ErrorCode;

/// The longest principal the gateway accepts, in bytes.
pub const MAX_PRINCIPAL_BYTES: usize = 256;

/// What a member may do, as `share` takes it and the gateway names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Access {
    /// Read and watch.
    Read,
    /// Read, watch and append.
    ReadWrite,
}

impl Access {
    /// `"read"` or `"readWrite"`, as `share` takes it; anything else is refused.
    pub fn parse(text: &str) -> Option<Access> {
        match text {
            "read" => Some(Access::Read),
            "readWrite" => Some(Access::ReadWrite),
            _ => None,
        }
    }

    fn wire(self) -> &'static str {
        match self {
            Access::Read => "read",
            Access::ReadWrite => "readWrite",
        }
    }
}

/// Checks a principal before anything is sent, with the gateway's own rules: `user:<subject>`
/// (non-empty) or `device:<clientId>` (a lower-case hyphenated UUID), at most
/// [`MAX_PRINCIPAL_BYTES`], no control characters. `Err` says why.
pub fn check_principal(text: &str) -> Result<(), String> {
    if text.len() > MAX_PRINCIPAL_BYTES {
        return Err(format!(
            "a principal has at most {MAX_PRINCIPAL_BYTES} bytes"
        ));
    }
    if text.chars().any(char::is_control) {
        return Err("a principal has no control characters".into());
    }
    if let Some(id) = text.strip_prefix("device:") {
        return match uuid::Uuid::parse_str(id) {
            Ok(u) if u.to_string() == id => Ok(()),
            _ => Err(format!(
                "{text:?}: device:<clientId> takes a lower-case hyphenated UUID"
            )),
        };
    }
    match text.strip_prefix("user:") {
        Some(sub) if !sub.is_empty() => Ok(()),
        _ => Err(format!(
            "{text:?} is not user:<subject> or device:<clientId>"
        )),
    }
}

/// The `PUT` body granting `access` (or, `None`, revoking) to `principal` (already checked).
pub fn put_body(principal: &str, access: Option<Access>) -> String {
    let access = access.map_or("none", Access::wire);
    // `principal` passed `check_principal` (no control characters), so escaping `"` and `\`
    // is all JSON needs; serde_json is not a dependency of the wasm build.
    let escaped = principal.replace('\\', "\\\\").replace('"', "\\\"");
    format!(r#"{{"principal":"{escaped}","access":"{access}"}}"#)
}

/// The code a refusal of the members endpoint is thrown with: the HTTP status and, when the
/// gateway answered with one, its code.
pub fn refusal(status: u16, code: Option<u32>) -> ErrorCode {
    match code {
        Some(g::NOT_FOUND) => ErrorCode::NotFound,
        Some(g::NOT_OWNER) => ErrorCode::NotOwner,
        Some(g::MEMBERS_NOT_ALLOWED) => ErrorCode::MembersNotAllowed,
        Some(g::TOO_MANY_MEMBERS) => ErrorCode::TooManyMembers,
        Some(g::INVALID_FIELD) => ErrorCode::InvalidPrincipal,
        Some(g::AGGREGATE_TYPE_FORBIDDEN) => ErrorCode::TypeForbidden,
        _ if status == 401 => ErrorCode::Unauthorized,
        _ => ErrorCode::RequestFailed,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn principals_are_checked_as_the_gateway_does() {
        for good in [
            "user:alice",
            "user:a b",
            "device:3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e0301",
        ] {
            assert!(check_principal(good).is_ok(), "{good}");
        }
        for bad in [
            "",
            "alice",
            "user:",
            "device:3B1F8E2C-9D4A-4C6B-B5E7-2A9C8D1E0301",
            "device:x",
            "user:a\nb",
            &format!("user:{}", "x".repeat(252)),
        ] {
            assert!(check_principal(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn bodies_and_refusals() {
        assert_eq!(
            put_body("user:a\"b", Some(Access::ReadWrite)),
            r#"{"principal":"user:a\"b","access":"readWrite"}"#
        );
        assert_eq!(
            put_body("user:a", None),
            r#"{"principal":"user:a","access":"none"}"#
        );
        assert_eq!(Access::parse("write"), None);
        assert_eq!(refusal(404, Some(40400)), ErrorCode::NotFound);
        assert_eq!(refusal(403, Some(40303)), ErrorCode::NotOwner);
        assert_eq!(refusal(403, Some(40304)), ErrorCode::MembersNotAllowed);
        assert_eq!(refusal(400, Some(40021)), ErrorCode::TooManyMembers);
        assert_eq!(refusal(401, Some(40103)), ErrorCode::Unauthorized);
        assert_eq!(refusal(403, Some(40301)), ErrorCode::TypeForbidden);
        assert_eq!(refusal(503, Some(50301)), ErrorCode::RequestFailed);
        assert_eq!(refusal(502, None), ErrorCode::RequestFailed);
    }
}
