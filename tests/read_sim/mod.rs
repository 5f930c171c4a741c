//! The simulated world of the read side's model tests (`tests/read_model.rs`,
//! `tests/read_model_contexts.rs`): a gateway holding each aggregate's batches (appending,
//! trimming, deleting, notifying the streams that watch it, refusing streams past its caps),
//! the network, and the executor of one [`Reader`] over one [`MemoryLog`] (pages read through
//! `engine::read::page` as `browser/reader.rs` reads them, one step at a time, with faults). The
//! reader can be replaced (a new drainer): its streams, page and timers go with it.
#![allow(dead_code)]

use std::collections::{BTreeMap, VecDeque};

use celeriant_sync::engine::backoff::Backoff;
use celeriant_sync::engine::model::AggregateRef;
use celeriant_sync::engine::read::log::{Cursor, LocalLog};
use celeriant_sync::engine::read::machine::{Action, Input, Note, PageEnd, Reader, StreamId};
use celeriant_sync::engine::read::memory_log::{LogBatch, LogEvent, MemoryLog};
use celeriant_sync::engine::read::page;
use celeriant_sync::engine::read::routing::ReaderNews;
use celeriant_sync::engine::read::streams::Limits;
use futures_executor::block_on;

use crate::sim::Rng;
use uuid::Uuid;

pub const ME: &str = "me";
/// Batches per page, small so catch-ups take several pages.
const PAGE: u64 = 3;

pub fn agg(n: u64) -> AggregateRef {
    AggregateRef {
        type_id: Uuid::from_u128(0x5EAD),
        id: Uuid::from_u128(u128::from(n)),
    }
}

/// One aggregate as the gateway holds it.
#[derive(Default)]
pub struct Held {
    pub batches: BTreeMap<u64, LogBatch>,
    pub tip: u64,
    /// The lowest version still available (1 unless trimmed).
    pub min: u64,
    pub deleted: bool,
}

pub struct Stream {
    pub watching: Vec<AggregateRef>,
    /// Subscribed at the gateway: changes are notified from then on.
    pub ready: bool,
    pub notes: VecDeque<Note>,
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
    /// Catch-ups to feed later (`Action::RetryLater`).
    pub retries: Vec<(u64, AggregateRef)>,
    pub fail_next: bool,
    pub online: bool,
    pub stamp: u64,
    /// Break the executor's reading of pages as the browser's was: a page's tip is not
    /// compared with the cursor (a deletion the stream did not report goes unnoticed).
    pub ignore_shrunk_tip: bool,
    /// What the reader's executor reported (`browser/reader.rs`'s `news`), for the context
    /// holding it to route; nobody listens in the single-context model.
    pub news: Vec<ReaderNews>,
    /// Aggregates this device's events just landed in (some context's pending events changed).
    pub touched: Vec<AggregateRef>,
    /// How many readers were started (the first one included).
    pub readers: u32,
    /// The reader stopped and no other started yet: what it is fed is dropped, as
    /// `ReaderRuntime::feed` drops it once stopped.
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
    /// retries forgotten (`ReaderRuntime::stop`: a page answered after the stop is not stored),
    /// and what its streams still say never reaches the new one (another executor). The new
    /// one starts at the configured limits, told whether the network is on.
    pub fn restart(&mut self) {
        let _ = self.stop();
        self.reader = Reader::with_limits(Backoff::default(), self.limits);
        self.readers += 1;
        self.stopped = false;
        self.feed(Input::Online(self.online));
    }

