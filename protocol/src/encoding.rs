//! The JSON encodings the protocol fixes, as serde helpers.
//!
//! * 128-bit ids are UUID strings (handled by `uuid`'s serde support).
//! * `u64` values travel as JSON numbers and must not exceed [`MAX_SAFE_INTEGER`] (2^53 − 1), the
//!   largest integer a JavaScript number holds exactly. A larger value is refused at parse time,
//!   so a browser can never be handed (or send) a sequence it would silently round.
//! * Bytes are standard, padded base64 (RFC 4648 §4); anything else is refused.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use serde::{Deserialize, Deserializer, Serializer, de::Error as _};

/// The largest integer a JavaScript number represents exactly: 2^53 − 1.
pub const MAX_SAFE_INTEGER: u64 = (1 << 53) - 1;

/// Encodes bytes as standard padded base64 ([`crate::json::base64`]).
pub fn encode_base64(bytes: &[u8]) -> String {
    crate::json::base64(bytes)
}

/// Decodes standard padded base64, refusing other alphabets, missing padding and whitespace.
pub fn decode_base64(text: &str) -> Result<Vec<u8>, base64::DecodeError> {
    STANDARD.decode(text)
}

/// Length of the base64 text for `n` bytes (padded).
pub const fn base64_len(n: usize) -> usize {
    n.div_ceil(3) * 4
}

/// A decimal number written with ASCII digits only: no sign, no space, no other script's
/// digits, not empty. `str::parse::<u64>` alone also takes a leading `+` (`"+1"` reads as 1),
/// so query parameters and headers that carry numbers go through this instead.
pub fn parse_decimal(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// serde `deserialize_with` for a `u64` that must be a JSON-safe integer.
pub fn safe_u64<'de, D: Deserializer<'de>>(d: D) -> Result<u64, D::Error> {
    let v = u64::deserialize(d)?;
    if v > MAX_SAFE_INTEGER {
        return Err(D::Error::custom(format_args!(
            "{v} is above 2^53 - 1 and cannot be represented exactly in JavaScript"
        )));
    }
    Ok(v)
}

/// serde `deserialize_with` for an optional `u64` that must be a JSON-safe integer when given
/// (`null` reads as absent). Use with `#[serde(default)]` so that a missing field is `None`.
pub fn safe_u64_opt<'de, D: Deserializer<'de>>(d: D) -> Result<Option<u64>, D::Error> {
    match Option::<u64>::deserialize(d)? {
        Some(v) if v > MAX_SAFE_INTEGER => Err(D::Error::custom(format_args!(
            "{v} is above 2^53 - 1 and cannot be represented exactly in JavaScript"
        ))),
        v => Ok(v),
    }
}

/// serde `with` module for `Vec<u8>` as standard padded base64.
pub mod base64_bytes {
    use super::*;

    /// Serialises bytes as a base64 string.
    pub fn serialize<S: Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&encode_base64(bytes))
    }

    /// Deserialises a base64 string into bytes.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text = <std::borrow::Cow<'de, str>>::deserialize(d)?;
        decode_base64(&text).map_err(|e| D::Error::custom(format_args!("invalid base64: {e}")))
    }
}

/// serde `with` module for `Option<Vec<u8>>` as base64 string or `null`.
pub mod base64_opt {
    use super::*;

    /// Serialises optional bytes as a base64 string or `null`.
    pub fn serialize<S: Serializer>(bytes: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match bytes {
            Some(b) => s.serialize_str(&encode_base64(b)),
            None => s.serialize_none(),
        }
    }

    /// Deserialises a base64 string or `null`.
    pub fn deserialize<'de, D: Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        match <Option<std::borrow::Cow<'de, str>>>::deserialize(d)? {
            None => Ok(None),
            Some(text) => decode_base64(&text)
                .map(Some)
                .map_err(|e| D::Error::custom(format_args!("invalid base64: {e}"))),
        }
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn decimals_are_ascii_digits_only() {
        assert_eq!(parse_decimal("0"), Some(0));
        assert_eq!(parse_decimal("0042"), Some(42));
        assert_eq!(parse_decimal("18446744073709551615"), Some(u64::MAX));
        for bad in [
            "",
            "+1",
            "-1",
            " 1",
            "1 ",
            "1_000",
            "0x10",
            "1e3",
            "\u{661}",
            "\u{ff11}",
            "١٢",
            "18446744073709551616",
        ] {
            assert_eq!(parse_decimal(bad), None, "{bad:?}");
        }
    }

    use super::*;

    #[derive(Deserialize)]
    struct N {
        #[serde(deserialize_with = "safe_u64")]
        n: u64,
    }

    #[test]
    fn safe_u64_accepts_the_boundary_and_refuses_above() {
        let ok: N = serde_json::from_str(r#"{"n":9007199254740991}"#).unwrap();
        assert_eq!(ok.n, MAX_SAFE_INTEGER);
        let err = serde_json::from_str::<N>(r#"{"n":9007199254740992}"#)
            .err()
            .unwrap();
        assert!(err.to_string().contains("2^53"), "{err}");
        assert!(serde_json::from_str::<N>(r#"{"n":-1}"#).is_err());
        assert!(serde_json::from_str::<N>(r#"{"n":1.5}"#).is_err());
        assert!(serde_json::from_str::<N>(r#"{"n":"1"}"#).is_err());
    }

    #[derive(Deserialize)]
    struct O {
        #[serde(default, deserialize_with = "safe_u64_opt")]
        n: Option<u64>,
    }

    #[test]
    fn safe_u64_opt_is_as_strict_and_reads_null_or_absent_as_none() {
        let read = |json: &str| serde_json::from_str::<O>(json).map(|o| o.n);
        assert_eq!(read("{}").unwrap(), None);
        assert_eq!(read(r#"{"n":null}"#).unwrap(), None);
        assert_eq!(read(r#"{"n":0}"#).unwrap(), Some(0));
        assert_eq!(
            read(r#"{"n":9007199254740991}"#).unwrap(),
            Some(MAX_SAFE_INTEGER)
        );
        for bad in [
            r#"{"n":9007199254740992}"#,
            r#"{"n":18446744073709551616}"#,
            r#"{"n":-1}"#,
            r#"{"n":1.5}"#,
            r#"{"n":1e3}"#,
            r#"{"n":"1"}"#,
            r#"{"n":true}"#,
        ] {
            assert!(read(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn base64_is_standard_and_padded() {
        assert_eq!(encode_base64(b"ab"), "YWI=");
        assert_eq!(decode_base64("YWI=").unwrap(), b"ab");
        assert!(decode_base64("YWI").is_err(), "unpadded must be refused");
        assert!(
            decode_base64("Y-I=").is_err(),
            "url-safe alphabet must be refused"
        );
        for n in 0..10 {
            assert_eq!(encode_base64(&vec![7u8; n]).len(), base64_len(n));
        }
    }
}
