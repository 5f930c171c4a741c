//! This context's copy of the `counters` it last wrote, so that an append can issue its writes
//! without first waiting for the counter read.
//!
//! Why: an append's transaction reads the aggregate's counter, then writes its events under the
//! next sequences. Waiting for the read is a round trip to the browser's IndexedDB backend
//! before any write is issued; with a one-event append awaited at a time that wait was about a
//! tenth of the whole append (docs/benchmarks.md). With the counter this context last wrote as
//! its guess, an append issues the read and the writes together.
//!
//! Why it is right: the guess is only that. The read is still made, in the same transaction,
//! before the writes (IndexedDB runs a transaction's requests in order), and its answer is
//! checked as soon as it arrives: a mismatch (another context appended to the aggregate since)
//! aborts the transaction, and the append is made again the plain way (read, then write).
//! The answers arrive, and the check runs, before any of the writes can answer — a
//! transaction's success events come in request order, and the check runs in the microtasks of
//! the last read's own event, while the transaction is still active and before it can commit
//! (an explicit commit is asked for only after the check) — so an aborted transaction never
//! committed anything, and a committed one wrote exactly what the plain way would have.
//! A guess that is wrong costs one aborted transaction, never a reused sequence.

use std::cell::RefCell;

use super::watermarks::Marks;
use crate::engine::model::AggregateRef;

/// How many aggregates' counters are remembered.
const REMEMBERED: usize = 64;

/// The counter of `aggregate` in `known`, if it is there.
fn mark_of_known(known: &Marks, aggregate: &AggregateRef) -> Option<u64> {
    known
        .iter()
        .find(|(a, _)| a == aggregate)
        .map(|(_, last)| *last)
}

/// The counters this context last committed (the first remembered is the first forgotten).
#[derive(Debug, Default)]
pub(super) struct Counters {
    known: RefCell<Marks>,
}

impl Counters {
    /// The guesses for `aggregates`, in order, if every one is known.
    pub(super) fn guess<'a>(
        &self,
        aggregates: impl Iterator<Item = &'a AggregateRef>,
    ) -> Option<Vec<u64>> {
        let known = self.known.borrow();
        let mut guesses = Vec::new();
        for aggregate in aggregates {
            guesses.push(mark_of_known(&known, aggregate)?);
        }
        Some(guesses)
    }

    /// Remembers what a committed append wrote.
    pub(super) fn committed(&self, written: impl Iterator<Item = (AggregateRef, u64)>) {
        let mut known = self.known.borrow_mut();
        for (aggregate, last) in written {
            match known.iter_mut().find(|(a, _)| *a == aggregate) {
                Some(entry) => entry.1 = last,
                None => {
                    if known.len() == REMEMBERED {
                        known.remove(0);
                    }
                    known.push((aggregate, last));
                }
            }
        }
    }

    /// Forgets every guess (an append failed, or a guess was wrong).
    pub(super) fn forget(&self) {
        self.known.borrow_mut().clear();
    }
}
