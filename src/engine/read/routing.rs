//! [`Routing`]: where the read side's work goes between the contexts (tabs, workers) of a
//! device, and who among this context's `read`s is answered — as a pure state machine.
//!
//! Only the draining context runs the [`Reader`](super::machine::Reader) (one change stream per
//! device, one catch-up at a time), so every other context's subscriptions and catch-ups must
//! reach it over the channel, and every context's `read` must hear when its catch-up ended,
//! whoever did it. These decisions were made inline by the browser runtime; here they are plain
//! Rust, tested natively, and the runtime (`browser/runtime/reads.rs`) only performs them:
//!
//! * the context holding the reader merges every context's subscriptions ([`Subscriptions`])
//!   and feeds the reader what changes the union, and the catch-ups asked anywhere;
//! * the others post what they watch and the catch-ups their `read`s need, and answer a new
//!   drainer's [`ReadMessage::WhoWatches`] with their list and their waiting reads again;
//! * a `read` asks under a [`ReadTag`] (this context's id and its waiter id) and waits until
//!   a catch-up that names the tag ends, here or elsewhere, or until it times out (the
//!   runtime's timer: [`Input::ReadTimedOut`]). The reader names a read only in the end of a
//!   catch-up whose page request began after the read asked, so its view holds at least what
//!   the server had when it asked; a catch-up that names no tag (a stream's, a landed
//!   batch's, one already under way when the read asked) answers no read.
//!
//! Inputs come in through [`Routing::handle`]; actions come out of [`Routing::poll`], in the
//! order they must be performed (posts on the channel keep that order).

use std::collections::VecDeque;

use super::machine::Input as ReadInput;
use super::message::{ReadMessage, ReadTag};
use super::subscriptions::Subscriptions;
use crate::engine::model::AggregateRef;
use crate::engine::sorted::SortedSet;

/// What the reader tells the rest of the runtime.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReaderNews {
    /// The aggregate's local log moved.
    LogChanged(AggregateRef),
    /// A catch-up of the aggregate ended (the reader's
    /// [`Action::CaughtUp`](super::machine::Action::CaughtUp)).
    CaughtUp {
        /// The aggregate.
        aggregate: AggregateRef,
        /// `true`: it reached the server's tip.
        ok: bool,
        /// The `read`s it answers, of any context.
        reads: Vec<ReadTag>,
    },
}

/// What happened to this context's read side.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// This context began draining and holds a new reader (any previous one is stopped).
    ReaderStarted,
    /// This context's reader stopped (its drain ended).
    ReaderStopped,
    /// A read-side message from another context.
    Message(ReadMessage),
    /// This context's subscriptions, with how many listeners each (told on every change).
    WatchChanged(Vec<(AggregateRef, u32)>),
    /// A `read` of `aggregate` asks for a catch-up; `online`: the client may reach the network.
    Read {
        /// The runtime's id of this `read` (its answer is keyed by it).
        waiter: u64,
        /// The aggregate read.
        aggregate: AggregateRef,
        /// Whether a catch-up can be tried at all.
        online: bool,
    },
    /// The `read` `waiter` stopped waiting (its timeout).
    ReadTimedOut(u64),
    /// What a reader reported (this context's, current or stopped).
    ReaderNews(ReaderNews),
    /// The aggregate's pending events changed in this context.
    Touched(AggregateRef),
    /// The client is closing (its reader, if any, is stopped).
    Close,
}

/// What the runtime must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Hand this to this context's reader.
    Feed(ReadInput),
    /// Post this to the other contexts.
    Post(ReadMessage),
    /// Rebuild this context's views of the aggregate (if any listen to it).
    RefreshViews(AggregateRef),
    /// The `read` `waiter` is done waiting: `ok` when its catch-up reached the server's tip.
    Answer {
        /// The runtime's id of the `read`.
        waiter: u64,
        /// Whether it reached the tip.
        ok: bool,
    },
}

/// The read-side routing of one context.
#[derive(Debug)]
pub struct Routing {
    /// This context's random id among the device's contexts.
    context: u64,
    /// This context holds the reader (it drains).
    reading: bool,
    /// Every context's subscriptions (kept only while `reading`).
    merged: Subscriptions,
    /// This context's own subscriptions.
    watched: Vec<(AggregateRef, u32)>,
    /// The `read`s waiting for a catch-up, as (waiter, aggregate), in the order they asked
    /// (the order they are asked again in).
    waiting: Vec<(u64, AggregateRef)>,
    /// The aggregates this context's reader has caught up since it started: the first
    /// catch-up of each is announced as a log change (see [`Input::ReaderNews`]).
    announced: SortedSet<AggregateRef>,
    actions: VecDeque<Action>,
}

