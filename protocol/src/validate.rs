//! The checks a write must pass before anything is written, shared by both ends.
//!
//! The gateway runs [`validate_write`] on every request before it reaches a backend, so a bad
//! request is refused whole and never half-written. The client runs [`validate_event`] at
//! `append`, so an app learns about bad input immediately, with the very same rules and codes,
//! instead of finding its aggregate parked later.

use std::collections::HashSet;

use crate::codes::gateway as g;
use crate::wire::{AggregateWrite, Event, WriteRequest};

/// Size and count limits of one request. The defaults keep a request far below Celeriant's own
/// 10,000,000-byte client limit once base64 is decoded.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most aggregates in one request.
    pub max_aggregates: usize,
    /// Most events in one request, across its aggregates.
    pub max_events: usize,
    /// Largest `data` of one event, in bytes (decoded).
    pub max_event_bytes: usize,
    /// Largest total of `data` in one request, in bytes (decoded).
    pub max_request_bytes: usize,
}

/// Largest `data` of one event by default: 1 MiB.
pub const DEFAULT_MAX_EVENT_BYTES: usize = 1 << 20;

impl Default for Limits {
    fn default() -> Self {
        Limits {
            max_aggregates: 16,
            max_events: 10_000,
            max_event_bytes: DEFAULT_MAX_EVENT_BYTES,
            max_request_bytes: 4 << 20,
        }
    }
}

