//! After a batch landed: the settle (watermark raised, pin moved to the read-ahead in the same
//! transaction), deferred pruning of landed events, and storage failures.

use super::super::super::outbox::{Pruned, StoreError};
use super::super::super::status::SyncedNotice;
use super::{Action, Drain, Now, Phase, Report, Settling};

impl Drain {
    pub(super) fn settle(&mut self, mut settling: Settling, _now: Now) {
        self.emit(Action::Settle {
            batch: settling.batch.clone(),
            through: settling.through,
            then: settling.then.as_ref().map(|(b, _)| b.clone()),
        });
        if settling.then.is_some() {
            // The batch pinned by this settle goes out next: confirm the lock meanwhile, not
            // after the commit (the settle's compare-and-set on the pin fences as well).
            self.emit(Action::CheckLock);
            settling.lock = Some(None);
        }
        self.phase = Phase::Settling(settling);
    }

    pub(super) fn settled(&mut self, s: Settling, now: Now) {
        self.attempt = 0;
        self.ambiguous = false;
        self.next_probe_at = 0;
        let whole = s.through >= s.batch.last_seq;
        self.settled_whole = whole.then(|| s.batch.clone());
        // One notice per aggregate (an atomic write's legs each get theirs).
        for landed in s.landed.chunk_by(|a, b| a.aggregate == b.aggregate) {
            let (first, last) = (&landed[0], &landed[landed.len() - 1]);
            let notice = SyncedNotice {
                aggregate: first.aggregate,
                first_seq: first.client_seq,
                last_seq: last.client_seq,
                event_ids: landed.iter().map(|e| e.event_id).collect(),
                duplicate: s.duplicate,
            };
            self.unpruned.insert(first.aggregate);
            self.unpruned_events += landed.len() as u64;
            self.report(Report::Synced {
                notice,
                removed: landed.len() as u32,
            });
        }
        match s.then {
            Some((batch, events)) => {
                if batch.aggregate != s.batch.aggregate || whole {
                    // The batch read ahead: pinned by the settle.
                    self.cursor = Some(batch.aggregate);
                    self.settled_whole = None;
                    self.ambiguous = self
                        .isolating
                        .get(&batch.aggregate)
                        .is_some_and(|(_, ambiguous)| *ambiguous);
                }
                self.ready_checked((batch, events), now, s.lock);
            }
            None => self.next_batch(),
        }
        self.maybe_prune(false);
    }

    pub(super) fn pruned(&mut self, result: Result<Pruned, StoreError>, now: Now) {
        let Some(aggregate) = self.pruning.take() else {
            return;
        };
        match result {
            Ok(p) => {
                self.unpruned_events = self.unpruned_events.saturating_sub(u64::from(p.removed));
                if !p.more {
                    self.unpruned.remove(&aggregate);
                }
                if self.unpruned.is_empty() {
                    self.unpruned_events = 0;
                }
                let idle = matches!(self.phase, Phase::Idle);
                self.maybe_prune(idle);
            }
            // Pruning can wait: the events are invisible already; try again when idle next.
            Err(e) => self.storage_error_reported(&e, now),
        }
    }

    /// Deletes landed events, a chunk at a time: when idle, or when too many have piled up.
    pub(super) fn maybe_prune(&mut self, idle: bool) {
        if self.pruning.is_some() {
            return;
        }
        let Some(aggregate) = self.unpruned.first().copied() else {
            return;
        };
        if idle || self.unpruned_events >= self.policy.prune_high_water {
            self.pruning = Some(aggregate);
            self.emit(Action::Prune { aggregate, idle });
        }
    }

    pub(super) fn storage_error_reported(&mut self, e: &StoreError, now: Now) {
        self.report(Report::Error {
            code: None,
            message: e.to_string(),
            at: now.ms,
        });
    }

    /// A storage failure on the drain's path: report it, wait, then start again from the pin.
    pub(super) fn storage_failed(&mut self, e: StoreError, now: Now) {
        self.storage_error_reported(&e, now);
        self.read_ahead = None;
        self.phase = Phase::StorageWait;
        self.emit(Action::Wait {
            ms: self.policy.storage_retry_ms,
            work: false,
            network: false,
        });
    }
}
