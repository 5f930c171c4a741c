//! The read side's executor in the draining context: performs what the
//! [`Reader`](crate::engine::read::machine::Reader) machine decides — the change streams
//! ([`super::stream`], one per shard of the watched set, each named by the machine's
//! [`StreamId`]), catch-up pages (`GET …/events?from=cursor+1`, stored with the cursor in
//! one transaction), log resets, timers — and feeds back what happened.
//!
//! Inputs are queued and handled one at a time, as in [`super::runtime`]; every callback from
//! the platform goes through `spawn_local` first, so nothing is re-entered and no closure is
//! dropped while it runs. A stream that outlives [`ReaderRuntime::stop`] (or was closed or
//! replaced) is no longer in `wanted`, and what it says is ignored.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::rc::{Rc, Weak};

use gloo_timers::callback::Timeout;
use gloo_timers::future::TimeoutFuture;
use js_sys::JSON;
use wasm_bindgen::JsValue;

use super::convert::{refused_from_js, tips_from_js};
use super::idb::outbox::IdbOutbox;
use super::js;
use super::network::NetworkSwitch;
use super::session::GatewaySessions;
use super::stream::WatchStream;
use crate::engine::backoff::Backoff;
use crate::engine::model::AggregateRef;
use crate::engine::read::log::LocalLog;
use crate::engine::read::machine::{Action, Input, PageEnd, Reader, StreamId};
use crate::engine::read::routing::ReaderNews;
use crate::engine::read::sse::{Parser, note};
use crate::engine::signal::{InFlight, Signal, first};
use crate::engine::sorted::{SortedMap, SortedSet};
use crate::engine::status::{Hub, Refused};
use celeriant_sync_protocol::WATCH_PATH;
use celeriant_sync_protocol::codes::gateway::{
    WATCH_STREAMS_PER_CLIENT, WATCH_TOO_MANY_AGGREGATES,
};
use celeriant_sync_protocol::watch;

#[wasm_bindgen::prelude::wasm_bindgen]
extern "C" {
    /// `JSON.parse` of a JS string as it is (`js_sys::JSON::parse` takes a `&str`: a copy of
    /// the text into JS).
    #[wasm_bindgen(js_namespace = JSON, js_name = parse, catch)]
    fn parse_text(text: &JsValue) -> Result<JsValue, JsValue>;
}

mod fetch_page;

/// Where the reader reads from.
pub(crate) struct ReaderConfig {
    /// The gateway's base URL.
    pub gateway_url: String,
    /// Per-request timeout for pages.
    pub timeout_ms: u32,
    /// The device's client id, as the server writes it.
    pub me: String,
    /// How a failed stream or page waits before it is tried again (the drain's, `maxBackoffMs`).
    pub backoff: Backoff,
    /// The client's network switch: off, no page is read and no stream opened.
    pub network: NetworkSwitch,
}

/// The read side of the draining context.
pub(crate) struct ReaderRuntime {
    config: ReaderConfig,
    outbox: Rc<IdbOutbox>,
    hub: Rc<Hub>,
    sessions: Rc<GatewaySessions>,
    news: Box<dyn Fn(ReaderNews)>,
    machine: RefCell<Reader>,
    queue: RefCell<VecDeque<Input>>,
    pumping: Cell<bool>,
    /// The streams the machine wants open, by id (`None` while one is being opened: its
    /// session and proof are on their way). Callbacks of a stream no longer here are ignored.
    streams: RefCell<SortedMap<StreamId, Option<WatchStream>>>,
    /// What each stream's `ready` said the gateway refused to watch.
    refused: RefCell<SortedMap<StreamId, Vec<Refused>>>,
    /// Watched aggregates that fit in no stream (reported with code 40020).
    unwatched: RefCell<Vec<AggregateRef>>,
    timer: RefCell<Option<Timeout>>,
    /// Catch-ups to try again (a failed page, a miss below a floor), each with whether its
    /// timer fired (then it is pruned).
    retries: RefCell<Vec<(Rc<Cell<bool>>, Timeout)>>,
    /// Aggregates with a local log: a landed batch of one is followed by its catch-up.
    logged: RefCell<SortedSet<AggregateRef>>,
    /// `logged` has been read from storage (until then every landed batch is caught up).
    loaded: Cell<bool>,
    stopped: Cell<bool>,
    /// Page stores and log resets past their last look at `stopped`, until their news are told
    /// ([`ReaderRuntime::written`]).
    writes: InFlight,
    /// Notified by [`ReaderRuntime::stop`], so the reader's own tasks end.
    stopping: Rc<Signal>,
}

