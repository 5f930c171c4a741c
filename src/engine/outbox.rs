//! The storage interface of the outbox, and the rules every implementation keeps.
//!
//! Two implementations exist: [`super::memory::MemoryOutbox`] (native tests, the property test)
//! and the IndexedDB one in `browser/idb`. Both run the same conformance suite
//! ([`super::conformance`]). The rules:
//!
//! 1. `append` assigns the aggregate's next sequences and stores the events **and** the bumped
//!    counter atomically: all of the append or none of it. Sequences start at 1, strictly
//!    increase per aggregate and are never reused — the counter outlives the events.
//! 2. Pending events are read per aggregate in sequence order ([`Outbox::head`], [`Outbox::read`]);
//!    aggregates are visited in key order ([`Outbox::next_aggregate`]).
//! 3. At most one batch is pinned. Its boundaries are persisted before its first send and read
//!    back on every resend, also after a restart.
//! 4. Only [`Outbox::settle`] (after `landed`) and [`Outbox::discard_parked`] (the app's explicit
//!    choice) remove events. Nothing else does.

use std::future::Future;

use uuid::Uuid;

use super::model::{AggregateRef, Batch, NewEvent, ParkRecord, Receipt, StoredEvent};

/// Why storage failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum StoreError {
    /// The browser refused to store more (disk or origin quota), with what it said (Chromium
    /// says nothing).
    #[error("storage quota exceeded{}", detail(.0))]
    QuotaExceeded(String),
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
    },
    /// A stored record could not be understood.
    #[error("corrupt outbox record: {0}")]
    Corrupt(String),
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
    /// Not in the outbox: it landed (synced events are pruned) — or this database never held it.
    Absent,
}

/// The outbox's storage.
pub trait Outbox {
    /// Loads the device's client id, storing `fresh` first if none exists yet.
    fn client_id(&self, fresh: Uuid) -> impl Future<Output = Result<Uuid, StoreError>>;

    /// Stores `events` under the aggregate's next sequences, counter and events in one atomic
    /// write. Resolves only once that write is durable.
    fn append(
        &self,
        aggregate: AggregateRef,
        events: Vec<NewEvent>,
    ) -> impl Future<Output = Result<Vec<Receipt>, StoreError>>;

    /// The highest sequence ever assigned in `aggregate` (0 if none).
    fn last_assigned(
        &self,
        aggregate: AggregateRef,
    ) -> impl Future<Output = Result<u64, StoreError>>;

    /// The first aggregate, in key order, strictly after `after` (from the start when `None`)
    /// that has pending events.
    fn next_aggregate(
        &self,
        after: Option<AggregateRef>,
    ) -> impl Future<Output = Result<Option<AggregateRef>, StoreError>>;

    /// The lowest pending sequence of `aggregate`, if it has pending events.
    fn lowest_pending(
        &self,
        aggregate: AggregateRef,
    ) -> impl Future<Output = Result<Option<u64>, StoreError>>;

    /// [`Outbox::lowest_pending`] of several aggregates (one transaction where storage has them).
    fn lowest_pending_of(
        &self,
        aggregates: &[AggregateRef],
    ) -> impl Future<Output = Result<Vec<Option<u64>>, StoreError>> {
        async move {
            let mut lowest = Vec::with_capacity(aggregates.len());
            for aggregate in aggregates {
                lowest.push(self.lowest_pending(*aggregate).await?);
            }
            Ok(lowest)
        }
    }

    /// The aggregate's lowest pending events in sequence order: at most `max_events`, and no
    /// more than fit in `max_bytes` of request body ([`StoredEvent::encoded_len`]) — but at
    /// least one event when any is pending.
    fn head(
        &self,
        aggregate: AggregateRef,
        max_events: usize,
        max_bytes: usize,
    ) -> impl Future<Output = Result<Vec<StoredEvent>, StoreError>>;

    /// The pending events within a batch's boundaries, in sequence order.
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

    /// After `landed`: removes the batch's events up to `through` and, in the same atomic
    /// write, unpins the batch (or, when `through < last_seq`, re-pins the rest of it) — the pin
    /// only if it is still this batch. Returns how many events were removed.
    fn settle(&self, batch: &Batch, through: u64) -> impl Future<Output = Result<u32, StoreError>>;

    /// After `rejected`: records the parked events and unpins `batch` (if it is still pinned),
    /// atomically.
    fn park(
        &self,
        record: &ParkRecord,
        batch: &Batch,
    ) -> impl Future<Output = Result<(), StoreError>>;

    /// Every parked record.
    fn parked(&self) -> impl Future<Output = Result<Vec<ParkRecord>, StoreError>>;

    /// Drops the aggregate's parked events and its park record, and records the dropped events'
    /// ids as discarded, atomically. Returns how many events were dropped (0 when it was not
    /// parked).
    fn discard_parked(
        &self,
        aggregate: AggregateRef,
    ) -> impl Future<Output = Result<u32, StoreError>>;

    /// How many events are in the outbox (pending and parked).
    fn count(&self) -> impl Future<Output = Result<u64, StoreError>>;

    /// Where the event with this id stands.
    fn event_state(&self, event_id: Uuid) -> impl Future<Output = Result<EventState, StoreError>>;
}

#[cfg(test)]
mod tests {
    use super::StoreError;

    #[test]
    fn a_quota_error_reads_well_with_and_without_the_platform_message() {
        assert_eq!(
            StoreError::QuotaExceeded(String::new()).to_string(),
            "storage quota exceeded"
        );
        assert_eq!(
            StoreError::QuotaExceeded("the disk is full".into()).to_string(),
            "storage quota exceeded: the disk is full"
        );
    }
}
