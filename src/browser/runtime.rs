//! The runtime of one open client: it performs what the engine's machines decide, with the
//! browser's means — the drain lock (Web Locks), the database's channel (`BroadcastChannel`),
//! the heartbeat timer, the `online` event, `spawn_local` — and feeds back what happens.
//!
//! Nothing here decides anything. Events for the coordination machine are queued and handled
//! one at a time ([`Runtime::feed`]); applying an effect may report more events (a hub change
//! the drainer relays), which wait their turn, so the machine is never re-entered.
//!
//! The read side's routing between contexts — the reader in the draining context, every
//! context's subscriptions, `read`'s waiters — is decided by
//! [`Routing`](crate::engine::read::routing::Routing) and performed in [`reads`].

mod reads;
pub(crate) mod storage;

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::{Rc, Weak};

use futures_channel::oneshot;
use gloo_timers::callback::Interval;
use gloo_timers::future::TimeoutFuture;
use uuid::Uuid;

use super::channel::Channel;
use super::env::{BrowserEnv, OnlineListener};
use super::fetch::FetchTransport;
use super::idb::outbox::IdbOutbox;
use super::locks::{self, DrainLock};
use super::members::MembersApi;
use super::network::NetworkSwitch;
use super::reader::ReaderRuntime;
use super::session::GatewaySessions;
use super::views::Views;
use crate::engine::coord::{
    Coordinator, Effect, Event, HEARTBEAT_MS, Hold, HubUpdate, Message, Outgoing,
};
use crate::engine::drain::{Drain, Edge, Policy, run_inspected};
use crate::engine::group::{AtomicWrites, GroupCommit, Spawn};
use crate::engine::inspect::Inspector;
use crate::engine::model::{AggregateRef, NewEvent, ParkRecord, Receipt};
use crate::engine::outbox::{Begun, Counted, Discarded, StoreError};
use crate::engine::read::machine::ReadState;
use crate::engine::read::routing::{Input as RouteInput, Routing};
use crate::engine::status::{Hub, Observer, Status, SyncState, SyncedNotice};

/// What the runtime needs to know.
#[derive(Debug, Clone)]
pub(crate) struct Config {
    /// The IndexedDB database (and the name of its lock and channel).
    pub database_name: String,
    /// The gateway's base URL.
    pub gateway_url: String,
    /// `{gateway}/v1/write`.
    pub write_url: String,
    /// Per-request timeout.
    pub request_timeout_ms: u32,
    /// How the drain cuts batches and waits.
    pub policy: Policy,
    /// The client's network switch (`setOffline`).
    pub network: NetworkSwitch,
}

/// One open client's runtime.
pub(crate) struct Runtime {
    /// The outbox.
    pub outbox: Rc<IdbOutbox>,
    /// Status, parked set and wake-ups.
    pub hub: Rc<Hub>,
    /// The device's client id.
    pub client_id: Uuid,
    /// What `inspect()` knows of this context's drain.
    pub inspector: Inspector,
    config: Config,
    sessions: Rc<GatewaySessions>,
    appends: Rc<GroupCommit<IdbOutbox>>,
    coordinator: RefCell<Coordinator>,
    queue: RefCell<VecDeque<Event>>,
    pumping: Cell<bool>,
    /// "Something changed" messages held for the next flush.
    outgoing: RefCell<Outgoing>,
    lock: RefCell<Option<DrainLock>>,
    channel: RefCell<Option<Channel>>,
    heartbeat: RefCell<Option<Interval>>,
    online: RefCell<Option<OnlineListener>>,
    draining: Cell<bool>,
    /// This context's views (`subscribe`, `read`).
    pub views: Rc<Views>,
    /// The read side's routing between contexts (who feeds the reader, who is answered).
    routing: RefCell<Routing>,
    /// Routing inputs waiting their turn ([`Runtime::route`]).
    route_queue: RefCell<VecDeque<RouteInput>>,
    routing_now: Cell<bool>,
    /// The read side, while this context drains.
    reader: RefCell<Option<Rc<ReaderRuntime>>>,
    /// Stopped readers whose page store or log reset was still under way when they stopped
    /// (`close` waits for them: [`Runtime::readers_written`]).
    retired: RefCell<Vec<Rc<ReaderRuntime>>>,
    /// `read` calls waiting for a catch-up to end, by waiter id (the routing answers them).
    answers: RefCell<Vec<(u64, oneshot::Sender<bool>)>>,
    next_waiter: Cell<u64>,
    /// `share`, `unshare`, `members`.
    pub members: MembersApi,
    /// What was appended here and not seen landed, and the loss if the storage went away.
    pub storage: storage::StorageMemory,
}

fn now() -> u64 {
    js_sys::Date::now() as u64
}

