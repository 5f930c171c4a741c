//! The simulated world of the read side's model tests (`tests/read_model.rs`,
//! `tests/read_model_contexts.rs`): a gateway holding each aggregate's batches (appending,
//! trimming, deleting, notifying the streams that watch it, refusing streams past its caps),
//! the network, and the executor of one [`Reader`] over one [`MemoryLog`] (pages read through
//! `engine::read::page` as `engine/read/run_page.rs` reads them, one step at a time, with faults). The
//! reader can be replaced (a new drainer): its streams, page and timers go with it.
//!
//! This file holds the world and the reader's executor (feeding the machine, performing its
//! actions, pages, timers, subscriptions, settling); the gateway and its streams are in
//! `gateway.rs`, the checks of the log, views and streams against the gateway in `checks.rs`
//! (split to keep each file short).
//! Its own executor, not `engine/read/run.rs` (tested in `run_tests.rs`): here the model picks
//! which page completes, fails, lags or outlives a stopped reader, step by step.
#![allow(dead_code)]

use std::collections::{BTreeMap, VecDeque};

use celeriant_sync::engine::backoff::Backoff;
use celeriant_sync::engine::model::AggregateRef;
use celeriant_sync::engine::read::log::{Cursor, LocalLog};
use celeriant_sync::engine::read::machine::{Action, Input, Note, PageEnd, Reader, StreamId};
use celeriant_sync::engine::read::memory_log::{LogBatch, MemoryLog};
use celeriant_sync::engine::read::page;
use celeriant_sync::engine::read::routing::ReaderNews;
use celeriant_sync::engine::read::streams::Limits;
use futures_executor::block_on;

use crate::sim::Rng;
use uuid::Uuid;

mod checks;
mod gateway;

pub use gateway::{Held, Stream};

pub const ME: &str = "me";
/// Batches per page, small so catch-ups take several pages.
const PAGE: u64 = 3;

pub fn agg(n: u64) -> AggregateRef {
    AggregateRef {
        type_id: Uuid::from_u128(0x5EAD),
        id: Uuid::from_u128(u128::from(n)),
    }
}

pub enum Flight {
    Page {
        aggregate: AggregateRef,
        probe: bool,
        cursor: Cursor,
        /// The tip a `ready` gave (`FetchPageUnlessAt`).
        tip: Option<u64>,
    },
    Reset {
        aggregate: AggregateRef,
        min_version: u64,
        gone: bool,
    },
}

/// A view as `views.rs` keeps it: the epoch and version it reaches, and its batches.
#[derive(Default)]
pub struct View {
    pub kept: Option<(u64, u64)>,
    pub batches: Vec<LogBatch>,
}

