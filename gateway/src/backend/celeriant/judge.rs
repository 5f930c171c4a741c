//! The access policy on the Celeriant backend's write path, judged before anything is sent.
//!
//! Per aggregate of the command: the access record (`access`: cached; re-read after the members
//! TTL when the preset has members) decides with [`crate::access::Preset::judge_write`], the
//! rules the embedded store applies in its transaction. Without a record, the data aggregate's
//! existence is asked (an aggregate-details request), and when it exists the record is read again (it is written
//! before the data, so it may have appeared since it was missed): an absent one may be created,
//! and its record is then written
//! **before** the data write, create-only (`expected_version: 0`). A record that loses that race
//! (2003) is read back and the write judged against the winner's record, like any other
//! principal's. Every aggregate is judged before any record is written, so a command refused
//! for one aggregate writes no record for another (except when a record of a later aggregate is
//! lost to a racing creator: the earlier ones stay, without data, as after a crash — their ids
//! are this principal's).
//!
//! A write that may not create its aggregate (`allowCreate: false`) finding neither record nor
//! data is refused here with Celeriant's own answer (2005, the gateway's not-exists wording) and
//! nothing is sent: the data write carries no guard of its own, so sent, it would land in an
//! aggregate another principal created (record first) after this judgement. Every other write
//! that is sent without a fresh record either creates (its record is written first, create-only)
//! or appends to data that already exists (a record-less aggregate under `authenticated`), so no
//! creation can race it.
//!
//! A command with a principal and no policy (`--auth none`) is judged as `authenticated`:
//! nothing is refused, owners are recorded (as the embedded store records them).
//!
//! **A data aggregate that exists without a record** (written through this backend before owners
//! were recorded, or by another Celeriant client) is judged as the embedded store judges an
//! aggregate with no owner: under `owner`, `members` and `members-read` nobody may write or read
//! it but the operator (reads only); under `authenticated` anyone may append; under
//! `authenticated-read` and `read-only` anyone may read and nobody append. No record is ever
//! written for it: an owner is never guessed, and the first principal to ask never takes it over.

use std::sync::Arc;

use celeriant_client_tokio::{ClientError, DetailsError, ServerError};
use celeriant_msg::request::requests::AggregateDetailsRequest;

use super::{CeleriantBackend, backend_error, convert};
use crate::access::{AccessRecord, NOT_EXISTS_MESSAGE, Policy, Principal, Refusal};
use crate::backend::{AggregateKey, BackendError, WriteCommand};
use celeriant_sync_protocol::codes::celeriant as cc;

fn refused(r: Refusal) -> BackendError {
    BackendError::code(r.code, r.message)
}

/// Judges `command` by `who` under `policy`, writing the access record of every aggregate it
/// creates; `Err` with the refusal (nothing of the command is sent then).
pub(super) async fn judge(
    backend: &CeleriantBackend,
    command: &WriteCommand,
    policy: &Policy,
    who: &Principal,
) -> Result<(), BackendError> {
    let mut creates = Vec::new();
    let mut doomed = None;
    for (index, write) in command.writes.iter().enumerate() {
        let type_id = write.key.aggregate.type_id;
        let preset = policy.preset(type_id);
        let mut record = backend
            .records
            .get(&write.key, preset.member_grants().is_some())
            .await?;
        let mut version = 1;
        if record.is_none() {
            // The record is written before the data: data seen after a missed record may have
            // been created (with its record) in between, so look for the record again.
            version = data_version(backend, &write.key).await?;
            if version > 0 {
                record = backend.records.read(&write.key).await?.map(Arc::new);
            }
        }
        match record {
            Some(record) => {
                preset
                    .judge_write(Some(&record), 1, write.allow_create, who, type_id)
                    .map_err(refused)?;
            }
            None => {
                let creates_it = preset
                    .judge_write(None, version, write.allow_create, who, type_id)
                    .map_err(refused)?;
                // Absent, and guarded on a version it cannot have: the write is refused 2003
                // whatever happens (below, once every aggregate is judged).
                let guard = write.expected_version.unwrap_or(0);
                if doomed.is_none() && version == 0 && guard != 0 {
                    doomed = Some(index);
                }
                // Absent, and this write may not create it: refused here, worded as
                // Celeriant's 2005. Sent, it could land in an aggregate another principal
                // creates (record first) between this judgement and the write: nothing else
                // guards the data write.
                if version == 0 && !write.allow_create {
                    return Err(BackendError::code(
                        cc::AGGREGATE_NOT_EXISTS,
                        NOT_EXISTS_MESSAGE,
                    ));
                }
                if creates_it {
                    creates.push((write.key, write.allow_create));
                }
            }
        }
    }
    if let Some(index) = doomed {
        return Err(stale_guard(backend, command, index).await);
    }
    for (key, allow_create) in creates {
        let record = AccessRecord::owned_by(who.clone());
        if backend.records.create(&key, &record).await? {
            tracing::info!(aggregate = %format!("{}/{}", key.aggregate.type_id, key.aggregate.id), owner = %who, "owner recorded");
            continue;
        }
        // Another creator's record landed first: judged like any other principal.
        let type_id = key.aggregate.type_id;
        let winner = backend.records.read(&key).await?;
        policy
            .preset(type_id)
            .judge_write(winner.as_ref(), 1, allow_create, who, type_id)
            .map_err(refused)?;
    }
    Ok(())
}

/// The 2003 Celeriant would answer `command`, whose write `doomed` is guarded on a version
/// other than 0 of an absent aggregate: the first stale guard in the command's order (an
/// earlier guarded write may be stale too). Refused here rather than sent, so that no owner is
/// recorded for an aggregate the write never creates, and nothing is sent that could land in
/// an aggregate another principal creates meanwhile (judged absent, it was never judged
/// against that principal's record).
async fn stale_guard(
    backend: &CeleriantBackend,
    command: &WriteCommand,
    doomed: usize,
) -> BackendError {
    let conflict = |key: &AggregateKey, expected: u64, current: u64| {
        BackendError::conflict(crate::backend::VersionConflict {
            aggregate: key.aggregate,
            expected,
            current,
        })
    };
    for write in &command.writes[..doomed] {
        let Some(expected) = write.expected_version else {
            continue;
        };
        let key = convert::aggregate_key(&write.key);
        let current = match super::record::tip(&backend.pool, &key).await {
            Ok(super::record::Tip::At(version)) => version,
            Ok(_) => 0,
            Err(e) => return e,
        };
        if current != expected {
            return conflict(&write.key, expected, current);
        }
    }
    let write = &command.writes[doomed];
    conflict(&write.key, write.expected_version.unwrap_or_default(), 0)
}

/// 0 when the data aggregate does not exist, else 1 (it exists, deleted or trimmed included):
/// one aggregate-details request, not a read of its first batch.
async fn data_version(backend: &CeleriantBackend, key: &AggregateKey) -> Result<u64, BackendError> {
    let details = backend
        .pool
        .aggregate_details(AggregateDetailsRequest {
            correlation_id: None,
            aggregate_key: convert::aggregate_key(key),
        })
        .await;
    match details {
        Ok(_) => Ok(1),
        Err(ClientError::Server(ServerError::Details {
            kind: DetailsError::AggregateNotExists,
            ..
        })) => Ok(0),
        Err(e) => Err(backend_error(e)),
    }
}