fn spawn() -> Spawn {
    Rc::new(super::env::spawn_boxed)
}

/// Reports the hub's changes to the app's observer and, through the coordinator, to the other
/// contexts; status changes are coalesced to one report per task.
struct Relay {
    app: Rc<dyn Observer>,
    runtime: Weak<Runtime>,
    status_due: Rc<Cell<bool>>,
}

impl Observer for Relay {
    fn status(&self, _: &Status) {
        if self.status_due.replace(true) {
            return;
        }
        let (app, runtime, due) = (
            self.app.clone(),
            self.runtime.clone(),
            self.status_due.clone(),
        );
        super::env::spawn(async move {
            due.set(false);
            if let Some(runtime) = runtime.upgrade() {
                let status = runtime.hub.status();
                app.status(&status);
                runtime.feed(Event::Changed(Message::Status(status)));
            }
        });
    }

    fn synced(&self, notice: &SyncedNotice) {
        self.app.synced(notice);
        if let Some(runtime) = self.runtime.upgrade() {
            runtime.storage.synced(notice.aggregate, notice.last_seq);
            runtime.feed(Event::Changed(Message::Synced(notice.clone())));
            let reader = runtime.reader.borrow().clone();
            if let Some(reader) = reader {
                reader.landed(notice.aggregate);
            }
        }
    }

    fn parked(&self, record: &ParkRecord) {
        self.app.parked(record);
        if let Some(runtime) = self.runtime.upgrade() {
            runtime.feed(Event::Changed(Message::Parked(record.clone())));
            runtime.touched(record.aggregate);
        }
    }
}

impl Runtime {
    /// Starts the runtime of a client over an open outbox: channel, lock request (or draining
    /// at once where Web Locks do not exist), heartbeat, `online` listener. `app` receives the
    /// hub's changes; `counts` were read at open.
    pub(crate) fn start(
        config: Config,
        outbox: Rc<IdbOutbox>,
        sessions: GatewaySessions,
        app: Rc<dyn Observer>,
        counts: Counted,
    ) -> Result<Rc<Runtime>, wasm_bindgen::JsValue> {
        let client_id = sessions.identity.client_id;
        let sessions = Rc::new(sessions);
        let runtime = Rc::new_cyclic(|weak: &Weak<Runtime>| {
            let relay = Relay {
                app,
                runtime: weak.clone(),
                status_due: Rc::default(),
            };
            let hub = Rc::new(Hub::new(Box::new(relay)));
            hub.reset_counts(counts);
            let read_hub = hub.clone();
            let views = Views::new(
                outbox.clone(),
                client_id.to_string(),
                Box::new(move || read_hub.status().read != ReadState::Connected),
            );
            let committed = weak.clone();
            Runtime {
                appends: GroupCommit::new(
                    outbox.clone(),
                    spawn(),
                    Box::new(move |stored, touched, begun| {
                        if let Some(runtime) = committed.upgrade() {
                            runtime.appended(stored, touched, begun);
                        }
                    }),
                ),
                outbox,
                hub,
                client_id,
                inspector: Inspector::default(),
                members: MembersApi::new(
                    config.gateway_url.clone(),
                    config.request_timeout_ms,
                    config.network.clone(),
                    sessions.clone(),
                ),
                config,
                sessions,
                coordinator: RefCell::new(Coordinator::new()),
                queue: RefCell::default(),
                pumping: Cell::new(false),
                outgoing: RefCell::default(),
                lock: RefCell::new(None),
                channel: RefCell::new(None),
                heartbeat: RefCell::new(None),
                online: RefCell::new(None),
                draining: Cell::new(false),
                views,
                routing: RefCell::new(Routing::new(
                    // This context's random id among the device's contexts.
                    (js_sys::Math::random() * 9_007_199_254_740_991.0) as u64,
                )),
                route_queue: RefCell::default(),
                routing_now: Cell::new(false),
                reader: RefCell::new(None),
                retired: RefCell::default(),
                answers: RefCell::default(),
                next_waiter: Cell::new(0),
                storage: storage::StorageMemory::default(),
            }
        });
        *runtime.online.borrow_mut() = Some(OnlineListener::new(&runtime.hub)?);
        let weak = Rc::downgrade(&runtime);
        *runtime.channel.borrow_mut() = Channel::open(&runtime.config.database_name, move |m| {
            if let Some(runtime) = weak.upgrade() {
                match m {
                    Message::Read(read) => runtime.route(RouteInput::Message(read)),
                    m => runtime.feed(Event::Received(m)),
                }
            }
        });
        let weak = Rc::downgrade(&runtime);
        *runtime.heartbeat.borrow_mut() = Some(Interval::new(HEARTBEAT_MS as u32, move || {
            if let Some(runtime) = weak.upgrade() {
                let pending = runtime.hub.status().pending;
                runtime.feed(Event::Tick { pending });
            }
        }));
        runtime.feed(Event::Start {
            locks: locks::supported(),
        });
        Ok(runtime)
    }

