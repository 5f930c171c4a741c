//! The life of an open client: its role (drainer or follower), the drain lock, the channel to
//! the other contexts, the heartbeat.
//!
//! Every client on a database requests the drain lock ([`crate::browser::locks`]); the one
//! holding it runs the drain loop and relays its status, `synced` and `parked` notices over the
//! database's channel ([`crate::browser::channel`]); the others append (IndexedDB serialises
//! the sequence counter) and mirror what they hear, so `status()`, `flush()`, `whenSynced()` and
//! the events behave the same in every context. When the drainer goes away, the next queued
//! request is granted and that context starts draining; a follower with pending work that hears
//! no heartbeat for [`STEAL_AFTER_MS`] takes the lock over (the holder is frozen or hung).

use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};

use futures_channel::oneshot;
use gloo_timers::callback::Interval;
use uuid::Uuid;
use web_sys::EventTarget;

use super::errors::ClientError;
use super::options::Options;
use crate::browser::channel::{Channel, Message};
use crate::browser::env::{BrowserEnv, OnlineListener};
use crate::browser::fetch::FetchTransport;
use crate::browser::idb::outbox::IdbOutbox;
use crate::browser::locks::{self, DrainLock};
use crate::browser::observer::DomObserver;
use crate::engine::drain::{Drainer, RunEnd};
use crate::engine::model::{AggregateRef, NewEvent, Receipt};
use crate::engine::outbox::StoreError;
use crate::engine::status::{Hub, Role};

/// How often the drainer says it is alive, and followers check that it is.
pub const HEARTBEAT_MS: u32 = 1_000;
/// Silence after which a follower with pending work takes the drain lock over.
pub const STEAL_AFTER_MS: f64 = 10_000.0;

/// An open client's shared state.
pub struct Session {
    /// The outbox.
    pub outbox: Rc<IdbOutbox>,
    /// Status, parked set and wake-ups.
    pub hub: Rc<Hub>,
    /// The device's client id.
    pub client_id: Uuid,
    /// Where listeners are registered.
    pub target: EventTarget,
    options: Options,
    relay: Rc<RefCell<Option<Channel>>>,
    draining: Rc<Cell<bool>>,
    lock: RefCell<Option<DrainLock>>,
    loop_running: Cell<bool>,
    /// When this context last heard the drainer, or started waiting for the lock (ms).
    last_heard: Cell<f64>,
    heartbeat: RefCell<Option<Interval>>,
    online: RefCell<Option<OnlineListener>>,
    /// Appends waiting for the next group commit.
    queued: RefCell<Vec<QueuedAppend>>,
    /// A group commit is being written.
    writing: Cell<bool>,
}

/// Most appends written in one group commit.
const MAX_GROUP: usize = 512;

struct QueuedAppend {
    aggregate: AggregateRef,
    events: Vec<NewEvent>,
    reply: oneshot::Sender<Result<Vec<Receipt>, StoreError>>,
}

fn now() -> f64 {
    js_sys::Date::now()
}

