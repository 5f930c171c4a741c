//! The read executor ([`ReadRun`]) run natively: over a [`MemoryLog`], a fake gateway whose
//! requests can be held and whose stores take time on a clock the test moves, fake timers on
//! that clock, and a `LocalPool` for its tasks. What is checked is the executor's own part — a
//! stopped reader feeds and publishes nothing more and keeps no timer, a page past its
//! deadline while storing is awaited (and one that is not, failed), an input fed while actions
//! are performed waits its turn; its streams in `run_stream_tests.rs` — the machine's
//! decisions having tests of their own.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::{Rc, Weak};
use std::task::{Poll, Waker};

use futures_executor::{LocalPool, LocalSpawner};
use futures_util::task::LocalSpawnExt;
use uuid::Uuid;

use super::{ReadPlatform, ReadRun, Replied, StreamSink};
use crate::engine::backoff::Backoff;
use crate::engine::env::Env;
use crate::engine::model::{AggregateRef, ParkRecord};
use crate::engine::outbox::StoreError;
use crate::engine::read::log::{Cursor, LocalLog};
use crate::engine::read::machine::{Input, ReadState, Reader, StreamId};
use crate::engine::read::memory_log::{LogBatch, LogEvent, MemoryLog};
use crate::engine::read::routing::ReaderNews;
use crate::engine::read::streams::Limits;
use crate::engine::signal::Signal;
use crate::engine::status::{Hub, Observer, Refused, Status, SyncedNotice};

const DEADLINE: u64 = 1_000;
/// Batches per page.
const PAGE: usize = 3;
/// A `ready` event (its data read by the test's `ready`).
const READY: &str = "event: ready\ndata: {}\n\n";

fn agg(n: u128) -> AggregateRef {
    AggregateRef {
        type_id: Uuid::from_u128(0x5EAD),
        id: Uuid::from_u128(n),
    }
}

struct Quiet;

impl Observer for Quiet {
    fn status(&self, _: &Status) {}
    fn synced(&self, _: &SyncedNotice) {}
    fn parked(&self, _: &ParkRecord) {}
}

/// A timer set on the [`Clock`]: when it fires, whether it was cancelled, what it does.
type Armed = (u64, Rc<Cell<bool>>, Box<dyn FnOnce()>);

/// A clock moved by the test, with its timers and sleepers.
#[derive(Default)]
struct Clock {
    now: Cell<u64>,
    timers: RefCell<Vec<Armed>>,
    sleepers: RefCell<Vec<Waker>>,
}

impl Clock {
    /// Moves the clock on by `ms`: fires the timers due (not cancelled), wakes the sleepers.
    fn advance(&self, ms: u64) {
        self.now.set(self.now.get() + ms);
        let now = self.now.get();
        let due: Vec<_> = {
            let mut timers = self.timers.borrow_mut();
            let (due, left) = std::mem::take(&mut *timers)
                .into_iter()
                .partition(|(at, _, _)| *at <= now);
            *timers = left;
            due
        };
        for (_, cancelled, fire) in due {
            if !cancelled.get() {
                fire();
            }
        }
        for waker in std::mem::take(&mut *self.sleepers.borrow_mut()) {
            waker.wake();
        }
    }

    async fn sleep(&self, ms: u64) {
        let at = self.now.get() + ms;
        std::future::poll_fn(|cx| {
            if self.now.get() >= at {
                return Poll::Ready(());
            }
            self.sleepers.borrow_mut().push(cx.waker().clone());
            Poll::Pending
        })
        .await
    }
}

/// A fake timer: dropped, it is cancelled (unless forgotten).
struct Timer {
    cancelled: Rc<Cell<bool>>,
    armed: bool,
}

impl Drop for Timer {
    fn drop(&mut self) {
        if self.armed {
            self.cancelled.set(true);
        }
    }
}

/// An open fake stream: dropped, it is closed.
struct Stream {
    id: StreamId,
    open: Rc<RefCell<Vec<StreamId>>>,
}

impl Drop for Stream {
    fn drop(&mut self) {
        self.open.borrow_mut().retain(|id| *id != self.id);
    }
}

