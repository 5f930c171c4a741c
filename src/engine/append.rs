//! The checks an `append` must pass before anything is written.
//!
//! They are the gateway's own rules (shared through `celeriant-sync-protocol`), applied at the
//! moment the app can still do something about them: an event the gateway would reject is
//! refused here, with a typed error, and nothing of the append is persisted.

use celeriant_sync_protocol::validate::{Limits, ValidationError, validate_fields};

use super::model::NewEvent;

/// Most `data` one `append` may carry in all, in bytes: 64 MiB, sixteen requests' worth at the
/// default 4 MiB. The events are copied into the module before anything is stored, and its
/// memory (4 GiB at most, never given back) must not be what refuses an append: 10,000 events
/// of 1 MiB each are otherwise valid, 10 GiB.
pub const MAX_APPEND_BYTES: usize = 64 << 20;

/// Why an append was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AppendError {
    /// No events.
    #[error("append needs at least one event")]
    Empty,
    /// More events than one append may carry.
    #[error("{count} events in one append; at most {max} are accepted")]
    TooMany {
        /// How many were given.
        count: usize,
        /// The limit.
        max: usize,
    },
    /// The events' `data` over [`MAX_APPEND_BYTES`] in all.
    #[error("{bytes} bytes of data in one append; at most {max} are accepted")]
    TooLarge {
        /// The events' data, in bytes.
        bytes: usize,
        /// The limit.
        max: usize,
    },
    /// One event breaks a protocol rule.
    #[error("events[{index}]: {error}")]
    Invalid {
        /// Which event.
        index: usize,
        /// The rule it breaks.
        error: ValidationError,
    },
}

/// Checks an append's events against the protocol's rules and `limits` — the very rules the
/// gateway applies ([`validate_fields`]), before anything is encoded or stored.
pub fn check(events: &[NewEvent], limits: &Limits) -> Result<(), AppendError> {
    if events.is_empty() {
        return Err(AppendError::Empty);
    }
    if events.len() > limits.max_events {
        return Err(AppendError::TooMany {
            count: events.len(),
            max: limits.max_events,
        });
    }
    let bytes = events.iter().map(|e| e.data.len()).sum::<usize>();
    if bytes > MAX_APPEND_BYTES {
        return Err(AppendError::TooLarge {
            bytes,
            max: MAX_APPEND_BYTES,
        });
    }
    for (index, e) in events.iter().enumerate() {
        validate_fields(e.event_type, e.iv.as_deref(), e.data.len(), limits, || {
            format!("events[{index}]")
        })
        .map_err(|error| AppendError::Invalid { index, error })?;
    }
    Ok(())
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use uuid::Uuid;

    fn ev(t: u64) -> NewEvent {
        NewEvent {
            event_id: Uuid::nil(),
            timestamp: 1,
            event_type: t,
            minor: 0,
            data: vec![1],
            iv: None,
        }
    }

    #[test]
    fn the_rules() {
        let limits = Limits {
            max_events: 3,
            max_event_bytes: 4,
            ..Limits::default()
        };
        assert_eq!(check(&[], &limits), Err(AppendError::Empty));
        assert!(matches!(
            check(&vec![ev(1); 4], &limits),
            Err(AppendError::TooMany { count: 4, max: 3 })
        ));
        assert!(matches!(
            check(&[ev(1), ev(0)], &limits),
            Err(AppendError::Invalid {
                index: 1,
                error: ValidationError::EventTypeZero { .. }
            })
        ));
        let big = NewEvent {
            data: vec![0; 5],
            ..ev(1)
        };
        assert!(matches!(
            check(&[big], &limits),
            Err(AppendError::Invalid {
                index: 0,
                error: ValidationError::EventTooLarge { .. }
            })
        ));
        let bad_iv = NewEvent {
            iv: Some(vec![0; 8]),
            ..ev(1)
        };
        assert!(matches!(
            check(&[bad_iv], &limits),
            Err(AppendError::Invalid {
                index: 0,
                error: ValidationError::InvalidIv { len: 8, .. }
            })
        ));
        check(
            &[
                ev(1),
                NewEvent {
                    iv: Some(vec![0; 12]),
                    ..ev(2)
                },
            ],
            &limits,
        )
        .unwrap();
    }

    #[test]
    fn one_append_carries_at_most_64_mib_of_data_in_all() {
        let mib = |tag: u64| NewEvent {
            data: vec![0; 1 << 20],
            ..ev(tag)
        };
        let limits = Limits::default();
        let mut events: Vec<NewEvent> = (1..=64).map(mib).collect();
        check(&events, &limits).unwrap();
        events.push(NewEvent {
            data: vec![0],
            ..ev(65)
        });
        assert_eq!(
            check(&events, &limits),
            Err(AppendError::TooLarge {
                bytes: (64 << 20) + 1,
                max: MAX_APPEND_BYTES
            })
        );
    }
}
