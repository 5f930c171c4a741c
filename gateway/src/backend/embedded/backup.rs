//! A consistent copy of the embedded store while the gateway runs (`POST /v1/backup`).
//!
//! redb offers no online backup, and copying the file while the writer commits can give a
//! torn image. A read transaction, though, sees one committed snapshot for as long as it is
//! open, whatever the writer commits meanwhile. So the copy is made from one read transaction,
//! table by table and row by row, into a new database: it is exactly the store as of one
//! commit — every write answered before the backup began is in it, and no write is in it half.
//! Writes go on during the copy (the writer does not wait for readers).
//!
//! The copy is built in `<data-dir>/backups/<unix-ms>.partial/` and renamed to
//! `<data-dir>/backups/<unix-ms>/` only after its last commit is durable (`Durability::
//! Immediate`) and the directory is synced, so a directory without `.partial` is always a
//! whole copy; it holds a `celeriant-gateway.redb` that `celeriant-gateway verify --data-dir`
//! checks and `celeriant-gateway --data-dir` serves as it is. Rows are copied in commits of
//! [`ROWS_PER_COMMIT`] so that a large store does not make one huge transaction; those commits
//! are not synced (the directory is not a backup until the rename).
//!
//! Every table the schema knows is copied; a table the copy does not know (a newer schema) is
//! refused rather than left out silently.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Instant;

use celeriant_sync_protocol::codes::gateway as g;

use redb::{
    Database, Durability, Key, ReadTransaction, ReadableDatabase, ReadableTable, TableDefinition,
    TableError, TableHandle, Value,
};

use super::access::ACCESS;
use super::health::free_space;
use super::revocations::REVOCATIONS;
use super::tables::{
    AGGREGATES, AGGREGATES_V1, BATCHES, CLIENT_SEQS, CLIENT_SEQS_V1, CLIENT_USAGE, META, TRIMS,
};
use super::{FILE_NAME, Shared};
use crate::backend::BackendError;

/// Rows copied per commit of the copy.
const ROWS_PER_COMMIT: u64 = 10_000;

/// What a backup made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Backup {
    /// The copy's directory (a data directory of its own).
    pub dir: PathBuf,
    /// Rows copied, over every table.
    pub rows: u64,
    /// The copy's file size in bytes.
    pub bytes: u64,
    /// How long it took, in milliseconds.
    pub took_ms: u64,
}

/// Why a backup was not made.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BackupError {
    /// The disk holding the data directory has too little room for a copy above the floor.
    NoRoom {
        /// The live file's size plus the floor.
        needed: u64,
        /// Free on the disk.
        free: u64,
    },
    /// The store or the file system failed; nothing was left behind but a `.partial` directory
    /// (removed when possible).
    Failed(String),
}

/// Set while a backup runs: one at a time (each reads the whole store and writes a copy).
static RUNNING: AtomicBool = AtomicBool::new(false);

/// Makes a backup of the store off the async threads; one at a time (42900 while another
/// runs), 50700 when the disk has no room for it, 50201 when it failed.
pub(super) async fn run(shared: Arc<Shared>) -> Result<Backup, BackendError> {
    if RUNNING.swap(true, Ordering::AcqRel) {
        return Err(BackendError::code(
            g::GATEWAY_BUSY,
            "a backup is being made already; retry when it is done",
        ));
    }
    struct Done;
    impl Drop for Done {
        fn drop(&mut self) {
            RUNNING.store(false, Ordering::Release);
        }
    }
    let done = Done;
    let made = tokio::task::spawn_blocking(move || {
        let _done = done;
        let db = shared.db()?;
        backup(&db, &shared.dir, shared.options.min_free_bytes).map_err(|e| match e {
            BackupError::NoRoom { needed, free } => BackendError::code(
                g::INSUFFICIENT_STORAGE,
                format!("a backup needs {needed} free bytes on the data directory's disk (the store's size and --min-free-bytes); {free} are free"),
            ),
            BackupError::Failed(why) => {
                tracing::error!(why, "backup failed");
                BackendError::code(g::INTERNAL, format!("the backup failed: {why}"))
            }
        })
    })
    .await
    .map_err(|e| BackendError::code(g::INTERNAL, format!("the backup failed: {e}")))??;
    tracing::info!(dir = %made.dir.display(), rows = made.rows, bytes = made.bytes, took_ms = made.took_ms, "backup made");
    Ok(made)
}

