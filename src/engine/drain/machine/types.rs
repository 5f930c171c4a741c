//! What the drain machine is given and what it gives back: its [`Policy`], the moment ([`Now`]),
//! what just happened ([`Input`]), what to do ([`Action`]), what to tell the app ([`Report`]) and
//! why a run ended ([`RunEnd`]).

use super::super::super::auth::{AuthFailure, Session};
use super::super::super::backoff::Backoff;
use super::super::super::env::{ReadBack, Reply};
use super::super::super::model::{AggregateRef, Batch, ParkRecord, StoredEvent};
use super::super::super::outbox::{Pruned, StoreError};
use super::super::super::status::{SyncState, SyncedNotice};

/// How the drain cuts batches, waits and prunes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Most events in one request.
    pub max_batch_events: usize,
    /// Largest request body, in bytes (a single larger event still goes alone).
    pub max_batch_bytes: usize,
    /// Backoff for `retry` and `unknown`.
    pub backoff: Backoff,
    /// While the platform reports offline, how often to try anyway.
    pub offline_probe_ms: u64,
    /// While idle, how often to look for work nobody announced (another tab's appends).
    pub idle_poll_ms: u64,
    /// After a storage failure, how long before trying again.
    pub storage_retry_ms: u64,
    /// Read the next batch while a request is in flight.
    pub read_ahead: bool,
    /// Prune while draining once this many landed events wait to be deleted (when idle, always).
    pub prune_high_water: u64,
    /// Most landed events deleted in one transaction.
    pub prune_chunk: u32,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_batch_events: 500,
            max_batch_bytes: 1 << 20,
            backoff: Backoff::default(),
            offline_probe_ms: 15_000,
            idle_poll_ms: 30_000,
            storage_retry_ms: 1_000,
            read_ahead: true,
            prune_high_water: 10_000,
            prune_chunk: 2_000,
        }
    }
}

/// Why the drain stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// The client was closed.
    Closed,
    /// Another context drains now (it took the drain lock, or changed the pin).
    Superseded,
}

/// What the machine needs to know of the moment, besides what happened.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Now {
    /// Unix milliseconds.
    pub ms: u64,
    /// The platform's belief that the network is up.
    pub online: bool,
    /// A uniform number in `[0, 1)`, for backoff jitter.
    pub random: f64,
}

/// What just happened: the result of an [`Action`], or an outside event.
#[derive(Debug)]
pub enum Input {
    /// [`Action::Recount`] finished (the executor updated the counts).
    Recounted(Result<(), StoreError>),
    /// [`Action::FindUnpruned`]'s answer.
    Unpruned(Result<Vec<AggregateRef>, StoreError>),
    /// [`Action::ReadPin`]'s answer.
    PinRead(Result<Option<Batch>, StoreError>),
    /// [`Action::Read`]'s answer.
    Read(Result<Vec<StoredEvent>, StoreError>),
    /// [`Action::Cut`]'s answer.
    Cut(Result<Option<Vec<StoredEvent>>, StoreError>),
    /// [`Action::ReadAhead`]'s answer, for the batch that was in flight.
    ReadAhead {
        /// The batch the read assumed would land.
        in_flight: Batch,
        /// What it found.
        result: Result<Option<Vec<StoredEvent>>, StoreError>,
    },
    /// [`Action::Pin`]'s answer: `false` when the compare-and-set failed.
    Pinned(Result<bool, StoreError>),
    /// [`Action::OpenSession`]'s answer.
    SessionOpened(Result<Session, AuthFailure>),
    /// [`Action::CheckLock`]'s answer.
    MaySend(bool),
    /// [`Action::Send`]'s answer.
    Replied(Reply),
    /// [`Action::Settle`]'s answer: `false` when the compare-and-set failed.
    Settled(Result<bool, StoreError>),
    /// [`Action::Park`]'s answer.
    Parked(Result<(), StoreError>),
    /// [`Action::ReadBack`]'s answer.
    ReadBack(ReadBack),
    /// [`Action::Prune`]'s answer.
    Pruned(Result<Pruned, StoreError>),
    /// The current [`Action::Wait`] ran out.
    TimerFired,
    /// The current [`Action::Wait`] was cut short by a signal it waited for.
    Woken,
    /// The local log of these aggregates moved: landed events it now holds may be pruned.
    Logged(Vec<AggregateRef>),
    /// The client is closing.
    Close,
    /// Another context drains now.
    Supersede,
}