fn now() -> u64 {
    js_sys::Date::now() as u64
}

impl ReaderRuntime {
    /// A reader with nothing watched yet; `news` hears of log changes and catch-ups.
    pub(crate) fn start(
        config: ReaderConfig,
        outbox: Rc<IdbOutbox>,
        hub: Rc<Hub>,
        sessions: Rc<GatewaySessions>,
        news: Box<dyn Fn(ReaderNews)>,
    ) -> Rc<ReaderRuntime> {
        let machine = RefCell::new(Reader::new(config.backoff));
        let reader = Rc::new(ReaderRuntime {
            config,
            outbox,
            hub,
            sessions,
            news,
            machine,
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
        reader.feed(Input::Online(reader.config.network.online()));
        // The network coming and going, for as long as the reader runs.
        let weak = Rc::downgrade(&reader);
        let (hub, stopping) = (reader.hub.clone(), reader.stopping.clone());
        super::env::spawn(async move {
            loop {
                let stop = stopping.notified();
                if !first(hub.network.notified(), stop).await {
                    return;
                }
                let Some(reader) = weak.upgrade() else { return };
                if reader.stopped.get() {
                    return;
                }
                reader.feed(Input::Online(reader.config.network.online()));
            }
        });
        let weak = Rc::downgrade(&reader);
        super::env::spawn(async move {
            let Some(reader) = weak.upgrade() else { return };
            if let Ok(logged) = reader.outbox.logged().await {
                reader.logged.borrow_mut().extend(logged);
            }
            reader.loaded.set(true);
        });
        reader
    }

    /// Stops: closes the stream, cancels the timer; whatever is in flight is ignored, but a page
    /// store or log reset already under way still commits and tells its news ([`Self::written`]).
    pub(crate) fn stop(&self) {
        self.stopped.set(true);
        *self.streams.borrow_mut() = SortedMap::new();
        self.timer.borrow_mut().take();
        self.retries.borrow_mut().clear();
        self.outbox.forget_kept();
        self.stopping.notify();
        self.hub
            .set_read(crate::engine::read::machine::ReadState::Idle);
    }

    /// Whether a page store or log reset is under way (it may be, after [`Self::stop`]).
    pub(crate) fn writing(&self) -> bool {
        self.writes.busy()
    }

    /// Resolves once no page store or log reset is under way and the news of each were told.
    /// Each is one IndexedDB transaction, which commits or aborts on its own; no request is
    /// waited for (a page answered after [`Self::stop`] is not stored).
    pub(crate) async fn written(&self) {
        self.writes.idle().await
    }

    /// The network was switched off: the open streams are closed now (and reopening them fails
    /// at once, without a request, until the network is switched on again).
    pub(crate) fn switched_off(self: &Rc<Self>) {
        let open = std::mem::take(&mut *self.streams.borrow_mut());
        for &id in open.keys() {
            self.feed(Input::StreamEnded(id));
        }
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

    /// Events of this aggregate landed: catch it up if it has a local log (its landed events
    /// are pruned only once the log holds them).
    pub(crate) fn landed(self: &Rc<Self>, aggregate: AggregateRef) {
        if !self.loaded.get() || self.logged.borrow().contains(&aggregate) {
            self.feed(Input::CatchUp(aggregate));
        }
    }

    /// The aggregate has a local log now (a `read` or `subscribe` in some context).
    pub(crate) fn note_logged(&self, aggregate: AggregateRef) {
        self.logged.borrow_mut().insert(aggregate);
    }

    /// Hands an input to the machine and performs what it decides.
    pub(crate) fn feed(self: &Rc<Self>, input: Input) {
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
                machine.handle(input, now(), js_sys::Math::random());
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
        super::env::spawn(async move {
            if let Some(reader) = weak.upgrade() {
                reader.feed(input);
            }
        });
    }

    fn apply(self: &Rc<Self>, action: Action) {
        match action {
            Action::OpenStream { id, aggregates } => self.open_stream(id, aggregates),
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
                super::env::spawn(async move {
                    // One deadline over the whole page (a session opening included), so a
                    // hung `auth` callback cannot stop catch-up for good.
                    let (end, storing) = (Cell::new(None), Cell::new(false));
                    let deadline = this.config.timeout_ms.saturating_mul(3);
                    let mut page = std::pin::pin!(async {
                        end.set(Some(this.fetch_page(aggregate, probe, tip, &storing).await))
                    });
                    if !first(page.as_mut(), TimeoutFuture::new(deadline)).await && storing.get() {
                        // Past the deadline while storing: that transaction commits or aborts
                        // on its own, so it is awaited and its news told (dropped, a store that
                        // then committed was told to nobody, `close` not waiting for it either).
                        page.await;
                    }
                    let end = end.take().unwrap_or_else(|| PageEnd::Failed {
                        message: format!("no page within {deadline} ms"),
                    });
                    if !this.stopped.get() {
                        this.feed(Input::Page { aggregate, end });
                    }
                });
            }
            Action::ResetLog {
                aggregate,
                min_version,
                gone,
            } => {
                let this = self.clone();
                super::env::spawn(async move {
                    if this.stopped.get() {
                        return;
                    }
                    let _writing = this.writes.enter();
                    // A failed reset leaves the old log: the next page read finds out again.
                    let _ = this.outbox.reset_log(aggregate, min_version, gone).await;
                    this.hub.logged(aggregate);
                    (this.news)(ReaderNews::LogChanged(aggregate));
                    this.feed(Input::LogReset(aggregate));
                });
            }
            Action::RetryLater { aggregate, ms } => {
                let weak = Rc::downgrade(self);
                let fired = Rc::new(Cell::new(false));
                let fired_flag = Rc::clone(&fired);
                let timer = Timeout::new(ms.min(u64::from(u32::MAX)) as u32, move || {
                    fired_flag.set(true);
                    if let Some(reader) = weak.upgrade() {
                        reader.later(Input::Retry(aggregate));
                    }
                });
                let mut retries = self.retries.borrow_mut();
                // Timers that fired are done: dropped (kept, the list grew by one per retry).
                // Never the one running: its `Retry` is fed from a spawned task, after it returns.
                retries.retain(|(fired, _)| !fired.get());
                retries.push((fired, timer));
                // Bounded all the same: a few dozen pending at most (one per aggregate behind
                // its floor, and one per failed page); past that the oldest fires unowned.
                if retries.len() > 64 {
                    retries.remove(0).1.forget();
                }
            }
            Action::Wait(ms) => {
                let weak = Rc::downgrade(self);
                let timer = Timeout::new(ms.min(u64::from(u32::MAX)) as u32, move || {
                    if let Some(reader) = weak.upgrade() {
                        reader.later(Input::TimerFired);
                    }
                });
                *self.timer.borrow_mut() = Some(timer);
            }
            Action::Report(state) => self.hub.set_read(state),
            Action::NeverServed {
                aggregate,
                notified,
                reached,
            } => web_sys::console::warn_1(
                &format!(
                    "celeriant-sync: the gateway notified version {notified} of {}/{} but its \
                     pages still end at {reached}; no longer waiting for it",
                    aggregate.type_id, aggregate.id
                )
                .into(),
            ),
            Action::CaughtUp {
                aggregate,
                ok,
                reads,
            } => {
                self.outbox.caught_up(aggregate);
                (self.news)(ReaderNews::CaughtUp {
                    aggregate,
                    ok,
                    reads,
                })
            }
        }
    }

    /// A session token: the drain's session, or one opened (or renewed) when needed
    /// ([`GatewaySessions::token`]).
    async fn token(&self) -> Result<String, String> {
        self.sessions
            .token()
            .await
            .map_err(|failure| failure.message)
    }

    /// Whether the stream `id` is still wanted.
    fn wanted(&self, id: StreamId) -> bool {
        !self.stopped.get() && self.streams.borrow().contains_key(&id)
    }

    fn open_stream(self: &Rc<Self>, id: StreamId, aggregates: Vec<AggregateRef>) {
        self.streams.borrow_mut().insert(id, None);
        let body = watch::watch_body(&aggregates);
        let this = self.clone();
        super::env::spawn(async move {
            let token = this.token().await;
            if !this.wanted(id) {
                return;
            }
            if this.config.network.is_off() {
                return this.later_if(id, Input::StreamEnded(id));
            }
            let token = match token {
                Ok(token) => token,
                Err(_) => return this.later_if(id, Input::StreamEnded(id)),
            };
            let url = format!("{}{WATCH_PATH}", this.config.gateway_url);
            let proof = match this.sessions.proof("POST", &url, &body, &token).await {
                Ok(proof) => proof,
                Err(_) => return this.later_if(id, Input::StreamEnded(id)),
            };
            if !this.wanted(id) {
                return;
            }
            let parser = Rc::new(RefCell::new(Parser::default()));
            let named = aggregates;
            let (on_chunk, on_end): (Weak<Self>, Weak<Self>) =
                (Rc::downgrade(&this), Rc::downgrade(&this));
            let streamed_under = token.clone();
            let stream = WatchStream::open(
                &url,
                &token,
                &proof,
                &body,
                move |text: String| {
                    let Some(reader) = on_chunk.upgrade() else {
                        return false;
                    };
                    let events = match parser.borrow_mut().feed(&text) {
                        Ok(events) => events,
                        Err(_) => return false,
                    };
                    for event in events {
                        // `ready` lists what the gateway refused to watch: reported as is; and
                        // may give each aggregate's version (fed before the `ready` itself).
                        if event.name == watch::READY && reader.wanted(id) {
                            let data = JSON::parse(&event.data).unwrap_or(JsValue::NULL);
                            let refused = refused_from_js(&js::get(&data, watch::REFUSED));
                            reader.refused.borrow_mut().insert(id, refused);
                            reader.publish_refused();
                            if let Some(tips) = tips_from_js(&js::get(&data, watch::TIPS), &named) {
                                reader.later_if(id, Input::Tips(id, tips));
                            }
                        }
                        match note(&event) {
                            Ok(Some(n)) => reader.later_if(id, Input::Stream(id, n)),
                            Ok(None) => {}
                            Err(_) => return false,
                        }
                    }
                    true
                },
                move |status: u16, why: String| {
                    let Some(reader) = on_end.upgrade() else {
                        return;
                    };
                    if status == 401 {
                        reader.sessions.refused(&streamed_under);
                    }
                    // Too many aggregates for this gateway: 40020, or 413 when the body alone
                    // is past its bound (200 bytes per aggregate it allows, plus 1 KiB; a
                    // stream of more than about twice its cap is refused that way first).
                    let too_large = status == 413
                        || (status == 400 && refusal_code(&why) == Some(WATCH_TOO_MANY_AGGREGATES));
                    // Too many streams for this client: the gateway's per-client cap is below
                    // what this device opens.
                    let too_many =
                        status == 429 && refusal_code(&why) == Some(WATCH_STREAMS_PER_CLIENT);
                    let input = if too_large {
                        Input::StreamTooLarge(id)
                    } else if too_many {
                        Input::StreamTooMany(id)
                    } else {
                        Input::StreamEnded(id)
                    };
                    reader.later_if(id, input);
                },
            );
            if let Some(slot) = this.streams.borrow_mut().get_mut(&id) {
                *slot = Some(stream);
            }
        });
    }

    /// Feeds `input` later if the stream `id` is still wanted (an ended one is forgotten
    /// first).
    fn later_if(self: &Rc<Self>, id: StreamId, input: Input) {
        let weak = Rc::downgrade(self);
        super::env::spawn(async move {
            if let Some(reader) = weak.upgrade()
                && reader.wanted(id)
            {
                if matches!(
                    input,
                    Input::StreamEnded(_) | Input::StreamTooLarge(_) | Input::StreamTooMany(_)
                ) {
                    reader.streams.borrow_mut().remove(&id);
                    if reader.refused.borrow_mut().remove(&id).is_some() {
                        reader.publish_refused();
                    }
                }
                reader.feed(input);
            }
        });
    }
}

/// The gateway's code in a refusal as `openWatch` reports it (`HTTP 400: {"code":…}`).
fn refusal_code(why: &str) -> Option<u32> {
    let body = why.split_once(": ")?.1;
    let parsed = JSON::parse(body).ok()?;
    js::get_u64(&parsed, watch::CODE).and_then(|c| u32::try_from(c).ok())
}
