//! The proof of possession every write, read, watch and members request carries (RFC 9449,
//! DPoP, is the model): a session token alone is worth nothing to whoever copies it.
//!
//! The proof is a compact JWS in the `DPoP` header, signed RS256 with the **device's own
//! RSA-2048 key** (the one `POST /v1/session` proved), whose public half travels in the JWS
//! header's `jwk` (`n`, `e`). The client id *is* a hash of that key, so the binding needs no
//! state: the key's canonical SPKI DER hashed with SHA-256, first 16 bytes as a little-endian
//! `u128`, must equal the token's `sub`. Any replica checks any proof.
//!
//! The payload names the request exactly: `htm` (method), `htu` (path and query as sent in the
//! request line, not the full URL: proxies rewrite scheme and host), `bh` (base64url SHA-256
//! of the body — of the empty body too), `ath` (base64url SHA-256 of the session token, so a
//! proof is useless with another token), `iat` (Unix seconds; at most [`MAX_AGE_SECS`] old and
//! [`MAX_AHEAD_SECS`] ahead) and `jti` (unique; replays refused by `super::proof_replay`).
//!
//! The signature is checked by `jsonwebtoken` (RS256 only, no other algorithm is ever tried),
//! the key rebuilt and re-encoded by `rsa`, hashes by `sha2`: nothing here is hand-made
//! cryptography. Everything is bounded before it is parsed.

use axum::http::{HeaderMap, HeaderName, Method};
use base64::Engine as _;
use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use celeriant_sync_protocol::codes::gateway as g;
use jsonwebtoken::jwk::AlgorithmParameters;
use jsonwebtoken::{Algorithm, DecodingKey, Validation};
use rsa::pkcs8::EncodePublicKey as _;
use rsa::traits::PublicKeyParts as _;
use rsa::{BigUint, RsaPublicKey};
use serde::Deserialize;
use sha2::{Digest as _, Sha256};
use uuid::Uuid;

use super::device::RSA_BITS;
use crate::error::ApiError;

/// The request header that carries the proof.
pub const HEADER: &str = "dpop";
/// The JWS `typ` a proof must carry.
pub const TYP: &str = "dpop+jwt";
/// The longest proof parsed, in bytes (a proof with an RSA-2048 `jwk` is about 1 100).
pub const MAX_PROOF_BYTES: usize = 4_096;
/// The longest `jti`, in bytes.
pub const MAX_JTI_BYTES: usize = 64;
/// How old a proof's `iat` may be, in seconds.
pub const MAX_AGE_SECS: u64 = 30;
/// How far ahead of the gateway's clock a proof's `iat` may be, in seconds.
pub const MAX_AHEAD_SECS: u64 = 5;

/// What a proof claims.
#[derive(Debug, Deserialize)]
struct Claims {
    jti: String,
    htm: String,
    htu: String,
    iat: u64,
    ath: String,
    bh: String,
}

/// A proof that verified for this request, except its body (checked when the body is read).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Checked {
    /// The proof's `jti`, for the replay cache.
    pub jti: String,
    /// The SHA-256 of the body the proof was made for.
    pub body_hash: [u8; 32],
}

/// The base64url (no padding) SHA-256 of `bytes`.
pub fn hash_b64(bytes: &[u8]) -> String {
    URL_SAFE_NO_PAD.encode(Sha256::digest(bytes))
}

fn invalid(why: impl std::fmt::Display) -> ApiError {
    ApiError::code(
        g::PROOF_INVALID,
        format!("the DPoP proof is not valid: {why}"),
    )
}

fn mismatch(what: &str) -> ApiError {
    ApiError::code(
        g::PROOF_MISMATCH,
        format!("the DPoP proof was made for another request ({what})"),
    )
}

/// The one `DPoP` header of `headers`, bounded and visible ASCII.
pub fn header(headers: &HeaderMap) -> Result<&str, ApiError> {
    let required = |why: &str| {
        ApiError::code(
            g::PROOF_REQUIRED,
            format!(
                "{why}: every request under a session needs a DPoP proof signed by the device's key"
            ),
        )
    };
    let mut values = headers.get_all(HeaderName::from_static(HEADER)).iter();
    let value = values.next().ok_or_else(|| required("no DPoP header"))?;
    if values.next().is_some() {
        return Err(required("more than one DPoP header"));
    }
    if value.len() > MAX_PROOF_BYTES {
        return Err(required("the DPoP header is too long"));
    }
    value
        .to_str()
        .map_err(|_| required("the DPoP header is not visible ASCII"))
}

