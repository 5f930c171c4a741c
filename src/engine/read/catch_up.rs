//! The catch-ups waiting for their page, in order, each aggregate at most once; and the `read`s
//! waiting for a catch-up of their aggregate that begins after they asked.
//!
//! A `ready` or `resync` of a shard queues up to 1,000 aggregates at once, and the unwatched
//! ones with them; checking "already queued?" by scanning the queue made such a burst
//! quadratic (8,000 queued: 32 million comparisons). A sorted index beside the order keeps it
//! a binary search.
//!
//! A `read` must see at least what the server had when it asked, so a catch-up answers only
//! the reads asked before one of its page requests began ([`CatchUps::board`]); a read asked
//! while a page is in flight waits for the next one (it queued its aggregate again). Before,
//! every catch-up that ended answered every read of its aggregate, also one whose last page
//! was answered before the read asked (found by `tests/read_model_contexts.rs`).
//!
//! Each read keeps the floor ([`super::floors`]) in force when it first boarded: a catch-up
//! ending at or above it answers the read, whatever the floor has become since. Before, the
//! read needed the floor of the last page it boarded, raised by every `changed` meanwhile: an
//! aggregate written faster than a lagging replica's pages reached each read's floor one page
//! late, again and again, and the read waited to its timeout.

use std::collections::VecDeque;

use super::super::model::AggregateRef;
use super::super::sorted::{SortedMap, SortedSet};
use super::message::ReadTag;

/// The catch-up queue.
#[derive(Debug, Default)]
pub(crate) struct CatchUps {
    order: VecDeque<AggregateRef>,
    queued: SortedSet<AggregateRef>,
    /// The reads waiting, by aggregate, each with the floor in force when a page request of
    /// it first began after they asked (aboard its catch-up; `None`: not yet).
    reads: SortedMap<AggregateRef, Vec<(ReadTag, Option<u64>)>>,
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

    /// Whether `aggregate` is queued.
    pub(crate) fn contains(&self, aggregate: &AggregateRef) -> bool {
        self.queued.contains(aggregate)
    }

    /// The next catch-up.
    pub(crate) fn pop_front(&mut self) -> Option<AggregateRef> {
        let next = self.order.pop_front()?;
        self.queued.remove(&next);
        Some(next)
    }

    /// The read `tag` waits for a catch-up of `aggregate` that begins from now on, which is
    /// queued (a read asked again — a new drainer asks every waiting read again — keeps its
    /// place).
    pub(crate) fn ask(&mut self, aggregate: AggregateRef, tag: ReadTag) {
        let reads = self.reads.get_or_default(aggregate);
        if !reads.iter().any(|(t, _)| *t == tag) {
            reads.push((tag, None));
        }
        self.push_back(aggregate);
    }

    /// Whether any read waits for a catch-up of `aggregate`.
    pub(crate) fn waiting(&self, aggregate: &AggregateRef) -> bool {
        self.reads.contains_key(aggregate)
    }

    /// A page request of `aggregate` begins with the floor at `floor` (0: none): every read
    /// of it waiting is aboard, those not yet aboard needing `floor`. Whether any read is
    /// aboard.
    pub(crate) fn board(&mut self, aggregate: AggregateRef, floor: u64) -> bool {
        let Some(reads) = self.reads.get_mut(&aggregate) else {
            return false;
        };
        for (_, needs) in reads.iter_mut() {
            needs.get_or_insert(floor);
        }
        !reads.is_empty()
    }

    /// The catch-up of `aggregate` ended with its log at `version`: the reads aboard it that
    /// need no more than `version` (all aboard when `version` is `None`: it ended for good),
    /// no longer waiting. The others stay, for the next catch-up (queued when they asked, or
    /// by the change that raised the floor).
    pub(crate) fn served(&mut self, aggregate: AggregateRef, version: Option<u64>) -> Vec<ReadTag> {
        let Some(reads) = self.reads.get_mut(&aggregate) else {
            return Vec::new();
        };
        let (served, waiting): (Vec<_>, Vec<_>) = std::mem::take(reads)
            .into_iter()
            .partition(|(_, needs)| needs.is_some_and(|floor| version.is_none_or(|v| floor <= v)));
        if waiting.is_empty() {
            self.reads.remove(&aggregate);
        } else {
            *reads = waiting;
        }
        served.into_iter().map(|(tag, _)| tag).collect()
    }
}
