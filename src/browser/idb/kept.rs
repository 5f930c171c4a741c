//! The pages this context's reader just stored in the local log, kept in memory (the parsed
//! batches, the very objects that were put) so that the view built after a catch-up takes them
//! from here instead of reading them back: a `read` of an aggregate of thousands of events
//! spent most of its view's time in IndexedDB reading back what it had just written
//! (docs/benchmarks.md, "Catch-up").
//!
//! What is kept is a *run*: the pages of one catch-up of an aggregate, stored one after the
//! other, which hold the log's versions `start + 1 ..= end` of one epoch exactly. A snapshot
//! uses a run only if, in its own transaction, the aggregate's cursor record is still the one
//! the run's last page wrote: the same epoch and version, and the same *tag*, a number each of
//! the reader's page stores writes into the cursor record (`r`) and that no other write of the
//! record keeps (a reset, a page stored by another context, by a stopped reader or through
//! [`LocalLog::store_page`](crate::engine::read::log::LocalLog::store_page), a database deleted
//! and made again). The log and its cursor only change together, so that record proves that the
//! log's versions above `start` are the kept pages' batches; anything else and the snapshot
//! reads the log back as before. Each page also checks that the record it replaced carried the
//! run's tag before it extends the run (else a run starts anew). Tags are a random base drawn
//! once per context from the platform's cryptographic generator plus a counter: unique across
//! contexts without asking the generator at every page.
//!
//! Memory is bounded: at most [`BUDGET`] UTF-16 units of page text (as the gateway sent it)
//! are held over every aggregate together, older pages and other aggregates' runs giving way
//! first. A run is dropped once a view was built from it after its catch-up ended, or
//! [`LINGER_MS`] after that end if no view was (the drainer's catch-up for another tab's `read`,
//! whose view that tab reads back), and every run when the reader stops ([`Kept::clear`]; a
//! page store still in flight then keeps nothing: [`Ticket`]).

use std::cell::RefCell;
use std::collections::VecDeque;
use std::rc::{Rc, Weak};

use gloo_timers::callback::Timeout;
use js_sys::Array;
use wasm_bindgen::JsValue;

use crate::engine::model::AggregateRef;
use crate::engine::read::log::Cursor;
use crate::engine::sorted::SortedMap;

/// Page text held at most, in UTF-16 units, all aggregates together: four of the gateway's
/// default pages (`--read-page-bytes`, 2 MiB); the parsed batches take about as much again.
pub const BUDGET: u64 = 8 << 20;

/// How long an ended run waits for its view before it is dropped. A `read` builds its view as
/// soon as its catch-up ends (a few tasks later); a later view only reads back, as before.
pub const LINGER_MS: u32 = 2_000;

/// Tags are integers from 1 to 2^53 − 1 (exact as the `f64` the record stores).
const TAGS: u64 = (1 << 53) - 1;

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
    /// Its catch-up ended: the next view built from it is the last; dropped when this fires.
    ended: Option<Timeout>,
}

impl Run {
    fn size(&self) -> u64 {
        self.pages.iter().fold(0, |n, p| n.saturating_add(p.size))
    }
}

/// A run as a snapshot sees it (handles to the same arrays).
pub struct Cover {
    epoch: u64,
    /// The versions up to here are read back from the log.
    pub start: u64,
    end: u64,
    tag: f64,
    pages: Vec<(u64, Array)>,
    ended: bool,
}

impl Cover {
    /// Whether the log is still what the run stored: the cursor record read in the snapshot's
    /// transaction is the one its last page wrote.
    pub fn holds(&self, cursor: Cursor, tag: f64) -> bool {
        tag != 0.0 && tag == self.tag && cursor.epoch == self.epoch && cursor.version == self.end
    }

    /// The kept batches above version `after`, in version order.
    pub fn above(&self, after: u64) -> impl Iterator<Item = JsValue> + '_ {
        self.pages.iter().flat_map(move |(from, batches)| {
            let skip = after.saturating_sub(*from).min(u64::from(u32::MAX)) as u32;
            (skip..batches.length()).map(move |i| batches.get(i))
        })
    }
}

/// What a page store takes before it begins ([`Kept::ticket`]): the tag it writes, and the
/// generation of runs it belongs to.
#[derive(Clone, Copy, Debug)]
pub struct Ticket {
    /// The tag the store writes into the cursor record.
    pub tag: f64,
    generation: u64,
}

struct State {
    runs: SortedMap<AggregateRef, Run>,
    /// Raised by [`Kept::clear`]: a store begun before keeps nothing.
    generation: u64,
    /// The next tag, before it is folded into `1..=TAGS`.
    next: u64,
    linger_ms: u32,
}

