//! The pages this context's reader just stored in the local log, kept in memory (the parsed
//! batches, the very objects that were put) so that the view built after a catch-up takes them
//! from here instead of reading them back: a `read` of an aggregate of thousands of events
//! spent most of its view's time in IndexedDB reading back what it had just written
//! (docs/benchmarks.md, "Catch-up").
//!
//! What is kept is a *run*: the pages of one catch-up of an aggregate, stored one after the
//! other, which hold the log's versions `start + 1 ..= end` of one epoch exactly. A snapshot
//! uses a run only if, in its own transaction, the aggregate's cursor record is still the one
//! the run's last page wrote: the same epoch and version, and the same *tag*, a random number
//! each page store writes into the cursor record (`r`) and that no other write of the record
//! keeps (a reset, a page stored by another context or by a stopped reader, a database deleted
//! and made again). The log and its cursor only change together, so that record proves that the
//! log's versions above `start` are the kept pages' batches; anything else and the snapshot
//! reads the log back as before. Each page also checks that the record it replaced carried the
//! run's tag before it extends the run (else a run starts anew).
//!
//! Memory is bounded: at most [`BUDGET`] UTF-16 units of page text (as the gateway sent it)
//! are held over every aggregate together, older pages and other aggregates' runs giving way
//! first; a run is dropped once a view was built from it after its catch-up ended.

use std::cell::RefCell;
use std::collections::VecDeque;

use js_sys::Array;
use wasm_bindgen::JsValue;

use crate::engine::model::AggregateRef;
use crate::engine::read::log::Cursor;
use crate::engine::sorted::SortedMap;

/// Page text held at most, in UTF-16 units, all aggregates together: four of the gateway's
/// default pages (`--read-page-bytes`, 2 MiB); the parsed batches take about as much again.
pub(crate) const BUDGET: u64 = 8 << 20;

/// One stored page: the batches it put, versions `after + 1 ..= after + batches.length()`
/// (a page's batches follow the cursor without a gap, `engine::read::log::place`).
struct Page {
    after: u64,
    batches: Array,
    size: u64,
}

struct Run {
    epoch: u64,
    /// The cursor's version before the run's first page kept.
    start: u64,
    /// The cursor's version after its last page.
    end: u64,
    /// What the last page wrote into the cursor record.
    tag: f64,
    pages: VecDeque<Page>,
    /// Its catch-up ended: the next view built from it is the last.
    ended: bool,
}

impl Run {
    fn size(&self) -> u64 {
        self.pages.iter().map(|p| p.size).sum()
    }
}

/// A run as a snapshot sees it (handles to the same arrays).
pub(crate) struct Cover {
    epoch: u64,
    pub start: u64,
    end: u64,
    tag: f64,
    pages: Vec<(u64, Array)>,
    ended: bool,
}

impl Cover {
    /// Whether the log is still what the run stored: the cursor record read in the snapshot's
    /// transaction is the one its last page wrote.
    pub(crate) fn holds(&self, cursor: Cursor, tag: f64) -> bool {
        tag != 0.0 && tag == self.tag && cursor.epoch == self.epoch && cursor.version == self.end
    }

    /// The kept batches above version `after`, in version order.
    pub(crate) fn above(&self, after: u64) -> impl Iterator<Item = JsValue> + '_ {
        self.pages.iter().flat_map(move |(from, batches)| {
            let skip = after.saturating_sub(*from).min(u64::from(u32::MAX)) as u32;
            (skip..batches.length()).map(move |i| batches.get(i))
        })
    }
}

/// The runs of one context's log, by aggregate.
#[derive(Default)]
pub(crate) struct Kept {
    runs: RefCell<SortedMap<AggregateRef, Run>>,
}

impl Kept {
    /// A fresh tag for a page store to write into the cursor record (never 0: 0 is "none").
    pub(crate) fn tag() -> f64 {
        js_sys::Math::random() + f64::EPSILON
    }

    /// A page was stored: the cursor went from `expected` (whose record carried `previous`) to
    /// `after` (written with `tag`), putting `put`; `size` is the page's text length.
    pub(crate) fn stored(
        &self,
        aggregate: AggregateRef,
        (expected, previous): (Cursor, f64),
        (after, tag): (Cursor, f64),
        put: Array,
        size: u64,
    ) {
        let mut runs = self.runs.borrow_mut();
        let page = Page {
            after: expected.version,
            batches: put,
            size,
        };
        let extends = runs.get(&aggregate).is_some_and(|r| {
            !r.ended
                && r.tag == previous
                && r.epoch == expected.epoch
                && r.end == expected.version
                && r.epoch == after.epoch
        });
        if extends {
            let run = runs.get_mut(&aggregate).expect("checked");
            run.end = after.version;
            run.tag = tag;
            if page.batches.length() > 0 {
                run.pages.push_back(page);
            }
        } else {
            let mut pages = VecDeque::new();
            if page.batches.length() > 0 {
                pages.push_back(page);
            }
            let run = Run {
                epoch: after.epoch,
                start: expected.version,
                end: after.version,
                tag,
                pages,
                ended: false,
            };
            runs.insert(aggregate, run);
        }
        // Within the budget: other aggregates' runs go first, then this run's oldest pages
        // (its `start` moves up: the snapshot reads those versions back).
        loop {
            let total: u64 = runs.values().map(Run::size).sum();
            if total <= BUDGET {
                break;
            }
            let other = runs.keys().copied().find(|a| *a != aggregate);
            if let Some(other) = other {
                runs.remove(&other);
                continue;
            }
            let run = runs.get_mut(&aggregate).expect("the only run left");
            run.pages.pop_front();
            match run.pages.front() {
                Some(first) => run.start = first.after,
                None => {
                    runs.remove(&aggregate);
                    break;
                }
            }
        }
    }

    /// The aggregate's catch-up ended: its run serves one more view.
    pub(crate) fn caught_up(&self, aggregate: AggregateRef) {
        if let Some(run) = self.runs.borrow_mut().get_mut(&aggregate) {
            run.ended = true;
        }
    }

    /// The aggregate's run, for a snapshot about to begin.
    pub(crate) fn cover(&self, aggregate: AggregateRef) -> Option<Cover> {
        let runs = self.runs.borrow();
        let run = runs.get(&aggregate)?;
        Some(Cover {
            epoch: run.epoch,
            start: run.start,
            end: run.end,
            tag: run.tag,
            pages: run
                .pages
                .iter()
                .map(|p| (p.after, p.batches.clone()))
                .collect(),
            ended: run.ended,
        })
    }

    /// A snapshot was read with `cover`: a run whose catch-up had ended is let go.
    pub(crate) fn used(&self, aggregate: AggregateRef, cover: &Cover) {
        let mut runs = self.runs.borrow_mut();
        if cover.ended && runs.get(&aggregate).is_some_and(|r| r.tag == cover.tag) {
            runs.remove(&aggregate);
        }
    }

    /// Lets every run go (the reader stopped: none of them is extended or ended any more).
    pub(crate) fn clear(&self) {
        *self.runs.borrow_mut() = SortedMap::new();
    }
}
