//! The proof a device gives at `POST /v1/session`: its RSA-2048 public key and its signature
//! over a fresh nonce, checked exactly as Celeriant checks a client's identify.
//!
//! Every field is bounded and its shape checked before anything is parsed or verified: the
//! nonce is a plain decimal of at most 16 digits, the key at most 1 024 base64 characters, the
//! signature exactly 256 bytes. The key must be an RSA key of exactly 2048 bits (the crate that
//! verifies accepts any size) in canonical DER, i.e. byte for byte what re-encoding the parsed
//! key gives: the client id is a hash of those bytes, so a key has exactly one id. Then
//! `celeriant_crypto::Crypto::validate_with_public_key` — the same code Celeriant's server runs
//! — checks the nonce window (at most 2 minutes old, at most 60 s ahead) and the
//! RSASSA-PKCS1-v1_5 / SHA-256 signature, and derives the client id:
//! `u128::from_le_bytes(SHA-256(SPKI DER)[..16])`.

use celeriant_crypto::{Crypto, CryptoError};
use celeriant_sync_protocol::SessionRequest;
use celeriant_sync_protocol::codes::gateway as g;
use celeriant_sync_protocol::encoding::decode_base64;
use celeriant_sync_protocol::session::{
    MAX_NONCE_DIGITS, MAX_PUBLIC_KEY_CHARS, MAX_SIGNATURE_CHARS, NONCE_MAX_AGE_MS,
    NONCE_MAX_AHEAD_MS,
};
use rsa::RsaPublicKey;
use rsa::pkcs8::{DecodePublicKey as _, EncodePublicKey as _};
use rsa::traits::PublicKeyParts as _;
use uuid::Uuid;

use crate::error::ApiError;

/// The only modulus size accepted, in bits.
pub const RSA_BITS: usize = 2048;
/// An RSA-2048 signature's length, in bytes.
const SIGNATURE_BYTES: usize = RSA_BITS / 8;

/// A device that proved it holds the key of this client id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Proven {
    /// The client id derived from the key.
    pub client_id: Uuid,
    /// The nonce, Unix milliseconds.
    pub nonce_ms: u64,
}

/// Checks the request's shape and signature at gateway time `now_ms`.
pub fn verify(request: &SessionRequest, now_ms: u64) -> Result<Proven, ApiError> {
    let nonce_ms = parse_nonce(&request.nonce)?;
    check_public_key(&request.public_key)?;
    check_signature_shape(&request.signature)?;
    check_window(nonce_ms, now_ms)?;
    let id =
        Crypto::validate_with_public_key(&request.public_key, &request.nonce, &request.signature)
            .map_err(|e| match e {
            CryptoError::InvalidNonce => ApiError::code(
                g::NONCE_OUT_OF_WINDOW,
                "the nonce is outside the accepted window (2 minutes old to 60 s ahead)",
            ),
            _ => ApiError::code(
                g::DEVICE_SIGNATURE_INVALID,
                "the signature does not verify with this public key",
            ),
        })?;
    Ok(Proven {
        client_id: Uuid::from_u128(id),
        nonce_ms,
    })
}

fn parse_nonce(nonce: &str) -> Result<u64, ApiError> {
    let invalid = |why: &str| {
        ApiError::code(
            g::INVALID_NONCE,
            format!("nonce: {why}; send the current Unix time in milliseconds, in decimal"),
        )
    };
    if nonce.is_empty() || nonce.len() > MAX_NONCE_DIGITS {
        return Err(invalid(&format!("1 to {MAX_NONCE_DIGITS} digits expected")));
    }
    if !nonce.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid("only the digits 0-9 are allowed"));
    }
    if nonce.starts_with('0') {
        return Err(invalid("no leading zero"));
    }
    nonce.parse().map_err(|_| invalid("not a number"))
}

fn check_public_key(public_key: &str) -> Result<(), ApiError> {
    let invalid = |why: String| {
        ApiError::code(
            g::INVALID_PUBLIC_KEY,
            format!(
                "publicKey: {why}; an RSA-2048 SubjectPublicKeyInfo in DER, standard base64, is required"
            ),
        )
    };
    if public_key.len() > MAX_PUBLIC_KEY_CHARS {
        return Err(invalid(format!(
            "{} characters, at most {MAX_PUBLIC_KEY_CHARS}",
            public_key.len()
        )));
    }
    let der = decode_base64(public_key).map_err(|e| invalid(format!("invalid base64 ({e})")))?;
    let key = RsaPublicKey::from_public_key_der(&der)
        .map_err(|e| invalid(format!("not an RSA SubjectPublicKeyInfo ({e})")))?;
    let bits = key.n().bits();
    if bits != RSA_BITS {
        return Err(invalid(format!("an RSA key of {bits} bits")));
    }
    let canonical = key
        .to_public_key_der()
        .map_err(|e| invalid(format!("cannot be re-encoded ({e})")))?;
    if canonical.as_bytes() != der.as_slice() {
        return Err(invalid("not in canonical DER".into()));
    }
    Ok(())
}