/// The runs of one context's log, by aggregate.
pub struct Kept {
    state: Rc<RefCell<State>>,
}

impl Default for Kept {
    fn default() -> Self {
        Kept::new(LINGER_MS)
    }
}

impl Kept {
    /// Ended runs wait `linger_ms` for their view (tests shorten it).
    pub fn new(linger_ms: u32) -> Self {
        let random = crate::browser::global::random_uuid().as_u64_pair().0;
        Kept {
            state: Rc::new(RefCell::new(State {
                runs: SortedMap::new(),
                generation: 0,
                next: random,
                linger_ms,
            })),
        }
    }

    /// For a page store about to begin: a fresh tag to write into the cursor record (never 0:
    /// 0 is "none"), and the current generation.
    pub fn ticket(&self) -> Ticket {
        let mut state = self.state.borrow_mut();
        let tag = state.next % TAGS + 1;
        state.next = state.next.wrapping_add(1);
        Ticket {
            tag: tag as f64,
            generation: state.generation,
        }
    }

    /// A page was stored with `ticket`: the cursor went from `expected` (whose record carried
    /// `previous`) to `after`, putting `put`; `size` is the page's text length. Nothing is kept
    /// if [`Kept::clear`] came since the ticket was taken.
    pub fn stored(
        &self,
        ticket: Ticket,
        aggregate: AggregateRef,
        (expected, previous): (Cursor, f64),
        after: Cursor,
        put: Array,
        size: u64,
    ) {
        let mut state = self.state.borrow_mut();
        if ticket.generation != state.generation {
            return;
        }
        let runs = &mut state.runs;
        let page = Page {
            after: expected.version,
            batches: put,
            size,
        };
        let extends = runs.get(&aggregate).is_some_and(|r| {
            r.ended.is_none()
                && r.tag == previous
                && r.epoch == expected.epoch
                && r.end == expected.version
                && r.epoch == after.epoch
        });
        if extends {
            let run = runs.get_mut(&aggregate).expect("checked");
            run.end = after.version;
            run.tag = ticket.tag;
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
                tag: ticket.tag,
                pages,
                ended: None,
            };
            runs.insert(aggregate, run);
        }
        // Within the budget: other aggregates' runs go first, then this run's oldest pages
        // (its `start` moves up: the snapshot reads those versions back).
        loop {
            let total = runs.values().fold(0u64, |n, r| n.saturating_add(r.size()));
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

    /// The aggregate's catch-up ended: its run serves one more view, if one comes within the
    /// linger time.
    pub fn caught_up(&self, aggregate: AggregateRef) {
        let mut state = self.state.borrow_mut();
        let linger_ms = state.linger_ms;
        let Some(run) = state.runs.get_mut(&aggregate) else {
            return;
        };
        if run.ended.is_none() {
            let (weak, tag) = (Rc::downgrade(&self.state), run.tag);
            run.ended = Some(Timeout::new(linger_ms, move || {
                linger_ended(&weak, aggregate, tag)
            }));
        }
    }

    /// The aggregate's run, for a snapshot about to begin.
    pub fn cover(&self, aggregate: AggregateRef) -> Option<Cover> {
        let state = self.state.borrow();
        let run = state.runs.get(&aggregate)?;
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
            ended: run.ended.is_some(),
        })
    }

    /// A snapshot was read with `cover`: a run whose catch-up had ended is let go.
    pub fn used(&self, aggregate: AggregateRef, cover: &Cover) {
        if cover.ended {
            drop_run(&mut self.state.borrow_mut(), aggregate, cover.tag);
        }
    }

    /// Lets every run go, and every page store in flight keep nothing (the reader stopped:
    /// none of them is extended or ended any more).
    pub fn clear(&self) {
        let mut state = self.state.borrow_mut();
        state.runs = SortedMap::new();
        state.generation += 1;
    }
}

/// Drops the aggregate's run if it is still the one whose last tag is `tag`.
fn drop_run(state: &mut State, aggregate: AggregateRef, tag: f64) {
    if state.runs.get(&aggregate).is_some_and(|r| r.tag == tag) {
        // (Dropping its timer from inside that timer's callback is safe: wasm-bindgen frees a
        // closure dropped while it runs only when it returns.)
        state.runs.remove(&aggregate);
    }
}

/// An ended run's linger time is over and no view took it.
fn linger_ended(state: &Weak<RefCell<State>>, aggregate: AggregateRef, tag: f64) {
    if let Some(state) = state.upgrade() {
        drop_run(&mut state.borrow_mut(), aggregate, tag);
    }
}
