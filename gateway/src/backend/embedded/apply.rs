//! Celeriant's write checks, applied inside one redb write transaction.
//!
//! The order is the server's (see `shared/celeriant.md`): per aggregate, validation (2000,
//! 2001), existence (2005), the version guard (2003), **then** idempotency — 2013 when the same
//! (aggregate, client) has a write with an overlapping sequence applied in the current,
//! not-yet-durable group, 2002 when the lowest sequence is at or below the highest durable one.
//! Every aggregate of a command is checked before any is written, so a refused command leaves
//! no trace and an accepted one is all-or-nothing.

use std::collections::HashMap;

use celeriant_sync_protocol::ReadBatch;
use celeriant_sync_protocol::codes::celeriant as codes;
use redb::{ReadableTable, WriteTransaction};

use super::tables::{AGGREGATES, BATCHES, CLIENT_SEQS, agg_key, client_key};
use crate::backend::{BackendError, WriteAck, WriteCommand};

/// Highest sequence per (aggregate, client) applied in the open, uncommitted group: those
/// writes are accepted but not yet durable, which is exactly Celeriant's "in flight".
pub type InFlight = HashMap<(u128, u128, u128, u128), u64>;

/// Why applying failed.
pub enum ApplyError {
    /// A Celeriant answer for this command; nothing of it was written.
    Refused(BackendError),
    /// The database failed; the whole transaction must be abandoned.
    Storage(String),
}

impl From<redb::TableError> for ApplyError {
    fn from(e: redb::TableError) -> Self {
        ApplyError::Storage(e.to_string())
    }
}

impl From<redb::StorageError> for ApplyError {
    fn from(e: redb::StorageError) -> Self {
        ApplyError::Storage(e.to_string())
    }
}

fn refuse(code: u32, message: impl Into<String>) -> ApplyError {
    ApplyError::Refused(BackendError::code(code, message))
}

fn sequence_refusal(code: u32, what: &str, last: u64, attempted: u64) -> ApplyError {
    ApplyError::Refused(BackendError::Code {
        code,
        message: format!("{what}: last client_seq {last}, attempted {attempted}"),
        last_client_seq: Some(last),
        attempted_client_seq: Some(attempted),
    })
}

/// Checks and applies one command inside `txn`, recording its sequences in `in_flight`.
pub fn apply(
    txn: &WriteTransaction,
    command: &WriteCommand,
    in_flight: &mut InFlight,
    server_timestamp: u64,
) -> Result<WriteAck, ApplyError> {
    let mut aggregates = txn.open_table(AGGREGATES)?;
    let mut client_seqs = txn.open_table(CLIENT_SEQS)?;
    if command.writes.is_empty() {
        return Err(refuse(
            codes::EMPTY_EVENTS_LIST,
            "the write names no aggregates",
        ));
    }

    // Check every aggregate before writing any.
    let mut versions = Vec::with_capacity(command.writes.len());
    for write in &command.writes {
        if write.events.is_empty() {
            return Err(refuse(codes::EMPTY_EVENTS_LIST, "events list is empty"));
        }
        if write.events.iter().any(|e| e.event_type == 0) {
            return Err(refuse(codes::ZERO_EVENT_TYPE, "event type 0 is reserved"));
        }
        let version = aggregates
            .get(agg_key(&write.key))?
            .map_or(0, |v| v.value());
        if version == 0 && !write.allow_create {
            return Err(refuse(
                codes::AGGREGATE_NOT_EXISTS,
                "aggregate does not exist",
            ));
        }
        if let Some(expected) = write.expected_version
            && expected != version
        {
            return Err(refuse(
                codes::OPTIMISTIC_CONCURRENCY_VIOLATION,
                format!("expected version {expected}, aggregate is at {version}"),
            ));
        }
        if write.enforce_client_idempotency {
            let ckey = client_key(&write.key, command.client_id);
            let lowest = write.events.iter().map(|e| e.client_seq).min().unwrap_or(0);
            if let Some(&pending) = in_flight.get(&ckey)
                && lowest <= pending
            {
                return Err(sequence_refusal(
                    codes::INFLIGHT_DUPLICATE,
                    "an identical write is in flight",
                    pending,
                    lowest,
                ));
            }
            let durable = client_seqs.get(ckey)?.map_or(0, |v| v.value());
            if lowest <= durable {
                return Err(sequence_refusal(
                    codes::CLIENT_IDEMPOTENCY_VIOLATION,
                    "client sequence already landed",
                    durable,
                    lowest,
                ));
            }
        }
        versions.push(version);
    }

    // Apply.
    let mut batches = txn.open_table(BATCHES)?;
    let mut last_version = 0;
    for (write, version) in command.writes.iter().zip(versions) {
        let (o, t, i) = agg_key(&write.key);
        let new_version = version + 1;
        let batch = ReadBatch {
            version: new_version,
            client_id: command.client_id,
            server_timestamp,
            events: write.events.clone(),
        };
        let bytes = serde_json::to_vec(&batch).map_err(|e| ApplyError::Storage(e.to_string()))?;
        batches.insert((o, t, i, new_version), bytes.as_slice())?;
        aggregates.insert((o, t, i), new_version)?;
        let highest = write.events.iter().map(|e| e.client_seq).max().unwrap_or(0);
        let ckey = client_key(&write.key, command.client_id);
        let durable = client_seqs.get(ckey)?.map_or(0, |v| v.value());
        if highest > durable {
            client_seqs.insert(ckey, highest)?;
        }
        if write.enforce_client_idempotency {
            let entry = in_flight.entry(ckey).or_insert(0);
            *entry = (*entry).max(highest);
        }
        last_version = new_version;
    }
    Ok(WriteAck {
        aggregate_version: (command.writes.len() == 1).then_some(last_version),
    })
}