impl Session {
    /// Starts a session over an open outbox: channel, lock request (or draining at once where
    /// Web Locks do not exist), heartbeat, `online` listener.
    pub fn start(
        options: Options,
        outbox: Rc<IdbOutbox>,
        client_id: Uuid,
    ) -> Result<Rc<Session>, ClientError> {
        let target = EventTarget::new().map_err(|_| {
            ClientError::new("UNSUPPORTED", "EventTarget is not constructible here")
        })?;
        let relay: Rc<RefCell<Option<Channel>>> = Rc::default();
        let draining = Rc::new(Cell::new(false));
        let observer = DomObserver {
            target: target.clone(),
            relay: relay.clone(),
            draining: draining.clone(),
        };
        let hub = Rc::new(Hub::new(Box::new(observer)));
        hub.set_role(Role::Follower);
        let session = Rc::new(Session {
            outbox,
            hub,
            client_id,
            target,
            options,
            relay,
            draining,
            lock: RefCell::new(None),
            loop_running: Cell::new(false),
            last_heard: Cell::new(now()),
            heartbeat: RefCell::new(None),
            online: RefCell::new(None),
            queued: RefCell::new(Vec::new()),
            writing: Cell::new(false),
        });
        let online = OnlineListener::new(&session.hub)
            .map_err(|_| ClientError::new("UNSUPPORTED", "cannot listen for the online event"))?;
        *session.online.borrow_mut() = Some(online);

        let weak = Rc::downgrade(&session);
        let channel = Channel::open(&session.options.database_name, move |message| {
            if let Some(session) = weak.upgrade() {
                session.on_message(message);
            }
        });
        *session.relay.borrow_mut() = channel;
        session.post(&Message::Hello);

        if locks::supported() {
            session.request_lock(false);
        } else {
            // Without Web Locks every client drains its own loop (documented limitation).
            session.start_draining();
        }
        let weak = Rc::downgrade(&session);
        *session.heartbeat.borrow_mut() = Some(Interval::new(HEARTBEAT_MS, move || {
            if let Some(session) = weak.upgrade() {
                session.tick();
            }
        }));
        Ok(session)
    }

    fn post(&self, message: &Message) {
        if let Some(channel) = self.relay.borrow().as_ref() {
            channel.post(message);
        }
    }

    /// Whether this context drains now.
    pub fn is_draining(&self) -> bool {
        self.draining.get()
    }

    fn request_lock(self: &Rc<Self>, steal: bool) {
        let name = DrainLock::name(&self.options.database_name);
        let (granted, lost) = (Rc::downgrade(self), Rc::downgrade(self));
        self.last_heard.set(now());
        let request = DrainLock::request(
            &name,
            steal,
            move || {
                if let Some(session) = granted.upgrade() {
                    session.start_draining();
                }
            },
            move || {
                if let Some(session) = lost.upgrade() {
                    session.hub.set_error(
                        None,
                        "another context took over draining".into(),
                        now() as u64,
                    );
                    session.hub.supersede();
                }
            },
        );
        match request {
            Ok(lock) => {
                // Replacing a pending request withdraws it.
                if let Some(old) = self.lock.replace(Some(lock)) {
                    old.release();
                }
            }
            Err(_) => self.start_draining(),
        }
    }

    fn start_draining(self: &Rc<Self>) {
        if self.hub.is_closed() || self.loop_running.get() {
            return;
        }
        self.draining.set(true);
        self.loop_running.set(true);
        self.hub.resume();
        self.hub.set_role(Role::Drainer);
        let options = &self.options;
        let transport = FetchTransport {
            url: format!(
                "{}{}",
                options.gateway_url,
                celeriant_sync_protocol::WRITE_PATH
            ),
            timeout_ms: options.request_timeout_ms,
        };
        let env = BrowserEnv {
            lock: self.lock.borrow().as_ref().map(DrainLock::state),
        };
        let drainer = Drainer::new(
            self.outbox.clone(),
            transport,
            Rc::new(env),
            self.hub.clone(),
            options.policy,
            self.client_id,
        );
        let weak: Weak<Session> = Rc::downgrade(self);
        wasm_bindgen_futures::spawn_local(async move {
            if let Err(e) = drainer.recount().await {
                drainer_error(&weak, &e.to_string());
            }
            let end = drainer.run().await;
            if let Some(session) = weak.upgrade() {
                session.loop_running.set(false);
                if end == RunEnd::Superseded && !session.hub.is_closed() {
                    session.draining.set(false);
                    session.hub.set_role(Role::Follower);
                    session.request_lock(false);
                }
            }
        });
        self.post(&Message::Status(self.hub.status()));
    }

