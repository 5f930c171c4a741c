//! The embedded store's revocations (`crate::auth::revoke`): the `revocations` table, one row
//! per target (`device:<uuid>`, `principal:<text>`, `session:<uuid>`), each value checksummed
//! like every other (`[TAG][crc32c of key and JSON][JSON]`). The table is created by the first
//! revocation, so a store without it is the same schema (no row: nothing revoked).
//!
//! A change is one write transaction: read every row, let the caller decide the new list, write
//! it back. Revocations are few (capped by `--max-revocations`) and change rarely (an operator's
//! hand), so rewriting the list is simpler than a diff and just as atomic. A damaged row fails
//! the whole read: a revocation is never silently dropped.

use redb::{Database, ReadableDatabase, ReadableTable, TableDefinition};

use std::sync::Arc;

use super::read::ReadError;
use super::record::Corrupt;
use super::{Shared, StoreFailure, storage_failure};
use crate::auth::revoke::{Revocation, prune};
use crate::backend::{BackendError, RevocationChange};
use crate::error::ApiError;

/// The revocations, by target key.
pub const REVOCATIONS: TableDefinition<&str, &[u8]> = TableDefinition::new("revocations");

const TAG: u8 = 0x7E;
const HEADER: usize = 5;

fn crc(key: &str, json: &[u8]) -> u32 {
    let c = crc32c::crc32c(b"revocation");
    let c = crc32c::crc32c_append(c, &(key.len() as u64).to_le_bytes());
    let c = crc32c::crc32c_append(c, key.as_bytes());
    crc32c::crc32c_append(c, json)
}

fn seal(key: &str, record: &Revocation) -> Vec<u8> {
    let json = serde_json::to_vec(record).unwrap_or_default();
    let mut out = Vec::with_capacity(HEADER + json.len());
    out.push(TAG);
    out.extend_from_slice(&crc(key, &json).to_le_bytes());
    out.extend_from_slice(&json);
    out
}

fn open(key: &str, stored: &[u8]) -> Result<Revocation, RevocationError> {
    let corrupt = || RevocationError::Corrupt(Corrupt(format!("the revocation {key:?}")));
    if stored.len() < HEADER || stored[0] != TAG {
        return Err(corrupt());
    }
    let sum = u32::from_le_bytes([stored[1], stored[2], stored[3], stored[4]]);
    let json = &stored[HEADER..];
    if crc(key, json) != sum {
        return Err(corrupt());
    }
    let record: Revocation = serde_json::from_slice(json).map_err(|_| corrupt())?;
    if record.target.key() != key {
        return Err(corrupt());
    }
    Ok(record)
}

/// Why reading or changing the revocations failed.
pub enum RevocationError {
    /// A stored row fails its checksum (named).
    Corrupt(Corrupt),
    /// The database failed.
    Storage(StoreFailure),
}

impl<E: Into<redb::Error>> From<E> for RevocationError {
    fn from(e: E) -> Self {
        RevocationError::Storage(storage_failure(e))
    }
}

fn all(
    table: &impl ReadableTable<&'static str, &'static [u8]>,
) -> Result<Vec<Revocation>, RevocationError> {
    let mut out = Vec::new();
    for row in table.iter()? {
        let (k, v) = row?;
        out.push(open(k.value(), v.value())?);
    }
    Ok(out)
}

/// Every stored revocation whose `forget_at` has not passed at `now_s`.
pub fn list(db: &Database, now_s: u64) -> Result<Vec<Revocation>, RevocationError> {
    let txn = db.begin_read()?;
    let table = match txn.open_table(REVOCATIONS) {
        Ok(table) => table,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(Vec::new()),
        Err(e) => return Err(e.into()),
    };
    let mut records = all(&table)?;
    prune(&mut records, now_s);
    Ok(records)
}

/// Hands the current list (pruned at `now_s`) to `change` and stores what it returns, in one
/// write transaction; `change`'s refusal is returned as is, with nothing written.
pub fn update<T>(
    db: &Database,
    now_s: u64,
    change: impl FnOnce(Vec<Revocation>) -> Result<(Vec<Revocation>, T), T>,
) -> Result<Result<T, T>, RevocationError> {
    let txn = db.begin_write()?;
    let answer = {
        let mut table = txn.open_table(REVOCATIONS)?;
        let mut current = all(&table)?;
        let keys: Vec<String> = current.iter().map(|r| r.target.key()).collect();
        prune(&mut current, now_s);
        match change(current) {
            Ok((records, answer)) => {
                for key in &keys {
                    table.remove(key.as_str())?;
                }
                for record in &records {
                    let key = record.target.key();
                    table.insert(key.as_str(), seal(&key, record).as_slice())?;
                }
                Ok(answer)
            }
            Err(refusal) => Err(refusal),
        }
    };
    if answer.is_ok() {
        txn.commit()?;
    }
    Ok(answer)
}

fn failed(shared: &Shared, e: RevocationError) -> BackendError {
    match e {
        RevocationError::Corrupt(c) => shared.read_failed(ReadError::Corrupt(c)),
        RevocationError::Storage(f) => shared.read_failed(ReadError::Storage(f)),
    }
}

/// [`list`] off the async runtime, with the store's error answers.
pub(super) async fn list_in(
    shared: Arc<Shared>,
    now_s: u64,
) -> Result<Vec<Revocation>, BackendError> {
    tokio::task::spawn_blocking(move || {
        let db = shared.db()?;
        list(&db, now_s).map_err(|e| failed(&shared, e))
    })
    .await
    .map_err(|e| BackendError::Unavailable(e.to_string()))?
}

/// [`update`] off the async runtime, with the store's error answers.
pub(super) async fn update_in(
    shared: Arc<Shared>,
    now_s: u64,
    change: RevocationChange,
) -> Result<Result<Vec<Revocation>, ApiError>, BackendError> {
    tokio::task::spawn_blocking(move || {
        let db = shared.db()?;
        let answer = update(&db, now_s, |current| {
            change(current).map(|l| (l.clone(), Ok(l))).map_err(Err)
        })
        .map_err(|e| failed(&shared, e))?;
        Ok(answer.unwrap_or_else(|refused| refused))
    })
    .await
    .map_err(|e| BackendError::Unavailable(e.to_string()))?
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::auth::revoke::Target;

    #[test]
    fn a_row_opens_under_its_own_key_only() {
        let record = Revocation {
            target: Target::Device(uuid::Uuid::from_u128(3)),
            revoked_at: 7,
            lifted_at: None,
            forget_at: None,
        };
        let key = record.target.key();
        let stored = seal(&key, &record);
        assert!(open(&key, &stored).is_ok_and(|r| r == record));
        assert!(open("device:00000000-0000-0000-0000-000000000004", &stored).is_err());
        let mut flipped = stored.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(open(&key, &flipped).is_err());
    }
}
