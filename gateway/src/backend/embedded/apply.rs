//! Celeriant's write checks, applied inside one redb write transaction.
//!
//! The order is the server's (see `docs/protocol.md` §6.4): per aggregate, validation (2000,
//! 2001), then the gateway's access policy (`crate::access`: 40302, or 2005 where a refusal
//! must look like a missing aggregate), existence (2005), the version guard (2003), **then**
//! idempotency — 2013 when the same (aggregate, client) has a write with an overlapping sequence
//! applied in the current, not-yet-durable group, 2002 when the lowest sequence is at or below
//! the highest durable one. Across a multi-aggregate command, access and existence refusals
//! answer at once, and every aggregate's guard is checked before any idempotency answer: a stale
//! guard anywhere is 2003 (naming the first such aggregate in the command's order, with its
//! current version), never 2002. So every aggregate's access is judged before a 2003 reveals
//! any aggregate's version.
//! Then the gateway's own storage quota per client id (40310): a duplicate is still answered
//! 2002 (landed) by a client over its quota, since it stores nothing. Every aggregate of a
//! command is checked, and everything it needs read (and checksum-checked), before any is
//! written, so a refused command leaves no trace and an accepted one is all-or-nothing.

use std::collections::HashMap;

use celeriant_sync_protocol::ReadBatch;
use celeriant_sync_protocol::codes::{celeriant as codes, gateway as g};
use redb::{ReadableTable, Table, WriteTransaction};
use uuid::Uuid;

use super::access::{ACCESS, open as open_access, seal as seal_access};
use super::record::{Corrupt, open_number, open_version, seal_batch, seal_number, seal_version};
use super::tables::{
    AGGREGATES, AggKey, BATCHES, BatchKey, CLIENT_SEQS, CLIENT_USAGE, ClientKey, Sealed, agg_key,
    client_key, describe,
};
use super::{StoreFailure, storage_failure};
use crate::access::AccessRecord;
use crate::backend::{BackendError, VersionConflict, WriteAck, WriteCommand};

/// Highest sequence per (aggregate, client) applied in the open, uncommitted group: those
/// writes are accepted but not yet durable, which is exactly Celeriant's "in flight".
pub type InFlight = HashMap<ClientKey, u64>;

/// The aggregates a group wrote, each with its highest new version (a group's writes to one
/// aggregate coalesce into one notification).
pub type Changed = HashMap<crate::backend::AggregateKey, u64>;

/// Why applying failed.
pub enum ApplyError {
    /// A Celeriant (or quota) answer for this command; nothing of it was written.
    Refused(BackendError),
    /// Data this command relies on fails its checksum; nothing of it was written, and the
    /// rest of the group goes on.
    Corrupt(Corrupt),
    /// The database failed; the whole transaction must be abandoned.
    Storage(StoreFailure),
}

impl From<redb::TableError> for ApplyError {
    fn from(e: redb::TableError) -> Self {
        ApplyError::Storage(storage_failure(e))
    }
}

impl From<redb::StorageError> for ApplyError {
    fn from(e: redb::StorageError) -> Self {
        ApplyError::Storage(storage_failure(e))
    }
}

