//! The read side's executor: performs what the [`Reader`] machine decides — the change streams
//! (one per shard of the watched set, each named by the machine's [`StreamId`]), catch-up
//! pages stored with their cursor, log resets, timers — and feeds back what happened, over a
//! [`ReadPlatform`] that does the I/O. The browser's `browser/reader.rs` is one such platform
//! (SSE streams, `fetch`, IndexedDB, sessions and proofs); `run_tests.rs` drives this same
//! executor natively over a [`MemoryLog`](super::memory_log::MemoryLog) and a fake gateway.
//!
//! What is decided here, whatever the platform: inputs are queued and handled one at a time
//! (an input fed while actions are being performed — from a news listener, say — waits its
//! turn: nothing is re-entered), every result of the platform is fed from a fresh task
//! ([`ReadPlatform::spawn`]); one deadline covers a whole page (its session and proof
//! included) and a page past it while storing is awaited, its news told; a stopped reader
//! feeds nothing more and ignores what its streams, pages and timers still say, but a page
//! store or log reset already under way commits and tells its news ([`ReadRun::written`]);
//! which aggregates have a local log (`logged`: a landed batch of one is caught up); and
//! what the gateway refused to watch, published on the [`Hub`].

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use celeriant_sync_protocol::codes::gateway::{
    WATCH_STREAMS_PER_CLIENT, WATCH_TOO_MANY_AGGREGATES,
};
use celeriant_sync_protocol::watch;

use super::log::{Cursor, LocalLog};
use super::machine::{Action, Input, PageEnd, ReadState, Reader, StreamId};
use super::page;
use super::routing::ReaderNews;
use super::sse::{Parser, note};
use crate::engine::backoff::Backoff;
use crate::engine::env::Env;
use crate::engine::model::AggregateRef;
use crate::engine::outbox::StoreError;
use crate::engine::signal::{InFlight, Signal, first};
use crate::engine::sorted::{SortedMap, SortedSet};
use crate::engine::status::{Hub, Refused};

/// What a page reply says, as the platform reads it ([`ReadPlatform::read_reply`]).
pub enum Replied<B> {
    /// 200 with a list of batches.
    Page {
        /// The batches, as the log stores them.
        batches: B,
        /// The aggregate's tip, if the reply gives it.
        tip: Option<u64>,
        /// A next page exists.
        next: bool,
        /// The reply's size (for the log's bookkeeping).
        size: u64,
    },
    /// 410: the versions asked for were trimmed.
    Trimmed {
        /// The `minVersion` it gives, if any.
        min_version: Option<u64>,
        /// The reply's body, for the error when `min_version` is unusable.
        body: String,
    },
    /// Anything else (a 200 without batches, a 401, a 5xx …): why, as `lastError` shows it.
    Failed(String),
}

/// What the executor needs from the platform: clock, randomness, network state and the page
/// deadline's sleep ([`Env`]), plus what is truly platform I/O.
pub trait ReadPlatform: Env + Sized + 'static {
    /// The local log.
    type Log: LocalLog;
    /// An open change stream; dropping it closes the stream, and must not call its sink (it is
    /// dropped while the executor's streams are borrowed).
    type Stream;
    /// A timer; dropping it cancels it.
    type Timer;
    /// A page request's reply, before it is read.
    type Reply;

    /// The local log.
    fn log(&self) -> &Self::Log;
    /// Runs `task` in the background: later, never within this call (what it feeds would
    /// re-enter the executor).
    fn spawn(&self, task: Pin<Box<dyn Future<Output = ()>>>);
    /// Calls `fire` after `ms` milliseconds unless the returned timer is dropped first.
    fn timer(&self, ms: u64, fire: Box<dyn FnOnce()>) -> Self::Timer;
    /// Lets `timer` fire even though nobody holds it any more.
    fn forget_timer(timer: Self::Timer);
    /// Why no page may be read now: the client's network switch is off (`None`: it is on).
    fn switched_off(&self) -> Option<&'static str>;
    /// How long one page may take in all (a session opening and a proof included).
    fn page_deadline_ms(&self) -> u64;
    /// Opens stream `id` for `aggregates`, telling `sink` what it says; `None` when it did not
    /// open (the platform told `sink` why, or the stream is no longer wanted).
    fn open_stream(
        &self,
        id: StreamId,
        aggregates: Vec<AggregateRef>,
        sink: StreamSink<Self>,
    ) -> impl Future<Output = Option<Self::Stream>>;
    /// Asks the gateway for the aggregate's page after `cursor` (with `probe`, its first
    /// version and tip only: what is left of it after a `reset`).
    fn request(
        &self,
        aggregate: AggregateRef,
        probe: bool,
        cursor: Cursor,
    ) -> impl Future<Output = Result<Self::Reply, String>>;
    /// What `reply` says. Called once per reply, and only if the reader had not stopped when
    /// it came; it may act on what it reads (the browser's refuses the session on a 401).
    fn read_reply(&self, reply: &Self::Reply) -> Replied<<Self::Log as LocalLog>::Page>;
    /// Stores a page with its cursor if it is still `expected` (`Ok(None)` if it moved).
    fn store(
        &self,
        aggregate: AggregateRef,
        batches: &<Self::Log as LocalLog>::Page,
        expected: Cursor,
        size: u64,
    ) -> impl Future<Output = Result<Option<Cursor>, StoreError>>;
    /// The aggregate's catch-up ended (the platform may drop what it kept for it).
    fn caught_up(&self, _aggregate: AggregateRef) {}
    /// The reader stopped (the platform may drop what it kept for it).
    fn stopped(&self) {}
    /// The machine gave up waiting for a version the gateway notified.
    fn never_served(&self, _aggregate: AggregateRef, _notified: u64, _reached: u64) {}
}

