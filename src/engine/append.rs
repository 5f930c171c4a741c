//! The checks an `append` must pass before anything is written.
//!
//! They are the gateway's own rules (shared through `celeriant-sync-protocol`), applied at the
//! moment the app can still do something about them: an event the gateway would reject is
//! refused here, with a typed error, and nothing of the append is persisted.

use std::cell::Cell;
use std::rc::Rc;

use celeriant_sync_protocol::validate::{Limits, ValidationError, validate_fields};

use super::model::NewEvent;

/// Most `data` one `append` may carry in all, in bytes: 64 MiB, sixteen requests' worth at the
/// default 4 MiB (the drain sends an append in several requests). Counted while the events are
/// copied into the module (`api::budget`): its memory, 4 GiB at most, is never given back.
pub const MAX_APPEND_BYTES: usize = 64 << 20;

/// Most the appends of the module may hold in memory at once (copied, not yet stored): their
/// events' `data` and `iv` and a fixed cost per event and per call (`api::budget`).
pub const MAX_HELD_BYTES: usize = 256 << 20;

/// What appends hold: copied into the module, not yet stored (one count per module).
#[derive(Clone, Debug, Default)]
pub struct Held(Rc<Cell<usize>>);

impl Held {
    /// A charge of nothing yet, released when dropped.
    pub fn charge(&self) -> Charge {
        Charge {
            held: self.0.clone(),
            bytes: 0,
        }
    }
}

/// One call's part of [`Held`]: kept with the call's events until they are stored (or the call
/// failed), then given back when dropped.
#[derive(Debug)]
pub struct Charge {
    held: Rc<Cell<usize>>,
    bytes: usize,
}

impl Charge {
    /// Counts `n` more bytes.
    pub fn add(&mut self, n: usize) {
        self.bytes = self.bytes.saturating_add(n);
        self.held.set(self.held.get().saturating_add(n));
    }

    /// How many more bytes every call together may still hold.
    pub fn room(&self) -> usize {
        MAX_HELD_BYTES.saturating_sub(self.held.get())
    }

    /// What every call together holds, in bytes.
    pub fn held(&self) -> usize {
        self.held.get()
    }
}

impl Drop for Charge {
    fn drop(&mut self) {
        self.held.set(self.held.get().saturating_sub(self.bytes));
    }
}

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

    fn held_now(held: &Held) -> usize {
        held.charge().held()
    }

    #[test]
    fn charges_add_up_across_calls_and_are_given_back_when_dropped() {
        let held = Held::default();
        let mut a = held.charge();
        a.add(MAX_HELD_BYTES - 10);
        let mut b = held.charge();
        assert_eq!(b.room(), 10);
        b.add(10);
        assert_eq!((a.room(), held_now(&held)), (0, MAX_HELD_BYTES));
        drop(a);
        assert_eq!((b.room(), held_now(&held)), (MAX_HELD_BYTES - 10, 10));
        drop(b);
        assert_eq!(held_now(&held), 0);
    }
}