impl Routing {
    /// The routing of context `context`, which does not hold a reader yet.
    pub fn new(context: u64) -> Self {
        Routing {
            context,
            reading: false,
            merged: Subscriptions::default(),
            watched: Vec::new(),
            waiting: Vec::new(),
            announced: SortedSet::default(),
            actions: VecDeque::new(),
        }
    }

    /// The next action to perform, if any.
    pub fn poll(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    fn emit(&mut self, action: Action) {
        self.actions.push_back(action);
    }

    fn post(&mut self, message: ReadMessage) {
        self.emit(Action::Post(message));
    }

    /// This context's subscriptions, as the other contexts are told them.
    fn watch(&self) -> ReadMessage {
        ReadMessage::Watch {
            context: self.context,
            list: self.watched.clone(),
        }
    }

    /// Context `context` subscribes to `list` now: the reader hears what that changes.
    fn merge(&mut self, context: u64, list: &[(AggregateRef, u32)]) {
        for input in self.merged.replace(context, list) {
            self.emit(Action::Feed(input));
        }
    }

    /// This context's waiting reads, with their tags, in the order they asked.
    fn waiting(&self) -> Vec<(AggregateRef, ReadTag)> {
        (self.waiting.iter())
            .map(|(waiter, a)| (*a, self.tag(*waiter)))
            .collect()
    }

    /// The tag of this context's read `waiter`.
    fn tag(&self, waiter: u64) -> ReadTag {
        ReadTag {
            context: self.context,
            waiter,
        }
    }

    /// A catch-up of `aggregate` ended: the reads of it waiting here that it names are
    /// answered (the others wait for a catch-up that began after they asked).
    fn caught_up(&mut self, aggregate: AggregateRef, ok: bool, reads: Option<&[ReadTag]>) {
        let context = self.context;
        // `None`: an older release's drainer, which names no read; every read of the
        // aggregate is answered, as that release's own contexts answer theirs.
        let named = |waiter: u64, a: AggregateRef| {
            a == aggregate && reads.is_none_or(|r| r.contains(&ReadTag { context, waiter }))
        };
        let (done, rest) = std::mem::take(&mut self.waiting)
            .into_iter()
            .partition::<Vec<_>, _>(|(w, a)| named(*w, *a));
        self.waiting = rest;
        for (waiter, _) in done {
            self.emit(Action::Answer { waiter, ok });
        }
    }

    /// Handles what happened.
    pub fn handle(&mut self, input: Input) {
        match input {
            Input::ReaderStarted => {
                self.reading = true;
                self.merged = Subscriptions::default();
                self.announced = SortedSet::default();
                let watched = self.watched.clone();
                self.merge(self.context, &watched);
                // Reads of this context that asked before it drained (their catch-up went to
                // the channel, and there was nobody to hear it).
                for (aggregate, tag) in self.waiting() {
                    self.emit(Action::Feed(ReadInput::Read(aggregate, tag)));
                }
                // The other contexts say what they watch (and ask again for their waiting reads).
                self.post(ReadMessage::WhoWatches);
            }
            Input::ReaderStopped => {
                self.reading = false;
                self.merged = Subscriptions::default();
                self.announced = SortedSet::default();
                // Its waiting reads were fed to the reader that stopped, and their tags went
                // with it: asked again of whoever drains now (a context whose lock was taken
                // heard the new drainer's `WhoWatches` while it still read, and answered only
                // its list). The drainer keeps each tag once.
                for (aggregate, tag) in self.waiting() {
                    self.post(ReadMessage::CatchUp {
                        aggregate,
                        read: Some(tag),
                    });
                }
            }
            Input::Message(message) => self.received(message),
            Input::WatchChanged(list) => {
                // Both lists come from the views' sorted map, in key order: one pass (a second
                // listener on each of 3,000 aggregates must not cost n² comparisons each).
                let same = list
                    .iter()
                    .map(|(a, _)| a)
                    .eq(self.watched.iter().map(|(b, _)| b));
                self.watched = list;
                // Only the first listener of an aggregate and the last change what is watched;
                // the counts alone are told when asked.
                if same {
                    return;
                }
                if self.reading {
                    let watched = self.watched.clone();
                    self.merge(self.context, &watched);
                } else {
                    self.post(self.watch());
                }
            }
            Input::Read {
                waiter,
                aggregate,
                online,
            } => {
                if !online {
                    // Offline: the view comes from the local log alone, at once.
                    self.emit(Action::Answer { waiter, ok: false });
                    return;
                }
                self.waiting.push((waiter, aggregate));
                let tag = self.tag(waiter);
                if self.reading {
                    self.emit(Action::Feed(ReadInput::Read(aggregate, tag)));
                } else {
                    self.post(ReadMessage::CatchUp {
                        aggregate,
                        read: Some(tag),
                    });
                }
            }
            // Not kept until some catch-up of it ends.
            Input::ReadTimedOut(waiter) => self.waiting.retain(|(w, _)| *w != waiter),
            Input::ReaderNews(ReaderNews::LogChanged(aggregate)) => {
                // Told already: its first catch-up need not be announced again.
                if self.reading {
                    self.announced.insert(aggregate);
                }
                self.emit(Action::RefreshViews(aggregate));
                self.post(ReadMessage::LogChanged(aggregate));
            }
            Input::ReaderNews(ReaderNews::CaughtUp {
                aggregate,
                ok,
                mut reads,
            }) => {
                // A reader's first catch-up of a watched aggregate refreshes every context's
                // views: the previous drainer's last page store may have committed after it
                // closed, its news told to nobody, and this catch-up then finds the cursor at
                // the tip and stores nothing (found by tests/read_model_contexts.rs). Watched
                // only: a `read` builds its view after its catch-up anyway. At most one
                // aggregate is at risk (the reader stores one page at a time), so each is
                // announced once per reader, and not again once it was told.
                if self.reading
                    && self.merged.watched(&aggregate)
                    && self.announced.insert(aggregate)
                {
                    self.emit(Action::RefreshViews(aggregate));
                    self.post(ReadMessage::LogChanged(aggregate));
                }
                // This context's reads are answered here; the others' are named to them. Posted
                // also when it names none: a context of an older release answers its reads by
                // the aggregate alone.
                self.caught_up(aggregate, ok, Some(&reads));
                let me = self.context;
                reads.retain(|tag| tag.context != me);
                self.post(ReadMessage::CaughtUp {
                    aggregate,
                    ok,
                    reads: Some(reads),
                });
            }
            Input::Touched(aggregate) => {
                self.emit(Action::RefreshViews(aggregate));
                self.post(ReadMessage::Touched(aggregate));
            }
            Input::Close => {
                self.reading = false;
                self.merged = Subscriptions::default();
                self.announced = SortedSet::default();
                // Goodbye to the drainer: this context watches nothing any more.
                self.post(ReadMessage::Watch {
                    context: self.context,
                    list: Vec::new(),
                });
                for (waiter, _) in std::mem::take(&mut self.waiting) {
                    self.emit(Action::Answer { waiter, ok: false });
                }
            }
        }
    }

    fn received(&mut self, message: ReadMessage) {
        match message {
            ReadMessage::Watch { context, list } => {
                if self.reading {
                    self.merge(context, &list);
                }
            }
            ReadMessage::WhoWatches => {
                self.post(self.watch());
                for (aggregate, tag) in self.waiting() {
                    self.post(ReadMessage::CatchUp {
                        aggregate,
                        read: Some(tag),
                    });
                }
            }
            ReadMessage::CatchUp { aggregate, read } => {
                if self.reading {
                    self.emit(Action::Feed(match read {
                        Some(tag) => ReadInput::Read(aggregate, tag),
                        // An older release's `read`: caught up untagged; the `CaughtUp` posted
                        // at its end answers it there (that release answers by aggregate).
                        None => ReadInput::CatchUp(aggregate),
                    }));
                }
            }
            ReadMessage::CaughtUp {
                aggregate,
                ok,
                reads,
            } => self.caught_up(aggregate, ok, reads.as_deref()),
            ReadMessage::LogChanged(aggregate) | ReadMessage::Touched(aggregate) => {
                self.emit(Action::RefreshViews(aggregate))
            }
        }
    }
}

#[cfg(test)]
#[path = "routing_tests.rs"]
mod tests;
