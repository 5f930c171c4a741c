//! What the app sees of the outbox, and the hub the drain loop and the API share.
//!
//! The [`Hub`] holds the current [`Status`], the set of parked aggregates and the [`Signal`]s
//! that wake the loop. Every change goes through it, so `status()` is always current and every
//! change is reported to the [`Observer`] (the browser layer turns those into DOM events).
//! Observer calls are made with no borrow held, so a listener may call back into the client.

use std::cell::{Cell, RefCell};

use uuid::Uuid;

use super::model::{AggregateRef, ParkRecord};
use super::outbox::{Begun, Counted};
use super::read::machine::ReadState;
use super::signal::Signal;
use super::sorted::SortedMap;

/// The drain loop's state.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SyncState {
    /// Nothing to send (or only parked events).
    Idle,
    /// A request is in flight.
    Syncing,
    /// Waiting before a resend.
    Backoff,
    /// The platform reports no network; probing slowly.
    Offline,
    /// Idle, but some aggregates are parked and wait for the app.
    Parked,
    /// The gateway refused a session (or could not be asked for one); the events wait.
    Unauthorized,
    /// The session the app's `auth` callback led to acts for another user than the one this
    /// outbox is bound to: nothing is sent under it; the events wait for their own user (or
    /// for `signOut({ discardPending: true })`).
    WrongUser,
    /// The client was closed.
    Closed,
}

impl SyncState {
    /// The state's name as the JS API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            SyncState::Idle => "idle",
            SyncState::Syncing => "syncing",
            SyncState::Backoff => "backoff",
            SyncState::Offline => "offline",
            SyncState::Parked => "parked",
            SyncState::Unauthorized => "unauthorized",
            SyncState::WrongUser => "wrongUser",
            SyncState::Closed => "closed",
        }
    }
}

/// Whether this context runs the drain loop (one per device) or mirrors it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Role {
    /// This context drains the outbox.
    Drainer,
    /// Another context drains; this one appends and mirrors its status.
    Follower,
}

impl Role {
    /// The role's name as the JS API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Drainer => "drainer",
            Role::Follower => "follower",
        }
    }
}

/// The most recent failure, kept until the next success.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LastError {
    /// The protocol code, when the gateway gave one.
    pub code: Option<u32>,
    /// What happened.
    pub message: String,
    /// Unix milliseconds.
    pub at: u64,
}

/// A snapshot of the outbox.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Status {
    /// The loop's state.
    pub state: SyncState,
    /// Events waiting to be synced (not counting parked ones).
    pub pending: u64,
    /// Events parked after a permanent rejection.
    pub parked: u64,
    /// The most recent failure since the last success.
    pub last_error: Option<LastError>,
    /// Whether this context drains.
    pub role: Role,
    /// The read side's state (the drainer's, mirrored in every context).
    pub read: ReadState,
    /// Aggregates the gateway refused to watch (`ready.refused` of the change stream, the
    /// drainer's, mirrored): the view of each stays as the local log has it.
    pub read_refused: Vec<Refused>,
}

/// An aggregate the gateway refused in a change stream, with its code (40302: someone else's
/// aggregate this user may not read).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Refused {
    /// The aggregate.
    pub aggregate: AggregateRef,
    /// The gateway's code.
    pub code: u32,
}

/// Events that landed, reported once they are settled locally.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SyncedNotice {
    /// The aggregate.
    pub aggregate: AggregateRef,
    /// Lowest sequence settled.
    pub first_seq: u64,
    /// Highest sequence settled.
    pub last_seq: u64,
    /// The settled events' ids, in sequence order.
    pub event_ids: Vec<Uuid>,
    /// The server answered 2002 (an earlier attempt had landed).
    pub duplicate: bool,
}

/// Receives every change.
pub trait Observer {
    /// The status changed.
    fn status(&self, status: &Status);
    /// Events landed.
    fn synced(&self, notice: &SyncedNotice);
    /// An aggregate was parked.
    fn parked(&self, record: &ParkRecord);
}

#[derive(Debug, Clone, Default)]
struct Counts {
    /// Every event in the outbox, parked ones included.
    total: u64,
    /// Parked aggregates and their parked event counts.
    parked: SortedMap<AggregateRef, ParkRecord>,
    /// This context's writes that began before this are in `total` and `parked` (the last
    /// recount saw them): when one of them reports in later, it is not counted again.
    counted_before: Begun,
    /// While a recount is out: this context's writes that reported in meanwhile. Those the
    /// recount did not see are applied again on top of what it read.
    recounting: Option<Vec<(Begun, Change)>>,
}

/// A change to the counts made by a write of this context.
#[derive(Debug, Clone, Copy)]
enum Change {
    Appended(u64),
    Discarded(AggregateRef, u32),
}

