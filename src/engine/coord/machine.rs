//! [`Coordinator`]: which context of a database drains, as a pure state machine.
//!
//! Every context (tab, worker) of a database runs one. Each requests the database's exclusive
//! drain lock; the one holding it is the **drainer** (it runs the drain and relays its status,
//! `synced` and `parked` notices to the others), the others are **followers** (they append, and
//! mirror what they hear, so `status()`, `flush()`, `whenSynced()` and the events behave the
//! same everywhere). When the drainer goes away the lock manager grants the next request
//! (takeover within milliseconds); a follower with pending work that hears nothing from the
//! drainer for [`STEAL_AFTER_MS`] steals the lock (the drainer is frozen or hung).
//!
//! Rules it keeps (`tests/coord_model.rs` checks them under random interleavings):
//!
//! * With Web Locks, the drain starts **only** when the current lock request is granted; a
//!   request that fails or is withdrawn never starts one (it is retried on the next tick).
//! * A context that learns its lock was taken stops draining, and drains again only after a
//!   new grant.
//! * Lock events of a request that is no longer current are ignored.
//! * Without Web Locks every context drains on its own (documented; pins stay compare-and-set).
//!
//! Events come in through [`Coordinator::handle`] with the time; effects come out of
//! [`Coordinator::poll`]. The machine does no I/O and sets no timer: the runtime calls it with
//! [`Event::Tick`] every [`HEARTBEAT_MS`].

use std::collections::VecDeque;

use super::message::Message;
use crate::engine::drain::RunEnd;
use crate::engine::model::{AggregateRef, ParkRecord};
use crate::engine::outbox::Begun;
use crate::engine::status::{Role, Status, SyncedNotice};

/// How often the drainer says it is alive (and followers check that it is).
pub const HEARTBEAT_MS: u64 = 1_000;
/// Silence after which a follower with pending work takes the drain lock over.
pub const STEAL_AFTER_MS: u64 = 10_000;

/// What happened to this context.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Event {
    /// The client opened; `locks`: whether the platform has Web Locks.
    Start {
        /// Web Locks exist here.
        locks: bool,
    },
    /// Lock request `id` was granted.
    LockGranted(u32),
    /// The lock held under request `id` was taken away (stolen).
    LockLost(u32),
    /// Lock request `id` failed or was withdrawn before it was granted.
    LockFailed(u32),
    /// The drain stopped.
    DrainStopped(RunEnd),
    /// A message from another context.
    Received(Message),
    /// The heartbeat timer; `pending`: events waiting to sync, as this context knows.
    Tick {
        /// Pending events.
        pending: u64,
    },
    /// This context appended events.
    Appended {
        /// How many.
        n: u64,
        /// When the write that stored them began.
        begun: Begun,
    },
    /// This context discarded an aggregate's parked events.
    Discarded {
        /// The aggregate.
        aggregate: AggregateRef,
        /// How many were dropped.
        removed: u32,
        /// When the write that dropped them began.
        begun: Begun,
    },
    /// This context's status changed, or its drain reported events (relayed when draining).
    Changed(Message),
    /// The client is closing (its drain has stopped).
    Close,
}

/// What the runtime must do.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Effect {
    /// Request the drain lock as request `id` (withdrawing or releasing the previous one).
    RequestLock {
        /// The request's id, echoed in its lock events.
        id: u32,
        /// Take it from its current holder at once.
        steal: bool,
    },
    /// Release the lock (or withdraw the pending request).
    ReleaseLock,
    /// Start the drain.
    StartDrain,
    /// Make the drain stop at its next step (the client stays open).
    StopDrain,
    /// Post to the other contexts.
    Post(Message),
    /// Post this context's current status to the other contexts.
    PostStatus,
    /// Change what this context shows.
    Hub(HubUpdate),
}

/// A change to this context's view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum HubUpdate {
    /// This context's role.
    Role(Role),
    /// Adopt the drainer's status.
    Mirror(Status),
    /// Events landed (the drainer settled them).
    Synced(SyncedNotice),
    /// An aggregate was parked.
    Parked(ParkRecord),
    /// Events were appended (count them; wake the drain).
    Appended {
        /// How many.
        n: u64,
        /// When this context's write began (`None`: another context's).
        begun: Option<Begun>,
    },
    /// Parked events were discarded.
    Discarded {
        /// The aggregate.
        aggregate: AggregateRef,
        /// How many.
        removed: u32,
        /// When this context's write began (`None`: another context's).
        begun: Option<Begun>,
    },
    /// A failure to show as `lastError`.
    Error(String),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Lock {
    /// No request (never made, failed, withdrawn, or lost).
    None,
    /// Requested, not granted yet.
    Pending { id: u32, steal: bool },
    /// Held.
    Held { id: u32 },
}

/// The coordination state machine of one context.
#[derive(Debug)]
pub struct Coordinator {
    locks: bool,
    lock: Lock,
    next_id: u32,
    /// This context is the drainer (its drain runs or was told to stop and has not yet).
    draining: bool,
    /// The drain is running.
    running: bool,
    /// The lock was granted again while the previous drain was still stopping.
    restart_when_stopped: bool,
    /// When this context last heard the drainer (or started waiting for the lock), ms.
    last_heard: u64,
    closed: bool,
    effects: VecDeque<Effect>,
}

impl Default for Coordinator {
    fn default() -> Self {
        Self::new()
    }
}

impl Coordinator {
    /// A coordinator before [`Event::Start`].
    pub fn new() -> Self {
        Coordinator {
            locks: false,
            lock: Lock::None,
            next_id: 0,
            draining: false,
            running: false,
            restart_when_stopped: false,
            last_heard: 0,
            closed: false,
            effects: VecDeque::new(),
        }
    }