/// A retry's timer, with whether it fired.
type Retry<T> = (Rc<Cell<bool>>, T);

/// The read side of the draining context: the [`Reader`] machine and what performs it.
pub struct ReadRun<P: ReadPlatform> {
    platform: P,
    hub: Rc<Hub>,
    news: Box<dyn Fn(ReaderNews)>,
    machine: RefCell<Reader>,
    queue: RefCell<VecDeque<Input>>,
    pumping: Cell<bool>,
    /// The streams the machine wants open, by id (`None` while one is being opened: its
    /// session and proof are on their way). What a stream no longer here says is ignored.
    streams: RefCell<SortedMap<StreamId, Option<P::Stream>>>,
    /// What each stream's `ready` said the gateway refused to watch.
    refused: RefCell<SortedMap<StreamId, Vec<Refused>>>,
    /// Watched aggregates that fit in no stream (reported with code 40020).
    unwatched: RefCell<Vec<AggregateRef>>,
    timer: RefCell<Option<P::Timer>>,
    /// Catch-ups to try again (a failed page, a miss below a floor), each with whether its
    /// timer fired (then it is pruned).
    retries: RefCell<Vec<Retry<P::Timer>>>,
    /// Aggregates with a local log: a landed batch of one is followed by its catch-up.
    logged: RefCell<SortedSet<AggregateRef>>,
    /// `logged` has been read from storage (until then every landed batch is caught up).
    loaded: Cell<bool>,
    stopped: Cell<bool>,
    /// Page stores and log resets past their last look at `stopped`, until their news are told
    /// ([`ReadRun::written`]).
    writes: InFlight,
    /// Notified by [`ReadRun::stop`], so the reader's own tasks end.
    stopping: Rc<Signal>,
}

impl<P: ReadPlatform> ReadRun<P> {
    /// A reader with nothing watched yet; `news` hears of log changes and catch-ups.
    pub fn start(
        platform: P,
        backoff: Backoff,
        hub: Rc<Hub>,
        news: Box<dyn Fn(ReaderNews)>,
    ) -> Rc<Self> {
        let run = Rc::new(ReadRun {
            platform,
            hub,
            news,
            machine: RefCell::new(Reader::new(backoff)),
            queue: RefCell::default(),
            pumping: Cell::new(false),
            streams: RefCell::default(),
            refused: RefCell::default(),
            unwatched: RefCell::default(),
            timer: RefCell::new(None),
            retries: RefCell::default(),
            logged: RefCell::default(),
            loaded: Cell::new(false),
            stopped: Cell::new(false),
            writes: InFlight::default(),
            stopping: Rc::default(),
        });
        run.feed(Input::Online(run.platform.is_online()));
        // The network coming and going, for as long as the reader runs.
        let weak = Rc::downgrade(&run);
        let (hub, stopping) = (run.hub.clone(), run.stopping.clone());
        run.platform.spawn(Box::pin(async move {
            loop {
                let stop = stopping.notified();
                if !first(hub.network.notified(), stop).await {
                    return;
                }
                let Some(run) = weak.upgrade() else { return };
                if run.stopped.get() {
                    return;
                }
                run.feed(Input::Online(run.platform.is_online()));
            }
        }));
        let weak = Rc::downgrade(&run);
        run.platform.spawn(Box::pin(async move {
            let Some(run) = weak.upgrade() else { return };
            if let Ok(logged) = run.platform.log().logged().await {
                run.logged.borrow_mut().extend(logged);
            }
            run.loaded.set(true);
        }));
        run
    }