/// What the executor does next.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Read the counts back from storage into the status.
    Recount,
    /// Find aggregates whose landed events an earlier session did not prune.
    FindUnpruned,
    /// Read the pinned batch.
    ReadPin,
    /// Read a pinned batch's events.
    Read(Batch),
    /// Cut the next batch: the first aggregate with pending events after `after` (round robin,
    /// parked ones skipped).
    Cut {
        /// Round-robin position.
        after: Option<AggregateRef>,
    },
    /// Read the batch that would follow `in_flight`, assuming it lands.
    ReadAhead {
        /// The batch in flight.
        in_flight: Batch,
    },
    /// Pin a batch by compare-and-set.
    Pin {
        /// The new pin.
        batch: Batch,
        /// The pin it replaces (`None`: nothing pinned).
        replacing: Option<Batch>,
    },
    /// Open a session (sign a fresh nonce, ask the gateway).
    OpenSession,
    /// Confirm this context still drains, right before sending.
    CheckLock,
    /// Post this body to the write endpoint under the session's token.
    Send {
        /// The request body.
        body: String,
        /// The session's bearer token.
        token: String,
    },
    /// Record that `batch` landed through `through` and pin `then`, by compare-and-set.
    Settle {
        /// The pinned batch.
        batch: Batch,
        /// Highest landed sequence.
        through: u64,
        /// The next pin: the rest of `batch`, or the batch read ahead.
        then: Option<Batch>,
    },
    /// Read the aggregate's batch at `version` back (a conditional batch got 2003: did it land
    /// in an earlier attempt?).
    ReadBack {
        /// Whose.
        aggregate: AggregateRef,
        /// The version the batch would have created: its guard's expected version + 1.
        version: u64,
        /// The session's bearer token.
        token: String,
    },
    /// Park the rejected events and unpin.
    Park {
        /// What was rejected: one record per aggregate (every leg of an atomic write).
        records: Vec<ParkRecord>,
        /// The pinned batch.
        batch: Batch,
    },
    /// Delete a chunk of an aggregate's landed events.
    Prune {
        /// Whose.
        aggregate: AggregateRef,
        /// Nothing to send: slower housekeeping may go with it (the IndexedDB outbox compacts
        /// its `ids` store only then; doing it mid-drain stalled a 100,000-event drain).
        idle: bool,
    },
    /// Wait `ms` (replacing any current wait), or less when a signal it names fires.
    Wait {
        /// How long.
        ms: u64,
        /// New work ends it (an append, a discard, since the last [`Action::Cut`]).
        work: bool,
        /// The network coming back ends it.
        network: bool,
    },
    /// Tell the app.
    Report(Report),
    /// Stop; perform nothing more.
    Stop(RunEnd),
}

/// A change the app sees.
#[derive(Debug, Clone, PartialEq)]
pub enum Report {
    /// The drain's state.
    State(SyncState),
    /// Nothing to send: idle, or parked when some aggregate is.
    Idle,
    /// A failure (kept as `lastError` until the next success).
    Error {
        /// The protocol code, if any.
        code: Option<u32>,
        /// What happened.
        message: String,
        /// When.
        at: u64,
    },
    /// Events landed; `removed` of them are no longer pending.
    Synced {
        /// What landed.
        notice: SyncedNotice,
        /// How many events that settles.
        removed: u32,
    },
    /// An aggregate was parked.
    Parked(ParkRecord),
}
