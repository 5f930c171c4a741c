//! The embedded store: a durable redb database with Celeriant's write semantics.
//!
//! It lets one command run everything on a laptop and gives the client's tests a real peer.
//! Guarantees:
//!
//! * **Durable before acknowledged.** redb commits with `Durability::Immediate` (fsync); a write
//!   is answered only after its commit returned, so an acknowledged write survives `kill -9`.
//! * **One writer, group commit.** A dedicated thread owns all writes. It takes every command
//!   waiting in its queue, applies them in arrival order inside one transaction and commits once,
//!   then answers each. Commands applied in the open transaction are "in flight": an identical
//!   (aggregate, client, sequence) write arriving meanwhile gets 2013, exactly like Celeriant's
//!   accepted-but-not-durable window. A later identical write sees the committed sequence: 2002.
//! * **Celeriant's check order** (`apply.rs`): 2000/2001, 2005, 2003, then 2013/2002.
//! * **Reads** see committed batches only, in version order.
//!
//! `linger` (tests and benchmarks) keeps a group open a little longer before committing, which
//! makes the in-flight window observable and trades latency for fewer fsyncs.

mod apply;
mod tables;

use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use async_trait::async_trait;
use celeriant_sync_protocol::ReadBatch;
use celeriant_sync_protocol::codes::celeriant as codes;
use redb::{Database, ReadableDatabase, ReadableTableMetadata};
use tokio::sync::{mpsc, oneshot};

use self::apply::{ApplyError, InFlight, apply};
use self::tables::{AGGREGATES, BATCHES, CLIENT_SEQS, agg_key};
use super::{Backend, BackendError, ReadPage, ReadQuery, WriteAck, WriteCommand};

/// Most commands committed in one group.
const MAX_GROUP: usize = 512;

/// Tuning of the embedded store.
#[derive(Debug, Clone, Copy, Default)]
pub struct EmbeddedOptions {
    /// How long a group stays open for more commands before it commits (default: commit as soon
    /// as the queue is empty).
    pub linger: Duration,
}

struct Job {
    command: WriteCommand,
    reply: oneshot::Sender<Result<WriteAck, BackendError>>,
}

/// The embedded durable store.
pub struct EmbeddedStore {
    db: Arc<Database>,
    jobs: mpsc::UnboundedSender<Job>,
    writer: Option<std::thread::JoinHandle<()>>,
}

impl Drop for EmbeddedStore {
    /// Stops the writer after the jobs already queued and waits for it, so the database file is
    /// closed (and can be reopened) when the store is gone.
    fn drop(&mut self) {
        let (closed, _) = mpsc::unbounded_channel();
        drop(std::mem::replace(&mut self.jobs, closed));
        if let Some(writer) = self.writer.take() {
            let _ = writer.join();
        }
    }
}

impl EmbeddedStore {
    /// Opens (or creates) the store in `dir/celeriant-gateway.redb` and starts its writer.
    pub fn open(dir: &Path, options: EmbeddedOptions) -> Result<Self, String> {
        std::fs::create_dir_all(dir)
            .map_err(|e| format!("cannot create {}: {e}", dir.display()))?;
        let path = dir.join("celeriant-gateway.redb");
        let db =
            Database::create(&path).map_err(|e| format!("cannot open {}: {e}", path.display()))?;
        // Create the tables up front so reads never meet a missing table.
        let txn = db.begin_write().map_err(|e| e.to_string())?;
        {
            txn.open_table(AGGREGATES).map_err(|e| e.to_string())?;
            txn.open_table(BATCHES).map_err(|e| e.to_string())?;
            txn.open_table(CLIENT_SEQS).map_err(|e| e.to_string())?;
        }
        txn.commit().map_err(|e| e.to_string())?;
        let db = Arc::new(db);
        let (jobs, queue) = mpsc::unbounded_channel();
        let writer_db = db.clone();
        let writer = std::thread::Builder::new()
            .name("embedded-writer".into())
            .spawn(move || writer_loop(&writer_db, queue, options))
            .map_err(|e| e.to_string())?;
        Ok(EmbeddedStore {
            db,
            jobs,
            writer: Some(writer),
        })
    }
}

