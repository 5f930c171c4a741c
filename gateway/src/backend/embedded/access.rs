//! The embedded store's access records: each aggregate's owner and members (`crate::access`),
//! in the `access` table, checksummed like every other value.
//!
//! A record is written by the write that creates its aggregate, in the same transaction
//! (`apply.rs`), so an aggregate never exists without its owner and two creators racing cannot
//! both own it: the single writer applies them one after the other, and the second sees the
//! first's record. Members change through [`update`], a read-modify-write in one transaction.
//!
//! **Existing stores** (written before access records): on open, every aggregate without a
//! record gets one whose owner is `device:<clientId>` of the writer of its lowest stored batch
//! (its first batch unless trimmed) — the migration rule documented in `docs/protocol.md`. An
//! aggregate with no batch left has no owner; only policies that need none let anyone use it.

use redb::{Database, ReadableDatabase, ReadableTable, ReadableTableMetadata, TableDefinition};
use uuid::Uuid;

use super::record::{Corrupt, open_batch, writer_of};
use super::tables::{AGGREGATES, AggKey, BATCHES, describe};
use super::{StoreFailure, storage_failure};
use crate::access::{AccessRecord, Principal};

/// Each aggregate's owner and members: `[TAG][crc32c][JSON of AccessRecord]`.
pub const ACCESS: TableDefinition<AggKey, &[u8]> = TableDefinition::new("access");

const TAG: u8 = 0xA5;
const HEADER: usize = 5;

fn crc(key: AggKey, json: &[u8]) -> u32 {
    let (o, t, i) = key;
    let mut c = crc32c::crc32c(b"access");
    for part in [o, t, i] {
        c = crc32c::crc32c_append(c, &part.to_le_bytes());
    }
    crc32c::crc32c_append(c, json)
}

/// The stored form of `record` under `key`.
pub fn seal(key: AggKey, record: &AccessRecord) -> Vec<u8> {
    let json = serde_json::to_vec(record).unwrap_or_default();
    let mut out = Vec::with_capacity(HEADER + json.len());
    out.push(TAG);
    out.extend_from_slice(&crc(key, &json).to_le_bytes());
    out.extend_from_slice(&json);
    out
}

/// The record stored under `key`, checked.
pub fn open(key: AggKey, stored: &[u8]) -> Result<AccessRecord, Corrupt> {
    let corrupt = || Corrupt(format!("the access record of {}", describe(key)));
    if stored.len() < HEADER || stored[0] != TAG {
        return Err(corrupt());
    }
    let sum = u32::from_le_bytes([stored[1], stored[2], stored[3], stored[4]]);
    let json = &stored[HEADER..];
    if crc(key, json) != sum {
        return Err(corrupt());
    }
    serde_json::from_slice(json).map_err(|_| corrupt())
}

/// Why reading or changing a record failed.
pub enum AccessError {
    /// A stored record fails its checksum.
    Corrupt(Corrupt),
    /// The database failed.
    Storage(StoreFailure),
}

impl<E: Into<redb::Error>> From<E> for AccessError {
    fn from(e: E) -> Self {
        AccessError::Storage(storage_failure(e))
    }
}

/// The record of `key`, if any.
pub fn get(db: &Database, key: AggKey) -> Result<Option<AccessRecord>, AccessError> {
    let txn = db.begin_read()?;
    let table = match txn.open_table(ACCESS) {
        Ok(table) => table,
        Err(redb::TableError::TableDoesNotExist(_)) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    match table.get(key)? {
        Some(v) => open(key, v.value()).map(Some).map_err(AccessError::Corrupt),
        None => Ok(None),
    }
}

/// Reads the record of `key`, hands it to `change` and stores what it returns, in one write
/// transaction; `change`'s refusal is returned as is, with nothing written.
pub fn update<T>(
    db: &Database,
    key: AggKey,
    change: impl FnOnce(Option<AccessRecord>) -> Result<(AccessRecord, T), T>,
) -> Result<Result<T, T>, AccessError> {
    let txn = db.begin_write()?;
    let answer = {
        let mut table = txn.open_table(ACCESS)?;
        let current = match table.get(key)? {
            Some(v) => Some(open(key, v.value()).map_err(AccessError::Corrupt)?),
            None => None,
        };
        match change(current) {
            Ok((record, answer)) => {
                table.insert(key, seal(key, &record).as_slice())?;
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

/// Gives every aggregate without a record the owner of the migration rule (see the module
/// documentation), in one transaction; returns how many were given one. Cheap when every
/// aggregate has a record (two table lengths).
pub fn backfill(db: &Database) -> Result<u64, String> {
    let failed = |e: &dyn std::fmt::Display| format!("recording owners: {e}");
    let txn = db.begin_write().map_err(|e| failed(&e))?;
    let mut added = 0;
    {
        let aggregates = txn.open_table(AGGREGATES).map_err(|e| failed(&e))?;
        let batches = txn.open_table(BATCHES).map_err(|e| failed(&e))?;
        let mut access = txn.open_table(ACCESS).map_err(|e| failed(&e))?;
        let (n_agg, n_access) = (
            aggregates.len().map_err(|e| failed(&e))?,
            access.len().map_err(|e| failed(&e))?,
        );
        if n_agg > n_access {
            for row in aggregates.iter().map_err(|e| failed(&e))? {
                let (k, _) = row.map_err(|e| failed(&e))?;
                let key = k.value();
                if access.get(key).map_err(|e| failed(&e))?.is_some() {
                    continue;
                }
                let (o, t, i) = key;
                let first = batches
                    .range((o, t, i, 0)..=(o, t, i, u64::MAX))
                    .map_err(|e| failed(&e))?
                    .next();
                let Some(first) = first else { continue };
                let (bk, bv) = first.map_err(|e| failed(&e))?;
                // A damaged first batch names nobody: the aggregate stays without an owner
                // (and the damage is reported where the batch is read).
                let Some(writer) = open_batch(bk.value(), bv.value()).ok().and_then(writer_of)
                else {
                    tracing::warn!(aggregate = %describe(key), "no owner recorded: its first batch fails its checksum");
                    continue;
                };
                let record = AccessRecord::owned_by(Principal::device(Uuid::from_u128(writer)));
                access
                    .insert(key, seal(key, &record).as_slice())
                    .map_err(|e| failed(&e))?;
                added += 1;
            }
        }
    }
    txn.commit().map_err(|e| failed(&e))?;
    Ok(added)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_opens_under_its_own_key_only() {
        let record = AccessRecord::owned_by(Principal::user("alice").unwrap());
        let stored = seal((1, 2, 3), &record);
        assert_eq!(open((1, 2, 3), &stored).unwrap(), record);
        assert!(open((1, 2, 4), &stored).is_err());
        let mut flipped = stored.clone();
        *flipped.last_mut().unwrap() ^= 1;
        assert!(open((1, 2, 3), &flipped).is_err());
    }
}