    fn on_message(self: &Rc<Self>, message: Message) {
        let draining = self.draining.get();
        match message {
            Message::Status(status) if !draining => {
                self.last_heard.set(now());
                self.hub.mirror(&status);
            }
            Message::Synced(notice) if !draining => self.hub.remote_synced(&notice),
            Message::Parked(record) if !draining => self.hub.remote_parked(record),
            Message::Appended { n } if draining => self.hub.appended(n),
            Message::Discarded { aggregate, removed } => self.hub.discarded(&aggregate, removed),
            Message::Heartbeat => self.last_heard.set(now()),
            Message::Hello if draining => self.post(&Message::Status(self.hub.status())),
            _ => {}
        }
    }

    fn tick(self: &Rc<Self>) {
        if self.hub.is_closed() {
            return;
        }
        if self.draining.get() {
            self.post(&Message::Heartbeat);
        } else if self.hub.status().pending > 0
            && now() - self.last_heard.get() > STEAL_AFTER_MS
            && locks::supported()
        {
            // The drainer is silent (frozen, hung) and work is waiting: take over.
            self.request_lock(true);
        }
    }

    /// Stores an append. Appends made while another group is being written are queued and
    /// written together in one transaction (group commit); each resolves once the transaction
    /// holding it committed, with its own receipts.
    pub async fn append(
        self: &Rc<Self>,
        aggregate: AggregateRef,
        events: Vec<NewEvent>,
    ) -> Result<Vec<Receipt>, StoreError> {
        let (reply, receipt) = oneshot::channel();
        self.queued.borrow_mut().push(QueuedAppend {
            aggregate,
            events,
            reply,
        });
        if !self.writing.replace(true) {
            let session = self.clone();
            wasm_bindgen_futures::spawn_local(async move { session.write_queued().await });
        }
        receipt.await.unwrap_or(Err(StoreError::Closed))
    }

    async fn write_queued(&self) {
        loop {
            let group: Vec<QueuedAppend> = {
                let mut queued = self.queued.borrow_mut();
                let n = queued.len().min(MAX_GROUP);
                queued.drain(..n).collect()
            };
            if group.is_empty() {
                self.writing.set(false);
                return;
            }
            let items: Vec<(AggregateRef, &[NewEvent])> = group
                .iter()
                .map(|q| (q.aggregate, q.events.as_slice()))
                .collect();
            let result = self.outbox.append_group(&items).await;
            match result {
                Ok(receipts) => {
                    for (queued, receipts) in group.into_iter().zip(receipts) {
                        let _ = queued.reply.send(Ok(receipts));
                    }
                }
                Err(e) => {
                    for queued in group {
                        let _ = queued.reply.send(Err(e.clone()));
                    }
                }
            }
        }
    }

    /// `n` events were appended in this context.
    pub fn appended(&self, n: u64) {
        self.hub.appended(n);
        if !self.draining.get() {
            self.post(&Message::Appended { n });
        }
    }

    /// This context discarded an aggregate's parked events.
    pub fn discarded(&self, aggregate: AggregateRef, removed: u32) {
        self.hub.discarded(&aggregate, removed);
        self.post(&Message::Discarded { aggregate, removed });
    }

    /// Stops the loop (if this context drains), releases the lock, closes channel and database.
    pub async fn close(&self) {
        if self.hub.is_closed() {
            return;
        }
        let stopped = self.hub.stopped.notified();
        self.hub.close();
        if self.loop_running.get() {
            stopped.await;
        } else {
            self.hub.set_state(crate::engine::status::SyncState::Closed);
        }
        self.heartbeat.borrow_mut().take();
        self.online.borrow_mut().take();
        if let Some(lock) = self.lock.borrow_mut().take() {
            lock.release();
        }
        self.relay.borrow_mut().take();
        self.outbox.close();
    }
}

fn drainer_error(session: &Weak<Session>, message: &str) {
    if let Some(session) = session.upgrade() {
        session
            .hub
            .set_error(None, message.to_owned(), now() as u64);
    }
}
