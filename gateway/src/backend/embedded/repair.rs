//! `celeriant-gateway repair-sequence`: an offline repair of one device's sequence record on
//! one aggregate of an embedded store.
//!
//! Celeriant's idempotency rule answers a write whose `clientSeq` is at or below the highest
//! stored for its (aggregate, client) with 2002, "already landed", and stores nothing. Before
//! sessions were bound to a proof, a stolen session token let a thief write, as its device, one
//! event with `clientSeq` 2^53−1: every later write of the device on that aggregate was then
//! answered 2002 and silently dropped. This command puts the record back where the device's own
//! writes left it.
//!
//! A device numbers each aggregate's events 1, 2, 3, … without gaps (the client never skips one,
//! and a resend repeats the same numbers), so the device's own events are the **contiguous run
//! from its lowest stored sequence**; anything stored above a gap was not written by the device's
//! client. The record is set to the end of that run. The events above the gap stay in the log
//! (the log is append-only: nothing is deleted), and the command lists them — versions and
//! sequences — for the operator and the app to judge. A trimmed aggregate (the test hook) is
//! refused: its early batches are gone, so the run cannot be known. The change is one redb
//! transaction; `--dry-run` shows it without writing; every run is printed and logged.

use std::path::Path;

use celeriant_sync_protocol::ReadBatch;
use redb::{Database, ReadableTable};
use uuid::Uuid;

use super::FILE_NAME;
use super::apply::{open_client_seq, seal_client_seq};
use super::record::open_batch;
use super::tables::{BATCHES, CLIENT_SEQS, META, SCHEMA, TRIMS};

/// What to repair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Target {
    /// The store's organisation (`--org-id`).
    pub org: Uuid,
    /// The aggregate type.
    pub type_id: Uuid,
    /// The aggregate id.
    pub id: Uuid,
    /// The device's client id.
    pub client: Uuid,
}

/// What a repair found and did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Repair {
    /// The record before (`None`: there was none).
    pub before: Option<u64>,
    /// The end of the device's contiguous run (0: the device has no event here).
    pub after: u64,
    /// The device's events above the gap: (version, clientSeq).
    pub beyond: Vec<(u64, u64)>,
    /// Whether the record was written (not a dry run, and it changed).
    pub written: bool,
}

/// Repairs `target` in the store in `dir` (see the module documentation).
pub fn repair(dir: &Path, target: Target, dry_run: bool) -> Result<Repair, String> {
    let path = dir.join(FILE_NAME);
    if !path.exists() {
        return Err(format!("no store at {}", path.display()));
    }
    let db = Database::open(&path).map_err(|e| match e {
        redb::DatabaseError::DatabaseAlreadyOpen => format!(
            "{} is open in another process (a gateway running on it?); stop it first",
            path.display()
        ),
        e => format!("cannot open {}: {e}", path.display()),
    })?;
    let e = |e: redb::Error| e.to_string();
    let txn = db.begin_write().map_err(|x| e(x.into()))?;
    let repaired = {
        let schema = txn.open_table(META).map_err(|x| e(x.into()))?;
        let version = schema
            .get("schema")
            .map_err(|x| e(x.into()))?
            .map(|v| v.value());
        if version != Some(SCHEMA) {
            return Err(format!(
                "the store is at schema {version:?}, not {SCHEMA}: start the gateway on it once \
                 (it migrates), stop it, then repair"
            ));
        }
        let (o, t, i, c) = (
            target.org.as_u128(),
            target.type_id.as_u128(),
            target.id.as_u128(),
            target.client.as_u128(),
        );
        let trims = txn.open_table(TRIMS).map_err(|x| e(x.into()))?;
        if trims.get((o, t, i)).map_err(|x| e(x.into()))?.is_some() {
            return Err(
                "the aggregate was trimmed: its early batches are gone, so the \
                        device's own run of sequences cannot be known; not repaired"
                    .into(),
            );
        }
        let batches = txn.open_table(BATCHES).map_err(|x| e(x.into()))?;
        let mut mine: Vec<(u64, u64)> = Vec::new();
        for row in batches
            .range((o, t, i, 0)..=(o, t, i, u64::MAX))
            .map_err(|x| e(x.into()))?
        {
            let (key, value) = row.map_err(|x| e(x.into()))?;
            let json = open_batch(key.value(), value.value())
                .map_err(|x| format!("{x}; run `celeriant-gateway verify` first"))?;
            let batch: ReadBatch = serde_json::from_slice(json)
                .map_err(|x| format!("batch {} does not parse: {x}", key.value().3))?;
            if batch.client_id == target.client {
                mine.extend(batch.events.iter().map(|ev| (batch.version, ev.client_seq)));
            }
        }
        mine.sort_by_key(|&(_, seq)| seq);
        let mut after = 0;
        let mut beyond = Vec::new();
        for &(version, seq) in &mine {
            if beyond.is_empty() && (after == 0 || seq == after + 1) {
                after = seq;
            } else {
                beyond.push((version, seq));
            }
        }
        let mut seqs = txn.open_table(CLIENT_SEQS).map_err(|x| e(x.into()))?;
        let key = (o, t, i, c);
        let before = match seqs.get(key).map_err(|x| e(x.into()))? {
            Some(v) => Some(open_client_seq(key, v.value()).map_err(|x| x.to_string())?),
            None => None,
        };
        let written = !dry_run && before != Some(after) && !(before.is_none() && after == 0);
        if written {
            if after == 0 {
                seqs.remove(key).map_err(|x| e(x.into()))?;
            } else {
                seqs.insert(key, seal_client_seq(key, after))
                    .map_err(|x| e(x.into()))?;
            }
        }
        Repair {
            before,
            after,
            beyond,
            written,
        }
    };
    if repaired.written {
        txn.commit().map_err(|x| e(x.into()))?;
    } else {
        txn.abort().map_err(|x| e(x.into()))?;
    }
    Ok(repaired)
}

/// Runs a repair and prints (and logs) what it did; returns the exit status: 0 done (or
/// nothing to do), 2 refused or failed.
pub fn run(dir: &Path, target: Target, dry_run: bool) -> i32 {
    match repair(dir, target, dry_run) {
        Err(e) => {
            eprintln!("celeriant-gateway repair-sequence: {e}");
            2
        }
        Ok(r) => {
            for (version, seq) in &r.beyond {
                println!(
                    "beyond the device's run: version {version}, clientSeq {seq} (left in the log)"
                );
            }
            let verb = if r.written {
                "repaired"
            } else if dry_run {
                "would set"
            } else {
                "unchanged"
            };
            println!(
                "{verb}: client {} on {}/{}: highest clientSeq {} -> {}",
                target.client,
                target.type_id,
                target.id,
                r.before.map_or("none".to_owned(), |b| b.to_string()),
                r.after
            );
            tracing::warn!(
                client = %target.client,
                type_id = %target.type_id,
                id = %target.id,
                before = ?r.before,
                after = r.after,
                beyond = r.beyond.len(),
                written = r.written,
                "repair-sequence"
            );
            0
        }
    }
}