pub struct World {
    pub rng: Rng,
    pub now: u64,
    pub reader: Reader,
    pub log: MemoryLog,
    pub gateway: BTreeMap<AggregateRef, Held>,
    pub subscribed: BTreeMap<AggregateRef, u32>,
    pub views: BTreeMap<AggregateRef, View>,
    /// The open streams, by the id the machine gave them.
    pub streams: BTreeMap<StreamId, Stream>,
    pub limits: Limits,
    /// The most aggregates the gateway takes in one stream (below `limits.per_stream` in some
    /// runs: a larger stream is refused, `StreamTooLarge`, and the machine halves its own).
    pub gateway_cap: usize,
    /// The most streams the gateway lets this client hold open (below `limits.streams` in
    /// some runs: one more is refused, `StreamTooMany`, and the machine opens one less).
    pub stream_cap: usize,
    /// Streams the gateway refused, to tell the machine: `true` for too many streams, `false`
    /// for too many aggregates in one.
    pub refused: Vec<(StreamId, bool)>,
    /// Polls of the unwatched aggregates let run while settling (see [`World::settle`]).
    pub polls: u32,
    /// Ids of streams closed or ended: the model sometimes feeds them notes a late callback
    /// would carry, which the machine must ignore.
    pub gone: Vec<StreamId>,
    /// The gateway sends no tips in `ready`.
    pub no_tips: bool,
    /// Pages not asked for because the cursor was at a `ready`'s tip.
    pub skipped: u64,
    pub flight: Option<Flight>,
    /// The machine's current wait (`Action::Wait`), when it runs out.
    pub wait: Option<u64>,
    /// Retries to feed later (`Action::RetryLater`, fed as `Input::Retry`).
    pub retries: Vec<(u64, AggregateRef)>,
    pub fail_next: bool,
    /// Pages may be answered by a replica that lags ([`World::lag_next`]; `tests/read_model.rs`
    /// only: `tests/read_model_contexts.rs` checks that a `read` sees what the gateway had when
    /// it asked, which no client can keep against such a replica for a change not yet
    /// notified — the reader keeps it for what was notified).
    pub lagging: bool,
    /// The next page that can be is answered by a replica that lags: from an older snapshot
    /// of the aggregate, at or above the log's cursor but below what the reader was notified
    /// (the Celeriant backend reads pages from any replica).
    pub lag_next: bool,
    /// The highest version a `changed` told the current reader of, per aggregate, since the
    /// last deletion `reset` of it it was told (versions may restart; a trim keeps the tip)
    /// and while it is watched: what a replica that lags answers below.
    pub notified: BTreeMap<AggregateRef, u64>,
    /// Pages answered from an older snapshot that held less than the gateway.
    pub lagged: u64,
    /// Catch-ups the machine stopped retrying below a notified version the gateway has
    /// (`NeverServed`).
    pub never_served: u64,
    pub online: bool,
    pub stamp: u64,
    /// Break the executor's reading of pages as the browser's was: a page's tip is not
    /// compared with the cursor (a deletion the stream did not report goes unnoticed).
    pub ignore_shrunk_tip: bool,
    /// What the reader's executor reported (`ReadRun`'s `news`, `engine/read/run.rs`), for the context
    /// holding it to route; nobody listens in the single-context model.
    pub news: Vec<ReaderNews>,
    /// Aggregates this device's events just landed in (some context's pending events changed).
    pub touched: Vec<AggregateRef>,
    /// How many readers were started (the first one included).
    pub readers: u32,
    /// The reader stopped and no other started yet: what it is fed is dropped, as
    /// `ReadRun::feed` drops it once stopped.
    pub stopped: bool,
}

impl World {
    pub fn new(seed: u64, limits: Limits) -> Self {
        World {
            rng: Rng::new(seed),
            now: 1_000_000,
            reader: Reader::with_limits(Backoff::default(), limits),
            limits,
            gateway_cap: usize::MAX,
            stream_cap: limits.streams + 1,
            refused: Vec::new(),
            polls: 0,
            gone: Vec::new(),
            no_tips: false,
            skipped: 0,
            log: MemoryLog::new(),
            gateway: BTreeMap::new(),
            subscribed: BTreeMap::new(),
            views: BTreeMap::new(),
            streams: BTreeMap::new(),
            flight: None,
            wait: None,
            retries: Vec::new(),
            fail_next: false,
            lagging: false,
            lag_next: false,
            notified: BTreeMap::new(),
            lagged: 0,
            never_served: 0,
            online: true,
            stamp: 0,
            ignore_shrunk_tip: false,
            news: Vec::new(),
            touched: Vec::new(),
            readers: 1,
            stopped: false,
        }
    }

    /// The reader stops and a new one starts over the same log (another context drains now,
    /// or the same one again): the old one's streams are closed, its page in flight, timers and
    /// retries forgotten (`ReadRun::stop`: a page answered after the stop is not stored),
    /// and what its streams still say never reaches the new one (another executor). The new
    /// one starts at the configured limits, told whether the network is on.
    pub fn restart(&mut self) {
        let _ = self.stop();
        self.reader = Reader::with_limits(Backoff::default(), self.limits);
        self.notified.clear();
        self.readers += 1;
        self.stopped = false;
        self.feed(Input::Online(self.online));
    }

    /// The reader stops (`ReadRun::stop`): its streams closed, its timers and retries
    /// forgotten, and nothing fed to it any more. Returns its page or reset in flight, which
    /// the caller may finish later ([`World::finish_orphan`]) or drop.
    #[must_use]
    pub fn stop(&mut self) -> Option<Flight> {
        self.stopped = true;
        self.streams.clear();
        self.refused.clear();
        self.gone.clear();
        self.wait = None;
        self.retries.clear();
        self.news.clear();
        self.flight.take()
    }

