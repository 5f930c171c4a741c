//! The storage behind the gateway, behind one trait.
//!
//! The HTTP layer validates a request, turns it into a [`WriteCommand`] and hands it to a
//! [`Backend`]. Two implementations exist:
//!
//! * [`embedded::EmbeddedStore`] (the default): a durable redb database with Celeriant's write
//!   semantics, so one command runs everything on a laptop;
//! * [`celeriant::CeleriantBackend`]: a real Celeriant cluster through the published
//!   `celeriant_client_tokio` crate.
//!
//! Both record each aggregate's owner and members (`crate::access`): the embedded store in the
//! creating write's transaction, the Celeriant backend in create-only records in Celeriant
//! (`celeriant::access`).
//!
//! A backend answers with either an acknowledgement or a [`BackendError`] that says exactly how
//! much is known about the write: a Celeriant code, "definitely not sent", or "may have landed".
//! [`BackendError::into_outcome`] turns that into the protocol's outcome with the shared table.
//!
//! Besides writing and reading, a backend says whether it can take writes at all right now
//! ([`Backend::write_gate`], asked before a body is read) and what `/healthz` should report
//! about its storage ([`Backend::store_health`]), and renders read pages straight into the
//! response body ([`Backend::read_json`]) so that a store holding JSON need not parse it.
//!
//! For the change stream (`POST /v1/watch`) a backend publishes [`Change`]s on a bounded
//! broadcast channel ([`Backend::changes`]); the gateway's watch hub (`crate::watch`) fans
//! them out. A trimmed aggregate's early versions read as [`BackendError::Trimmed`].

pub mod celeriant;
pub mod embedded;

use async_trait::async_trait;
use celeriant_sync_protocol::codes::celeriant as codes;
use celeriant_sync_protocol::outcome::{Failure, WriteOutcome};
use celeriant_sync_protocol::wire::StoreHealth;
use celeriant_sync_protocol::{AggregateRef, Event, ReadBatch, ReadResponse};
use std::sync::Arc;

use tokio::sync::broadcast;
use uuid::Uuid;

use crate::access::{AccessRecord, Policy, Principal};
use crate::auth::revoke::Revocation;

/// A fully qualified aggregate: the organisation (from gateway configuration) and the aggregate.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct AggregateKey {
    /// The organisation id.
    pub org: Uuid,
    /// Type and id of the aggregate.
    pub aggregate: AggregateRef,
}

/// Who asks for a stream's tips ([`Backend::tips`]): the fair-share key of a backend whose tips
/// cost it something (the Celeriant backend's per-client permits and rate).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Asker {
    /// The session's client id.
    Client(Uuid),
    /// No client id (`--auth none`): the client's address bucket (`crate::limits::ip::bucket`).
    Address(std::net::IpAddr),
}

/// A request for tips: who asks, and by when the answer is due. Past `deadline` a backend
/// answers with what it has (or `None`): `ready` is never held for tips.
#[derive(Debug, Clone, Copy)]
pub struct TipsAsk {
    /// The fair-share key.
    pub asker: Asker,
    /// When `ready` goes, with or without tips.
    pub deadline: tokio::time::Instant,
}

/// One atomic write, already validated by the protocol rules.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WriteCommand {
    /// The writing client.
    pub client_id: Uuid,
    /// One entry per aggregate; all land or none does.
    pub writes: Vec<AggregateCommand>,
    /// Who writes: recorded as the owner of every aggregate the write creates (`None`: no
    /// owner is recorded).
    pub principal: Option<Principal>,
    /// The policy the store judges each aggregate's write by, before its existence and
    /// sequence checks (`None`: not enforced, `--auth none`).
    pub policy: Option<Arc<Policy>>,
}

/// The events for one aggregate within a [`WriteCommand`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggregateCommand {
    /// Which aggregate.
    pub key: AggregateKey,
    /// Whether the write may create the aggregate.
    pub allow_create: bool,
    /// A conditional write's guard (`expectedVersion`): lands only at exactly this version
    /// (`0`: only while the aggregate does not exist); `None`: no guard.
    pub expected_version: Option<u64>,
    /// Whether the server enforces client idempotency. The HTTP path always sets it.
    pub enforce_client_idempotency: bool,
    /// The events, `client_seq` strictly increasing.
    pub events: Vec<Event>,
}

/// A change of an access record, judged against the current one: the new record, or the
/// answer refusing it.
/// It may be asked more than once (a store that retries on a concurrent change, the Celeriant
/// backend), so it must decide from its argument alone.
pub type AccessChange =
    Box<dyn Fn(Option<AccessRecord>) -> Result<AccessRecord, crate::error::ApiError> + Send + Sync>;

