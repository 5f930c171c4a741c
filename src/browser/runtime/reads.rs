//! The read side's routing between contexts: the draining context runs the reader (the change
//! stream and the catch-ups) for every context's subscriptions; the others send what they watch
//! and ask for catch-ups over the channel; `read` waits for a catch-up (whoever does it) or a
//! timeout. Decisions are the engine's ([`Subscriptions`], the read machine); this file only
//! routes.

use std::rc::Rc;

use futures_channel::oneshot;
use gloo_timers::future::TimeoutFuture;
use wasm_bindgen::JsValue;

use super::super::reader::{ReaderConfig, ReaderNews, ReaderRuntime};
use super::Runtime;
use crate::engine::coord::Message;
use crate::engine::model::AggregateRef;
use crate::engine::outbox::StoreError;
use crate::engine::read::log::LocalLog;
use crate::engine::read::machine::Input as ReadInput;
use crate::engine::read::message::ReadMessage;
use crate::engine::read::subscriptions::Subscriptions;
use crate::engine::signal::first;

impl Runtime {
    /// The draining context also holds the change stream and does the catch-ups.
    pub(super) fn start_reader(self: &Rc<Self>) {
        let weak = Rc::downgrade(self);
        let news = Box::new(move |news: ReaderNews| {
            let Some(runtime) = weak.upgrade() else {
                return;
            };
            match news {
                ReaderNews::LogChanged(aggregate) => {
                    runtime.views.changed(aggregate);
                    runtime.post(&Message::Read(ReadMessage::LogChanged(aggregate)));
                }
                ReaderNews::CaughtUp(aggregate, ok) => {
                    runtime.caught_up(aggregate, ok);
                    runtime.post(&Message::Read(ReadMessage::CaughtUp { aggregate, ok }));
                }
            }
        });
        let reader = ReaderRuntime::start(
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
        if let Some(old) = self.reader.borrow_mut().replace(reader.clone()) {
            old.stop();
        }
        let inputs = {
            let mut subscriptions = self.subscriptions.borrow_mut();
            *subscriptions = Subscriptions::default();
            subscriptions.replace(self.context, &self.views.watched())
        };
        for input in inputs {
            reader.feed(input);
        }
        // `read`s of this context that asked before it drained (their catch-up went to the
        // channel, and there was nobody to hear it).
        let waiting: Vec<AggregateRef> = self.waiters.borrow().iter().map(|(a, _)| *a).collect();
        for aggregate in waiting {
            reader.feed(ReadInput::CatchUp(aggregate));
        }
        // The other contexts say what they watch (and ask again for their waiting reads).
        self.post(&Message::Read(ReadMessage::WhoWatches));
    }

    /// A read-side message from another context.
    pub(super) fn read_message(self: &Rc<Self>, message: ReadMessage) {
        let reader = self.reader.borrow().clone();
        match message {
            ReadMessage::Watch { context, list } => {
                if let Some(reader) = reader {
                    let inputs = self.subscriptions.borrow_mut().replace(context, &list);
                    for input in inputs {
                        reader.feed(input);
                    }
                }
            }
            ReadMessage::WhoWatches => {
                self.post(&Message::Read(ReadMessage::Watch {
                    context: self.context,
                    list: self.views.watched(),
                }));
                let waiting: Vec<AggregateRef> =
                    self.waiters.borrow().iter().map(|(a, _)| *a).collect();
                for aggregate in waiting {
                    self.post(&Message::Read(ReadMessage::CatchUp(aggregate)));
                }
            }
            ReadMessage::CatchUp(aggregate) => {
                if let Some(reader) = reader {
                    reader.feed(ReadInput::CatchUp(aggregate));
                }
            }
            ReadMessage::CaughtUp { aggregate, ok } => self.caught_up(aggregate, ok),
            ReadMessage::LogChanged(aggregate) | ReadMessage::Touched(aggregate) => {
                self.views.changed(aggregate)
            }
        }
    }

    /// This context's subscriptions changed: tell whoever holds the stream.
    pub(crate) fn watch_changed(self: &Rc<Self>) {
        let list = self.views.watched();
        let reader = self.reader.borrow().clone();
        match reader {
            Some(reader) => {
                let inputs = self.subscriptions.borrow_mut().replace(self.context, &list);
                for input in inputs {
                    reader.feed(input);
                }
            }
            None => self.post(&Message::Read(ReadMessage::Watch {
                context: self.context,
                list,
            })),
        }
    }

    /// The aggregate has a local log now: the drainer's reader follows its landed batches.
    pub(crate) fn logged(&self, aggregate: AggregateRef) {
        if let Some(reader) = self.reader.borrow().as_ref() {
            reader.note_logged(aggregate);
        }
    }

    /// The aggregate's pending events changed here: refresh views, here and elsewhere.
    pub(super) fn touched(self: &Rc<Self>, aggregate: AggregateRef) {
        self.views.changed(aggregate);
        self.post(&Message::Read(ReadMessage::Touched(aggregate)));
    }

    pub(super) fn caught_up(&self, aggregate: AggregateRef, ok: bool) {
        let waiting = std::mem::take(&mut *self.waiters.borrow_mut());
        let (done, rest): (Vec<_>, Vec<_>) =
            waiting.into_iter().partition(|(a, _)| *a == aggregate);
        *self.waiters.borrow_mut() = rest;
        for (_, sender) in done {
            let _ = sender.send(ok);
        }
    }

    /// The aggregate's view now: caught up first when online (by whichever context drains),
    /// from the local log alone when offline or when the catch-up fails or takes too long.
    pub(crate) async fn read(
        self: &Rc<Self>,
        aggregate: AggregateRef,
    ) -> Result<JsValue, StoreError> {
        self.outbox.ensure_cursor(aggregate).await?;
        self.logged(aggregate);
        let mut ok = false;
        if self.config.network.online() {
            let (sender, receiver) = oneshot::channel();
            self.waiters.borrow_mut().push((aggregate, sender));
            let reader = self.reader.borrow().clone();
            match reader {
                Some(reader) => reader.feed(ReadInput::CatchUp(aggregate)),
                None => self.post(&Message::Read(ReadMessage::CatchUp(aggregate))),
            }
            let mut answer = None;
            first(
                async { answer = receiver.await.ok() },
                TimeoutFuture::new(self.config.request_timeout_ms.saturating_mul(2)),
            )
            .await;
            ok = answer == Some(true);
            // A waiter that timed out is not kept until some catch-up of it ends.
            self.waiters.borrow_mut().retain(|(_, s)| !s.is_canceled());
        }
        self.views.read(aggregate, !ok).await
    }
}
