//! `flush` and `whenSynced`: waiting, from any context, for events to land.
//!
//! Both answer from storage (so they work for events appended in another tab, before a
//! reload) and re-check whenever the hub reports progress (events settled, parked or
//! discarded — locally, or relayed from the draining context).
//!
//! A park holds more than its own aggregate: an atomic write waits until it heads every one of
//! its aggregates and none of them is parked, so a park on A also holds every aggregate whose
//! lowest pending event is a leg of a write that also writes A — transitively
//! ([`holding_park`]). `flush` and `decide` reject with that park instead of waiting for ever.

use uuid::Uuid;

use crate::engine::model::{AggregateRef, Batch, ParkRecord};
use crate::engine::outbox::{EventState, Outbox, StoreError};
use crate::engine::status::Hub;

/// Why `flush` or `when_synced` did not resolve.
#[derive(Debug, Clone, PartialEq, thiserror::Error)]
pub enum FlushError {
    /// An aggregate with events appended before the flush is parked.
    #[error("aggregate {}/{} is parked ({code}): {message}", .aggregate.type_id, .aggregate.id)]
    Parked {
        /// The aggregate.
        aggregate: AggregateRef,
        /// The rejection's code.
        code: u32,
        /// The rejection's message.
        message: String,
        /// The park's lowest sequence.
        first_seq: u64,
        /// The park's highest sequence.
        last_seq: u64,
        /// Whether the parked events may have landed (see [`ParkRecord::may_have_landed`]).
        may_have_landed: bool,
    },
    /// The event was parked and then discarded by the app: it will never land.
    #[error("event {0} was discarded after a permanent rejection")]
    Discarded(Uuid),
    /// The client was closed first.
    #[error("the client was closed before everything landed")]
    Closed,
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl FlushError {
    fn parked(aggregate: AggregateRef, record: ParkRecord) -> Self {
        FlushError::Parked {
            aggregate,
            code: record.code,
            message: record.message,
            first_seq: record.first_seq,
            last_seq: record.last_seq,
            may_have_landed: record.may_have_landed,
        }
    }

    /// Whether this is a proven version-guard conflict of exactly the conditional write of
    /// `aggregate`'s sequences `first..=last`: code 2003, confirmed by the read-back (not
    /// flagged as possibly landed), and the park is that aggregate's and covers exactly those
    /// events. Only then did that write certainly not land, so `decide` may discard it and
    /// decide again; any other park (one that may have landed, that holds other events too, or
    /// another aggregate's that holds this one) is left for the app.
    pub fn is_proven_conflict_of(&self, aggregate: &AggregateRef, first: u64, last: u64) -> bool {
        matches!(self, FlushError::Parked { aggregate: a, code, first_seq, last_seq, may_have_landed, .. }
            if a == aggregate && *code == CONFLICT && !*may_have_landed && *first_seq == first
                && *last_seq == last)
    }
}

/// The code of a version-guard conflict.
const CONFLICT: u32 = celeriant_sync_protocol::codes::celeriant::OPTIMISTIC_CONCURRENCY_VIOLATION;

/// Resolves once every event appended before the call has landed (or was discarded); fails as
/// soon as one of their aggregates is parked.
pub async fn flush<O: Outbox>(outbox: &O, hub: &Hub) -> Result<(), FlushError> {
    flush_some(outbox, hub, None).await
}

/// [`flush`] of one aggregate: resolves once its events appended before the call have landed;
/// fails as soon as it is parked (`decide` waits so for this device's own pending events).
pub async fn flush_aggregate<O: Outbox>(
    outbox: &O,
    hub: &Hub,
    aggregate: AggregateRef,
) -> Result<(), FlushError> {
    flush_some(outbox, hub, Some(aggregate)).await
}

async fn flush_some<O: Outbox>(
    outbox: &O,
    hub: &Hub,
    only: Option<AggregateRef>,
) -> Result<(), FlushError> {
    // Targets: every aggregate with pending events, up to its highest sequence now.
    let mut targets = outbox.pending_aggregates().await?;
    targets.retain(|(a, _)| only.is_none_or(|only| *a == only));
    loop {
        let progress = hub.progress.generation();
        let mut remaining = Vec::with_capacity(targets.len());
        let aggregates: Vec<AggregateRef> = targets.iter().map(|(a, _)| *a).collect();
        let lowest = outbox.lowest_pending_of(&aggregates).await?;
        for ((aggregate, target), lowest) in targets.into_iter().zip(lowest) {
            match lowest {
                Some(lowest) if lowest <= target => {
                    if let Some(record) = holding_park(outbox, hub, aggregate).await? {
                        return Err(FlushError::parked(record.aggregate, record));
                    }
                    remaining.push((aggregate, target));
                }
                _ => {}
            }
        }
        if remaining.is_empty() {
            return Ok(());
        }
        if hub.is_closed() {
            return Err(FlushError::Closed);
        }
        targets = remaining;
        hub.progress.changed_since(progress).await;
    }
}

/// Resolves once the event `event_id` has landed (it is no longer in the outbox and was not
/// discarded), whoever appended it and whichever context drains; fails as soon as it is parked
/// or discarded. An id this database never held counts as landed.
pub async fn when_synced<O: Outbox>(
    outbox: &O,
    hub: &Hub,
    event_id: Uuid,
) -> Result<(), FlushError> {
    synced(outbox, hub, event_id, false).await
}

/// [`when_synced`] that also fails as soon as any park of the event's aggregate starts at or
/// below its sequence: the event waits behind that park until the app discards it, so
/// `decide` rejects instead of waiting for ever behind another append's rejection.
pub async fn when_synced_unblocked<O: Outbox>(
    outbox: &O,
    hub: &Hub,
    event_id: Uuid,
) -> Result<(), FlushError> {
    synced(outbox, hub, event_id, true).await
}

async fn synced<O: Outbox>(
    outbox: &O,
    hub: &Hub,
    event_id: Uuid,
    behind: bool,
) -> Result<(), FlushError> {
    loop {
        let progress = hub.progress.generation();
        match outbox.event_state(event_id).await? {
            EventState::Absent => return Ok(()),
            EventState::Discarded => return Err(FlushError::Discarded(event_id)),
            EventState::Pending {
                aggregate,
                client_seq,
            } => {
                if let Some(record) = hub.park_record(&aggregate)
                    && (record.first_seq <= client_seq)
                    && (behind || client_seq <= record.last_seq)
                {
                    return Err(FlushError::parked(aggregate, record));
                }
                // Behind an atomic write that another aggregate's park holds.
                if behind
                    && hub.park_record(&aggregate).is_none()
                    && let Some(record) = holding_park(outbox, hub, aggregate).await?
                {
                    return Err(FlushError::parked(record.aggregate, record));
                }
            }
        }
        if hub.is_closed() {
            return Err(FlushError::Closed);
        }
        hub.progress.changed_since(progress).await;
    }
}

/// The park that holds `aggregate`'s pending events: its own; or, when its lowest pending event
/// is a leg of an atomic write, a park of one of the write's other aggregates — transitively,
/// since such an aggregate may itself wait behind another atomic write. Looked for past the
/// aggregate's own park only while some aggregate is parked (a read per aggregate on the way).
pub(crate) async fn holding_park<O: Outbox>(
    outbox: &O,
    hub: &Hub,
    aggregate: AggregateRef,
) -> Result<Option<ParkRecord>, StoreError> {
    if let Some(record) = hub.park_record(&aggregate) {
        return Ok(Some(record));
    }
    if hub.parked_aggregates().is_empty() {
        return Ok(None);
    }
    let (mut seen, mut queue) = (vec![aggregate], vec![aggregate]);
    while let Some(a) = queue.pop() {
        let Some(lowest) = outbox.lowest_pending_of(&[a]).await?.pop().flatten() else {
            continue;
        };
        let head = outbox.read(&Batch::plain(a, lowest, lowest, 1)).await?;
        let Some(legs) = head.first().and_then(|e| e.atomic.clone()) else {
            continue; // a plain head: it drains, and what waits behind it follows
        };
        for leg in legs.iter() {
            if seen.contains(&leg.aggregate) {
                continue;
            }
            seen.push(leg.aggregate);
            if let Some(record) = hub.park_record(&leg.aggregate) {
                return Ok(Some(record));
            }
            queue.push(leg.aggregate);
        }
    }
    Ok(None)
}

#[cfg(all(test, not(target_arch = "wasm32")))]
#[path = "flush_tests.rs"]
mod held;

#[cfg(test)]
mod tests {
    use super::*;