impl Counts {
    /// Applies a change; `begun` is when its write began (`None`: another context's, which no
    /// recount can place, so it always counts, until the next recount reads the truth).
    fn apply(&mut self, change: Change, begun: Option<Begun>) {
        if let Some(begun) = begun {
            if begun < self.counted_before {
                return; // the last recount saw it
            }
            if let Some(recounting) = &mut self.recounting {
                recounting.push((begun, change));
            }
        }
        match change {
            Change::Appended(n) => self.total += n,
            Change::Discarded(aggregate, removed) => {
                self.parked.remove(&aggregate);
                self.total = self.total.saturating_sub(u64::from(removed));
            }
        }
    }
}

/// The state shared by the drain loop and the API.
pub struct Hub {
    observer: Box<dyn Observer>,
    state: Cell<SyncState>,
    role: Cell<Role>,
    read: Cell<ReadState>,
    read_refused: RefCell<Vec<Refused>>,
    /// Aggregates whose local log moved, for the drain to prune what it now holds.
    logged: RefCell<Vec<AggregateRef>>,
    last_error: RefCell<Option<LastError>>,
    counts: RefCell<Counts>,
    closed: Cell<bool>,
    superseded: Cell<bool>,
    /// New work: an append, a discard.
    pub work: Signal,
    /// The network may be back (`online`).
    pub network: Signal,
    /// Events were settled, parked or discarded (for `flush`).
    pub progress: Signal,
    /// The client is closing.
    pub closing: Signal,
    /// The drain loop has stopped.
    pub stopped: Signal,
    /// An aggregate's local log moved (see [`Hub::logged`]).
    pub log: Signal,
}

impl Hub {
    /// A hub reporting to `observer`.
    pub fn new(observer: Box<dyn Observer>) -> Self {
        Hub {
            observer,
            state: Cell::new(SyncState::Idle),
            role: Cell::new(Role::Drainer),
            read: Cell::new(ReadState::Idle),
            read_refused: RefCell::default(),
            logged: RefCell::default(),
            last_error: RefCell::new(None),
            counts: RefCell::new(Counts::default()),
            closed: Cell::new(false),
            superseded: Cell::new(false),
            work: Signal::default(),
            network: Signal::default(),
            progress: Signal::default(),
            closing: Signal::default(),
            stopped: Signal::default(),
            log: Signal::default(),
        }
    }

    /// The current status.
    pub fn status(&self) -> Status {
        let counts = self.counts.borrow();
        let parked: u64 = counts.parked.values().map(|r| u64::from(r.count)).sum();
        Status {
            state: self.state.get(),
            pending: counts.total.saturating_sub(parked),
            parked,
            last_error: self.last_error.borrow().clone(),
            role: self.role.get(),
            read: self.read.get(),
            read_refused: self.read_refused.borrow().clone(),
        }
    }

    /// Sets the aggregates the change stream's gateway refused (reported only when it changed).
    pub fn set_read_refused(&self, refused: Vec<Refused>) {
        if *self.read_refused.borrow() == refused {
            return;
        }
        let before = self.status();
        *self.read_refused.borrow_mut() = refused;
        self.changed(before);
    }

    /// Sets the read side's state.
    pub fn set_read(&self, state: ReadState) {
        let before = self.status();
        self.read.set(state);
        self.changed(before);
    }

    /// The local log of `aggregate` moved: landed events it now holds may be pruned.
    pub fn logged(&self, aggregate: AggregateRef) {
        let mut logged = self.logged.borrow_mut();
        if !logged.contains(&aggregate) {
            logged.push(aggregate);
        }
        drop(logged);
        self.log.notify();
    }

    /// The aggregates whose log moved since the last call.
    pub(crate) fn take_logged(&self) -> Vec<AggregateRef> {
        std::mem::take(&mut self.logged.borrow_mut())
    }

    /// Sets whether this context drains.
    pub fn set_role(&self, role: Role) {
        let before = self.status();
        self.role.set(role);
        self.changed(before);
    }

    /// A follower adopts the drainer's status (state, counts, last error).
    pub fn mirror(&self, status: &Status) {
        let before = self.status();
        if !self.closed.get() {
            self.state.set(status.state);
        }
        self.read.set(status.read);
        *self.read_refused.borrow_mut() = status.read_refused.clone();
        *self.last_error.borrow_mut() = status.last_error.clone();
        {
            let mut counts = self.counts.borrow_mut();
            let parked: u64 = counts.parked.values().map(|r| u64::from(r.count)).sum();
            // Parked events are counted from the records this context knows; the rest is pending.
            counts.total = status.pending + parked.max(status.parked);
        }
        self.changed(before);
    }

    /// A follower learns that events landed (the drainer settled them).
    pub fn remote_synced(&self, notice: &SyncedNotice) {
        self.observer.synced(notice);
        self.progress.notify();
    }

    /// A follower learns that an aggregate was parked.
    pub fn remote_parked(&self, record: ParkRecord) {
        let before = self.status();
        self.counts
            .borrow_mut()
            .parked
            .insert(record.aggregate, record.clone());
        self.changed(before);
        self.observer.parked(&record);
        self.progress.notify();
    }

    fn changed(&self, before: Status) {
        let after = self.status();
        if after != before {
            self.observer.status(&after);
        }
    }

