//! The fake node's store: how it applies a write (existence, the version guard, then client
//! idempotency, in the server's order), serves a read page and an aggregate's details, all
//! from the state shared by every node of a cluster.

use std::time::{SystemTime, UNIX_EPOCH};

use celeriant_msg::error_codes;
use celeriant_msg::process_client_requests::ClientRequest;
use celeriant_msg::process_client_responses::ClientResponse;
use celeriant_msg::request::requests::{AggregateDetailsRequest, ReadRequest, WriteRequest};
use celeriant_msg::response::aggregate_event_batch::AggregateEventBatch;
use celeriant_msg::response::responses::{
    AggregateConflict, AggregateDetailsResponse, ReadResponse, WriteConflictResponse, WriteResponse,
};

use crate::{State, WatchMsg, error, written};

impl State {
    pub(crate) fn apply(&mut self, request: &ClientRequest) -> ClientResponse {
        match request {
            ClientRequest::Write(write) => self.write(write),
            ClientRequest::Read(read) => self.read(read),
            ClientRequest::AggregateDetails(details) => self.details(details),
            other => error(
                other.correlation_id(),
                error_codes::SHARD_ROUTING_NO_KEY,
                "the fake serves only reads, details and writes".into(),
            ),
        }
    }

    /// Atomic across the request's aggregates, like the server. Per aggregate, in the server's
    /// order: the events (2000 empty, 2001 type 0), existence (2005), then the version guard (2003: `expected_version: n` commits
    /// only at exactly version n, the batch count, so `0` only while the aggregate does not
    /// exist; answered, as the server does, with a `WriteConflictResponse` naming each stale
    /// guard's expected and current version), **then** client idempotency where the write
    /// enforces it (2002 with the sequences in the message, when its lowest `client_seq`, if
    /// at least 1, is at or below the highest stored for this aggregate and client id). 2013
    /// (in flight) is never produced here: tests script it.
    fn write(&mut self, request: &WriteRequest) -> ClientResponse {
        let correlation_id = request.correlation_id;
        let mut conflicts = Vec::new();
        for (key, write) in &request.writes {
            if write.events.is_empty() {
                let message = "events list is empty".into();
                return error(
                    correlation_id,
                    error_codes::WRITE_EMPTY_EVENTS_LIST,
                    message,
                );
            }
            if write.events.iter().any(|e| e.event_type_major == 0) {
                let message = "event type 0 is reserved".into();
                return error(correlation_id, error_codes::WRITE_ZERO_EVENT_TYPE, message);
            }
            let current = self.store.get(key).map_or(0, |b| b.len() as u64);
            if current == 0 && !write.allow_create {
                return error(
                    correlation_id,
                    error_codes::WRITE_AGGREGATE_NOT_EXISTS,
                    "aggregate does not exist".into(),
                );
            }
            if let Some(expected) = write.expected_version
                && expected != current
            {
                conflicts.push(AggregateConflict {
                    key: key.clone(),
                    expected,
                    current,
                });
            }
        }
        if !conflicts.is_empty() {
            return ClientResponse::WriteConflict(WriteConflictResponse {
                correlation_id,
                conflicts,
            });
        }
        for (key, write) in &request.writes {
            let lowest = write.events.iter().map(|e| e.client_seq).min().unwrap_or(0);
            let highest = self.seqs.get(&(key.clone(), request.client_id)).copied();
            if write.enforce_client_idempotency
                && lowest >= 1
                && let Some(highest) = highest
                && lowest <= highest
            {
                return error(
                    correlation_id,
                    error_codes::WRITE_CLIENT_IDEMPOTENCY_VIOLATION,
                    format!(r#"{{"last_client_seq":{highest},"attempted_client_seq":{lowest}}}"#),
                );
            }
        }
        for (key, write) in &request.writes {
            let top = write.events.iter().map(|e| e.client_seq).max().unwrap_or(0);
            if write.enforce_client_idempotency {
                let held = self
                    .seqs
                    .entry((key.clone(), request.client_id))
                    .or_insert(0);
                *held = (*held).max(top);
            }
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let mut version = None;
        let mut notes = Vec::new();
        for (key, write) in &request.writes {
            let batches = self.store.entry(key.clone()).or_default();
            let mut event_seq = batches.iter().map(|b| b.events.len() as u64).sum::<u64>();
            let events = write
                .events
                .iter()
                .map(|e| {
                    event_seq += 1;
                    let mut e = e.clone();
                    e.event_seq = event_seq;
                    e
                })
                .collect();
            let aggregate_version = batches.len() as u64 + 1;
            batches.push(AggregateEventBatch {
                aggregate_version,
                client_id: request.client_id,
                user_id: request.user_id,
                server_timestamp: now,
                events,
            });
            version = Some(aggregate_version);
            notes.push(written(key, aggregate_version));
        }
        self.tell_watchers(WatchMsg::Events(notes));
        ClientResponse::Write(WriteResponse {
            correlation_id,
            max_aggregate_version: version.filter(|_| request.writes.len() == 1),
        })
    }

    /// An aggregate's versions (7001 when it does not exist).
    fn details(&self, request: &AggregateDetailsRequest) -> ClientResponse {
        let correlation_id = request.correlation_id;
        let Some(batches) = self.store.get(&request.aggregate_key) else {
            return error(
                correlation_id,
                error_codes::EXISTS_AGGREGATE_NOT_EXISTS,
                "aggregate does not exist".into(),
            );
        };
        let last = batches.last();
        ClientResponse::AggregateDetails(AggregateDetailsResponse {
            correlation_id,
            min_aggregate_version: batches.first().map_or(0, |b| b.aggregate_version),
            max_aggregate_version: last.map_or(0, |b| b.aggregate_version),
            max_event_seq: batches.iter().map(|b| b.events.len() as u64).sum(),
            is_deleted: false,
            allow_recreate: false,
            allow_sequence_continuation: false,
            last_server_timestamp: last.map_or(0, |b| b.server_timestamp),
            last_client_id: last.map_or(0, |b| b.client_id),
            last_user_id: last.and_then(|b| b.user_id),
        })
    }

    fn read(&self, request: &ReadRequest) -> ClientResponse {
        let correlation_id = request.correlation_id;
        let Some(batches) = self.store.get(&request.aggregate_key) else {
            return error(
                correlation_id,
                error_codes::READ_AGGREGATE_NOT_EXISTS,
                "aggregate does not exist".into(),
            );
        };
        let from = request.filters.from_aggregate_version;
        let to = request.filters.to_aggregate_version.unwrap_or(u64::MAX);
        let mut in_range = batches
            .iter()
            .filter(|b| b.aggregate_version >= from && b.aggregate_version <= to);
        let limit = self.read_page_limit.unwrap_or(usize::MAX);
        let event_batches: Vec<_> = in_range.by_ref().take(limit).cloned().collect();
        ClientResponse::Read(ReadResponse {
            correlation_id,
            event_batches,
            next_aggregate_version: in_range.next().map(|b| b.aggregate_version),
        })
    }
}
