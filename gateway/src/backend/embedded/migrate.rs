//! Opening a database: creating schema 2, or converting a schema 1 store in place.
//!
//! Stores written before checksums existed (schema 1: no `meta` table, bare numbers, batches as
//! bare JSON) are **migrated** the first time this gateway opens them, in one write
//! transaction, so a crash midway leaves the old store untouched: every batch is rewritten as
//! a checksummed record (its JSON unchanged, so reads answer exactly what they answered
//! before), versions and sequences move to their checksummed tables, each client's usage is
//! counted for the quota, and `meta.schema` becomes 2. Batches are rewritten a chunk at a time,
//! so memory stays bounded however large the store is. A store from a newer gateway (schema
//! above 2) is refused rather than guessed at.

use std::collections::HashMap;

use redb::{Database, ReadableTable, TableHandle, WriteTransaction};

use super::apply::{seal_client_seq, seal_usage};
use super::record::{HEADER, TAG, seal_batch, seal_version, writer_of};
use super::tables::{
    AGGREGATES, AGGREGATES_V1, BATCHES, BatchKey, CLIENT_SEQS, CLIENT_SEQS_V1, CLIENT_USAGE, META,
    SCHEMA,
};

/// Batches rewritten per step of the migration.
const CHUNK: usize = 256;

/// What opening found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Opened {
    /// A new, empty store.
    Created,
    /// Already at schema 2.
    Current,
    /// Converted from schema 1; this many batches rewritten.
    Migrated(u64),
}

/// Brings `db` to schema 2 (see the module documentation).
pub fn prepare(db: &Database) -> Result<Opened, String> {
    let txn = db.begin_write().map_err(|e| e.to_string())?;
    let names: Vec<String> = txn
        .list_tables()
        .map_err(|e| e.to_string())?
        .map(|t| t.name().to_owned())
        .collect();
    let has = |name: &str| names.iter().any(|n| n == name);
    let opened = if has(META.name()) {
        let schema = txn
            .open_table(META)
            .map_err(|e| e.to_string())?
            .get("schema")
            .map_err(|e| e.to_string())?
            .map(|v| v.value());
        match schema {
            Some(SCHEMA) => Opened::Current,
            other => {
                return Err(format!(
                    "the store has schema {other:?}; this gateway reads schema {SCHEMA} (and \
                     migrates schema 1)"
                ));
            }
        }
    } else if has(AGGREGATES_V1.name()) || has(BATCHES.name()) {
        Opened::Migrated(migrate(&txn).map_err(|e| format!("migrating schema 1: {e}"))?)
    } else {
        Opened::Created
    };
    create_tables(&txn).map_err(|e| e.to_string())?;
    txn.commit().map_err(|e| e.to_string())?;
    Ok(opened)
}

fn create_tables(txn: &WriteTransaction) -> Result<(), redb::Error> {
    txn.open_table(AGGREGATES)?;
    txn.open_table(BATCHES)?;
    txn.open_table(CLIENT_SEQS)?;
    txn.open_table(CLIENT_USAGE)?;
    txn.open_table(META)?.insert("schema", SCHEMA)?;
    Ok(())
}

fn migrate(txn: &WriteTransaction) -> Result<u64, redb::Error> {
    let mut usage: HashMap<u128, u64> = HashMap::new();
    let mut rewritten = 0u64;
    {
        let mut batches = txn.open_table(BATCHES)?;
        let mut from: Option<BatchKey> = None;
        loop {
            let chunk: Vec<(BatchKey, Vec<u8>)> = {
                let rows = match from {
                    None => batches.range::<BatchKey>(..)?,
                    Some(after) => batches.range::<BatchKey>((
                        std::ops::Bound::Excluded(after),
                        std::ops::Bound::Unbounded,
                    ))?,
                };
                let mut chunk = Vec::with_capacity(CHUNK);
                for row in rows.take(CHUNK) {
                    let (key, value) = row?;
                    chunk.push((key.value(), value.value().to_vec()));
                }
                chunk
            };
            let Some(last) = chunk.last() else { break };
            from = Some(last.0);
            for (key, json) in chunk {
                let record = if json.first() == Some(&TAG) {
                    json // already converted (a schema 1 store never has this tag)
                } else {
                    rewritten += 1;
                    let record = seal_batch(key, &json);
                    batches.insert(key, record.as_slice())?;
                    record
                };
                // The writing client, for the quota; a batch that does not parse counts for
                // nobody (`verify` reports it).
                if let Some(client) = writer_of(&record[HEADER..]) {
                    *usage.entry(client).or_insert(0) += record.len() as u64;
                }
            }
        }
    }
    {
        let old = txn.open_table(AGGREGATES_V1)?;
        let mut new = txn.open_table(AGGREGATES)?;
        for row in old.iter()? {
            let (key, version) = row?;
            new.insert(key.value(), seal_version(key.value(), version.value()))?;
        }
    }
    txn.delete_table(AGGREGATES_V1)?;
    {
        let old = txn.open_table(CLIENT_SEQS_V1)?;
        let mut new = txn.open_table(CLIENT_SEQS)?;
        for row in old.iter()? {
            let (key, seq) = row?;
            new.insert(key.value(), seal_client_seq(key.value(), seq.value()))?;
        }
    }
    txn.delete_table(CLIENT_SEQS_V1)?;
    let mut table = txn.open_table(CLIENT_USAGE)?;
    for (client, bytes) in usage {
        table.insert(client, seal_usage(client, bytes))?;
    }
    Ok(rewritten)
}
