//! What the runtime remembers in memory about the events it has not seen land, so that when
//! the storage goes away under a running client (the database deleted or evicted) it can say
//! what was lost instead of hiding it: per aggregate, the `clientSeq` range this context
//! appended and has not seen synced. Memory only — the database is gone when this is read.

use std::cell::RefCell;

use crate::engine::model::{AggregateRef, Receipt};
use crate::engine::status::Status;

/// One aggregate's events appended here and not yet seen landed: `first..=last`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Range {
    /// The aggregate.
    pub aggregate: AggregateRef,
    /// The lowest sequence not seen landed.
    pub first: u64,
    /// The highest sequence appended.
    pub last: u64,
}

/// What the client reports lost when its database went away.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Lost {
    /// Events that were waiting to sync (the status's count: every context's appends).
    pub pending: u64,
    /// Events that were parked.
    pub parked: u64,
    /// The ranges this context appended and had not seen land.
    pub aggregates: Vec<Range>,
}

/// The runtime's memory of unsynced ranges, and the loss once it happened.
#[derive(Default)]
pub(crate) struct StorageMemory {
    unsynced: RefCell<Vec<Range>>,
    lost: RefCell<Option<Lost>>,
}

impl StorageMemory {
    /// This context's append of `receipts` to `aggregate` committed. After a loss (an append
    /// that committed just before the database was deleted), it is added to what was lost.
    pub(crate) fn appended(&self, aggregate: AggregateRef, receipts: &[Receipt]) {
        let (Some(lo), Some(hi)) = (
            receipts.iter().map(|r| r.client_seq).min(),
            receipts.iter().map(|r| r.client_seq).max(),
        ) else {
            return;
        };
        widen(&mut self.unsynced.borrow_mut(), aggregate, lo, hi);
        if let Some(lost) = self.lost.borrow_mut().as_mut() {
            lost.pending += receipts.len() as u64;
            widen(&mut lost.aggregates, aggregate, lo, hi);
        }
    }

    /// `aggregate` landed through `through` (this context's drain or another's).
    pub(crate) fn synced(&self, aggregate: AggregateRef, through: u64) {
        let mut unsynced = self.unsynced.borrow_mut();
        if let Some(r) = unsynced.iter_mut().find(|r| r.aggregate == aggregate) {
            r.first = r.first.max(through + 1);
        }
        unsynced.retain(|r| r.first <= r.last);
    }

    /// `aggregate`'s parked events were discarded (by the app: not lost).
    pub(crate) fn discarded(&self, aggregate: AggregateRef) {
        self.unsynced
            .borrow_mut()
            .retain(|r| r.aggregate != aggregate);
    }

    /// The storage is gone: what was pending is lost. Remembered (the first loss counts).
    pub(crate) fn lose(&self, status: &Status) -> Lost {
        self.lost
            .borrow_mut()
            .get_or_insert_with(|| Lost {
                pending: status.pending,
                parked: status.parked,
                aggregates: self.unsynced.borrow().clone(),
            })
            .clone()
    }

    /// The loss, once it happened.
    pub(crate) fn lost(&self) -> Option<Lost> {
        self.lost.borrow().clone()
    }
}

/// Widens `aggregate`'s range in `ranges` to cover `lo..=hi` (adds one if it has none).
fn widen(ranges: &mut Vec<Range>, aggregate: AggregateRef, lo: u64, hi: u64) {
    match ranges.iter_mut().find(|r| r.aggregate == aggregate) {
        Some(r) => {
            r.first = r.first.min(lo);
            r.last = r.last.max(hi);
        }
        None => ranges.push(Range {
            aggregate,
            first: lo,
            last: hi,
        }),
    }
}
