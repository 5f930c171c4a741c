//! `flush` and `whenSynced`: waiting, from any context, for events to land.
//!
//! Both answer from storage (so they work for events appended in another tab, before a
//! reload) and re-check whenever the hub reports progress (events settled, parked or
//! discarded — locally, or relayed from the draining context).

use uuid::Uuid;

use crate::engine::model::{AggregateRef, ParkRecord};
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
    /// sequences `first..=last`: code 2003, confirmed by the read-back (not flagged as possibly
    /// landed), and the park covers exactly those events. Only then did that write certainly
    /// not land, so `decide` may discard it and decide again; any other park (one that may have
    /// landed, or that holds other events too) is left for the app.
    pub fn is_proven_conflict_of(&self, first: u64, last: u64) -> bool {
        matches!(self, FlushError::Parked { code, first_seq, last_seq, may_have_landed, .. }
            if *code == CONFLICT && !*may_have_landed && *first_seq == first && *last_seq == last)
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
                    if let Some(record) = hub.park_record(&aggregate) {
                        return Err(FlushError::parked(aggregate, record));
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
            }
        }
        if hub.is_closed() {
            return Err(FlushError::Closed);
        }
        hub.progress.changed_since(progress).await;
    }
}

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
        assert!(parked(CONFLICT, false, 4, 5).is_proven_conflict_of(4, 5));
        // Possibly landed: discarding and deciding again could write the decision twice.
        assert!(!parked(CONFLICT, true, 4, 5).is_proven_conflict_of(4, 5));
        // Another park (other events, or more than the attempt's): not this attempt's conflict.
        assert!(!parked(CONFLICT, false, 3, 5).is_proven_conflict_of(4, 5));
        assert!(!parked(CONFLICT, false, 4, 6).is_proven_conflict_of(4, 5));
        assert!(!parked(CONFLICT, false, 1, 1).is_proven_conflict_of(4, 5));
        // Another rejection.
        assert!(!parked(2022, false, 4, 5).is_proven_conflict_of(4, 5));
        assert!(!FlushError::Closed.is_proven_conflict_of(4, 5));
    }
}
