//! `flush` and `whenSynced`: waiting, from any context, for events to land.
//!
//! Both answer from storage (so they work for events appended in another tab, before a
//! reload) and re-check whenever the hub reports progress (events settled, parked or
//! discarded — locally, or relayed from the draining context).

use uuid::Uuid;

use crate::engine::model::AggregateRef;
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
                        return Err(FlushError::Parked {
                            aggregate,
                            code: record.code,
                            message: record.message,
                        });
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
                    && (record.first_seq..=record.last_seq).contains(&client_seq)
                {
                    return Err(FlushError::Parked {
                        aggregate,
                        code: record.code,
                        message: record.message,
                    });
                }
            }
        }
        if hub.is_closed() {
            return Err(FlushError::Closed);
        }
        hub.progress.changed_since(progress).await;
    }
}
