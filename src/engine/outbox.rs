//! The storage interface of the outbox, and the rules every implementation keeps.
//!
//! Two implementations exist: [`super::memory::MemoryOutbox`] (native tests, the property tests)
//! and the IndexedDB one in `browser/idb`. Both run the same conformance suite
//! ([`super::conformance`]). The rules:
//!
//! 1. `append_group` assigns each aggregate's next sequences and stores the events **and** the
//!    bumped counters atomically: all of the group or none of it. Sequences start at 1, strictly
//!    increase per aggregate and are never reused — the counter outlives the events.
//!    An append may carry a version guard (`expectedVersion`): its events are stored with it
//!    ([`super::model::Guard`]: the expected version and the append's sequence span).
//!    `append_atomic` stores an atomic write (`appendAtomic`): several aggregates' appends in one
//!    such group commit, each event carrying every leg ([`super::model::Legs`]).
//! 2. An event is **pending** until it is settled; settling records a per-aggregate *landed
//!    watermark* (every sequence at or below it landed). Landed events may stay stored until
//!    [`Outbox::prune`] deletes them, but no read that serves the drain, `flush` or
//!    `whenSynced` ever returns or counts them.
//! 3. Pending events are read per aggregate in sequence order; aggregates are visited in key
//!    order ([`Outbox::next_batch`]). A batch never mixes a conditional append with other
//!    events: it is exactly that append's pending events, whatever the limits, or the
//!    unconditional events before the next conditional append
//!    ([`super::batch::cut_at_guards`]). An atomic write is one batch, whole, across its
//!    aggregates, and only once it is at the head of **every** one of them (each leg's first
//!    sequence is its aggregate's lowest pending one, and none of them is skipped); until then
//!    the aggregate whose head it is is passed over. Since an atomic write was committed after
//!    everything before it on each of its aggregates, the oldest pending write is always
//!    sendable: this never deadlocks.
//! 4. At most one batch is pinned. Its boundaries are persisted before its first send and read
//!    back on every resend, also after a restart. The pin changes only by compare-and-set.
//! 5. Only [`Outbox::settle`] (after `landed`) and [`Outbox::discard_parked`] (the app's
//!    explicit choice) end an event's life; [`Outbox::prune`] only deletes what was settled.
//!    An atomic write is settled, parked and discarded whole: every leg or none.
//! 6. Writes that change the counts (`append_group`, `discard_parked`) say when they began
//!    ([`Begun`]), and [`Outbox::counts`] says which of them it saw: exactly those that began
//!    before it. The status counts stay exact while appends and a recount overlap
//!    ([`super::status::Hub::reset_counts`]).

use std::future::Future;

use uuid::Uuid;

use super::model::{AggregateRef, Batch, NewEvent, ParkRecord, Receipt, StoredEvent};

/// Why storage failed.
#[derive(Debug, Clone, thiserror::Error)]
pub enum StoreError {
    /// The browser refused to store more (disk or origin quota), with what it said (Chromium
    /// says nothing).
    #[error("storage quota exceeded{}", detail(.0))]
    QuotaExceeded(String, Cause),
    /// The database was closed (by `close`, or by another tab's upgrade).
    #[error("the outbox database is closed")]
    Closed,
    /// Any other storage failure, with the platform's error name.
    #[error("storage failed ({name}): {message}")]
    Failed {
        /// The platform's name for it (`DOMException.name`), or a short tag.
        name: String,
        /// What it said.
        message: String,
        /// The platform's own error object, when there is one.
        cause: Cause,
    },
    /// A stored record could not be understood.
    #[error("corrupt outbox record: {0}")]
    Corrupt(String),
}

impl PartialEq for StoreError {
    /// Equal by kind and text; the platform's error object is not compared.
    fn eq(&self, other: &Self) -> bool {
        match (self, other) {
            (StoreError::QuotaExceeded(a, _), StoreError::QuotaExceeded(b, _)) => a == b,
            (StoreError::Closed, StoreError::Closed) => true,
            (
                StoreError::Failed {
                    name: a,
                    message: m,
                    ..
                },
                StoreError::Failed {
                    name: b,
                    message: n,
                    ..
                },
            ) => a == b && m == n,
            (StoreError::Corrupt(a), StoreError::Corrupt(b)) => a == b,
            _ => false,
        }
    }
}

impl StoreError {
    /// The platform's error object behind this failure, if any.
    pub fn cause(&self) -> &Cause {
        match self {
            StoreError::QuotaExceeded(_, cause) | StoreError::Failed { cause, .. } => cause,
            StoreError::Closed | StoreError::Corrupt(_) => &Cause::NONE,
        }
    }
}

/// The platform's own error object behind a failure, carried opaquely through the engine so
/// the API can hand it to the app as `error.cause` (the engine never looks inside).
#[derive(Clone, Default)]
pub struct Cause(Option<std::rc::Rc<dyn std::any::Any>>);

impl Cause {
    /// No underlying error.
    pub const NONE: Cause = Cause(None);

