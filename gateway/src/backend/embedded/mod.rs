//! The embedded store: a durable redb database with Celeriant's write semantics.
//!
//! It lets one command run everything on a laptop and gives the client's tests a real peer.
//! Guarantees:
//!
//! * **Durable before acknowledged.** redb commits with `Durability::Immediate` (fsync); a write
//!   is answered only after its commit returned, so an acknowledged write survives `kill -9`,
//!   a full disk and the reopening that follows one.
//! * **One writer, group commit** (`writer.rs`). A dedicated thread owns all writes. It takes
//!   every command waiting in its queue, applies them in arrival order inside one transaction
//!   and commits once, then answers each. Commands applied in the open transaction are "in
//!   flight": an identical (aggregate, client, sequence) write arriving meanwhile gets 2013,
//!   exactly like Celeriant's accepted-but-not-durable window. A later identical write sees the
//!   committed sequence: 2002.
//! * **Celeriant's check order** (`apply.rs`): 2000/2001, 2005, 2003, then 2013/2002; then the
//!   per-client storage quota (40310).
//! * **Checksums** (`record.rs`): every stored value carries a CRC-32C of its key and contents,
//!   checked on every read and wherever a write relies on stored data; damaged data is never
//!   served or trusted (50001, counted in `/healthz`). `verify.rs` checks a whole store
//!   offline. Schema 1 stores are migrated on open (`migrate.rs`).
//! * **Ownership** (`access.rs`): the write that creates an aggregate records its owner in the
//!   same transaction, after the access policy judged it (before the existence and sequence
//!   checks); aggregates of older stores get the writer of their first batch as owner on open.
//! * **Reads** see committed batches only, in version order, served as stored (`read.rs`).
//! * **Disk** (`health.rs`): writes are refused early while free space is under the floor, and
//!   after an I/O error — after which redb refuses everything ("Previous I/O error occurred") —
//!   the store's monitor thread closes and reopens the database, commits a probe transaction,
//!   and takes writes again, without a restart. Until then `/healthz` says degraded.
//!
//! * **Changes** (for `POST /v1/watch`): after each commit the writer publishes every
//!   aggregate the group wrote, with its new version (one per aggregate per group), on a
//!   bounded `tokio::sync::broadcast` channel ([`Backend::changes`]); publishing never waits
//!   for a reader. The trim test hook (`trim.rs`) publishes a reset.
//!
//! `linger` (tests and benchmarks) keeps a group open a little longer before committing, which
//! makes the in-flight window observable and trades latency for fewer fsyncs.

pub mod access;
mod apply;
pub mod backup;
pub mod health;
mod migrate;
mod read;
mod record;
pub mod repair;
pub mod revocations;
mod tables;
mod trim;
pub mod verify;
mod writer;

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock, mpsc as std_mpsc};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use celeriant_sync_protocol::codes::gateway as g;
use celeriant_sync_protocol::wire::StoreHealth;
use redb::{Database, ReadableDatabase, ReadableTableMetadata};
use tokio::sync::{broadcast, mpsc, oneshot};

use self::health::{Health, free_space};
use self::migrate::Opened;
use self::read::ReadError;
use self::tables::AGGREGATES;
use self::writer::{Job, writer_loop};
use super::{
    AccessChange, AggregateKey, Backend, BackendError, CHANGE_BUFFER, Change, JsonPage, ReadPage,
    ReadQuery, RevocationChange, WriteAck, WriteCommand,
};
use crate::access::AccessRecord;
use crate::auth::revoke::Revocation;
use crate::config::Config;
use crate::error::ApiError;
use crate::limits::notice::Throttle;

/// How often the monitor samples free space and, when failed, tries to reopen.
pub const CHECK_INTERVAL: Duration = Duration::from_secs(1);

/// The database file inside the data directory.
pub const FILE_NAME: &str = "celeriant-gateway.redb";

/// Tuning of the embedded store.
#[derive(Debug, Clone, Copy)]
pub struct EmbeddedOptions {
    /// How long a group stays open for more commands before it commits (default: commit as soon
    /// as the queue is empty).
    pub linger: Duration,
    /// The database's page cache, in bytes.
    pub cache_bytes: usize,
    /// Refuse writes while the disk has fewer free bytes (0: never).
    pub min_free_bytes: u64,
    /// Most bytes of batches one client id may store (0: no quota).
    pub quota_bytes: u64,
}

