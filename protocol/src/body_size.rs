//! The size of the largest legal `POST /v1/write` body, computed from [`Limits`].
//!
//! The gateway refuses a body over its limit before reading it (413), so that limit must never
//! be smaller than a request the protocol allows, and should not be much larger: every byte of
//! it is memory an attacker can make the gateway hold. [`max_write_body_bytes`] is that bound,
//! exact for the compact JSON this crate writes (the client sends nothing else): every
//! aggregate and event the limits allow, every optional field present, every integer at
//! 2^53 − 1, canonical UUIDs, and the decoded payload split across the events so that base64
//! padding is as large as it can be. A test builds that request and checks its length equals
//! the bound. (JSON whitespace or `\u` escapes could make a legal value longer; a client that
//! sends them is sending more than it needs to, and gets 413.)

use crate::encoding::{MAX_SAFE_INTEGER, base64_len};
use crate::validate::Limits;

/// Characters of a canonical UUID (`8-4-4-4-12`).
const UUID: usize = 36;

/// Digits of the largest integer the protocol carries (2^53 − 1).
const INT: usize = MAX_SAFE_INTEGER.ilog10() as usize + 1;

/// The envelope around the writes: `{"clientId":"…","writes":[…]}`.
const ENVELOPE: usize = r#"{"clientId":"","writes":[]}"#.len() + UUID;

/// One write around its events:
/// `{"aggregate":{"typeId":"…","id":"…"},"allowCreate":false,"expectedVersion":…,"events":[…]}`.
const WRITE: usize =
    r#"{"aggregate":{"typeId":"","id":""},"allowCreate":false,"expectedVersion":,"events":[]}"#
        .len()
        + 2 * UUID
        + INT;

/// One event besides its `data` characters, with an `eventId` and a 12-byte `iv`.
const EVENT: usize =
    r#"{"clientSeq":,"eventId":"","timestamp":,"type":,"minor":,"data":"","iv":""}"#.len()
        + 4 * INT
        + UUID
        + base64_len(12);

/// The largest `POST /v1/write` body allowed by `limits`, in bytes (see the module docs).
pub fn max_write_body_bytes(limits: &Limits) -> usize {
    let aggregates = limits.max_aggregates.max(1);
    let events = limits.max_events.max(aggregates);
    // Base64 of n bytes is 4⌈n/3⌉ ≤ 4(n + 2)/3 characters, so `events` payloads holding `total`
    // bytes together take at most 4(total + 2·events)/3, and no event more than its own limit.
    let total = limits
        .max_request_bytes
        .min(events.saturating_mul(limits.max_event_bytes));
    let data = (4 * (total + 2 * events) / 3).min(events * base64_len(limits.max_event_bytes));
    // Commas: between the writes, and between the events of each write.
    ENVELOPE + aggregates * WRITE + (aggregates - 1) + events * EVENT + (events - aggregates) + data
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::{AggregateRef, AggregateWrite, Event, WriteRequest};
    use crate::{ValidationError, validate::validate_write};
    use uuid::Uuid;

    /// The request the bound describes: 16 aggregates, 10,000 events, 4 MiB of payload in
    /// sizes that are all 1 more than a multiple of 3 (two padding characters each).
    fn largest_request(limits: &Limits, allow_create: bool) -> WriteRequest {
        let per = limits.max_events / limits.max_aggregates;
        let small = 418; // 418 = 3·139 + 1
        let last = limits.max_request_bytes - (limits.max_events - 1) * small;
        assert_eq!(last % 3, 1);
        let mut seq = MAX_SAFE_INTEGER - limits.max_events as u64;
        let writes = (0..limits.max_aggregates)
            .map(|w| AggregateWrite {
                aggregate: AggregateRef {
                    type_id: Uuid::from_u128(u128::MAX - w as u128),
                    id: Uuid::from_u128(u128::MAX - 1000 - w as u128),
                },
                allow_create,
                expected_version: Some(MAX_SAFE_INTEGER),
                events: (0..per)
                    .map(|e| {
                        seq += 1;
                        let is_last = w + 1 == limits.max_aggregates && e + 1 == per;
                        Event {
                            client_seq: seq,
                            event_id: Some(Uuid::from_u128(u128::MAX - seq as u128)),
                            timestamp: MAX_SAFE_INTEGER,
                            event_type: MAX_SAFE_INTEGER,
                            minor: MAX_SAFE_INTEGER,
                            data: vec![0xAB; if is_last { last } else { small }],
                            iv: Some(vec![7; 12]),
                        }
                    })
                    .collect(),
            })
            .collect();
        WriteRequest {
            client_id: Uuid::from_u128(u128::MAX - 77),
            writes,
        }
    }

    #[test]
    fn the_largest_legal_request_is_exactly_the_bound() {
        let limits = Limits::default();
        let request = largest_request(&limits, false);
        validate_write(&request, &limits).unwrap();
        let body = serde_json::to_vec(&request).unwrap();
        assert_eq!(body.len(), max_write_body_bytes(&limits));
        // One more byte of payload is no longer legal.
        let mut over = request;
        over.writes[0].events[0].data.push(0);
        assert!(matches!(
            validate_write(&over, &limits),
            Err(ValidationError::WriteTooLarge { .. })
        ));
    }

    #[test]
    fn the_default_bound_is_below_8_mib() {
        let bound = max_write_body_bytes(&Limits::default());
        assert_eq!(bound, 7_541_918);
        assert!(bound < 8 << 20);
    }

    #[test]
    fn small_limits_give_small_bounds() {
        let one = Limits {
            max_aggregates: 1,
            max_events: 1,
            max_event_bytes: 3,
            max_request_bytes: 3,
        };
        let request = WriteRequest {
            client_id: Uuid::from_u128(1),
            writes: vec![AggregateWrite {
                aggregate: AggregateRef {
                    type_id: Uuid::from_u128(2),
                    id: Uuid::from_u128(3),
                },
                allow_create: false,
                expected_version: Some(MAX_SAFE_INTEGER),
                events: vec![Event {
                    client_seq: MAX_SAFE_INTEGER,
                    event_id: Some(Uuid::from_u128(4)),
                    timestamp: MAX_SAFE_INTEGER,
                    event_type: MAX_SAFE_INTEGER,
                    minor: MAX_SAFE_INTEGER,
                    data: vec![1, 2, 3],
                    iv: Some(vec![0; 12]),
                }],
            }],
        };
        assert_eq!(
            serde_json::to_vec(&request).unwrap().len(),
            max_write_body_bytes(&one)
        );
    }
}
