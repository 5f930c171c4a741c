//! `celeriant-gateway verify --data-dir D`: an offline check of a whole embedded store.
//!
//! Opens the database read-only (redb refuses while a gateway has it open: stop it first) and
//! checks everything the gateway relies on:
//!
//! * every batch record: its checksum (key and JSON), that its JSON parses as a batch, and
//!   that the version inside is the one it is stored under;
//! * every trim mark: its checksum;
//! * every access record (an aggregate's owner and members): its checksum;
//! * every aggregate's version record: its checksum, and that the aggregate's batches are
//!   exactly versions min..=version (min: its trim mark, else 1);
//! * every highest-sequence record and every client's usage record: their checksums, and that
//!   the usage equals the bytes of that client's batches (unless a damaged batch hides whose
//!   it is).
//!
//! Each problem is one line of the report; the last line sums up. The exit status is 0 when
//! the store is sound, 1 when something is damaged, 2 when it cannot be checked at all.

use std::collections::{BTreeMap, HashMap};
use std::path::Path;

use celeriant_sync_protocol::ReadBatch;
use redb::{ReadOnlyDatabase, ReadableDatabase, ReadableTable, TableHandle};

use super::FILE_NAME;
use super::access::{ACCESS, open as open_access};
use super::apply::{open_client_seq, open_usage};
use super::record::{HEADER, describe_batch, open_batch, open_trim, open_version, writer_of};
use super::tables::{
    AGGREGATES, AggKey, BATCHES, CLIENT_SEQS, CLIENT_USAGE, META, SCHEMA, TRIMS, describe,
};

/// What a check found.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub struct Report {
    /// Batch records checked.
    pub batches: u64,
    /// Aggregates checked.
    pub aggregates: u64,
    /// Highest-sequence records checked.
    pub sequences: u64,
    /// Clients with a usage record.
    pub clients: u64,
    /// Trim marks checked.
    pub trims: u64,
    /// Access records (owners) checked.
    pub owners: u64,
    /// One line per problem.
    pub problems: Vec<String>,
}

/// Runs the check and prints the report; returns the exit status.
pub fn run(dir: &Path) -> i32 {
    match verify(dir) {
        Err(e) => {
            eprintln!("celeriant-gateway verify: {e}");
            2
        }
        Ok(report) => {
            for problem in &report.problems {
                println!("DAMAGED {problem}");
            }
            println!(
                "{}: {} batches, {} aggregates, {} trim marks, {} sequence records, {} clients checked; {} problem{}",
                if report.problems.is_empty() {
                    "ok"
                } else {
                    "damaged"
                },
                report.batches,
                report.aggregates,
                report.trims,
                report.sequences,
                report.clients,
                report.problems.len(),
                if report.problems.len() == 1 { "" } else { "s" },
            );
            i32::from(!report.problems.is_empty())
        }
    }
}

