//! The versions the change stream notified, per aggregate (the **floors**), so a catch-up
//! answered by a replica that lags is not taken for caught up.
//!
//! With the Celeriant backend a page may be read from a replica behind the one that notified:
//! after `changed` said "the aggregate reached version N", a catch-up could end (no `next`)
//! with the local log below N, and nothing would tell the client again until the next change or
//! resync — a lost notification, the view behind. So the reader remembers the highest version
//! notified for each aggregate, and a catch-up that ends below it is retried with backoff
//! instead of ending caught up.
//!
//! A floor goes when it is reached, when a `reset` says the aggregate was trimmed or deleted
//! (after a deletion its versions restart, so an older floor would never be reached), when a
//! page finds the aggregate gone (its tip below the cursor: deleted while no `reset` reached
//! this device), when the last subscriber goes, and with the reader (a new one starts without).
//! A trim (a 410, `Trimmed`) keeps it: a trim keeps the tip.
//!
//! Bounded: a gateway that notifies a version it never serves makes the reader retry at most
//! [`BEHIND_RETRIES`] times in a row without its cursor moving (the drain's backoff, 250 ms
//! doubling to its cap: about half a minute in all at the defaults), then the floor is dropped
//! and the executor logs it. A retry that moves the cursor (the replica catching up under a
//! stream of changes) starts the count again: it serves versions it has, so it cannot loop.

use super::super::model::AggregateRef;
use super::super::sorted::SortedMap;

/// Catch-ups in a row that may end below a floor without moving the cursor before the floor
/// is dropped.
pub const BEHIND_RETRIES: u32 = 8;

/// One aggregate's floor.
#[derive(Debug, Clone, Copy)]
struct Floor {
    /// The highest version notified.
    version: u64,
    /// Catch-ups in a row that ended below it without moving the cursor.
    misses: u32,
    /// Where the last of them ended.
    at: u64,
}

/// What a catch-up that ended at some version means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reached {
    /// At or above the floor (or none): caught up; the floor is dropped.
    Yes,
    /// Below it: retry after the backoff of attempt `attempt` (0 first).
    Behind {
        /// Misses in a row, less one.
        attempt: u32,
    },
    /// Below it once more than [`BEHIND_RETRIES`] allow: the floor `notified` is dropped.
    GaveUp {
        /// The version notified and never served.
        notified: u64,
    },
}

/// Every aggregate's floor.
#[derive(Debug, Default)]
pub(crate) struct Floors {
    by_aggregate: SortedMap<AggregateRef, Floor>,
}

impl Floors {
    /// A `changed` said the aggregate reached `version`.
    pub(crate) fn notified(&mut self, aggregate: AggregateRef, version: u64) {
        let floor = self.by_aggregate.get_or_insert_with(aggregate, || Floor {
            version,
            misses: 0,
            at: 0,
        });
        floor.version = floor.version.max(version);
    }

    /// The floor means nothing any more (a reset, a deletion, no subscriber).
    pub(crate) fn forget(&mut self, aggregate: &AggregateRef) {
        self.by_aggregate.remove(aggregate);
    }

    /// Whether a `changed` notified more than `version`.
    pub(crate) fn above(&self, aggregate: &AggregateRef, version: u64) -> bool {
        self.by_aggregate
            .get(aggregate)
            .is_some_and(|f| f.version > version)
    }

    /// A catch-up of the aggregate ended with its log at `version`.
    pub(crate) fn reached(&mut self, aggregate: AggregateRef, version: u64) -> Reached {
        let Some(floor) = self.by_aggregate.get_mut(&aggregate) else {
            return Reached::Yes;
        };
        if version >= floor.version {
            self.by_aggregate.remove(&aggregate);
            return Reached::Yes;
        }
        if version > floor.at {
            floor.misses = 0; // the replica serves more than last time: it is catching up
        }
        floor.at = version;
        floor.misses += 1;
        if floor.misses > BEHIND_RETRIES {
            let notified = floor.version;
            self.by_aggregate.remove(&aggregate);
            return Reached::GaveUp { notified };
        }
        Reached::Behind {
            attempt: floor.misses - 1,
        }
    }
}
