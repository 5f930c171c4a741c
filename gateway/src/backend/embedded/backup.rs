//! A consistent copy of the embedded store while the gateway runs (`POST /v1/backup`).
//!
//! redb offers no online backup, and copying the file while the writer commits can give a
//! torn image. A read transaction, though, sees one committed snapshot for as long as it is
//! open, whatever the writer commits meanwhile (redb frees no page a live read transaction can
//! see). So the copy is made from one read transaction, table by table and row by row, into a
//! new database: it is exactly the store as of one commit — every write answered before the
//! backup began is in it, and no write is in it half. Writes go on during the copy.
//!
//! A backup is a job: [`start`] checks the room, names the copy and returns at once (a copy of
//! a large store outlasts any request deadline); [`status`] says whether one runs and how the
//! last one ended. One runs at a time. The copy is built in `<data-dir>/backups/<unix-ms>.partial/`
//! (mode 0700, the file 0600, like the store) and renamed to `<unix-ms>/` only after its last
//! commit is durable (`Durability::Immediate`, which makes the earlier unsynced commits durable
//! with it) and the directory is synced, so a directory without `.partial` is always a whole
//! copy: a data directory of its own that `celeriant-gateway verify --data-dir` checks and
//! `celeriant-gateway --data-dir` serves. Rows are copied in commits of [`ROWS_PER_COMMIT`] so
//! that a large store does not make one huge transaction. A `.partial` left by a crash is
//! removed when the next backup starts.
//!
//! Every table the schema knows is copied; a table the copy does not know (a newer schema) is
//! refused rather than left out silently.

use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use celeriant_sync_protocol::codes::gateway as g;
use redb::{
    Database, Durability, Key, MultimapTableHandle, ReadTransaction, ReadableDatabase,
    ReadableTable, TableDefinition, TableError, TableHandle, Value,
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

/// A finished backup.
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

/// Whether a backup runs, and how the last one ended.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Status {
    /// The directory the running backup will have when done.
    pub running: Option<PathBuf>,
    /// The last backup to end: made, or why not (its directory, the reason).
    pub last: Option<Result<Backup, (PathBuf, String)>>,
}