impl Default for EmbeddedOptions {
    /// No linger, a 64 MiB cache, no free-space floor, no quota (tests; the gateway uses
    /// [`EmbeddedOptions::from_config`]).
    fn default() -> Self {
        EmbeddedOptions {
            linger: Duration::ZERO,
            cache_bytes: 64 << 20,
            min_free_bytes: 0,
            quota_bytes: 0,
        }
    }
}

impl EmbeddedOptions {
    /// The options of the gateway's flags.
    pub fn from_config(config: &Config) -> Self {
        EmbeddedOptions {
            linger: Duration::from_millis(config.commit_linger_ms),
            cache_bytes: config.store.store_cache_bytes,
            min_free_bytes: config.store.min_free_bytes,
            quota_bytes: config.store.store_quota_bytes,
        }
    }
}

/// A failure of the database itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreFailure {
    /// An I/O error, or redb refusing everything after one: the database must be reopened.
    Io(String),
    /// Anything else: the operation failed, the database is still usable.
    Other(String),
}

impl StoreFailure {
    fn message(&self) -> &str {
        match self {
            StoreFailure::Io(m) | StoreFailure::Other(m) => m,
        }
    }
}

/// Classifies a redb error.
pub fn storage_failure(e: impl Into<redb::Error>) -> StoreFailure {
    match e.into() {
        e @ (redb::Error::Io(_)
        | redb::Error::PreviousIo
        | redb::Error::DatabaseClosed
        | redb::Error::Corrupted(_)
        | redb::Error::Backend(_)) => StoreFailure::Io(e.to_string()),
        e => StoreFailure::Other(e.to_string()),
    }
}

/// What the writer, the monitor and the readers share.
struct Shared {
    dir: PathBuf,
    path: PathBuf,
    options: EmbeddedOptions,
    db: RwLock<Option<Arc<Database>>>,
    health: Health,
    reopen_log: Throttle,
    changes: broadcast::Sender<Change>,
    backups: std::sync::Mutex<backup::Status>,
}

/// The embedded durable store.
pub struct EmbeddedStore {
    shared: Arc<Shared>,
    jobs: mpsc::UnboundedSender<Job>,
    writer: Option<std::thread::JoinHandle<()>>,
    monitor: Option<(std_mpsc::Sender<()>, std::thread::JoinHandle<()>)>,
}

impl Drop for EmbeddedStore {
    /// Stops the writer after the jobs already queued, and the monitor, and waits for both, so
    /// the database file is closed (and can be reopened) when the store is gone.
    fn drop(&mut self) {
        let (closed, _) = mpsc::unbounded_channel();
        drop(std::mem::replace(&mut self.jobs, closed));
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
        if let Some((stop, monitor)) = self.monitor.take() {
            drop(stop);
            let _ = monitor.join();
        }
    }
}

/// Opens (or creates) the database at `path` and brings it to the current schema.
fn open_database(path: &Path, cache_bytes: usize) -> Result<(Database, Opened), String> {
    crate::private::private_file(path)?;
    let db = Database::builder()
        .set_cache_size(cache_bytes)
        .create(path)
        .map_err(|e| format!("cannot open {}: {e}", path.display()))?;
    let opened = migrate::prepare(&db).map_err(|e| format!("{}: {e}", path.display()))?;
    Ok((db, opened))
}

impl EmbeddedStore {
    /// Opens (or creates, or migrates) the store in `dir/celeriant-gateway.redb` and starts its
    /// writer and its monitor.
    pub fn open(dir: &Path, options: EmbeddedOptions) -> Result<Self, String> {
        crate::private::private_dir(dir)?;
        let path = dir.join(FILE_NAME);
        let (db, opened) = open_database(&path, options.cache_bytes)?;
        if let Opened::Migrated(batches) = opened {
            tracing::info!(batches, "store: schema 1 migrated to schema 2 (checksums)");
        }
        let owned = access::backfill(&db)?;
        if owned > 0 {
            tracing::info!(
                aggregates = owned,
                "store: owners recorded (the writer of each aggregate's first batch)"
            );
        }
        let shared = Arc::new(Shared {
            dir: dir.to_owned(),
            path,
            options,
            db: RwLock::new(Some(Arc::new(db))),
            health: Health::new(options.min_free_bytes),
            reopen_log: Throttle::new(),
            changes: broadcast::channel(CHANGE_BUFFER).0,
            backups: Default::default(),
        });
        shared.health.observe_free(free_space(dir));
        let (jobs, queue) = mpsc::unbounded_channel();
        let writer_shared = shared.clone();
        let writer = std::thread::Builder::new()
            .name("embedded-writer".into())
            .spawn(move || writer_loop(&writer_shared, queue))
            .map_err(|e| e.to_string())?;
        let (stop, stopped) = std_mpsc::channel();
        let monitor_shared = shared.clone();
        let monitor = std::thread::Builder::new()
            .name("embedded-monitor".into())
            .spawn(move || {
                while let Err(std_mpsc::RecvTimeoutError::Timeout) =
                    stopped.recv_timeout(CHECK_INTERVAL)
                {
                    monitor_shared.tick();
                }
            })
            .map_err(|e| e.to_string())?;
        Ok(EmbeddedStore {
            shared,
            jobs,
            writer: Some(writer),
            monitor: Some((stop, monitor)),
        })
    }
}

