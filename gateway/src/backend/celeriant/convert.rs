//! Translation between the gateway's types and Celeriant's message types.
//!
//! Kept apart from the network code so that every field's mapping (UUID to `u128`, `type` to
//! `event_type_major`, milliseconds to `event_timestamp`, the 12-byte `iv`) is stated once and can
//! be tested without a server. A command that cannot be expressed faithfully (two entries for one
//! aggregate would collapse in Celeriant's map, an `iv` of the wrong length) is refused here,
//! before anything is sent.

use std::collections::HashMap;
use std::collections::hash_map::Entry;
use std::sync::Arc;

use celeriant_msg::request::requests::{SingleAggregateWrite, WriteRequest};
use celeriant_msg::response::aggregate_event_batch::AggregateEventBatch;
use celeriant_msg::response::responses::ReadResponse;
use celeriant_sync_protocol::codes::gateway as g;
use celeriant_sync_protocol::{Event, ReadBatch};
use celeriant_wal::aggregate_key::AggregateKey as CeleriantKey;
use celeriant_wal::datablocks::datablock_aggregate_event::DatablockAggregateEvent;
use uuid::Uuid;

use crate::backend::{AggregateKey, BackendError, ReadPage, WriteCommand};

/// Celeriant's key for an aggregate.
pub(super) fn aggregate_key(key: &AggregateKey) -> CeleriantKey {
    CeleriantKey::new(
        key.org.as_u128(),
        key.aggregate.type_id.as_u128(),
        key.aggregate.id.as_u128(),
    )
}

/// The Celeriant request for a command. The correlation id is left for the connection to assign
/// (it numbers its own requests); no user id is sent.
pub(super) fn write_request(command: WriteCommand) -> Result<WriteRequest, BackendError> {
    if command.writes.is_empty() {
        return Err(BackendError::code(
            g::NO_WRITES,
            "the write names no aggregate",
        ));
    }
    let mut writes = HashMap::with_capacity(command.writes.len());
    for write in command.writes {
        let events = write
            .events
            .into_iter()
            .map(event)
            .collect::<Result<Vec<_>, _>>()?;
        match writes.entry(aggregate_key(&write.key)) {
            Entry::Occupied(_) => {
                return Err(BackendError::code(
                    g::DUPLICATE_AGGREGATE,
                    format!(
                        "aggregate {}/{} appears twice in one write",
                        write.key.aggregate.type_id, write.key.aggregate.id
                    ),
                ));
            }
            Entry::Vacant(slot) => {
                slot.insert(SingleAggregateWrite {
                    events,
                    allow_create: write.allow_create,
                    expected_version: write.expected_version,
                    enforce_client_idempotency: write.enforce_client_idempotency,
                });
            }
        }
    }
    Ok(WriteRequest {
        correlation_id: None,
        client_id: command.client_id.as_u128(),
        user_id: None,
        writes,
    })
}

fn event(event: Event) -> Result<DatablockAggregateEvent, BackendError> {
    let iv = match event.iv {
        None => None,
        Some(iv) => Some(<[u8; 12]>::try_from(iv.as_slice()).map_err(|_| {
            BackendError::code(
                g::INVALID_IV,
                format!(
                    "event {}: iv must be 12 bytes, got {}",
                    event.client_seq,
                    iv.len()
                ),
            )
        })?),
    };
    Ok(DatablockAggregateEvent {
        client_seq: event.client_seq,
        // Assigned by the server.
        event_seq: 0,
        event_id: event.event_id.map(|id| id.as_u128()),
        event_timestamp: event.timestamp,
        event_type_major: event.event_type,
        event_type_minor: event.minor,
        event_value: Arc::new(event.data),
        iv,
    })
}

/// One stored batch as the protocol returns it.
pub(super) fn read_batch(batch: AggregateEventBatch) -> ReadBatch {
    ReadBatch {
        version: batch.aggregate_version,
        client_id: Uuid::from_u128(batch.client_id),
        server_timestamp: batch.server_timestamp,
        events: batch.events.into_iter().map(read_event).collect(),
    }
}

