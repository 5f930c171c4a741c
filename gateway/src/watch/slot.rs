//! One open stream's pending notifications, bounded by what it watches.
//!
//! The hub writes into a [`Slot`] (never waiting: a short lock, a map insert, a wake-up) and
//! the stream's body drains it when the connection can take more bytes. A reader that stops
//! reading therefore costs at most one entry per aggregate it watches: changes to one aggregate
//! coalesce into its highest version, a reset is a flag per aggregate, a resync one flag that
//! replaces everything pending. Versions sent never go backwards (the slot remembers the last
//! version it sent per aggregate, again one entry per watched aggregate) until the aggregate is
//! reset: a deleted aggregate created again is notified from its new versions.

use std::collections::{HashMap, HashSet};
use std::sync::Mutex;

use celeriant_sync_protocol::AggregateRef;
use tokio::sync::Notify;
use uuid::Uuid;

/// A notification due on a stream.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Note {
    /// `event: changed`.
    Changed(AggregateRef, u64),
    /// `event: reset`.
    Reset(AggregateRef),
    /// `event: resync`.
    Resync,
}

#[derive(Debug, Default)]
struct Pending {
    changed: HashMap<AggregateRef, u64>,
    resets: HashSet<AggregateRef>,
    resync: bool,
    sent: HashMap<AggregateRef, u64>,
}

/// One stream's registration: what it watches, for whom, and what is due.
#[derive(Debug)]
pub struct Slot {
    /// The stream's id in the hub.
    pub id: u64,
    /// The session's client id (`None` under `--auth none`).
    pub client: Option<Uuid>,
    /// The aggregates watched (deduplicated).
    pub aggregates: HashSet<AggregateRef>,
    pending: Mutex<Pending>,
    wake: Notify,
}

impl Slot {
    /// A slot with nothing pending.
    pub fn new(id: u64, client: Option<Uuid>, aggregates: HashSet<AggregateRef>) -> Self {
        Slot {
            id,
            client,
            aggregates,
            pending: Mutex::new(Pending::default()),
            wake: Notify::new(),
        }
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Pending> {
        self.pending.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// `aggregate` is now at `version` (coalesced with anything pending).
    pub fn changed(&self, aggregate: AggregateRef, version: u64) {
        let mut p = self.lock();
        if p.sent.get(&aggregate).is_some_and(|&sent| sent >= version) {
            return;
        }
        let due = p.changed.entry(aggregate).or_insert(version);
        *due = (*due).max(version);
        drop(p);
        self.wake.notify_one();
    }

    /// `aggregate` was trimmed or deleted. What was sent or pending of it no longer holds: a
    /// deleted aggregate created again starts from version 1, and its versions must be notified
    /// again (the reader re-reads it from scratch on `reset` anyway).
    pub fn reset(&self, aggregate: AggregateRef) {
        let mut p = self.lock();
        p.sent.remove(&aggregate);
        p.changed.remove(&aggregate);
        p.resets.insert(aggregate);
        drop(p);
        self.wake.notify_one();
    }

    /// Everything must be caught up.
    pub fn resync(&self) {
        self.lock().resync = true;
        self.wake.notify_one();
    }

    /// Resolves once something may be due (or at once if it already was).
    pub async fn wait(&self) {
        self.wake.notified().await;
    }

    /// Takes everything due, in the order to send: a resync alone (it covers everything), else
    /// resets, then changes.
    pub fn drain(&self) -> Vec<Note> {
        let mut p = self.lock();
        if std::mem::take(&mut p.resync) {
            p.resets.clear();
            p.changed.clear();
            return vec![Note::Resync];
        }
        let mut notes: Vec<Note> = p.resets.drain().map(Note::Reset).collect();
        let changed: Vec<(AggregateRef, u64)> = p.changed.drain().collect();
        for (aggregate, version) in changed {
            p.sent.insert(aggregate, version);
            notes.push(Note::Changed(aggregate, version));
        }
        notes
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn agg(n: u128) -> AggregateRef {
        AggregateRef {
            type_id: Uuid::from_u128(1),
            id: Uuid::from_u128(n),
        }
    }

    #[test]
    fn changes_coalesce_and_never_go_backwards() {
        let s = Slot::new(1, None, [agg(1), agg(2)].into());
        s.changed(agg(1), 3);
        s.changed(agg(1), 5);
        s.changed(agg(1), 4);
        assert_eq!(s.drain(), vec![Note::Changed(agg(1), 5)]);
        s.changed(agg(1), 5);
        s.changed(agg(1), 2);
        assert_eq!(s.drain(), vec![]);
        s.changed(agg(1), 6);
        assert_eq!(s.drain(), vec![Note::Changed(agg(1), 6)]);
    }

    #[test]
    fn after_a_reset_lower_versions_are_notified_again() {
        let s = Slot::new(1, None, [agg(1)].into());
        s.changed(agg(1), 5);
        assert_eq!(s.drain(), vec![Note::Changed(agg(1), 5)]);
        s.changed(agg(1), 6);
        s.reset(agg(1));
        s.changed(agg(1), 1);
        assert_eq!(
            s.drain(),
            vec![Note::Reset(agg(1)), Note::Changed(agg(1), 1)]
        );
    }

    #[test]
    fn a_resync_replaces_everything_pending_and_resets_come_first() {
        let s = Slot::new(1, None, [agg(1), agg(2)].into());
        s.changed(agg(1), 3);
        s.reset(agg(2));
        s.resync();
        assert_eq!(s.drain(), vec![Note::Resync]);
        s.changed(agg(1), 4);
        s.reset(agg(2));
        assert_eq!(
            s.drain(),
            vec![Note::Reset(agg(2)), Note::Changed(agg(1), 4)]
        );
    }
}