/// Checks the store in `dir` (see the module documentation).
pub fn verify(dir: &Path) -> Result<Report, String> {
    let path = dir.join(FILE_NAME);
    if !path.exists() {
        return Err(format!("no store at {}", path.display()));
    }
    let db = ReadOnlyDatabase::open(&path).map_err(|e| match e {
        redb::DatabaseError::DatabaseAlreadyOpen => format!(
            "{} is open in another process (a gateway running on it?); stop it first",
            path.display()
        ),
        e => format!("cannot open {}: {e}", path.display()),
    })?;
    let txn = db.begin_read().map_err(|e| e.to_string())?;
    let has_meta = txn
        .list_tables()
        .map_err(|e| e.to_string())?
        .any(|t| t.name() == META.name());
    let schema = if has_meta {
        txn.open_table(META)
            .map_err(|e| e.to_string())?
            .get("schema")
            .map_err(|e| e.to_string())?
            .map(|v| v.value())
    } else {
        None
    };
    if schema != Some(SCHEMA) {
        return Err(format!(
            "the store has schema {} (this gateway checks schema {SCHEMA}); start the gateway on \
             it once to migrate it, then verify",
            schema.map_or("1 (no checksums)".to_owned(), |s| s.to_string())
        ));
    }
    let mut report = Report::default();
    let e = |e: redb::Error| e.to_string();

    // Batches: checksum, shape, version; per aggregate the versions seen, per client the bytes.
    let mut versions: BTreeMap<AggKey, Vec<u64>> = BTreeMap::new();
    let mut usage: HashMap<u128, u64> = HashMap::new();
    let mut usage_unknown = false;
    let batches = txn.open_table(BATCHES).map_err(|x| e(x.into()))?;
    for row in batches.iter().map_err(|x| e(x.into()))? {
        let (key, value) = row.map_err(|x| e(x.into()))?;
        let key = key.value();
        report.batches += 1;
        versions
            .entry((key.0, key.1, key.2))
            .or_default()
            .push(key.3);
        let json = match open_batch(key, value.value()) {
            Ok(json) => json,
            Err(corrupt) => {
                report.problems.push(corrupt.to_string());
                // Still the client's bytes, if the damage left its id readable.
                match value.value().get(HEADER..).and_then(writer_of) {
                    Some(client) => *usage.entry(client).or_insert(0) += value.value().len() as u64,
                    None => usage_unknown = true,
                }
                continue;
            }
        };
        match serde_json::from_slice::<ReadBatch>(json) {
            Ok(batch) if batch.version == key.3 => {
                *usage.entry(batch.client_id.as_u128()).or_insert(0) += value.value().len() as u64;
            }
            Ok(batch) => report.problems.push(format!(
                "{} holds version {}",
                describe_batch(key),
                batch.version
            )),
            Err(err) => report
                .problems
                .push(format!("{} does not parse: {err}", describe_batch(key))),
        }
    }

    // Trim marks: checksum; an aggregate trimmed below `min` holds batches min..=version.
    let mut trims: HashMap<AggKey, u64> = HashMap::new();
    let has_trims = txn
        .list_tables()
        .map_err(|e| e.to_string())?
        .any(|t| t.name() == TRIMS.name());
    if has_trims {
        let table = txn.open_table(TRIMS).map_err(|x| e(x.into()))?;
        for row in table.iter().map_err(|x| e(x.into()))? {
            let (key, sealed) = row.map_err(|x| e(x.into()))?;
            let key = key.value();
            report.trims += 1;
            match open_trim(key, sealed.value()) {
                Ok(min) => {
                    trims.insert(key, min);
                }
                Err(corrupt) => report.problems.push(corrupt.to_string()),
            }
        }
    }

    // Access records (owners and members): their checksums.
    let has_access = txn
        .list_tables()
        .map_err(|x| e(x.into()))?
        .any(|t| t.name() == ACCESS.name());
    if has_access {
        let table = txn.open_table(ACCESS).map_err(|x| e(x.into()))?;
        for row in table.iter().map_err(|x| e(x.into()))? {
            let (key, stored) = row.map_err(|x| e(x.into()))?;
            report.owners += 1;
            if let Err(corrupt) = open_access(key.value(), stored.value()) {
                report.problems.push(corrupt.to_string());
            }
        }
    }

    // Aggregates: checksum, and batches exactly min..=version (min: 1 unless trimmed).
    let aggregates = txn.open_table(AGGREGATES).map_err(|x| e(x.into()))?;
    for row in aggregates.iter().map_err(|x| e(x.into()))? {
        let (key, sealed) = row.map_err(|x| e(x.into()))?;
        let key = key.value();
        report.aggregates += 1;
        let found = versions.remove(&key).unwrap_or_default();
        match open_version(key, sealed.value()) {
            Err(corrupt) => report.problems.push(corrupt.to_string()),
            Ok(version) => {
                let min = trims.get(&key).copied().unwrap_or(1);
                let contiguous = found.len() as u64 == (version + 1).saturating_sub(min)
                    && found.iter().enumerate().all(|(i, v)| *v == min + i as u64);
                if !contiguous {
                    report.problems.push(format!(
                        "{} is at version {version} (from {min}) but holds {} batches ({:?}…)",
                        describe(key),
                        found.len(),
                        &found[..found.len().min(5)]
                    ));
                }
            }
        }
    }
    for (key, found) in versions {
        report.problems.push(format!(
            "{} has {} batches but no version record",
            describe(key),
            found.len()
        ));
    }

    // Sequences and usage: checksums; usage against the batches.
    let seqs = txn.open_table(CLIENT_SEQS).map_err(|x| e(x.into()))?;
    for row in seqs.iter().map_err(|x| e(x.into()))? {
        let (key, sealed) = row.map_err(|x| e(x.into()))?;
        report.sequences += 1;
        if let Err(corrupt) = open_client_seq(key.value(), sealed.value()) {
            report.problems.push(corrupt.to_string());
        }
    }
    let stored = txn.open_table(CLIENT_USAGE).map_err(|x| e(x.into()))?;
    for row in stored.iter().map_err(|x| e(x.into()))? {
        let (client, sealed) = row.map_err(|x| e(x.into()))?;
        let client = client.value();
        report.clients += 1;
        let counted = usage.remove(&client).unwrap_or(0);
        match open_usage(client, sealed.value()) {
            Err(corrupt) => report.problems.push(corrupt.to_string()),
            Ok(bytes) if bytes != counted && !usage_unknown => report.problems.push(format!(
                "the storage usage of client {} says {bytes} bytes; its batches hold {counted}",
                uuid::Uuid::from_u128(client)
            )),
            Ok(_) => {}
        }
    }
    for (client, counted) in usage.into_iter().filter(|_| !usage_unknown) {
        report.problems.push(format!(
            "client {} has {counted} bytes of batches but no usage record",
            uuid::Uuid::from_u128(client)
        ));
    }
    Ok(report)
}