    fn parked(code: u32, may_have_landed: bool, first_seq: u64, last_seq: u64) -> FlushError {
        FlushError::Parked {
            aggregate: AggregateRef {
                type_id: Uuid::nil(),
                id: Uuid::nil(),
            },
            code,
            message: String::new(),
            first_seq,
            last_seq,
            may_have_landed,
        }
    }

    #[test]
    fn only_a_proven_conflict_of_exactly_the_attempt_may_be_discarded_and_retried() {
        let nil = AggregateRef {
            type_id: Uuid::nil(),
            id: Uuid::nil(),
        };
        let other = AggregateRef {
            type_id: Uuid::nil(),
            id: Uuid::from_u128(1),
        };
        assert!(parked(CONFLICT, false, 4, 5).is_proven_conflict_of(&nil, 4, 5));
        // Possibly landed: discarding and deciding again could write the decision twice.
        assert!(!parked(CONFLICT, true, 4, 5).is_proven_conflict_of(&nil, 4, 5));
        // Another park (other events, or more than the attempt's): not this attempt's conflict.
        assert!(!parked(CONFLICT, false, 3, 5).is_proven_conflict_of(&nil, 4, 5));
        assert!(!parked(CONFLICT, false, 4, 6).is_proven_conflict_of(&nil, 4, 5));
        assert!(!parked(CONFLICT, false, 1, 1).is_proven_conflict_of(&nil, 4, 5));
        // Another aggregate's park (holding this one through an atomic write), same numbers.
        assert!(!parked(CONFLICT, false, 4, 5).is_proven_conflict_of(&other, 4, 5));
        // Another rejection.
        assert!(!parked(2022, false, 4, 5).is_proven_conflict_of(&nil, 4, 5));
        assert!(!FlushError::Closed.is_proven_conflict_of(&nil, 4, 5));
    }
}