fn check_signature_shape(signature: &str) -> Result<(), ApiError> {
    let invalid = |why: String| {
        ApiError::code(
            g::INVALID_SIGNATURE,
            format!("signature: {why}; {SIGNATURE_BYTES} bytes in standard base64 are required"),
        )
    };
    if signature.len() > MAX_SIGNATURE_CHARS {
        return Err(invalid(format!("{} characters", signature.len())));
    }
    let bytes = decode_base64(signature).map_err(|e| invalid(format!("invalid base64 ({e})")))?;
    if bytes.len() != SIGNATURE_BYTES {
        return Err(invalid(format!("{} bytes", bytes.len())));
    }
    Ok(())
}

/// Celeriant's window, checked first with the gateway's own clock reading so the message can
/// say by how much the nonce is off (the body's `serverTime` lets the client correct it).
fn check_window(nonce_ms: u64, now_ms: u64) -> Result<(), ApiError> {
    if nonce_ms > now_ms + NONCE_MAX_AHEAD_MS {
        return Err(ApiError::code(
            g::NONCE_OUT_OF_WINDOW,
            format!(
                "the nonce is {} ms ahead of the gateway's clock (at most {NONCE_MAX_AHEAD_MS}); correct it with serverTime",
                nonce_ms - now_ms
            ),
        ));
    }
    if now_ms.saturating_sub(nonce_ms) > NONCE_MAX_AGE_MS {
        return Err(ApiError::code(
            g::NONCE_OUT_OF_WINDOW,
            format!(
                "the nonce is {} ms old (at most {NONCE_MAX_AGE_MS}); sign a fresh one, corrected with serverTime",
                now_ms - nonce_ms
            ),
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(r: Result<impl std::fmt::Debug, ApiError>) -> u32 {
        r.unwrap_err().0.code().unwrap()
    }

    #[test]
    fn nonces_are_plain_bounded_decimals() {
        assert_eq!(parse_nonce("1764450000000").unwrap(), 1_764_450_000_000);
        for bad in [
            "",
            "+1764450000000",
            "-1",
            "01764450000000",
            "1764450000000.5",
            " 1",
            "17644500000001234",
            "1e12",
            "١٢",
        ] {
            assert_eq!(code(parse_nonce(bad)), g::INVALID_NONCE, "{bad:?}");
        }
    }

    #[test]
    fn the_window_is_two_minutes_back_and_sixty_seconds_ahead() {
        let now = 1_764_450_000_000;
        assert!(check_window(now, now).is_ok());
        assert!(check_window(now - NONCE_MAX_AGE_MS, now).is_ok());
        assert!(check_window(now + NONCE_MAX_AHEAD_MS, now).is_ok());
        assert_eq!(
            code(check_window(now - NONCE_MAX_AGE_MS - 1, now)),
            g::NONCE_OUT_OF_WINDOW
        );
        assert_eq!(
            code(check_window(now + NONCE_MAX_AHEAD_MS + 1, now)),
            g::NONCE_OUT_OF_WINDOW
        );
    }

    #[test]
    fn malformed_keys_and_signatures_are_refused_before_any_verification() {
        for bad in [
            "",
            "AAAA",
            "not base64!",
            &"A".repeat(MAX_PUBLIC_KEY_CHARS + 4),
        ] {
            assert_eq!(
                code(check_public_key(bad)),
                g::INVALID_PUBLIC_KEY,
                "{bad:.20}"
            );
        }
        assert_eq!(code(check_signature_shape("AAAA")), g::INVALID_SIGNATURE);
        assert_eq!(
            code(check_signature_shape(&"A".repeat(600))),
            g::INVALID_SIGNATURE
        );
        let ok = celeriant_sync_protocol::encoding::encode_base64(&[0u8; 256]);
        assert!(check_signature_shape(&ok).is_ok());
    }
}
