//! This context's copy of the `landed` watermarks, so that the drain's read-ahead needs no
//! `landed` in its transaction.
//!
//! Why: the read-ahead (`next_batch`) runs while a batch is in flight, and the settle of that
//! batch is a read-write transaction on `landed`. IndexedDB makes a read-write transaction wait
//! for every earlier transaction whose stores overlap, so a read-ahead that read `landed` held
//! the settle back until it was done (`node bench/idb-probe.mjs --mode drain`: the settle took
//! 20 ms a batch, mostly waiting). Reading ahead on `outbox` alone, with the watermarks from
//! here, lets the settle commit while the read goes on.
//!
//! Why the copy is right: only the drainer writes `landed` (the settle raises a watermark, the
//! prune drops one whose events are all gone), and it writes through here — when the drainer
//! holds the device's Web Lock, which is the only time the copy is kept at all
//! ([`Watermarks::keep`]): without Web Locks every context drains on its own (a documented
//! fallback), and each cut then reads `landed` in its own transaction as before. The copy is
//! forgotten at every drain start (`unpruned`, one of the start's reads) and read again, in
//! the next cut's transaction. The one write from elsewhere that can happen while this context
//! drains is the settle of a former drainer that still had the pinned batch in flight: it
//! raises the watermark of exactly the batch this drain has in flight too — which the cut
//! already takes as landed (`CutQuery::assume_landed`) — and it moves the pin, so this
//! drain's own settle fails and the drain stops (and starts again, reading afresh).
//! A generation number keeps a read that began before a `forget` from installing its copy.
//!
//! A copy can only be behind the store, never ahead: watermarks only rise, a prune drops one
//! only once no event at or below it is stored, and the copy changes only after a committed
//! write. The cost of a copy that is behind is a batch of landed events sent again, which the
//! server answers with 2002 and its `lastClientSeq` (settled, nothing doubled); never a skipped
//! event. Where the lock's fallback cannot tell a hung former drainer that it lost the lock
//! (`navigator.locks.query` missing: `src/browser/locks.rs`), that drainer may still cut from
//! its older copy and send such a batch.

use std::cell::{Cell, RefCell};

use crate::engine::model::AggregateRef;

/// Watermarks by aggregate, in `landed`'s key order. A plain list, looked up by a scan: it holds
/// one entry per aggregate with landed events still stored (few), and a map type of its own
/// cost the module 2.5 KB gzipped.
pub(super) type Marks = Vec<(AggregateRef, u64)>;

/// The aggregate's watermark in `marks` (0: none, nothing of it landed and stored).
pub(super) fn mark_of(marks: &Marks, aggregate: &AggregateRef) -> u64 {
    marks
        .iter()
        .find(|(a, _)| a == aggregate)
        .map_or(0, |(_, through)| *through)
}

/// The watermarks as this context's drain last read or wrote them; `None` until read.
#[derive(Debug, Default)]
pub(super) struct Watermarks {
    known: RefCell<Option<Marks>>,
    generation: Cell<u64>,
    /// Whether a copy is kept (this context drains holding the Web Lock); off by default.
    keep: Cell<bool>,
}

impl Watermarks {
    /// Whether to keep a copy from now on; turning it off forgets the copy.
    pub(super) fn keep(&self, keep: bool) {
        self.keep.set(keep);
        self.forget();
    }

    /// The copy, if there is one, and the generation to hand back to [`Watermarks::loaded`].
    pub(super) fn get(&self) -> (Option<Marks>, u64) {
        (self.known.borrow().clone(), self.generation.get())
    }

    /// Installs what was just read from `landed`, unless forgotten since `generation` or no
    /// copy is kept.
    pub(super) fn loaded(&self, generation: u64, marks: Marks) {
        if self.keep.get() && generation == self.generation.get() {
            *self.known.borrow_mut() = Some(marks);
        }
    }

    /// Drops the copy: the next cut reads `landed` again.
    pub(super) fn forget(&self) {
        self.generation.set(self.generation.get() + 1);
        *self.known.borrow_mut() = None;
    }

    /// A settle committed `through` as the aggregate's watermark.
    pub(super) fn raised(&self, aggregate: AggregateRef, through: u64) {
        if let Some(marks) = self.known.borrow_mut().as_mut() {
            match marks.iter_mut().find(|(a, _)| *a == aggregate) {
                Some((_, mark)) => *mark = through,
                None => marks.push((aggregate, through)),
            }
        }
    }

    /// Another context committed a watermark of at least `through` (the copy never goes down).
    pub(super) fn raised_to(&self, aggregate: AggregateRef, through: u64) {
        let higher = self
            .known
            .borrow()
            .as_ref()
            .is_some_and(|marks| mark_of(marks, &aggregate) < through);
        if higher {
            self.raised(aggregate, through);
        }
    }

    /// A prune deleted the aggregate's watermark (none of its landed events is stored).
    pub(super) fn dropped(&self, aggregate: &AggregateRef) {
        if let Some(marks) = self.known.borrow_mut().as_mut() {
            marks.retain(|(a, _)| a != aggregate);
        }
    }
}
