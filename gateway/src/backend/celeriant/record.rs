//! The one storage pattern the gateway's own records in Celeriant share (the access records of
//! `access`, the revocations of `revocations`): an aggregate of the reserved type
//! (`crate::access::RESERVED_TYPE`) whose every batch is **one** event ([`RECORD_EVENT_TYPE`])
//! holding the whole record after a change, written under [`RECORD_WRITER`] without client
//! idempotency and guarded with `expected_version` = the version the change was decided on.
//!
//! Reading costs at most two requests however long the history: the tip ([`tip`], an
//! aggregate-details request), then that batch alone ([`value_at`]). Kept here once so the two
//! users cannot drift apart.

use std::sync::Arc;

use celeriant_client_tokio::{CeleriantPool, ClientError, DetailsError, ServerError, WriteError};
use celeriant_msg::request::read_filters::ReadFilters;
use celeriant_msg::request::requests::{
    AggregateDetailsRequest, ReadRequest, SingleAggregateWrite, WriteRequest,
};
use celeriant_wal::aggregate_key::AggregateKey as CeleriantKey;
use celeriant_wal::datablocks::datablock_aggregate_event::DatablockAggregateEvent;
use sha2::{Digest, Sha256};

use super::backend_error;
use crate::backend::BackendError;

/// The event type of a record batch (its value: the whole record as JSON).
pub const RECORD_EVENT_TYPE: u64 = 1;

/// The client id the gateway writes its records under (idempotency is off for them: the version
/// guard decides).
pub const RECORD_WRITER: u128 = 0xac0e_55ed_0000_4000_8000_0000_0000_0001;

/// The first 16 bytes of SHA-256 over `parts` in order, read as a big-endian `u128`: how a
/// record's aggregate id is derived from a domain tag (and what the record is about).
pub fn derived_id(parts: &[&[u8]]) -> u128 {
    let mut hash = Sha256::new();
    for part in parts {
        hash.update(part);
    }
    let digest = hash.finalize();
    let mut first = [0u8; 16];
    first.copy_from_slice(&digest[..16]);
    u128::from_be_bytes(first)
}

/// What an aggregate-details request says of a record.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Tip {
    /// The aggregate does not exist.
    Missing,
    /// It was (soft-)deleted: the gateway never deletes a record, so it is damaged.
    Deleted,
    /// Its newest version.
    At(u64),
}

/// The record's tip (one aggregate-details request).
pub async fn tip(pool: &CeleriantPool, key: &CeleriantKey) -> Result<Tip, BackendError> {
    let details = pool
        .aggregate_details(AggregateDetailsRequest {
            correlation_id: None,
            aggregate_key: key.clone(),
        })
        .await;
    match details {
        Ok(d) if d.is_deleted => Ok(Tip::Deleted),
        Ok(d) => Ok(Tip::At(d.max_aggregate_version)),
        Err(ClientError::Server(ServerError::Details {
            kind: DetailsError::AggregateNotExists,
            ..
        })) => Ok(Tip::Missing),
        Err(e) => Err(backend_error(e)),
    }
}

/// The value of the one event of batch `version` (one read request). `Ok(Err(why))`: the
/// record is damaged (no such batch, or not exactly one event).
pub async fn value_at(
    pool: &CeleriantPool,
    key: &CeleriantKey,
    version: u64,
) -> Result<Result<Arc<Vec<u8>>, &'static str>, BackendError> {
    let response = pool
        .read(ReadRequest {
            correlation_id: None,
            aggregate_key: key.clone(),
            filters: ReadFilters::new(version).to_aggregate_version(version),
        })
        .await
        .map_err(backend_error)?;
    let Some(batch) = response
        .event_batches
        .iter()
        .find(|b| b.aggregate_version == version)
    else {
        return Ok(Err("has no batch at its tip"));
    };
    let [event] = batch.events.as_slice() else {
        return Ok(Err("has a batch that is not one event"));
    };
    Ok(Ok(event.event_value.clone()))
}

fn is_conflict(error: &ClientError) -> bool {
    matches!(
        error,
        ClientError::Server(ServerError::Write {
            kind: WriteError::OptimisticConcurrencyViolation { .. },
            ..
        })
    )
}

/// Appends `value` as version `version` of the record (guarded on `version - 1`, created only
/// when `version` is 1). `Ok(false)`: the guard was stale (2003), nothing was appended.
pub async fn append(
    pool: &CeleriantPool,
    key: &CeleriantKey,
    value: Vec<u8>,
    version: u64,
) -> Result<bool, BackendError> {
    let event = DatablockAggregateEvent {
        client_seq: version,
        event_seq: 0,
        event_id: None,
        event_timestamp: std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64),
        event_type_major: RECORD_EVENT_TYPE,
        event_type_minor: 0,
        event_value: Arc::new(value),
        iv: None,
    };
    let write = SingleAggregateWrite {
        events: vec![event],
        allow_create: version == 1,
        expected_version: Some(version.saturating_sub(1)),
        enforce_client_idempotency: false,
    };
    let request = WriteRequest {
        correlation_id: None,
        client_id: RECORD_WRITER,
        user_id: None,
        writes: [(key.clone(), write)].into(),
    };
    match pool.write(request).await {
        Ok(_) => Ok(true),
        Err(e) if is_conflict(&e) => Ok(false),
        Err(e) => Err(backend_error(e)),
    }
}