impl Shared {
    /// The open database, unless it is being reopened.
    fn db(&self) -> Result<Arc<Database>, BackendError> {
        self.db
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .clone()
            .ok_or_else(|| {
                BackendError::code(
                    g::STORE_DEGRADED,
                    "the store is reopening after an I/O error; retry shortly",
                )
            })
    }

    /// Records a database failure: an I/O one makes the store `failed` until reopened.
    fn fail(&self, failure: &StoreFailure) {
        match failure {
            StoreFailure::Io(reason) => self.health.failed(reason),
            StoreFailure::Other(reason) => tracing::error!(reason, "store: operation failed"),
        }
    }

    /// The answer to a read that failed.
    fn read_failed(&self, e: ReadError) -> BackendError {
        match e {
            ReadError::Corrupt(corrupt) => {
                self.health.corrupt(&corrupt);
                BackendError::code(g::DATA_CORRUPT, format!("{corrupt}; it is not served"))
            }
            ReadError::Storage(failure) => {
                self.fail(&failure);
                BackendError::code(
                    g::STORE_DEGRADED,
                    format!("the store could not be read: {}", failure.message()),
                )
            }
            ReadError::Trimmed(min_version) => BackendError::Trimmed { min_version },
        }
    }

    /// The answer to an access-record read or change that failed.
    fn access_failed(&self, e: access::AccessError) -> BackendError {
        match e {
            access::AccessError::Corrupt(corrupt) => self.read_failed(ReadError::Corrupt(corrupt)),
            access::AccessError::Storage(failure) => self.read_failed(ReadError::Storage(failure)),
        }
    }

    /// Tells the watchers about `change`; without a receiver (no hub) it goes nowhere.
    fn publish(&self, change: Change) {
        if self.changes.receiver_count() > 0 {
            let _ = self.changes.send(change);
        }
    }

    /// One round of the monitor: sample the free space; when failed and there is room, reopen.
    fn tick(&self) {
        self.health.observe_free(free_space(&self.dir));
        if self.health.is_failed() && self.health.has_room() {
            match self.reopen() {
                Ok(()) => self.health.recovered(),
                Err(reason) => {
                    if let Some(suppressed) = self.reopen_log.allow() {
                        tracing::warn!(reason, suppressed, "store: reopening failed; trying again");
                    }
                    self.health.failed(&reason);
                }
            }
        }
    }

    /// Closes the database (once no reader holds it), opens it again — redb repairs it from
    /// its last commit — and commits an empty transaction to prove the disk takes writes.
    fn reopen(&self) -> Result<(), String> {
        let old = self.db.write().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(mut old) = old {
            let deadline = Instant::now() + Duration::from_secs(5);
            loop {
                match Arc::try_unwrap(old) {
                    Ok(db) => {
                        let _ = db.close();
                        break;
                    }
                    Err(still) if Instant::now() < deadline => {
                        old = still;
                        std::thread::sleep(Duration::from_millis(10));
                    }
                    Err(still) => {
                        *self.db.write().unwrap_or_else(|p| p.into_inner()) = Some(still);
                        return Err("the database is still in use".into());
                    }
                }
            }
        }
        let (db, _) = open_database(&self.path, self.options.cache_bytes)?;
        let probe = db.begin_write().map_err(|e| e.to_string())?;
        probe.commit().map_err(|e| e.to_string())?;
        *self.db.write().unwrap_or_else(|p| p.into_inner()) = Some(Arc::new(db));
        Ok(())
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[async_trait]
impl Backend for EmbeddedStore {
    fn name(&self) -> &'static str {
        "embedded"
    }

    async fn write(&self, command: WriteCommand) -> Result<WriteAck, BackendError> {
        let (reply, answer) = oneshot::channel();
        self.jobs
            .send(Job { command, reply })
            .map_err(|_| BackendError::Unavailable("embedded writer stopped".into()))?;
        // The writer answers every job it takes; a dropped sender means it died mid-group, after
        // which nothing is known about this write.
        answer.await.unwrap_or_else(|_| {
            Err(BackendError::OutcomeUnknown(
                "embedded writer stopped".into(),
            ))
        })
    }

    fn backup(&self) -> Result<PathBuf, BackendError> {
        backup::start(self.shared.clone())
    }

    fn backup_status(&self) -> Result<backup::Status, BackendError> {
        Ok(backup::status(&self.shared))
    }

    async fn read(&self, query: ReadQuery) -> Result<ReadPage, BackendError> {
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || {
            let db = shared.db()?;
            read::page(&db, query).map_err(|e| shared.read_failed(e))
        })
        .await
        .map_err(|e| BackendError::Unavailable(e.to_string()))?
    }

