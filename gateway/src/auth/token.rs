//! Session tokens: stateless HS256 JWTs bound to a client id, with an expiry, the principal the
//! session acts for (`crate::access`) and the optional list of aggregate types it may touch.
//!
//! Stateless so that any replica holding the same secret accepts a token another issued, and
//! so that nothing grows with the number of devices. `jsonwebtoken` compares MACs in constant
//! time and checks `exp` (no leeway: a token is refused from the second after its expiry) and
//! the audience, which keeps a session token from being confused with any other JWT signed with
//! the same secret. Tokens are bounded in size before they are parsed.

use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, EncodingKey, Header, Validation};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use celeriant_sync_protocol::codes::gateway as g;

use crate::error::ApiError;

/// The `aud` of every session token.
pub const SESSION_AUDIENCE: &str = "celeriant-gateway/session";
/// The longest bearer token parsed, in bytes.
pub const MAX_TOKEN_BYTES: usize = 8_192;

/// What a session token says.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct SessionClaims {
    /// The client id the device proved.
    pub sub: Uuid,
    /// Always [`SESSION_AUDIENCE`].
    pub aud: String,
    /// Issued at, Unix seconds.
    pub iat: u64,
    /// Expires at, Unix seconds.
    pub exp: u64,
    /// The aggregate types the session may write and read; absent: all.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub types: Option<Vec<Uuid>>,
    /// The principal the session acts for (`user:<sub>` or `device:<clientId>`); absent (a
    /// token issued before principals existed): `device:<sub>`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub principal: Option<String>,
    /// The token's own id (random), so that one token can be revoked and named in logs;
    /// absent in tokens issued before revocation existed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub jti: Option<Uuid>,
}

/// Issues and verifies session tokens under one secret.
pub struct SessionKeys {
    encoding: EncodingKey,
    decoding: DecodingKey,
    validation: Validation,
}

impl SessionKeys {
    /// Keys for `secret`.
    pub fn new(secret: &[u8]) -> Self {
        let mut validation = Validation::new(Algorithm::HS256);
        validation.leeway = 0;
        validation.set_audience(&[SESSION_AUDIENCE]);
        validation.set_required_spec_claims(&["exp", "aud", "sub"]);
        SessionKeys {
            encoding: EncodingKey::from_secret(secret),
            decoding: DecodingKey::from_secret(secret),
            validation,
        }
    }

    /// A signed token for `claims`.
    pub fn issue(&self, claims: &SessionClaims) -> Result<String, String> {
        jsonwebtoken::encode(&Header::new(Algorithm::HS256), claims, &self.encoding)
            .map_err(|e| format!("cannot sign a session token: {e}"))
    }

    /// The claims of a token this gateway issued and that has not expired; otherwise the 401
    /// the client answers by opening a new session.
    pub fn verify(&self, token: &str) -> Result<SessionClaims, ApiError> {
        if token.len() > MAX_TOKEN_BYTES {
            return Err(ApiError::code(
                g::SESSION_INVALID,
                format!("the session token is over {MAX_TOKEN_BYTES} bytes"),
            ));
        }
        jsonwebtoken::decode::<SessionClaims>(token, &self.decoding, &self.validation)
            .map(|data| data.claims)
            .map_err(|e| match e.kind() {
                ErrorKind::ExpiredSignature => ApiError::code(
                    g::SESSION_EXPIRED,
                    "the session has expired; open a new one",
                ),
                _ => ApiError::code(
                    g::SESSION_INVALID,
                    format!("the session token is not valid here ({e}); open a new session"),
                ),
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn claims(exp: u64) -> SessionClaims {
        SessionClaims {
            sub: Uuid::from_u128(7),
            aud: SESSION_AUDIENCE.into(),
            iat: 0,
            exp,
            types: None,
            principal: None,
            jti: None,
        }
    }

    fn now() -> u64 {
        jsonwebtoken::get_current_timestamp()
    }

    #[test]
    fn tokens_verify_under_their_secret_only_and_until_they_expire() {
        let keys = SessionKeys::new(&[1; 32]);
        let token = keys.issue(&claims(now() + 60)).unwrap();
        assert_eq!(keys.verify(&token).unwrap().sub, Uuid::from_u128(7));
        let other = SessionKeys::new(&[2; 32]);
        assert_eq!(
            other.verify(&token).unwrap_err().0.code(),
            Some(g::SESSION_INVALID)
        );
        let expired = keys.issue(&claims(now() - 1)).unwrap();
        assert_eq!(
            keys.verify(&expired).unwrap_err().0.code(),
            Some(g::SESSION_EXPIRED)
        );
        let mut wrong_audience = claims(now() + 60);
        wrong_audience.aud = "app".into();
        let t = keys.issue(&wrong_audience).unwrap();
        assert_eq!(
            keys.verify(&t).unwrap_err().0.code(),
            Some(g::SESSION_INVALID)
        );
        for garbage in ["", "a.b.c", "not a token", &"x".repeat(MAX_TOKEN_BYTES + 1)] {
            assert_eq!(
                keys.verify(garbage).unwrap_err().0.code(),
                Some(g::SESSION_INVALID)
            );
        }
    }

    #[test]
    fn an_unsigned_or_differently_signed_token_is_refused() {
        let keys = SessionKeys::new(&[1; 32]);
        let token = keys.issue(&claims(now() + 60)).unwrap();
        let payload = token.split('.').nth(1).unwrap();
        // alg "none" with the same payload and no signature.
        let none = format!("eyJhbGciOiJub25lIiwidHlwIjoiSldUIn0.{payload}.");
        assert_eq!(
            keys.verify(&none).unwrap_err().0.code(),
            Some(g::SESSION_INVALID)
        );
        // The signature of another payload.
        let sig = token.split('.').nth(2).unwrap();
        let other = keys
            .issue(&SessionClaims {
                sub: Uuid::from_u128(8),
                ..claims(now() + 60)
            })
            .unwrap();
        let spliced = format!(
            "{}.{}.{sig}",
            other.split('.').next().unwrap(),
            other.split('.').nth(1).unwrap()
        );
        assert_eq!(
            keys.verify(&spliced).unwrap_err().0.code(),
            Some(g::SESSION_INVALID)
        );
    }
}