/// The client id of an RSA-2048 public key given as JWK `n` and `e` (base64url): the hash of
/// its canonical SPKI DER, as `POST /v1/session` derives it.
fn client_id_of(n: &str, e: &str) -> Result<Uuid, ApiError> {
    let decode = |s: &str| {
        URL_SAFE_NO_PAD
            .decode(s)
            .map_err(|e| invalid(format!("jwk: {e}")))
    };
    let key = RsaPublicKey::new(
        BigUint::from_bytes_be(&decode(n)?),
        BigUint::from_bytes_be(&decode(e)?),
    )
    .map_err(|e| invalid(format!("jwk: {e}")))?;
    if key.n().bits() != RSA_BITS {
        return Err(invalid(format!(
            "jwk: an RSA key of {} bits",
            key.n().bits()
        )));
    }
    let der = key
        .to_public_key_der()
        .map_err(|e| invalid(format!("jwk: {e}")))?;
    let digest = Sha256::digest(der.as_bytes());
    let mut first = [0u8; 16];
    first.copy_from_slice(&digest[..16]);
    Ok(Uuid::from_u128(u128::from_le_bytes(first)))
}

/// The request a proof must match.
pub struct Expected<'a> {
    /// The request's method.
    pub method: &'a Method,
    /// The request's path and query, as received.
    pub target: &'a str,
    /// The session token the request carries.
    pub token: &'a str,
    /// The client id the token was issued to.
    pub client_id: Uuid,
    /// The gateway's clock, Unix milliseconds.
    pub now_ms: u64,
}

/// Checks `proof` for `expected`: signature by the session's own key, method, target, token
/// and freshness. The body hash is returned for the caller to compare once the body is read;
/// the `jti` for the replay cache.
pub fn verify(proof: &str, expected: &Expected<'_>) -> Result<Checked, ApiError> {
    let header = jsonwebtoken::decode_header(proof).map_err(invalid)?;
    if header.typ.as_deref() != Some(TYP) {
        return Err(invalid(format!("typ must be {TYP:?}")));
    }
    if header.alg != Algorithm::RS256 {
        return Err(invalid("alg must be RS256"));
    }
    let Some(AlgorithmParameters::RSA(rsa)) = header.jwk.as_ref().map(|j| &j.algorithm) else {
        return Err(invalid(
            "the header needs the device's RSA public key as jwk",
        ));
    };
    if client_id_of(&rsa.n, &rsa.e)? != expected.client_id {
        return Err(invalid(
            "signed by another key than the session's device key",
        ));
    }
    let key = DecodingKey::from_rsa_components(&rsa.n, &rsa.e).map_err(invalid)?;
    let mut validation = Validation::new(Algorithm::RS256);
    validation.required_spec_claims.clear();
    validation.validate_exp = false;
    validation.validate_aud = false;
    let claims = jsonwebtoken::decode::<Claims>(proof, &key, &validation)
        .map_err(invalid)?
        .claims;
    if claims.jti.is_empty()
        || claims.jti.len() > MAX_JTI_BYTES
        || !claims.jti.bytes().all(|b| b.is_ascii_graphic())
    {
        return Err(invalid(format!(
            "jti must be 1 to {MAX_JTI_BYTES} visible ASCII characters"
        )));
    }
    if claims.htm != expected.method.as_str() {
        return Err(mismatch("method"));
    }
    if claims.htu != expected.target {
        return Err(mismatch("path and query"));
    }
    if claims.ath != hash_b64(expected.token.as_bytes()) {
        return Err(mismatch("session token"));
    }
    check_fresh(claims.iat, expected.now_ms)?;
    let mut body_hash = [0u8; 32];
    let decoded = URL_SAFE_NO_PAD
        .decode(&claims.bh)
        .ok()
        .filter(|b| b.len() == 32)
        .ok_or_else(|| invalid("bh must be a base64url SHA-256"))?;
    body_hash.copy_from_slice(&decoded);
    Ok(Checked {
        jti: claims.jti,
        body_hash,
    })
}

/// Refuses (401, `PROOF_STALE`) an `iat` (Unix seconds) outside the window around `now_ms`.
/// The caller passes the replay cache's clock ([`super::proof_replay::ProofReplay::now_ms`]),
/// never behind the latest reading, so a clock stepped back cannot make a forgotten proof fresh.
pub fn check_fresh(iat: u64, now_ms: u64) -> Result<(), ApiError> {
    let now = now_ms / 1000;
    if iat > now + MAX_AHEAD_SECS || now.saturating_sub(iat) > MAX_AGE_SECS {
        return Err(ApiError::code(
            g::PROOF_STALE,
            format!(
                "the DPoP proof's iat {iat} is outside the window ({MAX_AGE_SECS} s old to {MAX_AHEAD_SECS} s ahead of {now}); open a new session for serverTime and sign a fresh proof"
            ),
        ));
    }
    Ok(())
}

/// Refuses (401, `PROOF_MISMATCH`) a body other than the one the proof was made for.
pub fn check_body(expected: &[u8; 32], body: &[u8]) -> Result<(), ApiError> {
    if Sha256::digest(body).as_slice() == expected {
        Ok(())
    } else {
        Err(mismatch("body"))
    }
}