    /// A stopped reader's page or reset that was past its last check of `stopped` (a page's
    /// store or a reset already under way in `engine/read/run_page.rs`): it still writes the log,
    /// with the cursor it read (a compare-and-set), but nothing is fed to any reader. Returns
    /// the aggregate if its log moved (the stopped reader's `LogChanged` news).
    pub fn finish_orphan(&mut self, flight: Flight) -> Option<AggregateRef> {
        match flight {
            Flight::Page {
                aggregate,
                probe,
                cursor,
                tip,
            } => {
                if probe || tip.is_some_and(|tip| page::at_tip(cursor, tip).is_some()) {
                    return None;
                }
                let news = self.news.len();
                self.answer(aggregate, false, cursor);
                let moved = self.news.len() > news;
                self.news.truncate(news);
                moved.then_some(aggregate)
            }
            Flight::Reset {
                aggregate,
                min_version,
                gone,
            } => {
                block_on(self.log.reset_log(aggregate, min_version, gone)).unwrap();
                Some(aggregate)
            }
        }
    }

    /// The world of run `seed`: one run in three against a gateway that takes one aggregate
    /// per stream, one in five against one that lets the client hold one stream only, one in
    /// four against a gateway that sends no tips in `ready` (as the Celeriant backend).
    pub fn for_seed(seed: u64) -> Self {
        let mut world = World::new(seed, LIMITS);
        if seed % 3 == 0 {
            world.gateway_cap = 1;
        }
        if seed % 5 == 2 {
            world.stream_cap = 1;
        }
        world.no_tips = seed % 4 == 1;
        world
    }

    pub fn feed(&mut self, input: Input) {
        if self.stopped {
            return;
        }
        let random = self.rng.float();
        match input {
            Input::Stream(_, Note::Changed { aggregate, version }) => {
                let v = self.notified.entry(aggregate).or_default();
                *v = (*v).max(version);
            }
            // A deletion: versions may restart. A trim keeps the tip (and the reader its floor).
            Input::Stream(
                _,
                Note::Reset {
                    aggregate,
                    deleted: true,
                },
            ) => {
                self.notified.remove(&aggregate);
            }
            _ => {}
        }
        let unsubscribed = match input {
            Input::Unsubscribe(aggregate) => Some(aggregate),
            _ => None,
        };
        self.reader.handle(input, self.now, random);
        if let Some(a) = unsubscribed.filter(|a| !self.reader.watched().contains(a)) {
            self.notified.remove(&a);
        }
        while let Some(action) = self.reader.poll() {
            self.apply(action);
        }
    }

    pub fn apply(&mut self, action: Action) {
        match action {
            Action::OpenStream { id, aggregates } => {
                assert!(
                    aggregates.len() <= self.limits.per_stream,
                    "a stream too large"
                );
                if aggregates.len() > self.gateway_cap {
                    self.refused.push((id, false)); // 400, 40020
                    self.gone.push(id);
                    return;
                }
                if self.streams.len() >= self.stream_cap {
                    self.refused.push((id, true)); // 429, 42920
                    self.gone.push(id);
                    return;
                }
                let old = self.streams.insert(
                    id,
                    Stream {
                        watching: aggregates,
                        ready: false,
                        notes: VecDeque::new(),
                    },
                );
                assert!(old.is_none(), "a stream id used twice");
                // The gateway's per-client cap: every shard's stream, and one being replaced.
                assert!(
                    self.streams.len() <= self.limits.streams + 1,
                    "{} streams open",
                    self.streams.len()
                );
            }
            Action::CloseStream(id) => {
                // A stream the gateway refused, closed before the machine heard of it: the
                // refusal is never delivered (the executor drops a closed stream's callbacks).
                let was_refused = self.refused.iter().any(|(r, _)| *r == id);
                self.refused.retain(|(r, _)| *r != id);
                assert!(
                    self.streams.remove(&id).is_some() || was_refused,
                    "closed a stream that is not open"
                );
                self.gone.push(id);
            }
            Action::Unwatched(_) => {}
            Action::FetchPage(aggregate)
            | Action::Probe(aggregate)
            | Action::FetchPageUnlessAt(aggregate, _) => {
                assert!(self.flight.is_none(), "one page at a time");
                let cursor = block_on(self.log.cursor(aggregate)).unwrap();
                let probe = matches!(action, Action::Probe(_));
                let tip = match action {
                    Action::FetchPageUnlessAt(_, tip) => Some(tip),
                    _ => None,
                };
                self.flight = Some(Flight::Page {
                    aggregate,
                    probe,
                    cursor,
                    tip,
                });
            }
            Action::ResetLog {
                aggregate,
                min_version,
                gone,
            } => {
                assert!(self.flight.is_none(), "a reset waits for the page");
                self.flight = Some(Flight::Reset {
                    aggregate,
                    min_version,
                    gone,
                });
            }
            Action::RetryLater { aggregate, ms } => self.retries.push((self.now + ms, aggregate)),
            Action::Wait(ms) => self.wait = Some(self.now + ms),
            Action::Report(_) => {}
            Action::NeverServed {
                aggregate,
                notified,
                ..
            } => {
                // Given up on a version the gateway has (not on one of an aggregate deleted
                // since, whose `reset` was lost: that the cap is for).
                if (self.gateway.get(&aggregate)).is_some_and(|h| h.tip >= notified) {
                    self.never_served += 1;
                }
            }
            Action::CaughtUp {
                aggregate,
                ok,
                reads,
            } => self.news.push(ReaderNews::CaughtUp {
                aggregate,
                ok,
                reads,
            }),
        }
    }