    /// The platform.
    pub fn platform(&self) -> &P {
        &self.platform
    }

    /// Stops: closes the streams, cancels the timers; whatever is in flight is ignored, but a
    /// page store or log reset already under way still commits and tells its news
    /// ([`Self::written`]).
    pub fn stop(&self) {
        self.stopped.set(true);
        *self.streams.borrow_mut() = SortedMap::new();
        self.timer.borrow_mut().take();
        self.retries.borrow_mut().clear();
        self.platform.stopped();
        self.stopping.notify();
        self.hub.set_read(ReadState::Idle);
    }

    /// Whether a page store or log reset is under way (it may be, after [`Self::stop`]).
    pub fn writing(&self) -> bool {
        self.writes.busy()
    }

    /// Resolves once no page store or log reset is under way and the news of each were told.
    /// No request is waited for (a page answered after [`Self::stop`] is not stored).
    pub async fn written(&self) {
        self.writes.idle().await
    }

    /// The network was switched off: the open streams are closed now (and reopening them fails
    /// at once, without a request, until the network is switched on again). Their refusals go
    /// with them, as an ended stream's do: the shard reopens under a new id, so nothing would
    /// remove them later.
    pub fn switched_off(self: &Rc<Self>) {
        let open = std::mem::take(&mut *self.streams.borrow_mut());
        let mut dropped = false;
        for &id in open.keys() {
            dropped |= self.refused.borrow_mut().remove(&id).is_some();
        }
        if dropped {
            self.publish_refused();
        }
        for &id in open.keys() {
            self.feed(Input::StreamEnded(id));
        }
    }

    /// Events of this aggregate landed: catch it up if it has a local log (its landed events
    /// are pruned only once the log holds them).
    pub fn landed(self: &Rc<Self>, aggregate: AggregateRef) {
        if !self.loaded.get() || self.logged.borrow().contains(&aggregate) {
            self.feed(Input::CatchUp(aggregate));
        }
    }

    /// The aggregate has a local log now (a `read` or `subscribe` in some context).
    pub fn note_logged(&self, aggregate: AggregateRef) {
        self.logged.borrow_mut().insert(aggregate);
    }

    /// Hands an input to the machine and performs what it decides; an input fed while that is
    /// under way is queued and handled next.
    pub fn feed(self: &Rc<Self>, input: Input) {
        if self.stopped.get() {
            return;
        }
        if let Input::Subscribe(a) | Input::CatchUp(a) | Input::Retry(a) | Input::Read(a, _) =
            &input
        {
            self.logged.borrow_mut().insert(*a);
        }
        self.queue.borrow_mut().push_back(input);
        if self.pumping.replace(true) {
            return;
        }
        loop {
            let Some(input) = self.queue.borrow_mut().pop_front() else {
                break;
            };
            let actions: Vec<Action> = {
                let mut machine = self.machine.borrow_mut();
                machine.handle(input, self.platform.now_ms(), self.platform.random());
                std::iter::from_fn(|| machine.poll()).collect()
            };
            for action in actions {
                self.apply(action);
            }
        }
        self.pumping.set(false);
    }

    /// Feeds `input` later, from a fresh task, unless the reader stopped meanwhile.
    fn later(self: &Rc<Self>, input: Input) {
        let weak = Rc::downgrade(self);
        self.platform.spawn(Box::pin(async move {
            if let Some(run) = weak.upgrade() {
                run.feed(input);
            }
        }));
    }

    /// Whether the stream `id` is still wanted.
    fn wanted(&self, id: StreamId) -> bool {
        !self.stopped.get() && self.streams.borrow().contains_key(&id)
    }

    /// Feeds `input` later if the stream `id` is still wanted (an ended one is forgotten
    /// first).
    fn later_if(self: &Rc<Self>, id: StreamId, input: Input) {
        let weak = Rc::downgrade(self);
        self.platform.spawn(Box::pin(async move {
            if let Some(run) = weak.upgrade()
                && run.wanted(id)
            {
                if matches!(
                    input,
                    Input::StreamEnded(_) | Input::StreamTooLarge(_) | Input::StreamTooMany(_)
                ) {
                    run.streams.borrow_mut().remove(&id);
                    if run.refused.borrow_mut().remove(&id).is_some() {
                        run.publish_refused();
                    }
                }
                run.feed(input);
            }
        }));
    }