    /// Wraps a platform value.
    pub fn new<T: 'static>(value: T) -> Self {
        Cause(Some(std::rc::Rc::new(value)))
    }

    /// The wrapped value, if it is a `T`.
    pub fn get<T: 'static>(&self) -> Option<&T> {
        self.0.as_deref()?.downcast_ref()
    }
}

impl std::fmt::Debug for Cause {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(if self.0.is_some() {
            "Cause(..)"
        } else {
            "None"
        })
    }
}

/// `": {message}"`, or nothing when the platform gave no message.
fn detail(message: &str) -> String {
    if message.is_empty() {
        String::new()
    } else {
        format!(": {message}")
    }
}

/// Where an event stands, by its id.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum EventState {
    /// In the outbox, not yet landed (it may be parked).
    Pending {
        /// Its aggregate.
        aggregate: AggregateRef,
        /// Its sequence.
        client_seq: u64,
    },
    /// Parked, then discarded by the app: it will never land.
    Discarded,
    /// Not pending: it landed — or this database never held it.
    Absent,
}

/// What [`Outbox::next_batch`] looks for.
#[derive(Debug, Clone, Copy)]
pub struct CutQuery<'a> {
    /// Round robin: start strictly after this aggregate and wrap around (it comes last).
    pub after: Option<AggregateRef>,
    /// Aggregates not to serve (parked ones), sorted.
    pub skip: &'a [AggregateRef],
    /// Treat this aggregate's events up to this sequence as landed too (the batch in flight,
    /// when the next batch is read ahead).
    pub assume_landed: Option<(AggregateRef, u64)>,
    /// Most events.
    pub max_events: usize,
    /// Largest request body the events may make ([`StoredEvent::encoded_len`]); at least one
    /// event is returned whatever its size.
    pub max_bytes: usize,
}

/// What one [`Outbox::prune`] call did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Pruned {
    /// Landed events deleted.
    pub removed: u32,
    /// Whether landed events of that aggregate remain stored.
    pub more: bool,
}

/// When a write of this context began, in the order its transactions began: a store runs
/// transactions whose scopes overlap in that order, so a read sees exactly the writes that
/// began before it (the ones that committed).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, PartialOrd, Ord)]
pub struct Begun(pub u64);

/// What [`Outbox::counts`] read, in one transaction.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Counted {
    /// Events pending or parked (landed ones not counted).
    pub events: u64,
    /// Every parked record.
    pub parked: Vec<ParkRecord>,
    /// It saw this context's writes that began before this one, and none that began later.
    pub before: Begun,
}

/// What [`Outbox::append_group`] stored.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Appended {
    /// Per append, in order, its events' receipts.
    pub receipts: Vec<Vec<Receipt>>,
    /// When the transaction that stored them began.
    pub begun: Begun,
}

/// What [`Outbox::discard_parked`] dropped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Discarded {
    /// Events dropped (0 when the aggregate was not parked), every leg's for an atomic write.
    pub removed: u32,
    /// When the transaction that dropped them began.
    pub begun: Begun,
    /// The other aggregates whose park records went with it (the other legs of a parked atomic
    /// write), in the write's order.
    pub also: Vec<AggregateRef>,
}

/// One append of a group: its aggregate, its events, and its version guard (`Some(v)`: a
/// conditional append, `append(…, { expectedVersion: v })`).
pub type GroupItem<'a> = (AggregateRef, &'a [NewEvent], Option<u64>);

/// The outbox's storage.
pub trait Outbox {
    /// Loads the device's client id, storing `fresh` first if none exists yet.
    fn client_id(&self, fresh: Uuid) -> impl Future<Output = Result<Uuid, StoreError>>;