impl Shared {
    fn backups(&self) -> std::sync::MutexGuard<'_, Status> {
        self.backups.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// This store's backups: whether one runs, how the last one ended.
pub(super) fn status(shared: &Shared) -> Status {
    shared.backups().clone()
}

/// Starts a backup of the store and returns the directory it will have. 42900 while another
/// runs; 50700 (nothing written) when the disk holding the data directory has less free than
/// twice the store's size plus `--min-free-bytes` (the copy can outgrow the live file, and the
/// live file grows by what the writer frees meanwhile, which the pinned snapshot keeps).
pub(super) fn start(shared: Arc<Shared>) -> Result<PathBuf, BackendError> {
    let mut status = shared.backups();
    if status.running.is_some() {
        return Err(BackendError::code(
            g::GATEWAY_BUSY,
            "a backup is being made already; GET /v1/backup says when it is done",
        ));
    }
    let internal = |what: &str, e: &dyn std::fmt::Display| {
        BackendError::code(
            g::INTERNAL,
            format!("the backup could not start: {what}: {e}"),
        )
    };
    let live = std::fs::metadata(shared.dir.join(FILE_NAME))
        .map_err(|e| internal("the store's size", &e))?
        .len();
    let root = shared.dir.join("backups");
    crate::private::private_dir(&root).map_err(|e| internal("backups/", &e))?;
    sync_dir(&shared.dir).map_err(|e| internal("syncing the data directory", &e))?;
    if let Some(free) = free_space(&root) {
        let needed = live
            .saturating_mul(2)
            .saturating_add(shared.options.min_free_bytes);
        if free < needed {
            return Err(BackendError::code(
                g::INSUFFICIENT_STORAGE,
                format!(
                    "a backup needs {needed} free bytes on the data directory's disk (twice the \
                     store's size, and --min-free-bytes); {free} are free"
                ),
            ));
        }
    }
    sweep_partials(&root);
    let name = now_ms().to_string();
    let done = root.join(&name);
    status.running = Some(done.clone());
    drop(status);
    // Ends the job whatever happens in it (a panic included).
    struct Job(
        Arc<Shared>,
        Option<Result<Backup, (PathBuf, String)>>,
        PathBuf,
    );
    impl Drop for Job {
        fn drop(&mut self) {
            let last = self
                .1
                .take()
                .unwrap_or_else(|| Err((self.2.clone(), "the backup stopped".into())));
            let mut status = self.0.backups();
            status.running = None;
            status.last = Some(last);
        }
    }
    impl Job {
        fn end(&mut self, made: Result<Backup, String>) {
            self.1 = Some(made.map_err(|why| (self.2.clone(), why)));
        }
    }
    let mut job = Job(shared.clone(), None, done.clone());
    tokio::task::spawn_blocking(move || {
        let made = shared
            .db()
            .map_err(|e| format!("{e:?}"))
            .and_then(|db| backup(&db, &root, &name));
        match &made {
            Ok(b) => {
                tracing::info!(dir = %b.dir.display(), rows = b.rows, bytes = b.bytes, took_ms = b.took_ms, "backup made")
            }
            Err(why) => tracing::error!(why, "backup failed"),
        }
        job.end(made);
    });
    Ok(done)
}

/// Removes `.partial` directories a crash left (only one backup runs at a time, and none now).
fn sweep_partials(root: &Path) {
    let Ok(entries) = std::fs::read_dir(root) else {
        return;
    };
    for entry in entries.flatten() {
        if entry.file_name().to_string_lossy().ends_with(".partial") {
            let _ = std::fs::remove_dir_all(entry.path());
        }
    }
}

/// Copies `db` into `root/<name>` (built as `root/<name>.partial`, renamed when durable).
fn backup(db: &Database, root: &Path, name: &str) -> Result<Backup, String> {
    let started = Instant::now();
    let failed = |what: &str, e: &dyn std::fmt::Display| format!("{what}: {e}");
    let partial = root.join(format!("{name}.partial"));
    let done = root.join(name);
    let result = (|| {
        crate::private::private_dir(&partial)?;
        let file = partial.join(FILE_NAME);
        crate::private::private_file(&file)?;
        let rows = copy_into(db, &file).map_err(|e| failed("copying", &e))?;
        sync_dir(&partial).map_err(|e| failed("syncing the copy", &e))?;
        std::fs::rename(&partial, &done).map_err(|e| failed("renaming the copy", &e))?;
        sync_dir(root).map_err(|e| failed("syncing backups/", &e))?;
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
    if let Some(table) = from.list_multimap_tables()?.next() {
        return Err(redb::Error::Corrupted(format!(
            "the store has a multimap table `{}` this gateway cannot copy",
            table.name()
        )));
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

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::atomic::{AtomicBool, Ordering};

    /// One commit: batch `n` and the counter `n`, together.
    fn commit(db: &Database, n: u64) {
        let txn = db.begin_write().unwrap();
        {
            let mut batches = txn.open_table(BATCHES).unwrap();
            batches.insert((1, 2, 3, n), [7u8; 16].as_slice()).unwrap();
            let mut meta = txn.open_table(META).unwrap();
            meta.insert("n", n).unwrap();
        }
        txn.commit().unwrap();
    }

    #[test]
    fn the_copy_is_one_commit_of_a_store_written_meanwhile_across_several_copy_commits() {
        let dir = tempfile::tempdir().unwrap();
        let db = Arc::new(Database::create(dir.path().join("live.redb")).unwrap());
        // More rows than two copy commits hold, seeded in large commits.
        let seeded = 2 * ROWS_PER_COMMIT + 5_000;
        let txn = db.begin_write().unwrap();
        {
            let mut batches = txn.open_table(BATCHES).unwrap();
            for n in 1..=seeded {
                batches.insert((1, 2, 3, n), [7u8; 16].as_slice()).unwrap();
            }
            txn.open_table(META).unwrap().insert("n", seeded).unwrap();
        }
        txn.commit().unwrap();
        // A writer commits batch and counter together throughout the copy.
        let stop = Arc::new(AtomicBool::new(false));
        let writer = {
            let (db, stop) = (db.clone(), stop.clone());
            std::thread::spawn(move || {
                let mut n = seeded;
                while !stop.load(Ordering::Acquire) {
                    n += 1;
                    commit(&db, n);
                }
                n
            })
        };
        let copy = dir.path().join("copy.redb");
        let rows = copy_into(&db, &copy).unwrap();
        stop.store(true, Ordering::Release);
        let written = writer.join().unwrap();
        let copy = Database::create(&copy).unwrap();
        let txn = copy.begin_read().unwrap();
        let counter = txn
            .open_table(META)
            .unwrap()
            .get("n")
            .unwrap()
            .unwrap()
            .value();
        let keys: Vec<u64> = txn
            .open_table(BATCHES)
            .unwrap()
            .iter()
            .unwrap()
            .map(|e| e.unwrap().0.value().3)
            .collect();
        // The counter and the batches are of the same commit, and nothing is missing.
        assert_eq!(keys, (1..=counter).collect::<Vec<_>>());
        assert_eq!(rows, counter + 1, "every batch and the counter");
        assert!(counter >= seeded && counter <= written);
        println!("copied {rows} rows at commit {counter}; the writer reached {written}");
    }
}