    /// Local and cheap: `ask` is not needed (the route bounds the wait all the same).
    async fn tips(
        &self,
        keys: Vec<AggregateKey>,
        _ask: super::TipsAsk,
    ) -> Result<Option<Vec<Option<u64>>>, BackendError> {
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || {
            let db = shared.db()?;
            read::tips(&db, &keys)
                .map(Some)
                .map_err(|e| shared.read_failed(e))
        })
        .await
        .map_err(|e| BackendError::Unavailable(e.to_string()))?
    }

    async fn read_json(&self, query: ReadQuery) -> Result<JsonPage, BackendError> {
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || {
            let db = shared.db()?;
            read::page_json(&db, query).map_err(|e| shared.read_failed(e))
        })
        .await
        .map_err(|e| BackendError::Unavailable(e.to_string()))?
    }

    async fn health(&self) -> Result<(), BackendError> {
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || {
            let db = shared.db()?;
            let check = || -> Result<(), redb::Error> {
                db.begin_read()?.open_table(AGGREGATES)?.len()?;
                Ok(())
            };
            check().map_err(|e| shared.read_failed(ReadError::Storage(storage_failure(e))))
        })
        .await
        .map_err(|e| BackendError::Unavailable(e.to_string()))?
    }

    fn write_gate(&self) -> Result<(), BackendError> {
        self.shared.health.gate()
    }

    fn changes(&self) -> Option<broadcast::Receiver<Change>> {
        Some(self.shared.changes.subscribe())
    }

    async fn trim(&self, key: AggregateKey, before: u64) -> Result<u64, BackendError> {
        let shared = self.shared.clone();
        let min = tokio::task::spawn_blocking(move || {
            let db = shared.db()?;
            trim::trim(&db, key, before).map_err(|e| match e {
                trim::TrimError::Read(e) => shared.read_failed(e),
                trim::TrimError::Refused(m) => BackendError::code(g::INVALID_FIELD, m),
            })
        })
        .await
        .map_err(|e| BackendError::Unavailable(e.to_string()))??;
        // A trim keeps the tip (the embedded store deletes no aggregate).
        self.shared.publish(Change::Reset {
            key,
            deleted: false,
        });
        Ok(min)
    }

    fn store_health(&self) -> Option<StoreHealth> {
        Some(self.shared.health.report())
    }

    fn records_owners(&self) -> bool {
        true
    }

    async fn access(&self, key: AggregateKey) -> Result<Option<AccessRecord>, BackendError> {
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || {
            let db = shared.db()?;
            access::get(&db, tables::agg_key(&key)).map_err(|e| shared.access_failed(e))
        })
        .await
        .map_err(|e| BackendError::Unavailable(e.to_string()))?
    }

    async fn update_access(
        &self,
        key: AggregateKey,
        change: AccessChange,
    ) -> Result<Result<AccessRecord, ApiError>, BackendError> {
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || {
            let db = shared.db()?;
            let answer = access::update(&db, tables::agg_key(&key), |current| {
                change(current)
                    .map(|record| (record.clone(), Ok(record)))
                    .map_err(Err)
            })
            .map_err(|e| shared.access_failed(e))?;
            Ok(answer.unwrap_or_else(|refused| refused))
        })
        .await
        .map_err(|e| BackendError::Unavailable(e.to_string()))?
    }

    fn keeps_revocations(&self) -> bool {
        true
    }

    async fn revocations(&self) -> Result<Vec<Revocation>, BackendError> {
        revocations::list_in(self.shared.clone(), now_ms() / 1000).await
    }

    async fn update_revocations(
        &self,
        change: RevocationChange,
    ) -> Result<Result<Vec<Revocation>, ApiError>, BackendError> {
        revocations::update_in(self.shared.clone(), now_ms() / 1000, change).await
    }
}
