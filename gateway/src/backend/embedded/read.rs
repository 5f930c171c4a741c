//! Reading pages of an aggregate's batches, every record checked against its checksum.
//!
//! A page is built straight from the stored records: their JSON is exactly what a read
//! answers, so [`page_json`] concatenates it into the response body without parsing (one copy,
//! no intermediate structures), while [`page`] parses it for the typed [`Backend::read`].
//! Either way a record that fails its checksum is never served: the read fails with
//! `DATA_CORRUPT` (50001) naming the aggregate and version, and the failure is counted
//! (`/healthz`) and logged by the caller.
//!
//! Every page carries the aggregate's `tip` (its version, read in the same transaction as the
//! batches). A read from below a trimmed aggregate's lowest available version fails with
//! [`ReadError::Trimmed`] (answered 410 with `minVersion`).
//!
//! [`Backend::read`]: crate::backend::Backend::read

use celeriant_sync_protocol::ReadBatch;
use redb::{Database, ReadableDatabase};

use redb::ReadTransaction;

use super::record::{Corrupt, HEADER, open_batch, open_trim};
use super::tables::{BATCHES, BatchKey, TRIMS, agg_key};
use super::{StoreFailure, storage_failure};
use crate::backend::{AggregateKey, JsonPage, ReadPage, ReadQuery};

/// Why a read failed.
pub enum ReadError {
    /// A record failed its checksum (or does not parse).
    Corrupt(Corrupt),
    /// The database failed.
    Storage(StoreFailure),
    /// The read starts below the aggregate's lowest available version, this one.
    Trimmed(u64),
}

impl<E: Into<redb::Error>> From<E> for ReadError {
    fn from(e: E) -> Self {
        ReadError::Storage(storage_failure(e))
    }
}

const OPEN: &[u8] = br#"{"batches":["#;

