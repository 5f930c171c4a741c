//! A projection's cache rule: what of a view must be folded again.
//!
//! A projection (`client.project`) folds a view's events with the app's `apply`. The view is
//! the confirmed log in server order, then this device's pending events; the confirmed part only
//! grows at its end until the log is reset (trimmed and read again, another epoch). So the state
//! of the confirmed part is folded once and kept with what it covers — the view's *base* (which
//! read of the confirmed log it extends: the views layer starts a new base at every reset) and
//! how many confirmed events it holds: a new page folds only its new events, and the pending
//! events, which change at every append and confirmation, are re-applied on top of the kept
//! state at each change. Anything else (another base, fewer confirmed events than folded, no
//! cache after a failed `apply`) folds from scratch.

/// What the kept confirmed state covers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Folded {
    /// The base of the view it was folded from.
    pub base: u64,
    /// How many confirmed events it holds.
    pub confirmed: usize,
    /// The aggregate version of the last of them (0: none).
    pub version: u64,
}

/// Where folding the confirmed part of a new view starts.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Plan {
    /// From the kept state, applying the confirmed events from this index on (none when it
    /// equals the view's count: only the pending events are re-applied).
    Extend {
        /// The first confirmed event not folded yet.
        from: usize,
    },
    /// From the initial state, every confirmed event.
    Refold,
}

/// The plan for a view with `confirmed` confirmed events on `base` (its version `version`),
/// given what is kept.
pub fn plan(kept: Option<&Folded>, base: u64, confirmed: usize, version: u64) -> Plan {
    match kept {
        Some(k) if k.base == base && k.confirmed <= confirmed && k.version <= version => {
            Plan::Extend { from: k.confirmed }
        }
        _ => Plan::Refold,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn kept(base: u64, confirmed: usize, version: u64) -> Folded {
        Folded {
            base,
            confirmed,
            version,
        }
    }

    #[test]
    fn nothing_kept_folds_from_scratch() {
        assert_eq!(plan(None, 1, 0, 0), Plan::Refold);
        assert_eq!(plan(None, 1, 10_000, 70), Plan::Refold);
    }

    #[test]
    fn a_new_page_folds_only_its_new_events() {
        let k = kept(3, 10_000, 500);
        assert_eq!(
            plan(Some(&k), 3, 10_001, 501),
            Plan::Extend { from: 10_000 }
        );
        // Only the pending part changed: nothing confirmed to fold.
        assert_eq!(
            plan(Some(&k), 3, 10_000, 500),
            Plan::Extend { from: 10_000 }
        );
    }

    #[test]
    fn a_reset_or_a_shrunk_log_folds_from_scratch() {
        let k = kept(3, 20, 9);
        assert_eq!(
            plan(Some(&k), 4, 25, 12),
            Plan::Refold,
            "another base: a reset"
        );
        assert_eq!(
            plan(Some(&k), 3, 19, 9),
            Plan::Refold,
            "fewer events than folded"
        );
        assert_eq!(plan(Some(&k), 3, 20, 8), Plan::Refold, "an older version");
    }
}