    /// The next effect to perform, if any.
    pub fn poll(&mut self) -> Option<Effect> {
        self.effects.pop_front()
    }

    /// Whether this context is the drainer.
    #[cfg(test)]
    pub(crate) fn is_draining(&self) -> bool {
        self.draining
    }

    /// Whether this context believes it holds the drain lock.
    pub fn holds_lock(&self) -> bool {
        matches!(self.lock, Lock::Held { .. })
    }

    fn emit(&mut self, effect: Effect) {
        self.effects.push_back(effect);
    }

    fn hub(&mut self, update: HubUpdate) {
        self.emit(Effect::Hub(update));
    }

    /// Handles what happened at `now` (Unix ms).
    pub fn handle(&mut self, event: Event, now: u64) {
        if self.closed {
            return;
        }
        match event {
            Event::Start { locks } => {
                self.locks = locks;
                self.last_heard = now;
                self.hub(HubUpdate::Role(Role::Follower));
                self.emit(Effect::Post(Message::Hello));
                if locks {
                    self.request(false, now);
                } else {
                    // Without Web Locks every context drains on its own (documented).
                    self.start_drain();
                }
            }
            Event::LockGranted(id) => {
                if self.lock != (Lock::Pending { id, steal: false })
                    && self.lock != (Lock::Pending { id, steal: true })
                {
                    return; // a request that is no longer current
                }
                self.lock = Lock::Held { id };
                self.start_drain();
            }
            Event::LockLost(id) => {
                if self.lock != (Lock::Held { id }) {
                    return;
                }
                self.lock = Lock::None;
                if self.draining {
                    self.hub(HubUpdate::Error(
                        "another context took over draining".into(),
                    ));
                    self.emit(Effect::StopDrain);
                }
            }
            Event::LockFailed(id) => {
                if matches!(self.lock, Lock::Pending { id: current, .. } if current == id) {
                    // Never drain without the lock; ask again on the next tick.
                    self.lock = Lock::None;
                }
            }
            Event::DrainStopped(end) => {
                self.running = false;
                if end == RunEnd::Superseded {
                    self.draining = false;
                    self.hub(HubUpdate::Role(Role::Follower));
                    if self.holds_lock() && self.restart_when_stopped {
                        // Granted again while the old drain was still stopping.
                        self.restart_when_stopped = false;
                        self.start_drain();
                    } else if self.locks {
                        // Superseded while holding the lock (another context changed the pin):
                        // queue again behind whoever drains now.
                        self.request(false, now);
                    }
                }
            }
            Event::Received(message) => self.received(message, now),
            Event::Tick { pending } => self.tick(pending, now),
            Event::Appended { n, begun } => {
                self.hub(HubUpdate::Appended {
                    n,
                    begun: Some(begun),
                });
                if !self.draining {
                    self.emit(Effect::Post(Message::Appended { n }));
                }
            }
            Event::Discarded {
                aggregate,
                removed,
                begun,
            } => {
                self.hub(HubUpdate::Discarded {
                    aggregate,
                    removed,
                    begun: Some(begun),
                });
                self.emit(Effect::Post(Message::Discarded { aggregate, removed }));
            }
            Event::Changed(message) => {
                if self.draining {
                    self.emit(Effect::Post(message));
                }
            }
            Event::Close => {
                self.closed = true;
                self.draining = false;
                if self.locks {
                    self.lock = Lock::None;
                    self.emit(Effect::ReleaseLock);
                }
            }
        }
    }

    fn received(&mut self, message: Message, now: u64) {
        let draining = self.draining;
        match message {
            Message::Status(status) if !draining => {
                self.last_heard = now;
                self.hub(HubUpdate::Mirror(status));
            }
            Message::Synced(notice) if !draining => self.hub(HubUpdate::Synced(notice)),
            Message::Parked(record) if !draining => self.hub(HubUpdate::Parked(record)),
            Message::Appended { n } if draining => self.hub(HubUpdate::Appended { n, begun: None }),
            Message::Discarded { aggregate, removed } => self.hub(HubUpdate::Discarded {
                aggregate,
                removed,
                begun: None,
            }),
            Message::Heartbeat => self.last_heard = now,
            Message::Hello if draining => self.emit(Effect::PostStatus),
            _ => {}
        }
    }

    fn tick(&mut self, pending: u64, now: u64) {
        if self.draining {
            // A drain told to stop (the lock was taken) says nothing until it has stopped.
            if self.holds_lock() || !self.locks {
                self.emit(Effect::Post(Message::Heartbeat));
            }
            return;
        }
        if !self.locks {
            return;
        }
        match self.lock {
            // A failed or lost request: ask again.
            Lock::None => self.request(false, now),
            // The drainer is silent (frozen, hung) and work is waiting: take over.
            Lock::Pending { steal: false, .. }
                if pending > 0 && now.saturating_sub(self.last_heard) > STEAL_AFTER_MS =>
            {
                self.request(true, now)
            }
            _ => {}
        }
    }

    fn request(&mut self, steal: bool, now: u64) {
        self.next_id = self.next_id.wrapping_add(1);
        let id = self.next_id;
        self.lock = Lock::Pending { id, steal };
        self.last_heard = now;
        self.emit(Effect::RequestLock { id, steal });
    }

    fn start_drain(&mut self) {
        if self.running {
            // The previous drain is still stopping: start again once it has.
            self.restart_when_stopped = true;
            return;
        }
        self.running = true;
        self.draining = true;
        self.hub(HubUpdate::Role(Role::Drainer));
        self.emit(Effect::StartDrain);
        self.emit(Effect::PostStatus);
    }
}

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;
