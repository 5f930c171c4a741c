//! The catch-ups waiting for their page, in order, each aggregate at most once.
//!
//! A `ready` or `resync` of a shard queues up to 1,000 aggregates at once, and the unwatched
//! ones with them; checking "already queued?" by scanning the queue made such a burst
//! quadratic (8,000 queued: 32 million comparisons). A sorted index beside the order keeps it
//! a binary search.

use std::collections::VecDeque;

use super::super::model::AggregateRef;
use super::super::sorted::SortedSet;

/// The catch-up queue.
#[derive(Debug, Default)]
pub(crate) struct CatchUps {
    order: VecDeque<AggregateRef>,
    queued: SortedSet<AggregateRef>,
}

impl CatchUps {
    /// Queues `aggregate` last, unless it is queued already (it is read up to the tip anyway).
    pub(crate) fn push_back(&mut self, aggregate: AggregateRef) {
        if self.queued.insert(aggregate) {
            self.order.push_back(aggregate);
        }
    }

    /// Queues `aggregate` first, moving it if it was queued.
    pub(crate) fn push_front(&mut self, aggregate: AggregateRef) {
        if !self.queued.insert(aggregate) {
            self.order.retain(|a| *a != aggregate);
        }
        self.order.push_front(aggregate);
    }

    /// The next catch-up.
    pub(crate) fn pop_front(&mut self) -> Option<AggregateRef> {
        let next = self.order.pop_front()?;
        self.queued.remove(&next);
        Some(next)
    }
}
