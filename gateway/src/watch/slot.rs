//! One open stream's pending notifications, bounded by what it watches.
//!
//! The hub writes into a [`Slot`] (never waiting: a short lock, a map insert, a wake-up) and
//! the stream's body drains it when the connection can take more bytes. A reader that stops
//! reading therefore costs at most one entry per aggregate it watches: changes to one aggregate
//! coalesce into its highest version, a reset is a flag per aggregate (whether it was a
//! deletion), a resync one flag that replaces everything pending. Versions sent never go
//! backwards (the slot remembers the last version it sent per aggregate, again one entry per
//! watched aggregate) until the hub passes the aggregate's deletion on ([`Slot::reset`] with
//! `deleted`): a deleted aggregate created again is then notified from its new versions. A
//! deletion the hub never sees (committed while no upstream watch is open, or lost when the
//! hub lags: a [`Slot::resync`] instead) forgets nothing: the recreated aggregate's versions
//! up to the last one sent are not sent on this stream at all, until it is reopened. A trim
//! keeps the tip, so it forgets nothing: a `changed`
//! below a version sent after a trim (an upstream watch renewed on a node still catching up)
//! is not sent. So on one stream a version below one sent follows a deletion, always — what
//! the client's floors rely on (`docs/architecture.md`, "Floors").

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
    /// `event: reset`; `true`: a deletion (else a trim).
    Reset(AggregateRef, bool),
    /// `event: resync`.
    Resync,
}

#[derive(Debug, Default)]
struct Pending {
    changed: HashMap<AggregateRef, u64>,
    /// Per aggregate, whether any reset pending was a deletion.
    resets: HashMap<AggregateRef, bool>,
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

    /// `aggregate` was trimmed or `deleted`. After a deletion what was sent or pending of it
    /// no longer holds: created again, it starts from version 1, and its versions must be
    /// notified again (the reader re-reads it from scratch on `reset` anyway). A trim keeps the
    /// tip, so its versions never go back: what was sent and what is pending still hold.
    /// (Before, a trim forgot them too, and after a trim and a `resync` that dropped its
    /// `reset` a renewed upstream watch on a node still catching up could send a version below
    /// one sent: the client took it for a recreation and answered a read below the version it
    /// waited for.)
    pub fn reset(&self, aggregate: AggregateRef, deleted: bool) {
        let mut p = self.lock();
        if deleted {
            p.sent.remove(&aggregate);
            p.changed.remove(&aggregate);
        }
        *p.resets.entry(aggregate).or_insert(false) |= deleted;
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
        let mut notes: Vec<Note> = (p.resets.drain())
            .map(|(aggregate, deleted)| Note::Reset(aggregate, deleted))
            .collect();
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
        s.reset(agg(1), true);
        s.changed(agg(1), 1);
        assert_eq!(
            s.drain(),
            vec![Note::Reset(agg(1), true), Note::Changed(agg(1), 1)]
        );
    }

    /// A trim keeps the tip: what was sent still holds, a lower version is not sent after it
    /// (a `changed` of a node still catching up), and a change pending survives it.
    #[test]
    fn a_trim_forgets_nothing_sent_or_pending() {
        let s = Slot::new(1, None, [agg(1)].into());
        s.changed(agg(1), 10);
        assert_eq!(s.drain(), vec![Note::Changed(agg(1), 10)]);
        s.reset(agg(1), false);
        s.changed(agg(1), 9);
        assert_eq!(s.drain(), vec![Note::Reset(agg(1), false)]);
        // Its `reset` lost in a resync: still nothing below 10.
        s.reset(agg(1), false);
        s.resync();
        assert_eq!(s.drain(), vec![Note::Resync]);
        s.changed(agg(1), 9);
        s.changed(agg(1), 10);
        assert_eq!(s.drain(), vec![]);
        s.changed(agg(1), 12);
        s.reset(agg(1), false);
        assert_eq!(
            s.drain(),
            vec![Note::Reset(agg(1), false), Note::Changed(agg(1), 12)]
        );
    }

    /// A deletion clears what was sent, even when its `reset` is lost in a resync; a trim and
    /// a deletion pending together are sent as a deletion.
    #[test]
    fn a_deletion_forgets_what_was_sent_and_outweighs_a_trim() {
        let s = Slot::new(1, None, [agg(1)].into());
        s.changed(agg(1), 10);
        assert_eq!(s.drain(), vec![Note::Changed(agg(1), 10)]);
        s.reset(agg(1), true);
        s.resync();
        assert_eq!(s.drain(), vec![Note::Resync]);
        s.changed(agg(1), 2);
        assert_eq!(s.drain(), vec![Note::Changed(agg(1), 2)]);
        s.reset(agg(1), false);
        s.reset(agg(1), true);
        s.reset(agg(1), false);
        assert_eq!(s.drain(), vec![Note::Reset(agg(1), true)]);
    }

    #[test]
    fn a_resync_replaces_everything_pending_and_resets_come_first() {
        let s = Slot::new(1, None, [agg(1), agg(2)].into());
        s.changed(agg(1), 3);
        s.reset(agg(2), true);
        s.resync();
        assert_eq!(s.drain(), vec![Note::Resync]);
        s.changed(agg(1), 4);
        s.reset(agg(2), false);
        assert_eq!(
            s.drain(),
            vec![Note::Reset(agg(2), false), Note::Changed(agg(1), 4)]
        );
    }
}