/// A change of the stored revocations, judged against the current ones (already pruned of
/// those past their `forget_at`): the new list, or the answer refusing it (nothing stored).
/// It may be asked more than once (the Celeriant backend decides again after losing the
/// version guard), so it must decide from its argument alone.
pub type RevocationChange =
    Box<dyn Fn(Vec<Revocation>) -> Result<Vec<Revocation>, crate::error::ApiError> + Send + Sync>;

/// A successful write.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WriteAck {
    /// The aggregate version after the write, when one aggregate was written.
    pub aggregate_version: Option<u64>,
}

/// A read of one aggregate's batches from a version on, bounded by size.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ReadQuery {
    /// Which aggregate.
    pub key: AggregateKey,
    /// First version to return (1-based).
    pub from_version: u64,
    /// Stop adding batches once the page's events hold this many payload bytes (a page holds
    /// at least one batch).
    pub max_bytes: usize,
    /// Most batches in one page.
    pub max_batches: usize,
}

/// One page of batches.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReadPage {
    /// Batches in version order.
    pub batches: Vec<ReadBatch>,
    /// The version to continue from, or `None` at the end.
    pub next: Option<u64>,
    /// The aggregate's highest version at the time of the read (0: unknown or deleted).
    pub tip: u64,
}

/// What a backend tells the watch hub after a commit (or about its upstream).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Change {
    /// The aggregate's version is now (at least) `version`.
    Changed {
        /// Which aggregate.
        key: AggregateKey,
        /// Its version after the commit.
        version: u64,
    },
    /// The aggregate was trimmed or deleted: read it again from scratch.
    Reset {
        /// Which aggregate.
        key: AggregateKey,
        /// Deleted (its versions may start again from 1), not trimmed (a trim keeps the tip:
        /// its versions never go back). The watch hub forgets the versions it sent of the
        /// aggregate only on a deletion, so on one stream a version below one sent follows a
        /// deletion, never a trim.
        deleted: bool,
    },
    /// Notifications may have been lost (an upstream watch reconnected or lagged): every
    /// watcher must catch up everything.
    Resync,
}

/// How many changes a backend's broadcast channel holds for a lagging receiver before that
/// receiver is told it lagged (and every stream gets `resync`).
pub const CHANGE_BUFFER: usize = 4096;

/// A page rendered as the body of `GET /v1/aggregates/…/events`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonPage {
    /// The body: `{"batches":[…],"next":…}`, at most the query's `max_bytes` unless it holds a
    /// single batch.
    Body(Vec<u8>),
    /// The first batch alone is over the query's `max_bytes`: the body would take this many
    /// bytes. Nothing was copied; ask again with at least that budget.
    Needs(usize),
}

/// How much is known about a write (or read) that did not succeed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BackendError {
    /// The store answered with a Celeriant code; the write was not applied, except for 2002
    /// (which means an earlier write with this sequence is durable).
    #[error("celeriant code {code}: {message}")]
    Code {
        /// The Celeriant code.
        code: u32,
        /// The server's message.
        message: String,
        /// For 2002/2013: the highest sequence held for this (aggregate, client).
        last_client_seq: Option<u64>,
        /// For 2002/2013: the lowest sequence of the refused write.
        attempted_client_seq: Option<u64>,
    },
    /// A version guard failed (Celeriant's 2003): nothing of the write was appended.
    /// `conflict` names the first aggregate, in the command's order, whose guard failed.
    #[error("celeriant code 2003: {message}")]
    Conflict {
        /// A human-readable explanation.
        message: String,
        /// Which aggregate, and its expected and current version.
        conflict: VersionConflict,
    },
    /// Nothing reached the store (connection refused, pool exhausted): definitely not applied.
    #[error("store unavailable: {0}")]
    Unavailable(String),
    /// The request was sent and no answer came back: it may or may not have been applied.
    #[error("outcome unknown: {0}")]
    OutcomeUnknown(String),
    /// A read from below the aggregate's lowest available version (it was trimmed):
    /// Celeriant's 1000, BatchIndexUnavailable. Read again from `min_version`.
    #[error("versions below {min_version} were trimmed")]
    Trimmed {
        /// The lowest version still available.
        min_version: u64,
    },
}

/// One failed version guard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct VersionConflict {
    /// Which aggregate (within the gateway's organisation).
    pub aggregate: AggregateRef,
    /// The `expectedVersion` the write carried.
    pub expected: u64,
    /// The aggregate's version when the write was refused (0: it does not exist).
    pub current: u64,
}