    /// Stores several appends in one atomic write (group commit): each aggregate's counter is
    /// read once, every append gets its next sequences in order, every counter is bumped, and
    /// all of it is durable before this resolves — or none of it is written. Receipts come
    /// back per append, in order.
    fn append_group(
        &self,
        group: &[GroupItem<'_>],
    ) -> impl Future<Output = Result<Appended, StoreError>>;

    /// Stores one atomic write: like [`Outbox::append_group`] of `writes` (each aggregate at most
    /// once), and every event also carries the write's legs, so it is only ever cut, sent,
    /// settled, parked and discarded whole.
    fn append_atomic(
        &self,
        writes: &[GroupItem<'_>],
    ) -> impl Future<Output = Result<Appended, StoreError>>;

    /// One append: [`Outbox::append_group`] of one.
    fn append(
        &self,
        aggregate: AggregateRef,
        events: Vec<NewEvent>,
    ) -> impl Future<Output = Result<Vec<Receipt>, StoreError>> {
        async move {
            let mut appended = self.append_group(&[(aggregate, &events, None)]).await?;
            Ok(appended.receipts.pop().unwrap_or_default())
        }
    }

    /// The highest sequence ever assigned in `aggregate` (0 if none).
    fn last_assigned(
        &self,
        aggregate: AggregateRef,
    ) -> impl Future<Output = Result<u64, StoreError>>;

    /// The lowest pending events of the first aggregate, round robin from `query.after`, that
    /// has pending events and is not skipped: at most `max_events`, within `max_bytes` of
    /// request body but at least one. `None` when no aggregate qualifies.
    fn next_batch(
        &self,
        query: CutQuery<'_>,
    ) -> impl Future<Output = Result<Option<Vec<StoredEvent>>, StoreError>>;

    /// The pending events within a batch's boundaries, in sequence order (an atomic batch's:
    /// every leg's, in the order of its legs).
    fn read(&self, batch: &Batch) -> impl Future<Output = Result<Vec<StoredEvent>, StoreError>>;

    /// The pinned batch, if any.
    fn pinned(&self) -> impl Future<Output = Result<Option<Batch>, StoreError>>;

    /// Pins `batch` if the pinned batch is still `replacing` (`None`: nothing pinned), in one
    /// atomic compare-and-set; `false` when another drainer changed the pin meanwhile.
    fn pin(
        &self,
        batch: &Batch,
        replacing: Option<&Batch>,
    ) -> impl Future<Output = Result<bool, StoreError>>;

    /// After `landed`, in one atomic compare-and-set on the pin (still `batch`): raises the
    /// aggregate's landed watermark to `through` (an atomic batch's: every leg's to its last
    /// sequence; it lands whole) and pins `then` — the rest of `batch` when only
    /// a prefix landed, or the next batch, read ahead — or unpins. `false` (and nothing
    /// written) when another drainer changed the pin meanwhile.
    fn settle(
        &self,
        batch: &Batch,
        through: u64,
        then: Option<&Batch>,
    ) -> impl Future<Output = Result<bool, StoreError>>;

    /// Deletes up to `max` landed events of `aggregate` (at or below its watermark), lowest
    /// first, in one atomic write. `idle`: the drain has nothing to send, so housekeeping whose
    /// cost grows with the store may run in the same write (never while a backlog drains).
    fn prune(
        &self,
        aggregate: AggregateRef,
        max: u32,
        idle: bool,
    ) -> impl Future<Output = Result<Pruned, StoreError>>;

    /// Aggregates with landed events still stored (left by an earlier session). Read at every
    /// drain start, before its first cut: an implementation that keeps a copy of what the
    /// drain wrote (the IndexedDB outbox keeps the landed watermarks) drops it here.
    fn unpruned(&self) -> impl Future<Output = Result<Vec<AggregateRef>, StoreError>>;

    /// After `rejected`: records the parked events (one record per aggregate: an atomic batch
    /// parks every leg) and unpins `batch` (if it is still pinned), atomically.
    fn park(
        &self,
        records: &[ParkRecord],
        batch: &Batch,
    ) -> impl Future<Output = Result<(), StoreError>>;

    /// Every parked record.
    fn parked(&self) -> impl Future<Output = Result<Vec<ParkRecord>, StoreError>>;

    /// Drops the aggregate's parked events and its park record, and records the dropped events'
    /// ids as discarded, atomically. Parked legs of an atomic write go together: every leg's
    /// events and record. Says how many events were dropped (0 when it was not parked).
    fn discard_parked(
        &self,
        aggregate: AggregateRef,
    ) -> impl Future<Output = Result<Discarded, StoreError>>;

    /// How many events are pending or parked, and every parked record, read together; and which
    /// of this context's writes that read saw (rule 6).
    fn counts(&self) -> impl Future<Output = Result<Counted, StoreError>>;

    /// How many events are pending or parked (landed ones not counted).
    fn count(&self) -> impl Future<Output = Result<u64, StoreError>> {
        async { Ok(self.counts().await?.events) }
    }

    /// Every aggregate with pending events, with the highest sequence assigned in it.
    fn pending_aggregates(
        &self,
    ) -> impl Future<Output = Result<Vec<(AggregateRef, u64)>, StoreError>>;

    /// The lowest pending sequence of each aggregate, in one read.
    fn lowest_pending_of(
        &self,
        aggregates: &[AggregateRef],
    ) -> impl Future<Output = Result<Vec<Option<u64>>, StoreError>>;

    /// Where the event with this id stands.
    fn event_state(&self, event_id: Uuid) -> impl Future<Output = Result<EventState, StoreError>>;
}

#[cfg(test)]
mod tests {
    use super::{Cause, StoreError};

    #[test]
    fn a_quota_error_reads_well_with_and_without_the_platform_message() {
        assert_eq!(
            StoreError::QuotaExceeded(String::new(), Cause::NONE).to_string(),
            "storage quota exceeded"
        );
        assert_eq!(
            StoreError::QuotaExceeded("the disk is full".into(), Cause::NONE).to_string(),
            "storage quota exceeded: the disk is full"
        );
    }

    #[test]
    fn a_cause_is_carried_opaquely() {
        let cause = Cause::new(42u32);
        assert_eq!(cause.get::<u32>(), Some(&42));
        assert_eq!(cause.get::<String>(), None);
        assert!(Cause::NONE.get::<u32>().is_none());
    }
}