    /// The reader stops (`ReaderRuntime::stop`): its streams closed, its timers and retries
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
    /// store or a reset already under way in `browser/reader.rs`): it still writes the log,
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
        self.reader.handle(input, self.now, random);
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
            Action::CaughtUp(aggregate, ok) => self.news.push(ReaderNews::CaughtUp(aggregate, ok)),
        }
    }

    /// What the gateway answers to a page or a probe of `aggregate` read at `cursor`, and what
    /// the executor makes of it (as `browser/reader.rs` does).
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
        let tip = Some(held.tip);
        if probe {
            return page::probed(tip, cursor);
        }
        if page::shrunk(tip, cursor) && !self.ignore_shrunk_tip {
            return PageEnd::Gone;
        }
        let batches: Vec<LogBatch> = held
            .batches
            .range(from..from + PAGE)
            .map(|(_, b)| b.clone())
            .collect();
        let next = held.tip >= from + PAGE;
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

    /// The gateway tells the stream, if it watches `aggregate` and is subscribed.
    pub fn notify(&mut self, aggregate: AggregateRef, note: Note) {
        for s in self.streams.values_mut() {
            if s.ready && s.watching.contains(&aggregate) {
                s.notes.push_back(note);
            }
        }
    }

    pub fn append(&mut self, aggregate: AggregateRef) {
        if self.gateway.get(&aggregate).is_some_and(|h| h.deleted) {
            return; // recreating below the log's cursor is out of this model
        }
        let mine = self.rng.chance(0.4);
        let seq = if mine {
            let seq = self.log.assign(aggregate, 1);
            self.log.land(aggregate, seq); // the drain's part, done at once
            self.touched.push(aggregate);
            seq
        } else {
            1
        };
        self.stamp += 1;
        let held = self.gateway.entry(aggregate).or_insert_with(|| Held {
            min: 1,
            ..Held::default()
        });
        held.tip += 1;
        let version = held.tip;
        let batch = LogBatch {
            version,
            client_id: if mine { ME } else { "other" }.into(),
            events: vec![LogEvent {
                client_seq: seq,
                event_type: 1,
                minor: 0,
                timestamp: self.stamp,
                data: Some("AAAA".into()),
            }],
        };
        held.batches.insert(version, batch);
        self.notify(aggregate, Note::Changed { aggregate, version });
    }

    pub fn trim(&mut self, aggregate: AggregateRef) {
        let Some(held) = self.gateway.get_mut(&aggregate) else {
            return;
        };
        if held.min > held.tip || held.deleted {
            return; // nothing left to trim
        }
        let min = held.min + 1 + self.rng.below(held.tip + 1 - held.min);
        held.min = min;
        held.batches.retain(|v, _| *v >= min);
        self.notify(aggregate, Note::Reset { aggregate });
    }

    pub fn delete(&mut self, aggregate: AggregateRef) {
        let Some(held) = self.gateway.get_mut(&aggregate) else {
            return;
        };
        *held = Held {
            min: 1,
            deleted: true,
            ..Held::default()
        };
        self.notify(aggregate, Note::Reset { aggregate });
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
            self.feed(Input::CatchUp(aggregate));
        }
        true
    }

    pub fn deliver(&mut self) -> bool {
        // Any stream with something to say, picked at random: streams are separate
        // connections, with no order between them.
        if let Some((id, many)) = self.refused.pop() {
            self.feed(if many {
                Input::StreamTooMany(id)
            } else {
                Input::StreamTooLarge(id)
            });
            return true;
        }
        let busy: Vec<StreamId> = self
            .streams
            .iter()
            .filter(|(_, s)| !s.ready || !s.notes.is_empty())
            .map(|(id, _)| *id)
            .collect();
        if busy.is_empty() {
            return false;
        }
        let id = busy[self.rng.below(busy.len() as u64) as usize];
        let s = self.streams.get_mut(&id).expect("busy");
        let note = if s.ready {
            s.notes.pop_front().expect("busy")
        } else {
            s.ready = true; // subscribed at the gateway now
            // The embedded store's `ready` gives each aggregate's version read after the
            // registration (in one run of four, as the Celeriant backend, none; and one ready
            // in four goes without, as when the gateway's read of them failed).
            if !self.no_tips && !self.rng.chance(0.25) {
                let tips = s
                    .watching
                    .iter()
                    .map(|a| (*a, self.gateway.get(a).map_or(0, |h| h.tip)))
                    .collect();
                self.feed(Input::Tips(id, tips));
            }
            Note::Ready
        };
        self.feed(Input::Stream(id, note));
        true
    }

    pub fn random_stream(&self) -> StreamId {
        let ids: Vec<StreamId> = self.streams.keys().copied().collect();
        ids[self.rng.below(ids.len() as u64) as usize]
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

    /// One step of the gateway, the streams, the network or the reader's executor (`kind` in
    /// 3..12; some only with `fault`).
    pub fn gateway_step(&mut self, kind: u64, a: AggregateRef, fault: bool) {
        match kind {
            3 | 4 => self.append(a),
            5 if fault => self.trim(a),
            6 if fault && self.rng.chance(0.3) => self.delete(a),
            7 if fault && !self.streams.is_empty() => {
                let id = self.random_stream();
                self.streams.remove(&id);
                self.gone.push(id);
                self.feed(Input::StreamEnded(id));
            }
            11 if fault && !self.gone.is_empty() => {
                // A late callback of a stream closed or ended since: ignored by the machine.
                let id = self.gone[self.rng.below(self.gone.len() as u64) as usize];
                let input = match self.rng.below(4) {
                    0 => Input::Stream(id, Note::Ready),
                    1 => Input::Stream(id, Note::Resync),
                    2 => Input::Stream(id, Note::Reset { aggregate: a }),
                    _ => Input::StreamEnded(id),
                };
                self.feed(input);
            }
            8 if fault && !self.streams.is_empty() => {
                let id = self.random_stream();
                let s = self.streams.get_mut(&id).expect("open");
                if s.ready {
                    s.notes.clear(); // the gateway lagged and dropped them
                    s.notes.push_back(Note::Resync);
                }
            }
            9 if fault => self.fail_next = true,
            10 if fault => {
                self.online = !self.online;
                self.feed(Input::Online(self.online));
            }
            5 | 6 | 11 => self.complete(),
            7 | 8 => {
                self.deliver();
            }
            _ => {
                self.tick();
            }
        }
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

    /// Every batch the log holds is the gateway's batch of that version, while it has it; each
    /// kept view equals its log.
    pub fn check_log(&self) {
        for (aggregate, held) in &self.gateway {
            let s = block_on(self.log.snapshot(*aggregate, None)).unwrap();
            for b in &s.batches {
                if let Some(g) = held.batches.get(&b.version) {
                    assert_eq!(b, g, "the log holds a batch the gateway never sent");
                }
            }
            if let Some(view) = self.views.get(aggregate) {
                assert_eq!(view.batches, s.batches, "a kept view differs from its log");
            }
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

    pub fn check_quiescent(&self) {
        let watched: Vec<AggregateRef> = self.subscribed.keys().copied().collect();
        self.check_reader(&watched);
        for aggregate in &watched {
            let s = block_on(self.log.snapshot(*aggregate, None)).unwrap();
            assert_eq!(
                self.views[aggregate].batches, s.batches,
                "the view did not converge"
            );
        }
    }

    /// Once quiescent, the reader watches `watched`, its streams are open, ready and cover it
    /// once within the gateway's caps, and every watched aggregate's log holds what the gateway
    /// holds (no notification lost).
    pub fn check_reader(&self, watched: &[AggregateRef]) {
        let watched = watched.to_vec();
        assert_eq!(self.reader.watched(), watched, "the machine's watched set");
        let wanted = self.reader.streams();
        assert_eq!(
            wanted.len(),
            self.streams.len(),
            "open streams {:?} against the machine's {wanted:?}",
            self.streams.keys().collect::<Vec<_>>()
        );
        assert!(wanted.len() <= self.reader.max_streams().min(self.stream_cap));
        let mut covered: Vec<AggregateRef> = self.reader.unwatched();
        for (id, aggregates) in &wanted {
            let s = self.streams.get(id).expect("every shard's stream is open");
            assert_eq!(&s.watching, aggregates, "a stream covers its shard");
            assert!(s.ready, "every stream is ready");
            assert!(!aggregates.is_empty(), "a stream with nothing watched");
            covered.extend(aggregates);
        }
        covered.sort();
        assert_eq!(
            covered, watched,
            "the streams and the unwatched cover the watched set, once each"
        );
        let per_stream = self.reader.per_stream();
        assert!(
            wanted
                .iter()
                .all(|(_, a)| a.len() <= per_stream.min(self.gateway_cap)),
            "every stream within what the gateway takes"
        );
        if !self.reader.unwatched().is_empty() {
            assert!(
                wanted.len() == self.reader.max_streams()
                    && wanted.iter().all(|(_, a)| a.len() == per_stream),
                "unwatched aggregates while a stream has room"
            );
        }
        // The unwatched ones too: the poll let run while settling caught them up.
        for aggregate in &watched {
            let held = self.gateway.get(aggregate);
            let (tip, min) = held.map_or((0, 1), |h| (h.tip, h.min));
            let s = block_on(self.log.snapshot(*aggregate, None)).unwrap();
            assert_eq!(
                s.cursor.version, tip,
                "a notification was lost: {aggregate:?}"
            );
            let served: Vec<&LogBatch> = s.batches.iter().filter(|b| b.version >= min).collect();
            let expected: Vec<&LogBatch> =
                held.map_or(Vec::new(), |h| h.batches.values().collect());
            assert_eq!(
                served, expected,
                "the log did not converge to the gateway's"
            );
            // Known and left open: an event of this device that landed in an aggregate deleted
            // before the log read it back (the log's cursor still at or below the deleted tip)
            // is never found gone — no page or probe shows a tip below the cursor — so it stays
            // pending. Checked for every aggregate that was not deleted.
            if !held.is_some_and(|h| h.deleted) {
                let pending = s.pending.iter().filter(|seq| **seq > s.cursor.mine).count();
                assert_eq!(pending, 0, "an event of this device stays pending");
            }
        }
    }
}

/// Small enough that 2–6 aggregates are split over streams and some fit in none.
pub const LIMITS: Limits = Limits {
    per_stream: 2,
    streams: 2,
};