impl BackendError {
    /// A 2003 for `conflict`, worded the same by every backend.
    pub fn conflict(conflict: VersionConflict) -> Self {
        let VersionConflict {
            aggregate,
            expected,
            current,
        } = conflict;
        BackendError::Conflict {
            message: format!(
                "version guard failed for aggregate {}/{}: expected version {expected}, the \
                 aggregate is at {current}; nothing was appended",
                aggregate.type_id, aggregate.id
            ),
            conflict,
        }
    }

    /// A code with a message and no sequence details.
    pub fn code(code: u32, message: impl Into<String>) -> Self {
        BackendError::Code {
            code,
            message: message.into(),
            last_client_seq: None,
            attempted_client_seq: None,
        }
    }

    /// The protocol outcome for this error, by the shared classification table.
    pub fn into_outcome(self) -> WriteOutcome {
        use celeriant_sync_protocol::codes::gateway as g;
        match self {
            BackendError::Code {
                code: codes::CLIENT_IDEMPOTENCY_VIOLATION,
                last_client_seq: Some(last),
                attempted_client_seq: Some(attempted),
                ..
            } => WriteOutcome::duplicate(last, attempted),
            BackendError::Code {
                code,
                message,
                last_client_seq,
                attempted_client_seq,
            } => match WriteOutcome::from_code(code, message) {
                WriteOutcome::Retry(f) => WriteOutcome::Retry(Failure {
                    last_client_seq,
                    attempted_client_seq,
                    ..f
                }),
                other => other,
            },
            BackendError::Conflict { message, conflict } => WriteOutcome::conflict(
                message,
                conflict.aggregate,
                conflict.expected,
                conflict.current,
            ),
            BackendError::Unavailable(m) => WriteOutcome::from_code(g::UPSTREAM_UNAVAILABLE, m),
            BackendError::OutcomeUnknown(m) => {
                WriteOutcome::from_code(g::UPSTREAM_OUTCOME_UNKNOWN, m)
            }
            BackendError::Trimmed { min_version } => WriteOutcome::Rejected(Failure::new(
                codes::BATCH_INDEX_UNAVAILABLE,
                format!("versions below {min_version} were trimmed; read from {min_version}"),
            )),
        }
    }
}

fn no_revocations(backend: &str) -> BackendError {
    BackendError::code(
        celeriant_sync_protocol::codes::gateway::NOT_FOUND,
        format!(
            "the {backend} backend keeps no revocations (rotate the session secret to revoke \
             every session)"
        ),
    )
}

fn no_backups(backend: &str) -> BackendError {
    BackendError::code(
        celeriant_sync_protocol::codes::gateway::NOT_FOUND,
        format!("the {backend} backend holds no data of its own: back up the Celeriant cluster"),
    )
}

