//! Hand-written JSON for the two places the browser client touches JSON on its hot path: writing
//! an event in its wire encoding, and reading a write's outcome.
//!
//! The gateway uses serde for everything. The client would need serde_json's generic machinery
//! in its WebAssembly module only for these two shapes, which costs tens of kilobytes; instead:
//!
//! * [`push_event`] writes an [`Event`](crate::Event) byte for byte as serde writes it (a test
//!   checks it over many random events), so the same event always gives the same bytes;
//! * [`Members`] reads the top-level members of one JSON object with scalar values: strings
//!   (unescaped), non-negative integers, booleans, `null`; any other valid JSON value (nested
//!   objects, arrays, negative or fractional numbers) is checked for syntax and kept as
//!   [`Scalar::Other`]. Anything that is not one well-formed JSON object is refused.
//!   [`crate::WriteOutcome::parse`] is built on it.
//!
//! Network input is hostile: the reader never panics, never recurses deeper than
//! [`MAX_DEPTH`] and allocates only for the member names and string values it returns.
//!
//! The writing half is here; the reader is in `json/read.rs`.

use uuid::Uuid;

mod read;
pub use read::{Duplicate, MAX_DEPTH, Members, Scalar};

/// Appends `n` in decimal.
pub fn push_u64(out: &mut String, mut n: u64) {
    let mut digits = [0u8; 20];
    let mut i = digits.len();
    loop {
        i -= 1;
        digits[i] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    // Only ASCII digits were written.
    out.push_str(std::str::from_utf8(&digits[i..]).unwrap_or("0"));
}

/// Appends a UUID, lowercase and hyphenated, in quotes.
fn push_uuid(out: &mut String, id: &Uuid) {
    out.push('"');
    out.push_str(id.hyphenated().encode_lower(&mut Uuid::encode_buffer()));
    out.push('"');
}

const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";

/// Appends standard padded base64 (RFC 4648 §4) of `bytes` — by hand, because the general
/// base64 crate would be the browser client's largest dependency for these few lines.
pub fn push_base64(out: &mut String, bytes: &[u8]) {
    out.reserve(bytes.len().div_ceil(3) * 4);
    let sextet = |n: u32, shift: u32| char::from(ALPHABET[((n >> shift) & 63) as usize]);
    let mut chunks = bytes.chunks_exact(3);
    for c in &mut chunks {
        let n = u32::from(c[0]) << 16 | u32::from(c[1]) << 8 | u32::from(c[2]);
        for shift in [18, 12, 6, 0] {
            out.push(sextet(n, shift));
        }
    }
    match *chunks.remainder() {
        [a] => {
            let n = u32::from(a) << 16;
            out.push(sextet(n, 18));
            out.push(sextet(n, 12));
            out.push_str("==");
        }
        [a, b] => {
            let n = u32::from(a) << 16 | u32::from(b) << 8;
            out.push(sextet(n, 18));
            out.push(sextet(n, 12));
            out.push(sextet(n, 6));
            out.push('=');
        }
        _ => {}
    }
}

/// Standard padded base64 of `bytes`.
pub fn base64(bytes: &[u8]) -> String {
    let mut out = String::new();
    push_base64(&mut out, bytes);
    out
}

/// Appends standard padded base64 of `bytes`, in quotes.
fn push_quoted_base64(out: &mut String, bytes: &[u8]) {
    out.push('"');
    push_base64(out, bytes);
    out.push('"');
}

/// The fields of one event, borrowed, in wire order.
#[derive(Debug, Clone, Copy)]
pub struct EventFields<'a> {
    /// `clientSeq`.
    pub client_seq: u64,
    /// `eventId`.
    pub event_id: Option<&'a Uuid>,
    /// `timestamp` (Unix ms).
    pub timestamp: u64,
    /// `type`.
    pub event_type: u64,
    /// `minor`.
    pub minor: u64,
    /// `data`.
    pub data: &'a [u8],
    /// `iv`.
    pub iv: Option<&'a [u8]>,
}

/// Appends one event exactly as serde serialises [`crate::Event`]:
/// `{"clientSeq":1,"eventId":"…"|null,"timestamp":…,"type":…,"minor":…,"data":"…","iv":"…"|null}`.
pub fn push_event(out: &mut String, e: EventFields<'_>) {
    out.push_str(r#"{"clientSeq":"#);
    push_u64(out, e.client_seq);
    out.push_str(r#","eventId":"#);
    match e.event_id {
        Some(id) => push_uuid(out, id),
        None => out.push_str("null"),
    }
    out.push_str(r#","timestamp":"#);
    push_u64(out, e.timestamp);
    out.push_str(r#","type":"#);
    push_u64(out, e.event_type);
    out.push_str(r#","minor":"#);
    push_u64(out, e.minor);
    out.push_str(r#","data":"#);
    push_quoted_base64(out, e.data);
    out.push_str(r#","iv":"#);
    match e.iv {
        Some(iv) => push_quoted_base64(out, iv),
        None => out.push_str("null"),
    }
    out.push('}');
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::Event;

    fn fields(e: &Event) -> EventFields<'_> {
        EventFields {
            client_seq: e.client_seq,
            event_id: e.event_id.as_ref(),
            timestamp: e.timestamp,
            event_type: e.event_type,
            minor: e.minor,
            data: &e.data,
            iv: e.iv.as_deref(),
        }
    }

    /// A small deterministic generator, so the checks below cover many shapes repeatably.
    pub(super) struct Rng(pub(super) u64);
    impl Rng {
        pub(super) fn next(&mut self) -> u64 {
            self.0 ^= self.0 << 13;
            self.0 ^= self.0 >> 7;
            self.0 ^= self.0 << 17;
            self.0
        }
    }

    #[test]
    fn events_are_written_exactly_as_serde_writes_them() {
        let mut rng = Rng(0x5EED);
        for i in 0..2_000u64 {
            let big = [0, 1, 9, 10, 99, 1 << 53, (1 << 53) - 1, u64::MAX];
            let pick = |rng: &mut Rng| big[(rng.next() % big.len() as u64) as usize];
            let e = Event {
                client_seq: if i % 3 == 0 {
                    pick(&mut rng)
                } else {
                    rng.next()
                },
                event_id: (i % 4 != 0).then(|| Uuid::from_u128(u128::from(rng.next()) << 64)),
                timestamp: rng.next() >> 11,
                event_type: pick(&mut rng),
                minor: rng.next() % 1000,
                data: (0..(rng.next() % 70)).map(|_| rng.next() as u8).collect(),
                iv: (i % 2 == 0).then(|| (0..12).map(|_| rng.next() as u8).collect()),
            };
            let mut ours = String::new();
            push_event(&mut ours, fields(&e));
            assert_eq!(ours, serde_json::to_string(&e).unwrap());
        }
    }

    #[test]
    fn base64_is_the_standard_padded_alphabet() {
        use base64::Engine as _;
        let mut rng = Rng(99);
        for len in 0..300 {
            let bytes: Vec<u8> = (0..len).map(|_| rng.next() as u8).collect();
            assert_eq!(
                base64(&bytes),
                base64::engine::general_purpose::STANDARD.encode(&bytes)
            );
        }
    }
}