    /// Hands an event to the coordinator and performs what it decides.
    pub(crate) fn feed(self: &Rc<Self>, event: Event) {
        self.queue.borrow_mut().push_back(event);
        if self.pumping.replace(true) {
            return; // the loop below is running further up the stack
        }
        loop {
            let Some(event) = self.queue.borrow_mut().pop_front() else {
                break;
            };
            let effects: Vec<Effect> = {
                let mut coordinator = self.coordinator.borrow_mut();
                coordinator.handle(event, now());
                std::iter::from_fn(|| coordinator.poll()).collect()
            };
            for effect in effects {
                self.apply(effect);
            }
        }
        self.pumping.set(false);
    }

    fn apply(self: &Rc<Self>, effect: Effect) {
        match effect {
            Effect::RequestLock { id, steal } => self.request_lock(id, steal),
            Effect::ReleaseLock => {
                if let Some(lock) = self.lock.borrow_mut().take() {
                    lock.release();
                }
            }
            Effect::StartDrain => self.start_drain(),
            Effect::StopDrain => {
                self.outgoing.borrow_mut().forget_status();
                self.hub.supersede();
            }
            Effect::Post(message) => self.post(&message),
            Effect::PostStatus => self.post(&Message::Status(self.hub.status())),
            Effect::Hub(update) => match update {
                HubUpdate::Role(role) => self.hub.set_role(role),
                HubUpdate::Mirror(status) => self.hub.mirror(&status),
                HubUpdate::Synced(notice) => {
                    self.storage.synced(notice.aggregate, notice.last_seq);
                    self.outbox
                        .landed_elsewhere(notice.aggregate, notice.last_seq);
                    self.hub.remote_synced(&notice)
                }
                HubUpdate::Parked(record) => self.hub.remote_parked(record),
                HubUpdate::Appended { n, begun } => self.hub.appended(n, begun),
                HubUpdate::Discarded {
                    aggregate,
                    removed,
                    begun,
                } => self.hub.discarded(&aggregate, removed, begun),
                HubUpdate::Error(message) => self.hub.set_error(None, message, now()),
            },
        }
    }

    /// Posts `message` to the other contexts: at once, or merged with others of its kind in
    /// the next flush ([`Outgoing`]).
    fn post(self: &Rc<Self>, message: &Message) {
        let hold = self.outgoing.borrow_mut().hold(message.clone(), now());
        match hold {
            Hold::PostNow(message) => self.post_now(&message),
            Hold::Held => {}
            Hold::FlushIn(ms) => {
                let weak = Rc::downgrade(self);
                super::env::spawn(async move {
                    TimeoutFuture::new(ms as u32).await;
                    if let Some(runtime) = weak.upgrade() {
                        runtime.flush_outgoing();
                    }
                });
            }
        }
    }

    fn flush_outgoing(&self) {
        let held = self.outgoing.borrow_mut().flush(now());
        for message in &held {
            self.post_now(message);
        }
    }

    fn post_now(&self, message: &Message) {
        if let Some(channel) = self.channel.borrow().as_ref() {
            channel.post(message);
        }
    }

    fn request_lock(self: &Rc<Self>, id: u32, steal: bool) {
        let name = DrainLock::name(&self.config.database_name);
        let (granted, lost, failed) = (
            Rc::downgrade(self),
            Rc::downgrade(self),
            Rc::downgrade(self),
        );
        let request = DrainLock::request(
            &name,
            steal,
            move || {
                granted
                    .upgrade()
                    .map_or((), |r| r.feed(Event::LockGranted(id)))
            },
            move || lost.upgrade().map_or((), |r| r.feed(Event::LockLost(id))),
            move || {
                failed
                    .upgrade()
                    .map_or((), |r| r.feed(Event::LockFailed(id)))
            },
        );
        // Replacing a request withdraws it (or releases the lock it holds).
        if let Some(old) = self.lock.borrow_mut().take() {
            old.release();
        }
        match request {
            Ok(lock) => *self.lock.borrow_mut() = Some(lock),
            Err(_) => self.feed(Event::LockFailed(id)),
        }
    }

