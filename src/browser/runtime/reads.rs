//! The read side's executor between contexts: performs what [`Routing`] decides — feeding
//! this context's reader (only the draining context holds one), posting read-side messages on
//! the channel, refreshing views, answering `read`s — and feeds it what happens here (the
//! reader starting and stopping, messages, subscriptions, `read`s and their timeouts, the
//! reader's news). `read`'s oneshot senders stay here, keyed by waiter id; the machine says
//! which is answered and how (the tag a `read` asks under, this context's id and its waiter
//! id, goes from the routing to the reader and back in the reader's news; nothing here reads
//! it).

use std::rc::Rc;

use futures_channel::oneshot;
use gloo_timers::future::TimeoutFuture;
use wasm_bindgen::JsValue;

use super::super::reader::{ReaderConfig, ReaderRuntime};
use super::Runtime;
use crate::engine::coord::Message;
use crate::engine::model::AggregateRef;
use crate::engine::outbox::StoreError;
use crate::engine::read::log::LocalLog;
use crate::engine::read::routing::{Action, Input, ReaderNews};
use crate::engine::signal::first;

impl Runtime {
    /// Hands an input to the routing machine and performs what it decides (queued, so the
    /// machine is never re-entered).
    pub(super) fn route(self: &Rc<Self>, input: Input) {
        self.route_queue.borrow_mut().push_back(input);
        if self.routing_now.replace(true) {
            return;
        }
        loop {
            let Some(input) = self.route_queue.borrow_mut().pop_front() else {
                break;
            };
            let actions: Vec<Action> = {
                let mut routing = self.routing.borrow_mut();
                routing.handle(input);
                std::iter::from_fn(|| routing.poll()).collect()
            };
            for action in actions {
                self.perform(action);
            }
        }
        self.routing_now.set(false);
    }

    fn perform(self: &Rc<Self>, action: Action) {
        match action {
            Action::Feed(input) => {
                let reader = self.reader.borrow().clone();
                if let Some(reader) = reader {
                    reader.feed(input);
                }
            }
            Action::Post(message) => self.post(&Message::Read(message)),
            Action::RefreshViews(aggregate) => self.views.changed(aggregate),
            Action::Answer { waiter, ok } => {
                let mut answers = self.answers.borrow_mut();
                if let Some(i) = answers.iter().position(|(w, _)| *w == waiter) {
                    let _ = answers.swap_remove(i).1.send(ok);
                }
            }
        }
    }

    /// The draining context also holds the change stream and does the catch-ups.
    pub(super) fn start_reader(self: &Rc<Self>) {
        let weak = Rc::downgrade(self);
        let news = Box::new(move |news: ReaderNews| {
            if let Some(runtime) = weak.upgrade() {
                runtime.route(Input::ReaderNews(news));
            }
        });
        let reader = super::super::reader::start(
            ReaderConfig {
                gateway_url: self.config.gateway_url.clone(),
                timeout_ms: self.config.request_timeout_ms,
                me: self.client_id.to_string(),
                backoff: self.config.policy.backoff,
                network: self.config.network.clone(),
            },
            self.outbox.clone(),
            self.hub.clone(),
            self.sessions.clone(),
            news,
        );
        // Taken out first: no borrow of `reader` is held while the old one stops.
        let old = self.reader.borrow_mut().replace(reader);
        if let Some(old) = old {
            self.retire(old);
        }
        self.route(Input::ReaderStarted);
    }

    /// This context's reader stops (its drain ended, or the client closes).
    pub(super) fn stop_reader(self: &Rc<Self>) {
        let reader = self.reader.borrow_mut().take();
        if let Some(reader) = reader {
            self.retire(reader);
        }
        self.route(Input::ReaderStopped);
    }

    /// Stops `reader`; kept while a page store or log reset of it is under way (whose news
    /// still come here), so that `close` can wait for it.
    fn retire(&self, reader: Rc<ReaderRuntime>) {
        reader.stop();
        let mut retired = self.retired.borrow_mut();
        retired.retain(|r| r.writing());
        if reader.writing() {
            retired.push(reader);
        }
    }

    /// Waits for the page stores and log resets this context's stopped readers still had under
    /// way, each until its news were told (routed here, so posted on the channel). Each is one
    /// IndexedDB transaction, which commits or aborts on its own, so this is short; bounded all
    /// the same (the request timeout), so that `close` always ends. No request is waited for:
    /// a page answered after the stop is not stored.
    pub(super) async fn readers_written(&self) {
        let retired = std::mem::take(&mut *self.retired.borrow_mut());
        let all = async {
            for reader in &retired {
                reader.written().await;
            }
        };
        first(all, TimeoutFuture::new(self.config.request_timeout_ms)).await;
    }

    /// This context's subscriptions changed (a listener came or went): tell whoever holds the
    /// stream, if that changes what is watched.
    pub(crate) fn watch_changed(self: &Rc<Self>) {
        self.route(Input::WatchChanged(self.views.watched()));
    }

    /// The aggregate has a local log now: the drainer's reader follows its landed batches.
    pub(crate) fn logged(&self, aggregate: AggregateRef) {
        if let Some(reader) = self.reader.borrow().as_ref() {
            reader.note_logged(aggregate);
        }
    }

    /// The aggregate's pending events changed here: refresh views, here and elsewhere.
    pub(super) fn touched(self: &Rc<Self>, aggregate: AggregateRef) {
        self.route(Input::Touched(aggregate));
    }

    /// The aggregate's view now: caught up first when online (by whichever context drains),
    /// from the local log alone when offline or when the catch-up fails or takes too long.
    pub(crate) async fn read(
        self: &Rc<Self>,
        aggregate: AggregateRef,
    ) -> Result<JsValue, StoreError> {
        self.outbox.ensure_cursor(aggregate).await?;
        self.logged(aggregate);
        let waiter = self.next_waiter.get();
        self.next_waiter.set(waiter.wrapping_add(1));
        let (sender, mut receiver) = oneshot::channel();
        self.answers.borrow_mut().push((waiter, sender));
        let online = self.config.network.online();
        self.route(Input::Read {
            waiter,
            aggregate,
            online,
        });
        let answer = match receiver.try_recv() {
            Ok(Some(ok)) => Some(ok), // offline: answered at once
            Err(_) => None,
            Ok(None) => {
                let mut answer = None;
                first(
                    async { answer = receiver.await.ok() },
                    TimeoutFuture::new(self.config.request_timeout_ms.saturating_mul(2)),
                )
                .await;
                answer
            }
        };
        if answer.is_none() {
            // Timed out: not kept until some catch-up of it ends.
            self.answers.borrow_mut().retain(|(w, _)| *w != waiter);
            self.route(Input::ReadTimedOut(waiter));
        }
        self.views.read(aggregate, answer != Some(true)).await
    }
}