/// The fake platform: a gateway holding each aggregate's batches, a memory log, a clock.
struct Fake {
    spawner: LocalSpawner,
    clock: Rc<Clock>,
    log: MemoryLog,
    gateway: RefCell<BTreeMap<AggregateRef, Vec<LogBatch>>>,
    /// Requests wait while this is set (released through `released`).
    hold_requests: Cell<bool>,
    released: Signal,
    /// How long a store takes, on the clock.
    store_ms: Cell<u64>,
    requests: Cell<u32>,
    spawned: Cell<u32>,
    sinks: RefCell<BTreeMap<StreamId, StreamSink<Fake>>>,
    open: Rc<RefCell<Vec<StreamId>>>,
}

impl Env for Fake {
    fn now_ms(&self) -> u64 {
        self.clock.now.get()
    }
    fn sleep(&self, ms: u64) -> impl Future<Output = ()> {
        let clock = self.clock.clone();
        async move { clock.sleep(ms).await }
    }
    fn is_online(&self) -> bool {
        true
    }
    fn random(&self) -> f64 {
        0.5
    }
}

impl ReadPlatform for Fake {
    type Log = MemoryLog;
    type Stream = Stream;
    type Timer = Timer;
    type Reply = (Vec<LogBatch>, u64, bool);

    fn log(&self) -> &MemoryLog {
        &self.log
    }
    fn spawn(&self, task: Pin<Box<dyn Future<Output = ()>>>) {
        self.spawned.set(self.spawned.get() + 1);
        self.spawner.spawn_local(task).unwrap();
    }
    fn timer(&self, ms: u64, fire: Box<dyn FnOnce()>) -> Timer {
        let cancelled = Rc::new(Cell::new(false));
        let at = self.clock.now.get() + ms;
        (self.clock.timers.borrow_mut()).push((at, cancelled.clone(), fire));
        Timer {
            cancelled,
            armed: true,
        }
    }
    fn forget_timer(mut timer: Timer) {
        timer.armed = false;
    }
    fn switched_off(&self) -> Option<&'static str> {
        None
    }
    fn page_deadline_ms(&self) -> u64 {
        DEADLINE
    }
    async fn open_stream(
        &self,
        id: StreamId,
        _aggregates: Vec<AggregateRef>,
        sink: StreamSink<Self>,
    ) -> Option<Stream> {
        self.sinks.borrow_mut().insert(id, sink);
        self.open.borrow_mut().push(id);
        Some(Stream {
            id,
            open: self.open.clone(),
        })
    }
    async fn request(
        &self,
        aggregate: AggregateRef,
        _probe: bool,
        cursor: Cursor,
    ) -> Result<Self::Reply, String> {
        self.requests.set(self.requests.get() + 1);
        loop {
            let released = self.released.notified();
            if !self.hold_requests.get() {
                break;
            }
            released.await;
        }
        let gateway = self.gateway.borrow();
        let all = gateway.get(&aggregate).cloned().unwrap_or_default();
        let tip = all.len() as u64;
        let from = cursor.version as usize;
        let page: Vec<LogBatch> = all.iter().skip(from).take(PAGE).cloned().collect();
        Ok((page, tip, from + PAGE < all.len()))
    }
    fn read_reply(&self, reply: &Self::Reply) -> Replied<Vec<LogBatch>> {
        Replied::Page {
            batches: reply.0.clone(),
            tip: Some(reply.1),
            next: reply.2,
            size: 0,
        }
    }
    async fn store(
        &self,
        aggregate: AggregateRef,
        batches: &Vec<LogBatch>,
        expected: Cursor,
        _size: u64,
    ) -> Result<Option<Cursor>, StoreError> {
        let ms = self.store_ms.get();
        if ms > 0 {
            self.clock.sleep(ms).await;
        }
        self.log
            .store_page(aggregate, batches, "me", expected)
            .await
    }
}

/// A reader over a fresh fake platform, its tasks on `pool`, and what it told.
struct Rig {
    pool: LocalPool,
    run: Rc<ReadRun<Fake>>,
    hub: Rc<Hub>,
    news: Rc<RefCell<Vec<ReaderNews>>>,
}