    /// What the gateway answers to a page or a probe of `aggregate` read at `cursor`, and what
    /// the executor makes of it (as `engine/read/run_page.rs` does).
    pub fn answer(&mut self, aggregate: AggregateRef, probe: bool, cursor: Cursor) -> PageEnd {
        if std::mem::take(&mut self.fail_next) || !self.online {
            return PageEnd::Failed {
                message: "injected".into(),
            };
        }
        let held = self.gateway.entry(aggregate).or_insert_with(|| Held {
            min: 1,
            ..Held::default()
        });
        let from = if probe { 1 } else { cursor.version + 1 };
        if from < held.min {
            return page::trimmed(Some(held.min)).expect("a trim");
        }
        let mut tip = Some(held.tip);
        if probe {
            return page::probed(tip, cursor);
        }
        let notified = self
            .notified
            .get(&aggregate)
            .map_or(0, |v| (*v).min(held.tip));
        if self.lag_next && notified > cursor.version {
            self.lag_next = false;
            // A replica behind what the reader was told, but not behind this log (one behind
            // the log reads as a deletion, `Gone`: another matter, not modelled). Nor behind
            // what nobody told (a `ready`'s or a `resync`'s catch-up): no client can tell.
            tip = Some(cursor.version + self.rng.below(notified - cursor.version));
            self.lagged += 1;
        }
        let tip_now = tip.unwrap_or(0);
        if page::shrunk(tip, cursor) && !self.ignore_shrunk_tip {
            return PageEnd::Gone;
        }
        let batches: Vec<LogBatch> = held
            .batches
            .range(from..(from + PAGE).min(tip_now + 1).max(from))
            .map(|(_, b)| b.clone())
            .collect();
        let next = tip_now >= from + PAGE;
        let after = block_on(self.log.store_page(aggregate, &batches, ME, cursor)).unwrap();
        if after.is_some_and(|after| after.version > cursor.version) {
            self.news.push(ReaderNews::LogChanged(aggregate));
        }
        page::stored(cursor, after, next)
    }

    pub fn complete(&mut self) {
        match self.flight.take() {
            Some(Flight::Page {
                aggregate,
                probe,
                cursor,
                tip,
            }) => {
                // As the browser's executor: at the tip a `ready` gave, nothing is asked.
                let end = match tip.and_then(|tip| page::at_tip(cursor, tip)) {
                    Some(end) => {
                        self.skipped += 1;
                        end
                    }
                    None => self.answer(aggregate, probe, cursor),
                };
                self.feed(Input::Page { aggregate, end });
            }
            Some(Flight::Reset {
                aggregate,
                min_version,
                gone,
            }) => {
                block_on(self.log.reset_log(aggregate, min_version, gone)).unwrap();
                self.news.push(ReaderNews::LogChanged(aggregate));
                self.feed(Input::LogReset(aggregate));
            }
            None => {}
        }
    }