    fn start_drain(self: &Rc<Self>) {
        if self.hub.is_closed() {
            return;
        }
        self.draining.set(true);
        self.hub.resume();
        let transport = FetchTransport {
            url: self.config.write_url.clone(),
            gateway_url: self.config.gateway_url.clone(),
            timeout_ms: self.config.request_timeout_ms,
            network: self.config.network.clone(),
            sessions: self.sessions.clone(),
        };
        let env = BrowserEnv {
            lock: self.lock.borrow().as_ref().map(DrainLock::state),
            network: self.config.network.clone(),
        };
        // Holding the Web Lock, this drain is the only writer of `landed` (without Web Locks
        // every context drains: each cut then reads the watermarks afresh).
        self.outbox.sole_drainer(env.lock.is_some());
        let drain = Drain::new(self.config.policy, self.client_id);
        let this = self.clone();
        super::env::spawn(async move {
            let edge = Edge {
                outbox: &*this.outbox,
                transport: &transport,
                auth: &*this.sessions,
                env: &env,
                hub: &this.hub,
            };
            let end = run_inspected(drain, edge, &this.inspector).await;
            this.draining.set(false);
            this.stop_reader();
            this.feed(Event::DrainStopped(end));
        });
        self.start_reader();
    }

    /// Stores an append through group commit; resolves once its transaction committed (and
    /// [`Runtime::appended`] told everyone).
    pub(crate) async fn append(
        self: &Rc<Self>,
        aggregate: AggregateRef,
        events: Vec<NewEvent>,
        expected_version: Option<u64>,
    ) -> Result<Vec<Receipt>, StoreError> {
        let receipts = self
            .appends
            .append_guarded(aggregate, events, expected_version)
            .await?;
        self.storage.appended(aggregate, &receipts);
        Ok(receipts)
    }

    /// Stores an atomic write through group commit, in call order, in a transaction of its own.
    pub(crate) async fn append_atomic(
        self: &Rc<Self>,
        writes: AtomicWrites,
    ) -> Result<Vec<Vec<Receipt>>, StoreError> {
        let aggregates: Vec<AggregateRef> = writes.iter().map(|w| w.0).collect();
        let receipts = self.appends.append_atomic(writes).await?;
        for (aggregate, receipts) in aggregates.into_iter().zip(&receipts) {
            self.storage.appended(aggregate, receipts);
        }
        Ok(receipts)
    }

    /// A group of appends committed: one status update, one refresh and one message per
    /// aggregate, however many appends the group held.
    fn appended(self: &Rc<Self>, stored: u64, touched: &[AggregateRef], begun: Begun) {
        self.feed(Event::Appended { n: stored, begun });
        for aggregate in touched {
            self.touched(*aggregate);
        }
    }

    /// The drain lock's name, and the lock manager's id of this context if it holds it.
    pub(crate) fn drain_lock(&self) -> (String, Option<String>) {
        let mine = self
            .lock
            .borrow()
            .as_ref()
            .and_then(|l| l.state().holder_id());
        (DrainLock::name(&self.config.database_name), mine)
    }

    /// The network switch was flipped ([`NetworkSwitch`]): off closes the change stream; both
    /// wake the drain and the reader as the `online` event does.
    pub(crate) fn network_switched(&self) {
        let reader = self.reader.borrow().clone();
        if let (true, Some(reader)) = (self.config.network.is_off(), reader) {
            reader.switched_off();
        }
        self.hub.network.notify();
    }

    /// This context discarded an aggregate's parked events (with the other legs of a parked
    /// atomic write: their parks went too, their events are in `removed`).
    pub(crate) fn discarded(self: &Rc<Self>, aggregate: AggregateRef, discarded: Discarded) {
        let legs = std::iter::once((aggregate, discarded.removed))
            .chain(discarded.also.iter().map(|other| (*other, 0)));
        for (aggregate, removed) in legs {
            self.storage.discarded(aggregate);
            self.feed(Event::Discarded {
                aggregate,
                removed,
                begun: discarded.begun,
            });
            self.touched(aggregate);
        }
    }

    /// Stops the drain (if this context drains), releases the lock, closes channel and
    /// database. Idempotent.
    pub(crate) async fn close(self: &Rc<Self>) {
        if self.hub.is_closed() {
            return;
        }
        let stopped = self.hub.stopped.notified();
        self.hub.close();
        if self.draining.get() {
            stopped.await;
        } else {
            self.hub.set_state(SyncState::Closed);
        }
        self.stop_reader();
        // A page store or log reset of the stopped reader still under way lands, and its
        // `LogChanged` is told on the channel, before the drain lock goes (`Event::Close`
        // releases it): else a store that commits after the next drainer's first catch-up of
        // its aggregate is told to nobody, and other contexts' views of it stay behind.
        self.readers_written().await;
        self.feed(Event::Close);
        // Goodbye to the drainer; every waiting `read` is answered (from the local log).
        self.route(RouteInput::Close);
        self.flush_outgoing();
        self.answers.borrow_mut().clear();
        self.heartbeat.borrow_mut().take();
        self.online.borrow_mut().take();
        if let Some(lock) = self.lock.borrow_mut().take() {
            lock.release();
        }
        self.channel.borrow_mut().take();
        self.outbox.close();
    }
}