impl Rig {
    /// A reader whose news are recorded, then handed to `also`.
    fn with(also: impl Fn(&ReaderNews) + 'static) -> Rig {
        let pool = LocalPool::new();
        let fake = Fake {
            spawner: pool.spawner(),
            clock: Rc::default(),
            log: MemoryLog::new(),
            gateway: RefCell::default(),
            hold_requests: Cell::new(false),
            released: Signal::default(),
            store_ms: Cell::new(0),
            requests: Cell::new(0),
            spawned: Cell::new(0),
            sinks: RefCell::default(),
            open: Rc::default(),
        };
        let hub = Rc::new(Hub::new(Box::new(Quiet)));
        let news: Rc<RefCell<Vec<ReaderNews>>> = Rc::default();
        let told = news.clone();
        let run = ReadRun::start(
            fake,
            Backoff::default(),
            hub.clone(),
            Box::new(move |n| {
                told.borrow_mut().push(n.clone());
                also(&n);
            }),
        );
        let mut rig = Rig {
            pool,
            run,
            hub,
            news,
        };
        rig.settle();
        rig
    }

    fn new() -> Rig {
        Rig::with(|_| {})
    }

    /// A reader whose streams name `per_stream` aggregates each, `streams` of them at most
    /// (the aggregates past that are unwatched, polled on its wait timer).
    fn limited(per_stream: usize, streams: usize) -> Rig {
        let rig = Rig::new();
        let limits = Limits {
            per_stream,
            streams,
        };
        *rig.run.machine.borrow_mut() = Reader::with_limits(Backoff::default(), limits);
        rig
    }

    fn fake(&self) -> &Fake {
        self.run.platform()
    }

    /// The gateway holds `n` batches of `aggregate` (versions 1..=n).
    fn hold(&self, aggregate: AggregateRef, n: u64) {
        let batches = (1..=n)
            .map(|version| LogBatch {
                version,
                client_id: "other".into(),
                events: vec![LogEvent {
                    client_seq: 1,
                    event_type: 1,
                    minor: 0,
                    timestamp: version,
                    data: Some("AAAA".into()),
                }],
            })
            .collect();
        self.fake().gateway.borrow_mut().insert(aggregate, batches);
    }

    fn settle(&mut self) {
        self.pool.run_until_stalled();
    }

    fn advance(&mut self, ms: u64) {
        self.fake().clock.advance(ms);
        self.settle();
    }

    /// The sink the platform was given for stream `id`.
    fn sink(&self, id: StreamId) -> StreamSink<Fake> {
        self.fake().sinks.borrow()[&id].clone()
    }

    /// The sink of the stream opened last.
    fn last_sink(&self) -> StreamSink<Fake> {
        let last = *self.fake().sinks.borrow().keys().last().unwrap();
        self.sink(last)
    }

    /// The fake timers neither fired nor cancelled.
    fn pending_timers(&self) -> usize {
        (self.fake().clock.timers.borrow().iter())
            .filter(|(_, cancelled, _)| !cancelled.get())
            .count()
    }

    /// What the hub says the gateway refused to watch (code by aggregate).
    fn refused(&self) -> Vec<(AggregateRef, u32)> {
        (self.hub.status().read_refused.iter())
            .map(|r| (r.aggregate, r.code))
            .collect()
    }

    fn version(&self, aggregate: AggregateRef) -> u64 {
        futures_executor::block_on(self.fake().log.cursor(aggregate))
            .unwrap()
            .version
    }

    fn caught_up(&self, aggregate: AggregateRef) -> Vec<bool> {
        (self.news.borrow().iter())
            .filter_map(|n| match n {
                ReaderNews::CaughtUp {
                    aggregate: a, ok, ..
                } if *a == aggregate => Some(*ok),
                _ => None,
            })
            .collect()
    }

    fn log_changed(&self, aggregate: AggregateRef) -> usize {
        (self.news.borrow().iter())
            .filter(|n| matches!(n, ReaderNews::LogChanged(a) if *a == aggregate))
            .count()
    }
}

