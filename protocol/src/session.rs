//! `POST /v1/session`: how a device proves its client id and gets a session token.
//!
//! The client id is the device's identity: `u128::from_le_bytes(SHA-256(SPKI DER)[..16])`,
//! written as a UUID (`Uuid::from_u128`), exactly as Celeriant derives it. A device proves it
//! holds the key by signing a nonce — the current Unix time in milliseconds, in decimal —
//! with RSASSA-PKCS1-v1_5 / SHA-256 under its RSA-2048 key. The gateway answers with a
//! short-lived token bound to that client id; every write and read then carries it as
//! `Authorization: Bearer <token>`, and a write whose `clientId` is not the token's is refused.
//!
//! Every answer of the endpoint, errors included, carries `serverTime` so a device whose clock
//! is off can correct its next nonce (the `Date` header is not readable cross-origin).

use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::strict::object_only;

/// Path of the session endpoint.
pub const SESSION_PATH: &str = "/v1/session";

/// The longest `publicKey` accepted, in base64 characters (an RSA-2048 SPKI is 392).
pub const MAX_PUBLIC_KEY_CHARS: usize = 1_024;
/// The longest `signature` accepted, in base64 characters (an RSA-2048 signature is 344).
pub const MAX_SIGNATURE_CHARS: usize = 512;
/// The longest `nonce` accepted, in digits (Unix milliseconds have 13 until the year 2286).
pub const MAX_NONCE_DIGITS: usize = 16;
/// The largest body `POST /v1/session` accepts, in bytes.
pub const MAX_SESSION_BODY_BYTES: usize = 4_096;
/// How old a nonce may be, in milliseconds (Celeriant's rule: 2 minutes).
pub const NONCE_MAX_AGE_MS: u64 = 120_000;
/// How far ahead of the gateway's clock a nonce may be, in milliseconds (Celeriant's: 60 s).
pub const NONCE_MAX_AHEAD_MS: u64 = 60_000;

/// The body of `POST /v1/session`.
///
/// Parsed strictly (unknown fields and positional arrays are refused).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionRequest {
    /// The device's public key: standard padded base64 of its SubjectPublicKeyInfo DER
    /// (WebCrypto `exportKey("spki", ...)`), an RSA key of exactly 2048 bits.
    pub public_key: String,
    /// The current Unix time in milliseconds, in decimal (`"1764450000000"`).
    pub nonce: String,
    /// Standard padded base64 of the RSASSA-PKCS1-v1_5 / SHA-256 signature over the nonce's
    /// UTF-8 bytes.
    pub signature: String,
}

#[derive(Deserialize)]
#[serde(
    remote = "SessionRequest",
    rename = "SessionRequest",
    rename_all = "camelCase",
    deny_unknown_fields
)]
struct SessionRequestDef {
    public_key: String,
    nonce: String,
    signature: String,
}

object_only!(SessionRequest => SessionRequestDef);

/// The answer of a successful `POST /v1/session` (HTTP 200).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SessionResponse {
    /// The client id proven by the key, to send as every write's `clientId`.
    pub client_id: Uuid,
    /// Who the session acts for in the gateway's access policy: `user:<sub>` (the app
    /// token's subject) when app tokens are required, otherwise `device:<clientId>`. Aggregates
    /// created under this session are owned by it; members are granted to principals. A client
    /// binds its outbox to the first principal it sees and never sends under another
    /// (docs/client.md, "One browser, many users").
    pub principal: String,
    /// The session token, for `Authorization: Bearer <token>`. Opaque to the client.
    pub token: String,
    /// When the token stops being accepted, Unix milliseconds (gateway clock).
    pub expires_at: u64,
    /// The gateway's clock when it answered, Unix milliseconds.
    pub server_time: u64,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_request_is_strict_and_the_response_has_the_documented_names() {
        let ok = r#"{"publicKey":"AAAA","nonce":"1764450000000","signature":"BBBB"}"#;
        let parsed: SessionRequest = serde_json::from_str(ok).unwrap();
        assert_eq!(parsed.nonce, "1764450000000");
        assert_eq!(serde_json::to_string(&parsed).unwrap(), ok);
        for bad in [
            r#"{"publicKey":"AAAA","nonce":"1","signature":"B","clientId":"x"}"#,
            r#"{"publicKey":"AAAA","nonce":1764450000000,"signature":"B"}"#,
            r#"["AAAA","1","B"]"#,
            r#"{"publicKey":"AAAA","nonce":"1"}"#,
        ] {
            assert!(
                serde_json::from_str::<SessionRequest>(bad).is_err(),
                "{bad}"
            );
        }
        let response = SessionResponse {
            client_id: Uuid::from_u128(1),
            principal: "user:alice".into(),
            token: "t".into(),
            expires_at: 2,
            server_time: 1,
        };
        assert_eq!(
            serde_json::to_string(&response).unwrap(),
            r#"{"clientId":"00000000-0000-0000-0000-000000000001","principal":"user:alice","token":"t","expiresAt":2,"serverTime":1}"#
        );
    }
}
