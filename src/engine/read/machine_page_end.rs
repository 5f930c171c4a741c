//! How the read machine ([`super::Reader`]) ends a catch-up: caught up, or below the version
//! a `changed` notified (its floor, [`crate::engine::read::floors`]) — which reads that answers,
//! whether to read again at once, retry later or give up. Kept apart from `machine.rs` so each
//! file reads on its own.

use super::super::floors::Reached;
use super::{Action, AggregateRef, Reader};

impl Reader {
    /// The aggregate's catch-up reached the page's end with its log at `version`: caught up,
    /// unless a `changed` notified more (the page was answered by a replica that lags).
    /// Either way it answers the reads aboard whose floor (the one in force when they first
    /// boarded) `version` reaches. Reached the floor in force when its page request began: it
    /// is read again for the newer one (no miss). Below that too: read again at once if a
    /// change or a read queued it meanwhile, else after a backoff (one retry pending at most),
    /// its other reads still waiting — given up after [`BEHIND_RETRIES`] misses and
    /// [`GIVE_UP_MS`] without the cursor moving.
    ///
    /// [`BEHIND_RETRIES`]: crate::engine::read::floors::BEHIND_RETRIES
    /// [`GIVE_UP_MS`]: crate::engine::read::floors::GIVE_UP_MS
    pub(super) fn page_end(
        &mut self,
        aggregate: AggregateRef,
        version: u64,
        now_ms: u64,
        random: f64,
    ) {
        let served = self.floors.served(&aggregate, version);
        let reached = self.floors.reached(aggregate, version, served, now_ms);
        match reached {
            Reached::Yes => self.caught_up(aggregate, true),
            Reached::Behind { attempt, retry } => {
                let reads = self.queue.served(aggregate, Some(version));
                // A floor kept past the last unsubscription for the reads waiting on it goes
                // once none waits: nothing else needs it.
                let orphan =
                    !self.watched.contains_key(&aggregate) && !self.queue.waiting(&aggregate);
                if served || orphan || !reads.is_empty() {
                    self.emit(Action::CaughtUp {
                        aggregate,
                        ok: true,
                        reads,
                    });
                }
                if orphan {
                    self.floors.forget(&aggregate);
                    return;
                }
                if served {
                    self.enqueue(aggregate);
                } else if !self.queue.contains(&aggregate) {
                    if !self.failed.contains(&aggregate) {
                        self.failed.push(aggregate);
                    }
                    if retry {
                        let ms = self.backoff.delay_ms(attempt, random, None).max(250);
                        self.floors.retrying(&aggregate);
                        self.emit(Action::RetryLater { aggregate, ms });
                    }
                }
            }
            Reached::GaveUp { notified } => {
                self.caught_up(aggregate, false);
                self.emit(Action::NeverServed {
                    aggregate,
                    notified,
                    reached: version,
                });
            }
        }
    }

    /// The aggregate's catch-up ended for good: it answers every read aboard it.
    pub(super) fn caught_up(&mut self, aggregate: AggregateRef, ok: bool) {
        let reads = self.queue.served(aggregate, None);
        self.emit(Action::CaughtUp {
            aggregate,
            ok,
            reads,
        });
    }
}