/// A store the gateway can write to and read from.
#[async_trait]
pub trait Backend: Send + Sync + 'static {
    /// `"embedded"` or `"celeriant"`.
    fn name(&self) -> &'static str;

    /// Applies one atomic write. Must not return `Ok` before the write is durable.
    async fn write(&self, command: WriteCommand) -> Result<WriteAck, BackendError>;

    /// Reads one page of an aggregate's batches. An unknown aggregate reads as empty.
    async fn read(&self, query: ReadQuery) -> Result<ReadPage, BackendError>;

    /// Checks the store answers.
    async fn health(&self) -> Result<(), BackendError>;

    /// Each aggregate's version now (0: none, or deleted), as a page's `tip` would say, for a
    /// change stream's `ready` (`crate::routes::watch`): a client whose cursor is at an
    /// aggregate's tip then reads nothing of it. An entry is `None` when that aggregate's
    /// version could not be read (a damaged record); the whole is `None` when the store cannot
    /// tell cheaply, or not by `ask.deadline` (the client then catches every aggregate up, as
    /// without tips).
    async fn tips(
        &self,
        _keys: Vec<AggregateKey>,
        _ask: TipsAsk,
    ) -> Result<Option<Vec<Option<u64>>>, BackendError> {
        Ok(None)
    }

    /// Whether the store can take writes now, decided without touching it (before a write's
    /// body is read): `Err` with the answer to give, e.g. a disk under its free-space floor.
    fn write_gate(&self) -> Result<(), BackendError> {
        Ok(())
    }

    /// The store's own state for `/healthz` (the embedded store's disk, checksums, recoveries).
    fn store_health(&self) -> Option<StoreHealth> {
        None
    }

    /// The changes this backend publishes, for the watch hub (`None`: it cannot be watched).
    /// Called once, at start-up.
    fn changes(&self) -> Option<broadcast::Receiver<Change>> {
        None
    }

    /// Whether the [`Change::Reset`]s this backend publishes tell a deletion from a trim
    /// reliably, so a change stream's `ready` may say `deletedResets` (the hub's streams forget
    /// what they sent of an aggregate only on a deletion, `crate::watch`). The Celeriant
    /// backend reads them from the notifications' fields, and answers false once their
    /// operation codes disagree with that reading.
    fn deleted_resets(&self) -> bool {
        true
    }

    /// Test hook (`POST /v1/faults/trim`): removes the aggregate's batches below `before`,
    /// records `before` as its lowest available version and publishes a [`Change::Reset`].
    /// Returns the lowest available version after it.
    async fn trim(&self, key: AggregateKey, before: u64) -> Result<u64, BackendError> {
        let _ = (key, before);
        Err(BackendError::code(
            celeriant_sync_protocol::codes::gateway::NOT_FOUND,
            format!("the {} backend cannot trim", self.name()),
        ))
    }

    /// The access record (owner and members) of `key`, `None` when it has none (it does not
    /// exist, or predates ownership and has no batch left). A backend that records no owners
    /// answers `None` (the gateway then starts only with a policy that needs none).
    async fn access(&self, key: AggregateKey) -> Result<Option<AccessRecord>, BackendError> {
        let _ = key;
        Ok(None)
    }

    /// The access record of `key` for an access check, which may come from a per-replica
    /// cache: an owner never changes, so a check that needs only the owner (`members: false`)
    /// may use a record of any age; one that depends on members gets a record at most the
    /// backend's members TTL old. The default asks [`Backend::access`].
    async fn access_check(
        &self,
        key: AggregateKey,
        members: bool,
    ) -> Result<Option<Arc<AccessRecord>>, BackendError> {
        let _ = members;
        Ok(self.access(key).await?.map(Arc::new))
    }

    /// Whether this backend records owners (and so can enforce any policy).
    fn records_owners(&self) -> bool {
        false
    }

    /// Changes `key`'s members atomically: `change` gets the current record and returns the
    /// new one (stored) or a refusal (nothing stored). The default stores nothing.
    async fn update_access(
        &self,
        key: AggregateKey,
        change: AccessChange,
    ) -> Result<Result<AccessRecord, crate::error::ApiError>, BackendError> {
        let _ = (key, change);
        Err(BackendError::code(
            celeriant_sync_protocol::codes::gateway::MEMBERS_NOT_ALLOWED,
            format!("the {} backend keeps no members", self.name()),
        ))
    }

    /// Whether this backend stores revocations (`crate::auth::revoke`).
    fn keeps_revocations(&self) -> bool {
        false
    }

    /// Notified when the stored revocations changed (or may have), so that
    /// `crate::auth::revoke::refresh_loop` reloads them at once rather than at its next tick.
    /// `None` (the default): the periodic reload alone.
    fn revocations_changed(&self) -> Option<Arc<tokio::sync::Notify>> {
        None
    }

    /// Starts a consistent copy of the store while it runs (`POST /v1/backup`); the directory
    /// it will have. The default (a backend that holds no data of its own) refuses.
    fn backup(&self) -> Result<std::path::PathBuf, BackendError> {
        Err(no_backups(self.name()))
    }

    /// Whether a backup runs and how the last one ended (`GET /v1/backup`). The default
    /// refuses, as [`Backend::backup`] does.
    fn backup_status(&self) -> Result<embedded::backup::Status, BackendError> {
        Err(no_backups(self.name()))
    }

    /// Every stored revocation. The default (a backend that keeps none) refuses.
    async fn revocations(&self) -> Result<Vec<Revocation>, BackendError> {
        Err(no_revocations(self.name()))
    }

    /// Changes the stored revocations atomically: `change` gets the current list and returns
    /// the new one (stored) or a refusal (nothing stored). The default refuses.
    async fn update_revocations(
        &self,
        change: RevocationChange,
    ) -> Result<Result<Vec<Revocation>, crate::error::ApiError>, BackendError> {
        let _ = change;
        Err(no_revocations(self.name()))
    }

    /// One page rendered as the response body. The default reads it with [`Backend::read`] and
    /// serialises it (never [`JsonPage::Needs`]).
    async fn read_json(&self, query: ReadQuery) -> Result<JsonPage, BackendError> {
        let page = self.read(query).await?;
        let body = serde_json::to_vec(&ReadResponse {
            batches: page.batches,
            next: page.next,
            tip: page.tip,
        })
        .map_err(|e| {
            BackendError::code(
                celeriant_sync_protocol::codes::gateway::INTERNAL,
                e.to_string(),
            )
        })?;
        Ok(JsonPage::Body(body))
    }
}