impl From<Corrupt> for ApplyError {
    fn from(c: Corrupt) -> Self {
        ApplyError::Corrupt(c)
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

/// Celeriant's idempotency answer for one aggregate's write, if it refuses it: 2013 when the same
/// (aggregate, client) has an overlapping sequence in the open group, 2002 when the lowest
/// sequence is at or below the highest durable one.
fn idempotency(
    write: &crate::backend::AggregateCommand,
    ckey: ClientKey,
    durable: u64,
    in_flight: &InFlight,
) -> Option<ApplyError> {
    let lowest = write.events.iter().map(|e| e.client_seq).min().unwrap_or(0);
    if let Some(&pending) = in_flight.get(&ckey)
        && lowest <= pending
    {
        return Some(sequence_refusal(
            codes::INFLIGHT_DUPLICATE,
            "an identical write is in flight",
            pending,
            lowest,
        ));
    }
    (lowest <= durable).then(|| {
        sequence_refusal(
            codes::CLIENT_IDEMPOTENCY_VIOLATION,
            "client sequence already landed",
            durable,
            lowest,
        )
    })
}

/// The sealed highest sequence of `key`.
pub fn seal_client_seq(key: ClientKey, seq: u64) -> (u64, u32) {
    let (o, t, i, c) = key;
    seal_number("client_seqs", &[o, t, i, c], seq)
}

/// The highest sequence of `key`, checked.
pub fn open_client_seq(key: ClientKey, sealed: (u64, u32)) -> Result<u64, Corrupt> {
    let (o, t, i, c) = key;
    open_number("client_seqs", &[o, t, i, c], sealed, || {
        format!(
            "the highest client_seq of client {} on {}",
            Uuid::from_u128(c),
            describe((o, t, i))
        )
    })
}

/// The sealed storage usage of `client`.
pub fn seal_usage(client: u128, bytes: u64) -> (u64, u32) {
    seal_number("client_usage", &[client], bytes)
}

/// The storage usage of `client`, checked.
pub fn open_usage(client: u128, sealed: (u64, u32)) -> Result<u64, Corrupt> {
    open_number("client_usage", &[client], sealed, || {
        format!("the storage usage of client {}", Uuid::from_u128(client))
    })
}

/// The tables a write touches, opened once per commit group.
pub struct Tables<'txn> {
    aggregates: Table<'txn, AggKey, Sealed>,
    batches: Table<'txn, BatchKey, &'static [u8]>,
    client_seqs: Table<'txn, ClientKey, Sealed>,
    usage: Table<'txn, u128, Sealed>,
    access: Table<'txn, AggKey, &'static [u8]>,
}

impl<'txn> Tables<'txn> {
    /// Opens them in `txn`.
    pub fn open(txn: &'txn WriteTransaction) -> Result<Self, ApplyError> {
        Ok(Tables {
            aggregates: txn.open_table(AGGREGATES)?,
            batches: txn.open_table(BATCHES)?,
            client_seqs: txn.open_table(CLIENT_SEQS)?,
            usage: txn.open_table(CLIENT_USAGE)?,
            access: txn.open_table(ACCESS)?,
        })
    }
}

/// Checks and applies one command in the tables of the group's transaction, recording its
/// sequences in `in_flight`. `quota`: most bytes of batches one client id may store (0: no
/// quota). Each aggregate written is recorded in `changed` with its new version (for the
/// watchers, once committed).
pub fn apply(
    tables: &mut Tables<'_>,
    command: &WriteCommand,
    in_flight: &mut InFlight,
    changed: &mut Changed,
    server_timestamp: u64,
    quota: u64,
) -> Result<WriteAck, ApplyError> {
    let Tables {
        aggregates,
        batches,
        client_seqs,
        usage,
        access,
    } = tables;
    if command.writes.is_empty() {
        return Err(refuse(
            codes::EMPTY_EVENTS_LIST,
            "the write names no aggregates",
        ));
    }

    // Check every aggregate, and read everything the writes need, before writing any. A
    // refusal of existence or access is answered at once; the guard is checked for every
    // aggregate before any idempotency answer is given (2003 before 2013/2002, across the
    // command, as the server's conflict response lists every stale guard).
    let mut plans = Vec::with_capacity(command.writes.len());
    let mut conflicts: Vec<VersionConflict> = Vec::new();
    let mut sequences: Option<ApplyError> = None;
    for write in &command.writes {
        if write.events.is_empty() {
            return Err(refuse(codes::EMPTY_EVENTS_LIST, "events list is empty"));
        }
        if write.events.iter().any(|e| e.event_type == 0) {
            return Err(refuse(codes::ZERO_EVENT_TYPE, "event type 0 is reserved"));
        }
        let akey = agg_key(&write.key);
        let version = match aggregates.get(akey)? {
            Some(v) => open_version(akey, v.value())?,
            None => 0,
        };
        let record = match access.get(akey)? {
            Some(v) => Some(open_access(akey, v.value())?),
            None => None,
        };
        let creates = match (&command.policy, &command.principal) {
            (Some(policy), Some(who)) => {
                let type_id = write.key.aggregate.type_id;
                policy
                    .preset(type_id)
                    .judge_write(record.as_ref(), version, write.allow_create, who, type_id)
                    .map_err(|r| refuse(r.code, r.message))?
            }
            (None, Some(_)) => record.is_none() && version == 0,
            (_, None) => false,
        };
        if version == 0 && !write.allow_create {
            return Err(refuse(
                codes::AGGREGATE_NOT_EXISTS,
                "aggregate does not exist",
            ));
        }
        if let Some(expected) = write.expected_version
            && expected != version
        {
            // Every stale guard is found (as the server lists them), but the answer names the
            // first in the command's order; no later check of this aggregate is made.
            conflicts.push(VersionConflict {
                aggregate: write.key.aggregate,
                expected,
                current: version,
            });
            continue;
        }
        let ckey = client_key(&write.key, command.client_id);
        let durable = match client_seqs.get(ckey)? {
            Some(v) => open_client_seq(ckey, v.value())?,
            None => 0,
        };
        if write.enforce_client_idempotency && sequences.is_none() {
            sequences = idempotency(write, ckey, durable, in_flight);
        }
        if !conflicts.is_empty() || sequences.is_some() {
            // Refused whatever the other aggregates hold: nothing to prepare.
            continue;
        }
        let batch = ReadBatch {
            version: version + 1,
            client_id: command.client_id,
            server_timestamp,
            events: write.events.clone(),
        };
        let json = serde_json::to_vec(&batch)
            .map_err(|e| ApplyError::Storage(StoreFailure::Other(e.to_string())))?;
        let bkey = (akey.0, akey.1, akey.2, version + 1);
        let owner = creates
            .then(|| command.principal.clone())
            .flatten()
            .map(AccessRecord::owned_by);
        plans.push((
            write,
            akey,
            ckey,
            durable,
            bkey,
            seal_batch(bkey, &json),
            owner,
        ));
    }

    if let Some(&first) = conflicts.first() {
        return Err(ApplyError::Refused(BackendError::conflict(first)));
    }
    if let Some(refusal) = sequences {
        return Err(refusal);
    }

    let client = command.client_id.as_u128();
    let used = match usage.get(client)? {
        Some(v) => open_usage(client, v.value())?,
        None => 0,
    };
    let added: u64 = plans.iter().map(|p| p.5.len() as u64).sum();
    if quota > 0 && used.saturating_add(added) > quota {
        return Err(refuse(
            g::STORAGE_QUOTA_EXCEEDED,
            format!(
                "client {} has {used} bytes stored; this write adds {added}, over the \
                 {quota}-byte quota",
                command.client_id
            ),
        ));
    }

    // Apply.
    let mut last_version = 0;
    for (write, akey, ckey, durable, bkey, record, owner) in plans {
        batches.insert(bkey, record.as_slice())?;
        if let Some(owner) = owner {
            access.insert(akey, seal_access(akey, &owner).as_slice())?;
        }
        aggregates.insert(akey, seal_version(akey, bkey.3))?;
        let highest = write.events.iter().map(|e| e.client_seq).max().unwrap_or(0);
        if highest > durable {
            client_seqs.insert(ckey, seal_client_seq(ckey, highest))?;
        }
        if write.enforce_client_idempotency {
            let entry = in_flight.entry(ckey).or_insert(0);
            *entry = (*entry).max(highest);
        }
        last_version = bkey.3;
        changed.insert(write.key, bkey.3);
    }
    usage.insert(client, seal_usage(client, used + added))?;
    Ok(WriteAck {
        aggregate_version: (command.writes.len() == 1).then_some(last_version),
    })
}