#[test]
fn a_subscription_opens_a_stream_and_pages_the_log_in() {
    let mut rig = Rig::new();
    let a = agg(1);
    rig.hold(a, 7);
    rig.run.feed(Input::Subscribe(a));
    rig.settle();
    assert_eq!(rig.version(a), 7);
    assert_eq!(rig.fake().requests.get(), 3, "pages of 3, 3 and 1");
    assert_eq!(rig.caught_up(a), vec![true]);
    assert_eq!(rig.log_changed(a), 3);
    assert_eq!(rig.fake().open.borrow().len(), 1);
    assert_eq!(rig.hub.status().read, ReadState::Connecting);
    // The stream's `ready` (fed from a task, never from within the callback).
    let sink = rig.fake().sinks.borrow().values().next().unwrap().clone();
    assert!(sink.chunk(READY, |_| (Vec::new(), None)));
    rig.settle();
    assert_eq!(rig.hub.status().read, ReadState::Connected);
}

#[test]
fn a_stopped_reader_feeds_nothing_more() {
    // One stream of one aggregate: `b` fits in none, polled on the wait timer.
    let mut rig = Rig::limited(1, 1);
    let (a, b) = (agg(1), agg(2));
    rig.hold(a, 2);
    rig.hold(b, 2);
    rig.fake().hold_requests.set(true);
    rig.run.feed(Input::Subscribe(a));
    rig.run.feed(Input::Subscribe(b));
    rig.settle();
    let sink = rig.last_sink();
    let refused = vec![Refused {
        aggregate: a,
        code: 40302,
    }];
    assert!(sink.chunk(READY, |_| (refused.clone(), None)));
    rig.settle();
    // `a`'s page fails at its deadline (retried on a timer), then `b`'s is under way.
    rig.advance(DEADLINE);
    assert_eq!(rig.caught_up(a), vec![false]);
    assert_eq!(rig.fake().requests.get(), 2, "b's page under way");
    assert_eq!(rig.pending_timers(), 2, "the poll's wait and a's retry");
    let published = rig.refused();
    assert_eq!(published.len(), 2);
    let told = rig.news.borrow().len();
    rig.run.stop();
    assert!(rig.fake().open.borrow().is_empty(), "its stream closed");
    assert_eq!(rig.pending_timers(), 0, "a timer outlived the stop");
    // The page answered after the stop is not stored, nor fed.
    rig.fake().hold_requests.set(false);
    rig.fake().released.notify();
    rig.settle();
    assert_eq!(
        rig.version(b),
        0,
        "a page answered after the stop was stored"
    );
    assert!(rig.caught_up(b).is_empty(), "a stopped reader fed its page");
    assert!(!rig.run.writing());
    // Nor what it is fed, nor what its stream still says (read while its reader is there,
    // and ignored: nothing published).
    let c = agg(3);
    rig.hold(c, 1);
    rig.run.feed(Input::Subscribe(c));
    rig.settle();
    let asked = rig.fake().requests.get();
    assert_eq!(asked, 2, "a stopped reader asked a page");
    assert!(
        rig.fake().open.borrow().is_empty(),
        "a stopped reader opened a stream"
    );
    assert!(!sink.wanted());
    assert!(sink.chunk(READY, |_| (Vec::new(), None)));
    assert!(sink.ended(0, || None));
    rig.advance(60_000);
    assert_eq!(rig.fake().requests.get(), 2);
    assert_eq!(rig.news.borrow().len(), told);
    assert_eq!(
        rig.refused(),
        published,
        "a stopped reader published what its stream said"
    );
    assert_eq!(rig.hub.status().read, ReadState::Idle);
    // Its reader gone, the stream is to be closed.
    drop(rig);
    assert!(!sink.chunk(READY, |_| (Vec::new(), None)));
    assert!(!sink.ended(0, || None));
}

