//! The embedded store's single writer thread: it takes every command waiting in its queue,
//! applies them in arrival order inside one transaction, commits once, then answers each and
//! publishes what changed (group commit; see [`super`]).

use std::time::{Duration, Instant};

use celeriant_sync_protocol::codes::{celeriant as codes, gateway as g};
use redb::Database;
use tokio::sync::{mpsc, oneshot};

use super::apply::{ApplyError, Changed, InFlight, Tables, apply};
use super::health::free_space;
use super::{Shared, StoreFailure, now_ms, storage_failure};
use crate::backend::{BackendError, Change, WriteAck, WriteCommand};

/// Most commands committed in one group.
const MAX_GROUP: usize = 512;

/// A command waiting for the writer, and where its answer goes.
pub(super) struct Job {
    pub(super) command: WriteCommand,
    pub(super) reply: oneshot::Sender<Result<WriteAck, BackendError>>,
}

/// Answers every job of `group` with `error`.
fn fail_all(group: Vec<Job>, error: &BackendError) {
    for job in group {
        let _ = job.reply.send(Err(error.clone()));
    }
}

/// The single writer: group, check the gate and the disk, apply, commit, answer.
pub(super) fn writer_loop(shared: &Shared, mut queue: mpsc::UnboundedReceiver<Job>) {
    let linger = shared.options.linger;
    while let Some(first) = queue.blocking_recv() {
        let deadline = Instant::now() + linger;
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
        if shared.options.min_free_bytes > 0 {
            shared.health.observe_free(free_space(&shared.dir));
        }
        let db = match shared.health.gate().and_then(|()| shared.db()) {
            Ok(db) => db,
            Err(e) => {
                fail_all(group, &e);
                continue;
            }
        };
        // A failure is recorded in the store's health inside, before the answers.
        let _ = commit_group(shared, &db, group);
    }
}

/// Applies and commits one group, answering every job; `Err` when the database failed (the
/// store's health says so before any job is answered: a client that got the failure and asks
/// `/healthz` at once sees it).
fn commit_group(shared: &Shared, db: &Database, group: Vec<Job>) -> Result<(), StoreFailure> {
    let fail = |group: Vec<Job>, failure: StoreFailure| {
        tracing::error!(
            reason = failure.message(),
            "embedded store: group failed, nothing committed"
        );
        shared.fail(&failure);
        fail_all(
            group,
            &BackendError::code(codes::FSYNC_ERROR, failure.message()),
        );
        Err(failure)
    };
    let txn = match db.begin_write() {
        Ok(txn) => txn,
        Err(e) => return fail(group, storage_failure(e)),
    };
    let now = now_ms();
    let quota = shared.options.quota_bytes;
    let mut in_flight = InFlight::new();
    let mut changed = Changed::new();
    let mut results = Vec::with_capacity(group.len());
    let mut tables = match Tables::open(&txn) {
        Ok(tables) => tables,
        Err(ApplyError::Storage(failure)) => return fail(group, failure),
        Err(_) => return fail(group, StoreFailure::Other("cannot open the tables".into())),
    };
    for job in &group {
        match apply(
            &mut tables,
            &job.command,
            &mut in_flight,
            &mut changed,
            now,
            quota,
        ) {
            Ok(ack) => results.push(Ok(ack)),
            Err(ApplyError::Refused(e)) => results.push(Err(e)),
            Err(ApplyError::Corrupt(corrupt)) => {
                shared.health.corrupt(&corrupt);
                results.push(Err(BackendError::code(
                    g::DATA_CORRUPT,
                    format!("{corrupt}; nothing was written"),
                )));
            }
            Err(ApplyError::Storage(failure)) => {
                drop(tables);
                drop(txn);
                return fail(group, failure);
            }
        }
    }
    drop(tables);
    if let Err(e) = txn.commit() {
        return fail(group, storage_failure(e));
    }
    for (job, result) in group.into_iter().zip(results) {
        let _ = job.reply.send(result);
    }
    for (key, version) in changed {
        shared.publish(Change::Changed { key, version });
    }
    Ok(())
}