/// Why a write was refused. Each variant has a stable gateway code ([`ValidationError::code`]).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ValidationError {
    /// `writes` was empty.
    #[error("the request names no writes")]
    NoWrites,
    /// More aggregates than allowed.
    #[error("{count} aggregates in one request; at most {max} are accepted")]
    TooManyAggregates {
        /// How many were sent.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// The same aggregate twice in one request.
    #[error("writes[{write}] names an aggregate already named earlier in the request")]
    DuplicateAggregate {
        /// Index into `writes`.
        write: usize,
    },
    /// A write without events.
    #[error("writes[{write}].events is empty")]
    EmptyEvents {
        /// Index into `writes`.
        write: usize,
    },
    /// More events than allowed.
    #[error("{count} events in one request; at most {max} are accepted")]
    TooManyEvents {
        /// How many were sent.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// `clientSeq` 0.
    #[error("{at}.clientSeq is 0; sequences start at 1")]
    ClientSeqZero {
        /// Where (`writes[0].events[3]`).
        at: String,
    },
    /// Sequences not strictly increasing.
    #[error("{at}.clientSeq {seq} does not follow the previous sequence {previous}")]
    ClientSeqNotIncreasing {
        /// Where.
        at: String,
        /// The offending sequence.
        seq: u64,
        /// The one before it.
        previous: u64,
    },
    /// `type` 0.
    #[error("{at}.type is 0; event types start at 1")]
    EventTypeZero {
        /// Where.
        at: String,
    },
    /// An `iv` that is not 12 bytes.
    #[error("{at}.iv is {len} bytes; an AES-GCM nonce is exactly 12")]
    InvalidIv {
        /// Where.
        at: String,
        /// Its length.
        len: usize,
    },
    /// One event's data over the limit.
    #[error("{at}.data is {len} bytes; at most {max} are accepted")]
    EventTooLarge {
        /// Where.
        at: String,
        /// Its length.
        len: usize,
        /// The limit.
        max: usize,
    },
    /// The whole request's data over the limit.
    #[error("the request carries {len} bytes of data; at most {max} are accepted")]
    WriteTooLarge {
        /// Total length.
        len: usize,
        /// The limit.
        max: usize,
    },
}

impl ValidationError {
    /// The gateway code for this error (see [`crate::codes::gateway`]).
    pub fn code(&self) -> u32 {
        match self {
            ValidationError::NoWrites => g::NO_WRITES,
            ValidationError::TooManyAggregates { .. } => g::TOO_MANY_AGGREGATES,
            ValidationError::DuplicateAggregate { .. } => g::DUPLICATE_AGGREGATE,
            ValidationError::EmptyEvents { .. } => g::EMPTY_EVENTS,
            ValidationError::TooManyEvents { .. } => g::TOO_MANY_EVENTS,
            ValidationError::ClientSeqZero { .. } => g::CLIENT_SEQ_ZERO,
            ValidationError::ClientSeqNotIncreasing { .. } => g::CLIENT_SEQ_NOT_INCREASING,
            ValidationError::EventTypeZero { .. } => g::EVENT_TYPE_ZERO,
            ValidationError::InvalidIv { .. } => g::INVALID_IV,
            ValidationError::EventTooLarge { .. } => g::EVENT_TOO_LARGE,
            ValidationError::WriteTooLarge { .. } => g::WRITE_TOO_LARGE,
        }
    }
}

/// Checks one event's own fields (everything but its sequence), as `append` must.
/// `at` names the event in messages.
pub fn validate_event(event: &Event, limits: &Limits, at: &str) -> Result<(), ValidationError> {
    validate_fields(
        event.event_type,
        event.iv.as_deref(),
        event.data.len(),
        limits,
        || at.to_owned(),
    )
}

/// The rules of [`validate_event`] on the fields themselves, without an [`Event`]: the client
/// checks `append` input with it before anything is encoded, the gateway through
/// [`validate_event`]. `at` is called only to name a failing event.
pub fn validate_fields(
    event_type: u64,
    iv: Option<&[u8]>,
    data_len: usize,
    limits: &Limits,
    at: impl Fn() -> String,
) -> Result<(), ValidationError> {
    if event_type == 0 {
        return Err(ValidationError::EventTypeZero { at: at() });
    }
    if let Some(iv) = iv
        && iv.len() != 12
    {
        return Err(ValidationError::InvalidIv {
            at: at(),
            len: iv.len(),
        });
    }
    if data_len > limits.max_event_bytes {
        return Err(ValidationError::EventTooLarge {
            at: at(),
            len: data_len,
            max: limits.max_event_bytes,
        });
    }
    Ok(())
}

/// Checks the sequences of one aggregate's events: each `>= 1` and strictly increasing.
pub fn validate_sequences(
    write_index: usize,
    write: &AggregateWrite,
) -> Result<(), ValidationError> {
    let mut previous = 0u64;
    for (i, event) in write.events.iter().enumerate() {
        let at = || format!("writes[{write_index}].events[{i}]");
        if event.client_seq == 0 {
            return Err(ValidationError::ClientSeqZero { at: at() });
        }
        if event.client_seq <= previous {
            return Err(ValidationError::ClientSeqNotIncreasing {
                at: at(),
                seq: event.client_seq,
                previous,
            });
        }
        previous = event.client_seq;
    }
    Ok(())
}

/// Checks a whole write request. Nothing may be written unless this returns `Ok`.
pub fn validate_write(request: &WriteRequest, limits: &Limits) -> Result<(), ValidationError> {
    if request.writes.is_empty() {
        return Err(ValidationError::NoWrites);
    }
    if request.writes.len() > limits.max_aggregates {
        return Err(ValidationError::TooManyAggregates {
            count: request.writes.len(),
            max: limits.max_aggregates,
        });
    }
    let mut seen = HashSet::with_capacity(request.writes.len());
    let (mut events, mut bytes) = (0usize, 0usize);
    for (w, write) in request.writes.iter().enumerate() {
        if !seen.insert(write.aggregate) {
            return Err(ValidationError::DuplicateAggregate { write: w });
        }
        if write.events.is_empty() {
            return Err(ValidationError::EmptyEvents { write: w });
        }
        validate_sequences(w, write)?;
        for (i, event) in write.events.iter().enumerate() {
            validate_event(event, limits, &format!("writes[{w}].events[{i}]"))?;
            bytes += event.data.len();
        }
        events += write.events.len();
    }
    if events > limits.max_events {
        return Err(ValidationError::TooManyEvents {
            count: events,
            max: limits.max_events,
        });
    }
    if bytes > limits.max_request_bytes {
        return Err(ValidationError::WriteTooLarge {
            len: bytes,
            max: limits.max_request_bytes,
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::wire::AggregateRef;
    use uuid::Uuid;

    fn event(seq: u64) -> Event {
        Event {
            client_seq: seq,
            event_id: None,
            timestamp: 1,
            event_type: 1,
            minor: 0,
            data: vec![1, 2, 3],
            iv: None,
        }
    }

    fn request(seqs: &[u64]) -> WriteRequest {
        WriteRequest {
            client_id: Uuid::from_u128(9),
            writes: vec![AggregateWrite {
                aggregate: AggregateRef {
                    type_id: Uuid::from_u128(1),
                    id: Uuid::from_u128(2),
                },
                allow_create: true,
                expected_version: None,
                events: seqs.iter().copied().map(event).collect(),
            }],
        }
    }

    fn code(r: &WriteRequest) -> u32 {
        validate_write(r, &Limits::default()).unwrap_err().code()
    }

    #[test]
    fn a_good_request_passes() {
        validate_write(&request(&[1, 2, 5]), &Limits::default()).unwrap();
    }

    #[test]
    fn each_rule_has_its_code() {
        assert_eq!(
            code(&WriteRequest {
                writes: vec![],
                ..request(&[1])
            }),
            g::NO_WRITES
        );
        assert_eq!(code(&request(&[])), g::EMPTY_EVENTS);
        assert_eq!(code(&request(&[0, 1])), g::CLIENT_SEQ_ZERO);
        assert_eq!(code(&request(&[1, 3, 3])), g::CLIENT_SEQ_NOT_INCREASING);
        assert_eq!(code(&request(&[2, 1])), g::CLIENT_SEQ_NOT_INCREASING);
        let mut r = request(&[1]);
        r.writes[0].events[0].event_type = 0;
        assert_eq!(code(&r), g::EVENT_TYPE_ZERO);
        let mut r = request(&[1]);
        r.writes[0].events[0].iv = Some(vec![0; 11]);
        assert_eq!(code(&r), g::INVALID_IV);
        r.writes[0].events[0].iv = Some(vec![0; 12]);
        validate_write(&r, &Limits::default()).unwrap();
        let mut r = request(&[1]);
        r.writes.push(r.writes[0].clone());
        assert_eq!(code(&r), g::DUPLICATE_AGGREGATE);
    }

    #[test]
    fn limits_are_enforced() {
        let tight = Limits {
            max_aggregates: 1,
            max_events: 2,
            max_event_bytes: 3,
            max_request_bytes: 5,
        };
        let check = |r: &WriteRequest| validate_write(r, &tight).map_err(|e| e.code());
        assert_eq!(check(&request(&[1, 2, 3])), Err(g::TOO_MANY_EVENTS));
        assert_eq!(check(&request(&[1, 2])), Err(g::WRITE_TOO_LARGE));
        let mut r = request(&[1]);
        r.writes[0].events[0].data = vec![0; 4];
        assert_eq!(check(&r), Err(g::EVENT_TOO_LARGE));
        let mut r = request(&[1]);
        let mut other = r.writes[0].clone();
        other.aggregate.id = Uuid::from_u128(77);
        r.writes.push(other);
        assert_eq!(check(&r), Err(g::TOO_MANY_AGGREGATES));
    }
}