/// Copies `db` (the store in `data_dir`) into a new directory under `data_dir/backups`,
/// keeping `floor` bytes free on the disk beyond the copy's expected size (the live file's).
pub fn backup(db: &Database, data_dir: &Path, floor: u64) -> Result<Backup, BackupError> {
    let started = Instant::now();
    let failed =
        |what: &str, e: &dyn std::fmt::Display| BackupError::Failed(format!("{what}: {e}"));
    let live = std::fs::metadata(data_dir.join(FILE_NAME))
        .map_err(|e| failed("the store's size", &e))?
        .len();
    let root = data_dir.join("backups");
    std::fs::create_dir_all(&root).map_err(|e| failed("creating backups/", &e))?;
    if let Some(free) = free_space(&root) {
        let needed = live.saturating_add(floor);
        if free < needed {
            return Err(BackupError::NoRoom { needed, free });
        }
    }
    let name = now_ms().to_string();
    let partial = root.join(format!("{name}.partial"));
    let done = root.join(&name);
    let result = (|| {
        std::fs::create_dir(&partial).map_err(|e| failed("creating the copy's directory", &e))?;
        let rows = copy_into(db, &partial.join(FILE_NAME)).map_err(|e| failed("copying", &e))?;
        sync_dir(&partial).map_err(|e| failed("syncing the copy", &e))?;
        std::fs::rename(&partial, &done).map_err(|e| failed("renaming the copy", &e))?;
        sync_dir(&root).map_err(|e| failed("syncing backups/", &e))?;
        let bytes = std::fs::metadata(done.join(FILE_NAME))
            .map_err(|e| failed("the copy's size", &e))?
            .len();
        Ok(Backup {
            dir: done.clone(),
            rows,
            bytes,
            took_ms: started.elapsed().as_millis() as u64,
        })
    })();
    if result.is_err() {
        let _ = std::fs::remove_dir_all(&partial);
    }
    result
}

/// Copies every table of one read transaction of `db` into a new database at `path`; the
/// rows copied.
fn copy_into(db: &Database, path: &Path) -> Result<u64, redb::Error> {
    let from = db.begin_read()?;
    let known = [
        META.name(),
        AGGREGATES.name(),
        BATCHES.name(),
        CLIENT_SEQS.name(),
        CLIENT_USAGE.name(),
        TRIMS.name(),
        ACCESS.name(),
        REVOCATIONS.name(),
        AGGREGATES_V1.name(),
        CLIENT_SEQS_V1.name(),
    ];
    for table in from.list_tables()? {
        if !known.contains(&table.name()) {
            return Err(redb::Error::Corrupted(format!(
                "the store has a table `{}` this gateway cannot copy",
                table.name()
            )));
        }
    }
    let to = Database::create(path)?;
    let mut rows = 0;
    rows += copy(&from, &to, META)?;
    rows += copy(&from, &to, AGGREGATES)?;
    rows += copy(&from, &to, BATCHES)?;
    rows += copy(&from, &to, CLIENT_SEQS)?;
    rows += copy(&from, &to, CLIENT_USAGE)?;
    rows += copy(&from, &to, TRIMS)?;
    rows += copy(&from, &to, ACCESS)?;
    rows += copy(&from, &to, REVOCATIONS)?;
    rows += copy(&from, &to, AGGREGATES_V1)?;
    rows += copy(&from, &to, CLIENT_SEQS_V1)?;
    // The durable commit: everything before it becomes durable with it.
    let mut last = to.begin_write()?;
    last.set_durability(Durability::Immediate)
        .map_err(|e| redb::Error::Corrupted(e.to_string()))?;
    last.commit()?;
    Ok(rows)
}

/// Copies one table (absent in the source: nothing, and not created in the copy).
fn copy<K: Key + 'static, V: Value + 'static>(
    from: &ReadTransaction,
    to: &Database,
    table: TableDefinition<K, V>,
) -> Result<u64, redb::Error> {
    let source = match from.open_table(table) {
        Ok(source) => source,
        Err(TableError::TableDoesNotExist(_)) => return Ok(0),
        Err(e) => return Err(e.into()),
    };
    let mut rows = 0;
    let mut entries = source.iter()?;
    loop {
        let mut txn = to.begin_write()?;
        txn.set_durability(Durability::None)
            .map_err(|e| redb::Error::Corrupted(e.to_string()))?;
        let mut more = false;
        {
            let mut target = txn.open_table(table)?;
            for entry in entries.by_ref() {
                let (key, value) = entry?;
                target.insert(key.value(), value.value())?;
                rows += 1;
                if rows % ROWS_PER_COMMIT == 0 {
                    more = true;
                    break;
                }
            }
        }
        txn.commit()?;
        if !more {
            return Ok(rows);
        }
    }
}

fn sync_dir(dir: &Path) -> std::io::Result<()> {
    std::fs::File::open(dir)?.sync_all()
}

fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}