    /// Publishes what the gateway refused to watch and what fits in no stream, as one list.
    fn publish_refused(&self) {
        // In aggregate order, through a SortedMap rather than a sort (the module's size).
        let mut all: SortedMap<AggregateRef, u32> = SortedMap::new();
        for r in self.refused.borrow().values().flatten() {
            all.insert(r.aggregate, r.code);
        }
        for aggregate in self.unwatched.borrow().iter() {
            all.insert(*aggregate, WATCH_TOO_MANY_AGGREGATES);
        }
        let all = all
            .iter()
            .map(|(aggregate, code)| Refused {
                aggregate: *aggregate,
                code: *code,
            })
            .collect();
        self.hub.set_read_refused(all);
    }

    fn apply(self: &Rc<Self>, action: Action) {
        match action {
            Action::OpenStream { id, aggregates } => {
                self.streams.borrow_mut().insert(id, None);
                let sink = StreamSink {
                    run: Rc::downgrade(self),
                    id,
                    parser: Rc::default(),
                };
                let this = self.clone();
                self.platform.spawn(Box::pin(async move {
                    let stream = this.platform.open_stream(id, aggregates, sink).await;
                    if let (Some(stream), Some(slot)) =
                        (stream, this.streams.borrow_mut().get_mut(&id))
                    {
                        *slot = Some(stream);
                    }
                }));
            }
            Action::CloseStream(id) => {
                self.streams.borrow_mut().remove(&id);
                if self.refused.borrow_mut().remove(&id).is_some() {
                    self.publish_refused();
                }
            }
            Action::Unwatched(list) => {
                *self.unwatched.borrow_mut() = list;
                self.publish_refused();
            }
            Action::FetchPage(aggregate)
            | Action::Probe(aggregate)
            | Action::FetchPageUnlessAt(aggregate, _) => {
                let probe = matches!(action, Action::Probe(_));
                let tip = match action {
                    Action::FetchPageUnlessAt(_, tip) => Some(tip),
                    _ => None,
                };
                let this = self.clone();
                self.platform.spawn(Box::pin(async move {
                    let end = this.page(aggregate, probe, tip).await;
                    if !this.stopped.get() {
                        this.feed(Input::Page { aggregate, end });
                    }
                }));
            }
            Action::ResetLog {
                aggregate,
                min_version,
                gone,
            } => {
                let this = self.clone();
                self.platform.spawn(Box::pin(async move {
                    if this.stopped.get() {
                        return;
                    }
                    let _writing = this.writes.enter();
                    // A failed reset leaves the old log: the next page read finds out again.
                    let log = this.platform.log();
                    let _ = log.reset_log(aggregate, min_version, gone).await;
                    this.hub.logged(aggregate);
                    (this.news)(ReaderNews::LogChanged(aggregate));
                    this.feed(Input::LogReset(aggregate));
                }));
            }
            Action::RetryLater { aggregate, ms } => {
                let weak = Rc::downgrade(self);
                let fired = Rc::new(Cell::new(false));
                let fired_flag = Rc::clone(&fired);
                let fire = move || {
                    fired_flag.set(true);
                    if let Some(run) = weak.upgrade() {
                        run.later(Input::Retry(aggregate));
                    }
                };
                let timer = self.platform.timer(ms, Box::new(fire));
                let mut retries = self.retries.borrow_mut();
                // Timers that fired are done: dropped (kept, the list grew by one per retry).
                // Never the one running: its `Retry` is fed from a spawned task, after it returns.
                retries.retain(|(fired, _)| !fired.get());
                retries.push((fired, timer));
                // Bounded all the same: a few dozen pending at most (one per aggregate behind
                // its floor, and one per failed page); past that the oldest fires unowned.
                if retries.len() > 64 {
                    P::forget_timer(retries.remove(0).1);
                }
            }
            Action::Wait(ms) => {
                let weak = Rc::downgrade(self);
                let fire = move || {
                    if let Some(run) = weak.upgrade() {
                        run.later(Input::TimerFired);
                    }
                };
                let timer = self.platform.timer(ms, Box::new(fire));
                *self.timer.borrow_mut() = Some(timer);
            }
            Action::Report(state) => self.hub.set_read(state),
            Action::NeverServed {
                aggregate,
                notified,
                reached,
            } => self.platform.never_served(aggregate, notified, reached),
            Action::CaughtUp {
                aggregate,
                ok,
                reads,
            } => {
                self.platform.caught_up(aggregate);
                (self.news)(ReaderNews::CaughtUp {
                    aggregate,
                    ok,
                    reads,
                })
            }
        }
    }
}

#[path = "run_page.rs"]
mod run_page;
pub use run_page::StreamSink;

#[cfg(all(test, not(target_arch = "wasm32")))]
#[path = "run_tests.rs"]
mod tests;
