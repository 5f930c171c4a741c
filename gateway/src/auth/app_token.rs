//! The app's own token at `POST /v1/session` (optional): who the user is, and which aggregate
//! types they may read and write.
//!
//! When `--app-token-alg` is set, a session is opened only for a caller presenting, in
//! `Authorization: Bearer`, a JWT the app signed: HS256 with a shared secret, or RS256/ES256 with
//! the app's private key (the gateway holds the public key). `jsonwebtoken` checks the signature
//! (only the configured algorithm is accepted, so no `alg` confusion), `exp` (required, no
//! leeway), `nbf` when present, and `iss`/`aud` when configured. `sub` is required and logged
//! with the client id. The optional claim [`TYPES_CLAIM`] — an array of aggregate type UUIDs —
//! limits the session to those types (absent: all; empty: none); the session token carries it.

use std::path::Path;

use axum::http::HeaderMap;
use celeriant_sync_protocol::codes::gateway as g;
use jsonwebtoken::errors::ErrorKind;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use serde::Deserialize;
use uuid::Uuid;

use super::bearer::{Bearer, bearer};
use crate::config::{AppTokenAlg, Config};
use crate::error::ApiError;

/// The claim listing the aggregate types the subject may read and write.
pub const TYPES_CLAIM: &str = "celeriant_types";
/// Most entries accepted in [`TYPES_CLAIM`].
pub const MAX_TYPES: usize = 256;
/// The largest key file read, in bytes.
const MAX_KEY_FILE_BYTES: u64 = 65_536;

/// What a verified app token grants.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AppGrant {
    /// The app's user (`sub`).
    pub subject: String,
    /// The aggregate types allowed; `None`: all.
    pub types: Option<Vec<Uuid>>,
    /// The token's `exp`, Unix seconds (a session never outlives it).
    pub expires_at: u64,
}

#[derive(Deserialize)]
struct AppClaims {
    sub: String,
    exp: u64,
    #[serde(default, rename = "celeriant_types")]
    types: Option<Vec<Uuid>>,
}

/// The configured verifier.
pub struct AppTokens {
    key: DecodingKey,
    validation: Validation,
}

impl AppTokens {
    /// The verifier the configuration asks for, if any.
    pub fn from_config(config: &Config) -> Result<Option<Self>, String> {
        let (Some(alg), Some(path)) = (config.app_token_alg, &config.app_token_key_file) else {
            return Ok(None);
        };
        let bytes = read_key(path)?;
        let shown = path.display();
        let (key, algorithm) = match alg {
            AppTokenAlg::Hs256 => {
                let mut secret = bytes;
                while secret.last().is_some_and(u8::is_ascii_whitespace) {
                    secret.pop();
                }
                if secret.len() < 32 {
                    return Err(format!(
                        "{shown}: an HS256 app-token secret needs at least 32 bytes"
                    ));
                }
                (DecodingKey::from_secret(&secret), Algorithm::HS256)
            }
            AppTokenAlg::Rs256 => (
                DecodingKey::from_rsa_pem(&bytes)
                    .map_err(|e| format!("{shown}: not an RSA public key in PEM: {e}"))?,
                Algorithm::RS256,
            ),
            AppTokenAlg::Es256 => (
                DecodingKey::from_ec_pem(&bytes)
                    .map_err(|e| format!("{shown}: not an EC public key in PEM: {e}"))?,
                Algorithm::ES256,
            ),
        };
        let mut validation = Validation::new(algorithm);
        validation.leeway = 0;
        validation.validate_nbf = true;
        // `iss` and `aud` are required too: `set_issuer`/`set_audience` alone check them only when
        // present, so a token without `iss` would pass (a test caught exactly that).
        validation.set_required_spec_claims(&["exp", "sub", "iss", "aud"]);
        match &config.app_token_audience {
            Some(aud) => validation.set_audience(&[aud]),
            None => validation.validate_aud = false,
        }
        if let Some(iss) = &config.app_token_issuer {
            validation.set_issuer(&[iss]);
        }
        Ok(Some(AppTokens { key, validation }))
    }

    /// The grant of the request's app token, or the 401 saying why there is none.
    pub fn verify(&self, headers: &HeaderMap) -> Result<AppGrant, ApiError> {
        let token = match bearer(headers) {
            Bearer::Token(token) => token,
            Bearer::Missing => {
                return Err(ApiError::code(
                    g::APP_TOKEN_REQUIRED,
                    "this gateway needs the app's token in Authorization: Bearer to open a session",
                ));
            }
            Bearer::Malformed(why) => {
                return Err(ApiError::code(
                    g::APP_TOKEN_INVALID,
                    format!("app token: {why}"),
                ));
            }
            Bearer::Operator(_) => {
                return Err(ApiError::code(
                    g::APP_TOKEN_INVALID,
                    "app token: expected the Bearer scheme",
                ));
            }
        };
        let claims = jsonwebtoken::decode::<AppClaims>(token, &self.key, &self.validation)
            .map_err(|e| match e.kind() {
                ErrorKind::ExpiredSignature => {
                    ApiError::code(g::APP_TOKEN_EXPIRED, "the app token has expired")
                }
                _ => ApiError::code(
                    g::APP_TOKEN_INVALID,
                    format!("the app token is not valid: {e}"),
                ),
            })?
            .claims;
        if claims.types.as_ref().is_some_and(|t| t.len() > MAX_TYPES) {
            return Err(ApiError::code(
                g::APP_TOKEN_INVALID,
                format!("{TYPES_CLAIM} lists more than {MAX_TYPES} types"),
            ));
        }
        Ok(AppGrant {
            subject: claims.sub,
            types: claims.types,
            expires_at: claims.exp,
        })
    }
}

fn read_key(path: &Path) -> Result<Vec<u8>, String> {
    let shown = path.display();
    let size = std::fs::metadata(path)
        .map_err(|e| format!("cannot read {shown}: {e}"))?
        .len();
    if size > MAX_KEY_FILE_BYTES {
        return Err(format!(
            "{shown} is {size} bytes; a key file is at most {MAX_KEY_FILE_BYTES}"
        ));
    }
    std::fs::read(path).map_err(|e| format!("cannot read {shown}: {e}"))
}