fn now_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// The single writer: group, apply, commit, answer.
fn writer_loop(db: &Database, mut queue: mpsc::UnboundedReceiver<Job>, options: EmbeddedOptions) {
    while let Some(first) = queue.blocking_recv() {
        let deadline = Instant::now() + options.linger;
        let mut group = vec![first];
        loop {
            while group.len() < MAX_GROUP {
                match queue.try_recv() {
                    Ok(job) => group.push(job),
                    Err(_) => break,
                }
            }
            if group.len() >= MAX_GROUP || Instant::now() >= deadline {
                break;
            }
            std::thread::sleep(Duration::from_millis(1).min(deadline - Instant::now()));
        }
        commit_group(db, group);
    }
}

fn commit_group(db: &Database, group: Vec<Job>) {
    let fail_all = |group: Vec<Job>, message: String| {
        tracing::error!(%message, "embedded store: group failed, nothing committed");
        for job in group {
            let _ = job
                .reply
                .send(Err(BackendError::code(codes::FSYNC_ERROR, message.clone())));
        }
    };
    let txn = match db.begin_write() {
        Ok(txn) => txn,
        Err(e) => return fail_all(group, e.to_string()),
    };
    let now = now_ms();
    let mut in_flight = InFlight::new();
    let mut results = Vec::with_capacity(group.len());
    for job in &group {
        match apply(&txn, &job.command, &mut in_flight, now) {
            Ok(ack) => results.push(Ok(ack)),
            Err(ApplyError::Refused(e)) => results.push(Err(e)),
            Err(ApplyError::Storage(message)) => {
                drop(txn);
                return fail_all(group, message);
            }
        }
    }
    if let Err(e) = txn.commit() {
        return fail_all(group, e.to_string());
    }
    for (job, result) in group.into_iter().zip(results) {
        let _ = job.reply.send(result);
    }
}

fn storage<E: std::fmt::Display>(e: E) -> BackendError {
    BackendError::Unavailable(format!("embedded store: {e}"))
}

fn read_page(db: &Database, query: ReadQuery) -> Result<ReadPage, BackendError> {
    let txn = db.begin_read().map_err(storage)?;
    let table = txn.open_table(BATCHES).map_err(storage)?;
    let (o, t, i) = agg_key(&query.key);
    let from = query.from_version.max(1);
    let mut page = ReadPage {
        batches: Vec::new(),
        next: None,
    };
    let mut bytes = 0usize;
    for row in table
        .range((o, t, i, from)..=(o, t, i, u64::MAX))
        .map_err(storage)?
    {
        let (key, value) = row.map_err(storage)?;
        let version = key.value().3;
        if !page.batches.is_empty()
            && (page.batches.len() >= query.max_batches || bytes >= query.max_bytes)
        {
            page.next = Some(version);
            break;
        }
        let batch: ReadBatch = serde_json::from_slice(value.value()).map_err(storage)?;
        bytes += batch.events.iter().map(|e| e.data.len()).sum::<usize>();
        page.batches.push(batch);
    }
    Ok(page)
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

    async fn read(&self, query: ReadQuery) -> Result<ReadPage, BackendError> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || read_page(&db, query))
            .await
            .map_err(|e| BackendError::Unavailable(e.to_string()))?
    }

    async fn health(&self) -> Result<(), BackendError> {
        let db = self.db.clone();
        tokio::task::spawn_blocking(move || {
            let txn = db.begin_read().map_err(storage)?;
            txn.open_table(AGGREGATES)
                .map_err(storage)?
                .len()
                .map_err(storage)?;
            Ok(())
        })
        .await
        .map_err(|e| BackendError::Unavailable(e.to_string()))?
    }
}