    /// Sets the loop's state.
    pub fn set_state(&self, state: SyncState) {
        let before = self.status();
        if !self.closed.get() || state == SyncState::Closed {
            self.state.set(state);
        }
        self.changed(before);
    }

    /// Idle, or parked when some aggregate is.
    pub(crate) fn set_idle(&self) {
        let parked = !self.counts.borrow().parked.is_empty();
        self.set_state(if parked {
            SyncState::Parked
        } else {
            SyncState::Idle
        });
    }

    /// Records a failure.
    pub fn set_error(&self, code: Option<u32>, message: String, at: u64) {
        let before = self.status();
        *self.last_error.borrow_mut() = Some(LastError { code, message, at });
        self.changed(before);
    }

    /// A recount is about to read storage ([`Hub::reset_counts`] or [`Hub::recount_failed`]
    /// follows): from now on, this context's writes that report in are remembered.
    pub fn recount_begins(&self) {
        let mut counts = self.counts.borrow_mut();
        debug_assert!(counts.recounting.is_none(), "one recount at a time");
        counts.recounting = Some(Vec::new());
    }

    /// The recount failed, or was dropped with the drain's run: the counts stay as they were.
    pub fn recount_failed(&self) {
        self.counts.borrow_mut().recounting = None;
    }

    /// Replaces the counts with ones read from storage. Appends and discards of this context
    /// may have overlapped the read: those it saw and that report in later are not counted
    /// again, and those it did not see but that reported in before it are applied again — the
    /// counts are exact whatever the order in which the writes and the read finish.
    pub fn reset_counts(&self, counted: Counted) {
        let before = self.status();
        {
            let mut counts = self.counts.borrow_mut();
            let meanwhile = counts.recounting.take().unwrap_or_default();
            counts.total = counted.events;
            counts.parked = counted
                .parked
                .into_iter()
                .map(|r| (r.aggregate, r))
                .collect();
            counts.counted_before = counts.counted_before.max(counted.before);
            for (begun, change) in meanwhile {
                counts.apply(change, Some(begun));
            }
        }
        self.changed(before);
    }

    /// `n` events were appended, by a write of this context that began at `begun`, or by
    /// another context (`None`).
    pub fn appended(&self, n: u64, begun: Option<Begun>) {
        let before = self.status();
        self.counts.borrow_mut().apply(Change::Appended(n), begun);
        self.changed(before);
        self.work.notify();
    }

    /// Events landed and `removed` of them left the outbox.
    pub fn synced(&self, notice: SyncedNotice, removed: u32) {
        let before = self.status();
        {
            let mut counts = self.counts.borrow_mut();
            counts.total = counts.total.saturating_sub(u64::from(removed));
        }
        *self.last_error.borrow_mut() = None;
        self.changed(before);
        self.observer.synced(&notice);
        self.progress.notify();
    }

    /// An aggregate was parked.
    pub fn parked(&self, record: ParkRecord) {
        let before = self.status();
        let message = record.message.clone();
        self.counts
            .borrow_mut()
            .parked
            .insert(record.aggregate, record.clone());
        *self.last_error.borrow_mut() = Some(LastError {
            code: Some(record.code),
            message,
            at: record.parked_at,
        });
        self.changed(before);
        self.observer.parked(&record);
        self.progress.notify();
    }

    /// The app discarded an aggregate's parked events (`removed` left the outbox), in a write
    /// of this context that began at `begun`, or in another context (`None`).
    pub fn discarded(&self, aggregate: &AggregateRef, removed: u32, begun: Option<Begun>) {
        let before = self.status();
        self.counts
            .borrow_mut()
            .apply(Change::Discarded(*aggregate, removed), begun);
        if self.state.get() == SyncState::Parked {
            self.set_idle();
        }
        self.changed(before);
        self.progress.notify();
        self.work.notify();
    }

    /// Whether `aggregate` is parked, and why.
    pub(crate) fn park_record(&self, aggregate: &AggregateRef) -> Option<ParkRecord> {
        self.counts.borrow().parked.get(aggregate).cloned()
    }

    /// Every parked aggregate, in order.
    pub(crate) fn parked_aggregates(&self) -> Vec<AggregateRef> {
        self.counts.borrow().parked.keys().copied().collect()
    }

    /// Starts closing: the loop stops at its next step, waiters are released.
    pub fn close(&self) {
        self.closed.set(true);
        self.closing.notify();
        self.progress.notify();
    }

    /// Whether `close` was called.
    pub fn is_closed(&self) -> bool {
        self.closed.get()
    }

    /// Another context drains now: the loop stops at its next step (the client stays open).
    pub fn supersede(&self) {
        self.superseded.set(true);
        self.closing.notify();
    }

    /// Whether the loop was told to stop because another context drains.
    pub(crate) fn is_superseded(&self) -> bool {
        self.superseded.get()
    }

    /// This context drains (again).
    pub fn resume(&self) {
        self.superseded.set(false);
    }
}

#[cfg(test)]
#[path = "status_tests.rs"]
mod tests;