fn read_event(event: DatablockAggregateEvent) -> Event {
    Event {
        client_seq: event.client_seq,
        event_id: event.event_id.map(Uuid::from_u128),
        timestamp: event.event_timestamp,
        event_type: event.event_type_major,
        minor: event.event_type_minor,
        data: Arc::unwrap_or_clone(event.event_value),
        iv: event.iv.map(|iv| iv.to_vec()),
    }
}

/// Cuts a Celeriant read response into a page with the embedded store's rules: batches are
/// added while the page has fewer than `max_batches` and under `max_bytes` of payload, and
/// always at least one. `next` is the first batch left out, else the server's continuation;
/// it never points back into the page (or before `from`), so a caller cannot loop.
///
/// A Celeriant read does not say the aggregate's version, so `tip` is the highest version
/// this read saw: exact when the page reached the end (`next` null), else a lower bound
/// (`next - 1`); an empty page from `from` gives `from - 1`.
pub(super) fn page(
    response: ReadResponse,
    from: u64,
    max_batches: usize,
    max_bytes: usize,
) -> ReadPage {
    let mut batches: Vec<ReadBatch> = Vec::new();
    let mut bytes = 0usize;
    let mut next = None;
    for batch in response.event_batches {
        if !batches.is_empty() && (batches.len() >= max_batches || bytes >= max_bytes) {
            next = Some(batch.aggregate_version);
            break;
        }
        bytes = batch
            .events
            .iter()
            .fold(bytes, |sum, e| sum.saturating_add(e.event_value.len()));
        batches.push(read_batch(batch));
    }
    let next = next.or(response.next_aggregate_version);
    let next = match batches.last() {
        Some(last) => next.map(|n| n.max(last.version.saturating_add(1))),
        // Nothing returned: only a continuation strictly ahead of `from` makes progress.
        None => next.filter(|n| *n > from),
    };
    let tip = match (next, batches.last()) {
        (Some(n), _) => n - 1,
        (None, Some(last)) => last.version,
        (None, None) => from - 1,
    };
    ReadPage { batches, next, tip }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::backend::AggregateCommand;
    use celeriant_sync_protocol::AggregateRef;

    fn key(id: u128) -> AggregateKey {
        AggregateKey {
            org: Uuid::from_u128(0x0a),
            aggregate: AggregateRef {
                type_id: Uuid::from_u128(0x0b),
                id: Uuid::from_u128(id),
            },
        }
    }

    fn sample_event(seq: u64) -> Event {
        Event {
            client_seq: seq,
            event_id: Some(Uuid::from_u128(u128::MAX - u128::from(seq))),
            timestamp: 1_700_000_000_000 + seq,
            event_type: 3,
            minor: 2,
            data: vec![seq as u8; 5],
            iv: Some(vec![7; 12]),
        }
    }

    fn command(writes: Vec<AggregateCommand>) -> WriteCommand {
        WriteCommand {
            principal: None,
            policy: None,
            client_id: Uuid::from_u128(0xc1),
            writes,
        }
    }

    fn aggregate(id: u128, events: Vec<Event>) -> AggregateCommand {
        AggregateCommand {
            key: key(id),
            allow_create: false,
            expected_version: Some(4),
            enforce_client_idempotency: true,
            events,
        }
    }

    #[test]
    fn every_field_of_a_write_is_carried() {
        let request = write_request(command(vec![aggregate(
            0x0c,
            vec![sample_event(1), sample_event(2)],
        )]))
        .unwrap();
        assert_eq!(request.correlation_id, None);
        assert_eq!(request.client_id, 0xc1);
        assert_eq!(request.user_id, None);
        let write = &request.writes[&CeleriantKey::new(0x0a, 0x0b, 0x0c)];
        assert!(!write.allow_create);
        assert_eq!(write.expected_version, Some(4));
        assert!(write.enforce_client_idempotency);
        let e = &write.events[1];
        assert_eq!(e.client_seq, 2);
        assert_eq!(e.event_seq, 0);
        assert_eq!(e.event_id, Some(u128::MAX - 2));
        assert_eq!(e.event_timestamp, 1_700_000_000_002);
        assert_eq!((e.event_type_major, e.event_type_minor), (3, 2));
        assert_eq!(*e.event_value, vec![2; 5]);
        assert_eq!(e.iv, Some([7; 12]));
    }

    #[test]
    fn events_survive_the_round_trip() {
        let request = write_request(command(vec![aggregate(1, vec![sample_event(9)])])).unwrap();
        let events = request.writes.into_values().next().unwrap().events;
        let batch = read_batch(AggregateEventBatch {
            aggregate_version: 3,
            client_id: 0xc1,
            user_id: None,
            server_timestamp: 42,
            events,
        });
        assert_eq!(
            batch,
            ReadBatch {
                version: 3,
                client_id: Uuid::from_u128(0xc1),
                server_timestamp: 42,
                events: vec![sample_event(9)],
            }
        );
    }

    #[test]
    fn a_command_celeriant_cannot_express_is_refused_before_sending() {
        let dup = write_request(command(vec![
            aggregate(1, vec![sample_event(1)]),
            aggregate(1, vec![sample_event(2)]),
        ]));
        assert!(matches!(
            dup,
            Err(BackendError::Code {
                code: g::DUPLICATE_AGGREGATE,
                ..
            })
        ));
        let mut bad = sample_event(1);
        bad.iv = Some(vec![0; 11]);
        let iv = write_request(command(vec![aggregate(1, vec![bad])]));
        assert!(matches!(
            iv,
            Err(BackendError::Code {
                code: g::INVALID_IV,
                ..
            })
        ));
        let none = write_request(command(vec![]));
        assert!(matches!(
            none,
            Err(BackendError::Code {
                code: g::NO_WRITES,
                ..
            })
        ));
    }

    fn batch(version: u64, bytes: usize) -> AggregateEventBatch {
        AggregateEventBatch {
            aggregate_version: version,
            client_id: 1,
            user_id: None,
            server_timestamp: 0,
            events: vec![DatablockAggregateEvent {
                client_seq: version,
                event_type_major: 1,
                event_value: Arc::new(vec![0; bytes]),
                ..Default::default()
            }],
        }
    }

    fn response(versions: &[u64], next: Option<u64>) -> ReadResponse {
        ReadResponse {
            correlation_id: None,
            event_batches: versions.iter().map(|&v| batch(v, 10)).collect(),
            next_aggregate_version: next,
        }
    }

    fn versions(page: &ReadPage) -> Vec<u64> {
        page.batches.iter().map(|b| b.version).collect()
    }

    #[test]
    fn pages_are_cut_like_the_embedded_store_cuts_them() {
        let p = page(response(&[1, 2, 3, 4, 5], None), 1, 3, usize::MAX);
        assert_eq!((versions(&p), p.next), (vec![1, 2, 3], Some(4)));
        let p = page(response(&[1, 2, 3, 4, 5], None), 1, 10, 15);
        assert_eq!((versions(&p), p.next), (vec![1, 2], Some(3)));
        let p = page(response(&[1, 2, 3, 4, 5], None), 1, 10, 0);
        assert_eq!(
            (versions(&p), p.next),
            (vec![1], Some(2)),
            "at least one batch"
        );
        let p = page(response(&[2, 3], None), 2, 10, usize::MAX);
        assert_eq!((versions(&p), p.next), (vec![2, 3], None));
        let p = page(response(&[2, 3], Some(4)), 2, 10, usize::MAX);
        assert_eq!((versions(&p), p.next), (vec![2, 3], Some(4)));
    }

    #[test]
    fn next_never_points_backwards() {
        let p = page(response(&[2, 3], Some(2)), 2, 10, usize::MAX);
        assert_eq!(p.next, Some(4));
        let p = page(response(&[], Some(5)), 5, 10, usize::MAX);
        assert_eq!((versions(&p), p.next), (vec![], None));
        let p = page(response(&[], Some(7)), 5, 10, usize::MAX);
        assert_eq!(p.next, Some(7));
    }
}