fn close(next: Option<u64>, tip: u64) -> String {
    match next {
        Some(n) => format!(r#"],"next":{n},"tip":{tip}}}"#),
        None => format!(r#"],"next":null,"tip":{tip}}}"#),
    }
}

/// Longest closing: `],"next":` and 16 digits, `,"tip":` and 16 digits, and `}`.
const CLOSE_MAX: usize = 49;

/// The aggregate's version (0: unknown) and its lowest available version (1 unless trimmed).
///
/// The version is the key of its last batch (one descent of the batches' tree), so a read never
/// depends on the `aggregates` record: a damaged one keeps the writes out (they must trust it)
/// but not the readers. An aggregate trimmed of every batch is at its lowest version − 1.
pub fn bounds(txn: &ReadTransaction, key: super::tables::AggKey) -> Result<(u64, u64), ReadError> {
    bounds_in(&Tables::open(txn)?, key)
}

/// The two tables [`bounds`] reads, opened once for many aggregates.
struct Tables {
    /// `None` while nothing was ever trimmed.
    trims: Option<redb::ReadOnlyTable<super::tables::AggKey, super::tables::Sealed>>,
    batches: redb::ReadOnlyTable<BatchKey, &'static [u8]>,
}

impl Tables {
    fn open(txn: &ReadTransaction) -> Result<Tables, ReadError> {
        let trims = match txn.open_table(TRIMS) {
            Ok(table) => Some(table),
            Err(redb::TableError::TableDoesNotExist(_)) => None,
            Err(e) => return Err(e.into()),
        };
        Ok(Tables {
            trims,
            batches: txn.open_table(BATCHES)?,
        })
    }
}

fn bounds_in(tables: &Tables, key: super::tables::AggKey) -> Result<(u64, u64), ReadError> {
    let min = match &tables.trims {
        Some(table) => match table.get(key)? {
            Some(v) => open_trim(key, v.value()).map_err(ReadError::Corrupt)?,
            None => 1,
        },
        None => 1,
    };
    let (o, t, i) = key;
    let last = (tables.batches)
        .range((o, t, i, 0)..=(o, t, i, u64::MAX))?
        .next_back()
        .transpose()?
        .map(|(k, _)| k.value().3);
    Ok((last.unwrap_or(0).max(min - 1), min))
}

/// Each aggregate's tip ([`bounds`]), in one read transaction with its tables opened once: what
/// a page of it read now would say (for a change stream's `ready`). An aggregate whose trim
/// record is damaged gets `None` (its pages fail the same way); a storage failure fails all.
pub fn tips(db: &Database, keys: &[AggregateKey]) -> Result<Vec<Option<u64>>, ReadError> {
    let txn = db.begin_read()?;
    let tables = Tables::open(&txn)?;
    keys.iter()
        .map(|key| match bounds_in(&tables, agg_key(key)) {
            Ok((tip, _)) => Ok(Some(tip)),
            Err(ReadError::Corrupt(_)) => Ok(None),
            Err(e) => Err(e),
        })
        .collect()
}

/// Visits the records of `query`'s range in order until `take` says stop (returning the version
/// it stopped at, the page's `next`) and the aggregate's tip. `take` checks each record it
/// keeps ([`open_batch`]); a record after the page's end is not read.
fn visit(
    db: &Database,
    query: &ReadQuery,
    mut take: impl FnMut(BatchKey, &[u8]) -> Result<bool, ReadError>,
) -> Result<(Option<u64>, u64), ReadError> {
    let txn = db.begin_read()?;
    let akey = agg_key(&query.key);
    let (tip, min) = bounds(&txn, akey)?;
    let from = query.from_version.max(1);
    if from < min {
        return Err(ReadError::Trimmed(min));
    }
    let table = txn.open_table(BATCHES)?;
    let (o, t, i) = akey;
    for row in table.range((o, t, i, from)..=(o, t, i, u64::MAX))? {
        let (key, value) = row?;
        let key = key.value();
        if !take(key, value.value())? {
            return Ok((Some(key.3), tip));
        }
    }
    Ok((None, tip))
}

/// The page as a response body: records while the body stays within `query.max_bytes` (the
/// first one alone may not fit: then [`JsonPage::Needs`] says how much it takes).
pub fn page_json(db: &Database, query: ReadQuery) -> Result<JsonPage, ReadError> {
    let mut body = Vec::new();
    let mut count = 0usize;
    let mut needs = None;
    let (next, tip) = visit(db, &query, |key, record| {
        let json_len = record.len().saturating_sub(HEADER);
        let size = if count == 0 {
            OPEN.len()
        } else {
            body.len() + 1
        } + json_len
            + CLOSE_MAX;
        if count >= query.max_batches || size > query.max_bytes {
            if count == 0 {
                needs = Some(size);
            }
            return Ok(false);
        }
        let json = open_batch(key, record).map_err(ReadError::Corrupt)?;
        if count == 0 {
            body.reserve(OPEN.len() + json.len() + CLOSE_MAX);
            body.extend_from_slice(OPEN);
        } else {
            body.push(b',');
        }
        body.extend_from_slice(json);
        count += 1;
        Ok(true)
    })?;
    if let Some(bytes) = needs {
        return Ok(JsonPage::Needs(bytes));
    }
    if count == 0 {
        body.extend_from_slice(OPEN);
    }
    body.extend_from_slice(close(next, tip).as_bytes());
    Ok(JsonPage::Body(body))
}

/// The page, parsed: batches while the page has fewer than `max_batches` and its events under
/// `max_bytes` of payload, and always at least one.
pub fn page(db: &Database, query: ReadQuery) -> Result<ReadPage, ReadError> {
    let mut batches: Vec<ReadBatch> = Vec::new();
    let mut bytes = 0usize;
    let (next, tip) = visit(db, &query, |key, record| {
        if !batches.is_empty() && (batches.len() >= query.max_batches || bytes >= query.max_bytes) {
            return Ok(false);
        }
        let json = open_batch(key, record).map_err(ReadError::Corrupt)?;
        let batch: ReadBatch = serde_json::from_slice(json).map_err(|e| {
            ReadError::Corrupt(Corrupt(format!(
                "{} (its JSON does not parse: {e})",
                super::record::describe_batch(key)
            )))
        })?;
        bytes += batch.events.iter().map(|e| e.data.len()).sum::<usize>();
        batches.push(batch);
        Ok(true)
    })?;
    Ok(ReadPage { batches, next, tip })
}