#[test]
fn a_store_under_way_at_the_stop_commits_and_tells_its_news_but_feeds_nothing() {
    let mut rig = Rig::new();
    let a = agg(1);
    rig.hold(a, 2);
    rig.fake().store_ms.set(DEADLINE / 2);
    rig.run.feed(Input::Subscribe(a));
    rig.settle();
    rig.run.stop();
    // What `close` waits for (`written`).
    assert!(
        rig.run.writing(),
        "a store under way at the stop was not counted"
    );
    let written = Rc::new(Cell::new(false));
    let (run, done) = (rig.run.clone(), written.clone());
    (rig.pool.spawner())
        .spawn_local(async move {
            run.written().await;
            done.set(true);
        })
        .unwrap();
    rig.settle();
    assert!(!written.get());
    rig.advance(DEADLINE / 2);
    assert!(written.get() && !rig.run.writing());
    assert_eq!(rig.version(a), 2);
    assert_eq!(
        rig.log_changed(a),
        1,
        "the stopped reader's store told nobody"
    );
    assert!(rig.caught_up(a).is_empty(), "a stopped reader fed its page");
}

#[test]
fn a_page_past_its_deadline_while_storing_is_awaited_and_told() {
    let mut rig = Rig::new();
    let a = agg(1);
    rig.hold(a, 2);
    rig.fake().store_ms.set(2 * DEADLINE);
    rig.run.feed(Input::Subscribe(a));
    rig.settle();
    rig.advance(DEADLINE + DEADLINE / 2);
    // Past the deadline, still storing: waited for, not failed.
    assert!(rig.run.writing(), "the store was dropped at the deadline");
    assert!(rig.caught_up(a).is_empty());
    rig.advance(DEADLINE);
    assert_eq!(rig.version(a), 2);
    assert_eq!(rig.log_changed(a), 1, "the store's news were not told");
    assert_eq!(
        rig.caught_up(a),
        vec![true],
        "the stored page was taken for failed"
    );
    assert!(!rig.run.writing());
}

#[test]
fn a_page_past_its_deadline_before_storing_fails_and_is_retried() {
    let mut rig = Rig::new();
    let a = agg(1);
    rig.hold(a, 2);
    rig.fake().hold_requests.set(true);
    rig.run.feed(Input::Subscribe(a));
    rig.settle();
    rig.advance(DEADLINE - 1);
    assert!(rig.caught_up(a).is_empty(), "failed before its deadline");
    rig.advance(1);
    assert_eq!(rig.caught_up(a), vec![false]);
    // Its retry comes after a backoff, and reads it in.
    rig.fake().hold_requests.set(false);
    rig.fake().released.notify();
    rig.settle();
    assert_eq!(
        rig.version(a),
        0,
        "a page dropped at its deadline was stored"
    );
    rig.advance(60_000);
    assert_eq!(rig.version(a), 2);
    assert_eq!(rig.caught_up(a), vec![false, true]);
}

#[test]
fn an_input_fed_while_actions_are_performed_waits_its_turn() {
    let (a, b) = (agg(1), agg(2));
    let handle: Rc<RefCell<Weak<ReadRun<Fake>>>> = Rc::default();
    // Tasks spawned while the nested feed ran: none, if it was only queued.
    let nested: Rc<Cell<Option<u32>>> = Rc::default();
    let (h, seen) = (handle.clone(), nested.clone());
    let mut rig = Rig::with(move |n| {
        if let ReaderNews::CaughtUp { aggregate, .. } = n
            && *aggregate == a
            && seen.get().is_none()
        {
            let run = h.borrow().upgrade().unwrap();
            let before = run.platform().spawned.get();
            run.feed(Input::Subscribe(b));
            seen.set(Some(run.platform().spawned.get() - before));
        }
    });
    *handle.borrow_mut() = Rc::downgrade(&rig.run);
    rig.hold(a, 1);
    rig.hold(b, 1);
    rig.run.feed(Input::Subscribe(a));
    rig.settle();
    assert_eq!(nested.get(), Some(0), "the executor was re-entered");
    // And it was handled, after.
    assert_eq!(rig.version(b), 1);
    assert_eq!(rig.caught_up(b), vec![true]);
}

#[path = "run_stream_tests.rs"]
mod stream_tests;