    /// Moves the clock to the next timer and fires it.
    pub fn tick(&mut self) -> bool {
        let next_retry = self.retries.iter().map(|(at, _)| *at).min();
        let next = match (self.wait, next_retry) {
            (Some(w), Some(r)) => w.min(r),
            (Some(w), None) => w,
            (None, Some(r)) => r,
            (None, None) => return false,
        };
        self.now = self.now.max(next);
        if self.wait.is_some_and(|w| w <= self.now) {
            self.wait = None;
            self.feed(Input::TimerFired);
        }
        let due: Vec<AggregateRef> = self
            .retries
            .iter()
            .filter(|(at, _)| *at <= self.now)
            .map(|(_, a)| *a)
            .collect();
        self.retries.retain(|(at, _)| *at > self.now);
        for aggregate in due {
            self.feed(Input::Retry(aggregate)); // as `ReadRun`'s retry timer does
        }
        true
    }

    pub fn subscribe(&mut self, aggregate: AggregateRef) {
        block_on(self.log.ensure_cursor(aggregate)).unwrap();
        *self.subscribed.entry(aggregate).or_default() += 1;
        self.views.entry(aggregate).or_default();
        self.feed(Input::Subscribe(aggregate));
    }

    pub fn unsubscribe(&mut self, aggregate: AggregateRef) {
        let Some(count) = self.subscribed.get_mut(&aggregate) else {
            return;
        };
        *count -= 1;
        if *count == 0 {
            self.subscribed.remove(&aggregate);
            self.views.remove(&aggregate);
        }
        self.feed(Input::Unsubscribe(aggregate));
    }

    pub fn step(&mut self, aggregates: u64, fault_rate: f64) {
        let a = agg(self.rng.below(aggregates));
        let fault = self.rng.chance(fault_rate);
        match self.rng.below(12) {
            0 => self.subscribe(a),
            1 => self.unsubscribe(a),
            2 => {
                block_on(self.log.ensure_cursor(a)).unwrap();
                self.feed(Input::CatchUp(a)); // a `read`
            }
            k => self.gateway_step(k, a, fault),
        }
        self.refresh_views();
        self.check_log();
        self.news.clear(); // one context: nobody to tell
        self.touched.clear();
    }

    /// Every watched view takes what is new, as `views.rs` does: from its kept place when the
    /// epoch is the same, from scratch otherwise.
    pub fn refresh_views(&mut self) {
        for (aggregate, view) in &mut self.views {
            let s = block_on(self.log.snapshot(*aggregate, view.kept)).unwrap();
            if s.from == 0 {
                view.batches.clear();
            }
            view.batches.extend(s.batches);
            view.kept = Some((s.cursor.epoch, s.cursor.version));
        }
    }

    /// Runs every note, page and timer to the end, without faults.
    pub fn settle(&mut self) {
        self.begin_settle();
        for _ in 0..10_000 {
            let progressed = self.settle_step();
            self.refresh_views();
            self.check_log();
            self.news.clear();
            self.touched.clear();
            if !progressed {
                return;
            }
        }
        panic!("the read side never became quiescent");
    }

    /// No more faults: the next page succeeds, the network is on.
    pub fn begin_settle(&mut self) {
        self.fail_next = false;
        self.lag_next = false;
        if !self.online {
            self.online = true;
            self.feed(Input::Online(true));
        }
        self.polls = 0;
    }

    /// One step towards quiescence (a page, a note, a timer); `false` when there is none left.
    pub fn settle_step(&mut self) -> bool {
        // The only timer left is the unwatched aggregates' poll: it is let run once (it must
        // bring them up to date too), then the machine counts as quiescent.
        let only_poll = self.retries.is_empty()
            && self.wait.is_some()
            && self.wait == self.reader.poll_due_at()
            && (self.reader.streams().iter()).all(|(id, _)| self.streams.contains_key(id));
        if self.flight.is_some() {
            self.complete();
            true
        } else if self.deliver() {
            true
        } else if only_poll && self.polls >= 1 {
            false
        } else {
            self.polls += u32::from(only_poll);
            self.tick()
        }
    }
}

/// Small enough that 2–6 aggregates are split over streams and some fit in none.
pub const LIMITS: Limits = Limits {
    per_stream: 2,
    streams: 2,
};
