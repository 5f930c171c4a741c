//! The trim test hook (`POST /v1/faults/trim`): drop an aggregate's early batches, the way a
//! Celeriant cluster trims an aggregate, so the read side's answer to a trim (410 with
//! `minVersion`, a `reset` on the change stream) can be tested against the embedded store.
//!
//! Trimming removes the batches below `before` and records `before` in the `trims` table (see
//! `tables.rs`), in one transaction; reads from below it then fail with
//! [`ReadError::Trimmed`]. The aggregate's version and its writers' sequences are kept, so
//! writes go on as before. The bytes of the batches removed are given back to their writers'
//! storage usage (the quota) in the same transaction.

use std::collections::HashMap;

use redb::{Database, ReadableTable};

use super::apply::{open_usage, seal_usage};
use super::read::ReadError;
use super::record::{HEADER, open_trim, open_version, seal_trim, writer_of};
use super::tables::{AGGREGATES, BATCHES, CLIENT_USAGE, TRIMS, agg_key, describe};
use crate::backend::AggregateKey;

/// Why a trim did nothing.
pub enum TrimError {
    /// The store failed, or a stored number failed its checksum.
    Read(ReadError),
    /// `before` is past the aggregate's version + 1.
    Refused(String),
}

impl<E: Into<redb::Error>> From<E> for TrimError {
    fn from(e: E) -> Self {
        TrimError::Read(e.into().into())
    }
}

/// Trims `key` below `before`; returns the lowest available version after it. `before` past
/// the aggregate's version + 1 is refused; at or below the current lowest it changes nothing.
pub fn trim(db: &Database, key: AggregateKey, before: u64) -> Result<u64, TrimError> {
    let akey = agg_key(&key);
    let txn = db.begin_write()?;
    let min;
    {
        let tip = match txn.open_table(AGGREGATES)?.get(akey)? {
            Some(v) => {
                open_version(akey, v.value()).map_err(|c| TrimError::Read(ReadError::Corrupt(c)))?
            }
            None => 0,
        };
        let mut trims = txn.open_table(TRIMS)?;
        let current = match trims.get(akey)? {
            Some(v) => {
                open_trim(akey, v.value()).map_err(|c| TrimError::Read(ReadError::Corrupt(c)))?
            }
            None => 1,
        };
        if before > tip + 1 {
            return Err(TrimError::Refused(format!(
                "{} is at version {tip}: it can be trimmed below {} at most, not {before}",
                describe(akey),
                tip + 1
            )));
        }
        if before <= current {
            return Ok(current);
        }
        let mut batches = txn.open_table(BATCHES)?;
        let (o, t, i) = akey;
        // The bytes each writer stored in the batches removed, given back to its quota.
        let mut freed: HashMap<u128, u64> = HashMap::new();
        for row in batches.range((o, t, i, current)..(o, t, i, before))? {
            let (_, value) = row?;
            let record = value.value();
            if let Some(client) = record.get(HEADER..).and_then(writer_of) {
                *freed.entry(client).or_insert(0) += record.len() as u64;
            }
        }
        batches.retain_in((o, t, i, current)..(o, t, i, before), |_, _| false)?;
        let mut usage = txn.open_table(CLIENT_USAGE)?;
        for (client, bytes) in freed {
            let used = match usage.get(client)? {
                Some(v) => open_usage(client, v.value())
                    .map_err(|c| TrimError::Read(ReadError::Corrupt(c)))?,
                None => 0,
            };
            usage.insert(client, seal_usage(client, used.saturating_sub(bytes)))?;
        }
        trims.insert(akey, seal_trim(akey, before))?;
        min = before;
    }
    txn.commit()?;
    Ok(min)
}
