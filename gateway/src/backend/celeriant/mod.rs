//! Forwarding to a real Celeriant cluster through the published `celeriant_client_tokio` pool.
//!
//! This is the production backend: the gateway authenticates upstream with its API key (never a
//! keypair, which would make the server refuse every browser's client id with 10003), sends each
//! validated command as one Celeriant `WriteRequest`, and reads aggregates back page by page. The
//! pool routes writes to the leader and never resends a write once it left, so the only question
//! left for this module is how much is known when a call fails; [`backend_error`] answers it.
//!
//! * `access`: owners and members, stored in Celeriant as create-only records (the access
//!   policy is judged here, before a write is sent: `judge`);
//! * `revocations`: the operator's revocations, one record in Celeriant shared by every
//!   replica;
//! * `record`: the storage pattern both kinds of record share (whole record per batch,
//!   version guard);
//! * `convert`: field-by-field translation between the gateway's and Celeriant's types;
//! * `errors`: the `ClientError` → [`BackendError`] table;
//! * `watch`: the one upstream watch per process behind [`Backend::changes`];
//! * `tips`: each watched aggregate's version for a stream's `ready`, read on the watch's node
//!   and through the pool, the higher answer.

pub mod access;
mod convert;
mod errors;
#[cfg(test)]
mod errors_table;
mod judge;
mod record;
pub mod revocations;
mod tips;
pub mod watch;

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use async_trait::async_trait;
use celeriant_client_tokio::{
    CeleriantPool, ClientError, ClientIdentityConfig, PoolOptions, ReadError, ServerError,
};
use celeriant_msg::request::read_filters::ReadFilters;
use celeriant_msg::request::requests::ReadRequest;
use celeriant_wal::aggregate_key::AggregateKey as CeleriantKey;
use tokio::sync::broadcast;

use super::{
    AccessChange, AggregateKey, Backend, BackendError, CHANGE_BUFFER, Change, ReadPage, ReadQuery,
    RevocationChange, TipsAsk, WriteAck, WriteCommand,
};
use crate::access::{AccessRecord, NOT_EXISTS_MESSAGE, Policy, Preset};
use crate::auth::revoke::Revocation;
use crate::error::ApiError;
use celeriant_sync_protocol::codes::celeriant as cc;
pub use errors::{UNRECOGNISED_UPSTREAM_CODE, backend_error};

/// How long a members check may use a cached access record unless told otherwise
/// (`--members-cache-ms`).
pub const DEFAULT_MEMBERS_TTL: Duration = Duration::from_secs(5);

/// Upper bound on dialling one node (and on waiting for one of the pool's connection slots).
const MAX_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How to reach the cluster.
#[derive(Clone)]
pub struct CeleriantOptions {
    /// Seed addresses, `HOST:PORT`; the first is dialled first.
    pub addresses: Vec<String>,
    /// The gateway's API key, if the cluster requires one.
    pub api_key: Option<String>,
    /// How long one request may take upstream.
    pub request_timeout: Duration,
}

/// Written by hand so that the API key never reaches a log.
impl fmt::Debug for CeleriantOptions {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("CeleriantOptions")
            .field("addresses", &self.addresses)
            .field("api_key", &self.api_key.as_ref().map(|_| "<redacted>"))
            .field("request_timeout", &self.request_timeout)
            .finish()
    }
}

/// A Celeriant cluster as a [`Backend`].
pub struct CeleriantBackend {
    pool: Arc<CeleriantPool>,
    watch: watch::WatchSettings,
    records: Arc<access::Records>,
    revocations: Arc<revocations::Revocations>,
    /// Where the upstream watch is open (set by `watch::run`, read by `tips`).
    node: Arc<watch::Node>,
    /// Whether the watch's notifications were seen to disagree with their kinds read by
    /// fields (set by `watch::run`; then `ready` says no `deletedResets`, and every `reset`
    /// is published as a trim).
    mapping: Arc<watch::Mapping>,
    tips: tips::Tips,
}

impl CeleriantBackend {
    /// Builds the pool. Nothing is dialled yet: the gateway starts (and reports unhealthy) while
    /// the cluster is down, and connects on the first request.
    pub async fn connect(options: CeleriantOptions) -> Result<Self, String> {
        let configured: Vec<String> = options
            .addresses
            .iter()
            .map(|a| a.trim())
            .filter(|a| !a.is_empty())
            .map(str::to_owned)
            .collect();
        let mut addresses = configured.iter().cloned();
        let first = addresses.next().ok_or("no Celeriant address configured")?;
        if options.request_timeout.is_zero() {
            return Err("the Celeriant request timeout must be above zero".into());
        }
        let mut pool = PoolOptions::new(first)
            .with_seed_addresses(addresses.collect())
            .with_request_timeout(options.request_timeout)
            .with_connection_timeout(options.request_timeout.min(MAX_CONNECT_TIMEOUT))
            .with_max_request_size(errors::MAX_REQUEST_BYTES)
            .with_max_response_size(errors::MAX_RESPONSE_BYTES);
        if let Some(key) = options.api_key {
            pool = pool.with_identity(ClientIdentityConfig::from_api_key(key));
        }
        let pool = Arc::new(CeleriantPool::new(pool));
        let node = Arc::new(watch::Node::default());
        let one_node = tips::one_node_each(&configured).await;
        if let Err(why) = &one_node {
            tracing::warn!(
                why,
                "celeriant tips: off; each --celeriant-addr must name one node (ready goes without tips, every aggregate is read)"
            );
        }
        Ok(CeleriantBackend {
            tips: tips::Tips::new(pool.clone(), node.clone(), one_node),
            node,
            mapping: Arc::new(watch::Mapping::default()),
            records: Arc::new(access::Records::new(pool.clone(), DEFAULT_MEMBERS_TTL)),
            revocations: Arc::new(revocations::Revocations::new(
                pool.clone(),
                crate::config::DEFAULT_ORG_ID,
            )),
            pool,
            watch: watch::WatchSettings::default(),
        })
    }

    /// Each client id (or address, under `--auth none`) may have tips read for `per_second`
    /// aggregates per second after a burst of `burst` (0: no limit); `main` passes
    /// `--rate-per-client` and `--burst-per-client` (see `tips`).
    pub fn with_tips_rate(mut self, per_second: u32, burst: u32) -> Self {
        self.tips.set_rate(per_second, burst);
        self
    }

    /// Scopes the upstream watch to `org` (`None`: every organisation) and renews it every
    /// `renew` (see [`watch`]).
    pub fn with_watch(mut self, org: Option<uuid::Uuid>, renew: Duration) -> Self {
        self.watch = watch::WatchSettings { org, renew };
        self
    }

    /// Keeps the revocations in `org`'s aggregate (`--org-id`; every replica of a fleet must
    /// name the same). The default is `crate::config::DEFAULT_ORG_ID`.
    pub fn with_org(mut self, org: uuid::Uuid) -> Self {
        self.revocations = Arc::new(revocations::Revocations::new(self.pool.clone(), org));
        self
    }

    /// Lets a members check use a cached access record for at most `ttl` (see `access`).
    pub fn with_members_ttl(mut self, ttl: Duration) -> Self {
        self.records = Arc::new(access::Records::new(self.pool.clone(), ttl));
        self
    }

    /// One read request: batches `from..=to` of `key`.
    async fn read_range(
        &self,
        key: &CeleriantKey,
        from: u64,
        to: u64,
    ) -> Result<celeriant_msg::response::responses::ReadResponse, ClientError> {
        self.pool
            .read(ReadRequest {
                correlation_id: None,
                aggregate_key: key.clone(),
                filters: ReadFilters::new(from).to_aggregate_version(to),
            })
            .await
    }
}

fn is_missing_aggregate(error: &ClientError) -> bool {
    matches!(
        error,
        ClientError::Server(ServerError::Read {
            kind: ReadError::AggregateNotExists,
            ..
        })
    )
}

#[async_trait]
impl Backend for CeleriantBackend {
    fn name(&self) -> &'static str {
        "celeriant"
    }

    /// Starts the one upstream watch (it ends when the receiver is dropped and the watch next
    /// wakes); `None` outside a runtime.
    fn changes(&self) -> Option<broadcast::Receiver<Change>> {
        let runtime = tokio::runtime::Handle::try_current().ok()?;
        let (sender, receiver) = broadcast::channel(CHANGE_BUFFER);
        // A changed access record (another replica's members change) or a resync expires the
        // cached copies, so revocations usually reach this replica at watch latency; the
        // members TTL is the bound when notifications are late or lost.
        // A change of the revocations' record makes the revocations reload at once; a lost
        // notification waits for the periodic reload (`--revocation-refresh-secs`).
        let records = self.records.clone();
        let revocations = self.revocations.clone();
        let observe: watch::Observer = Arc::new(move |change: &Change| match change {
            Change::Changed { key, .. } | Change::Reset { key, .. }
                if key.aggregate.type_id == crate::access::RESERVED_TYPE =>
            {
                let (org, id) = (key.org.as_u128(), key.aggregate.id.as_u128());
                if revocations.is_key(org, key.aggregate.type_id.as_u128(), id) {
                    revocations.changed().notify_one();
                } else {
                    records.expire_record(org, id);
                }
            }
            // Notifications may have been lost (a reconnect, a renewal): read both again.
            Change::Resync => {
                records.expire_all();
                revocations.changed().notify_one();
            }
            _ => {}
        });
        runtime.spawn(watch::run(
            self.pool.clone(),
            sender,
            self.watch,
            observe,
            self.node.clone(),
            self.mapping.clone(),
        ));
        Some(receiver)
    }

    /// Read on the node the upstream watch is open on and through the pool's routing, the
    /// higher answer (the pool alone may pick a lagging replica; the watch's node may itself
    /// lag, `tips`); `None` while no watch is open.
    async fn tips(
        &self,
        keys: Vec<AggregateKey>,
        ask: TipsAsk,
    ) -> Result<Option<Vec<Option<u64>>>, BackendError> {
        Ok(self.tips.read(&keys, ask).await)
    }

    async fn write(&self, command: WriteCommand) -> Result<WriteAck, BackendError> {
        if let Some(who) = &command.principal {
            // Without a policy (`--auth none`) nothing is refused, but owners are still
            // recorded, as the embedded store records them, so that sessions switched on later
            // find them.
            let unenforced;
            let policy = match &command.policy {
                Some(policy) => policy.as_ref(),
                None => {
                    unenforced = Policy {
                        default: Preset::Authenticated,
                        types: Default::default(),
                    };
                    &unenforced
                }
            };
            judge::judge(self, &command, policy, who).await?;
        }
        let order: Vec<AggregateKey> = command.writes.iter().map(|w| w.key).collect();
        let request = convert::write_request(command)?;
        let response = self.pool.write(request).await.map_err(|e| {
            let e = match errors::write_conflict(&order, e) {
                Ok(conflict) => return conflict,
                Err(e) => e,
            };
            match backend_error(e) {
                // Worded exactly as a refusal by the policy, so the two cannot be told apart.
                BackendError::Code {
                    code: cc::AGGREGATE_NOT_EXISTS,
                    ..
                } => BackendError::code(cc::AGGREGATE_NOT_EXISTS, NOT_EXISTS_MESSAGE),
                other => other,
            }
        })?;
        Ok(WriteAck {
            aggregate_version: response.max_aggregate_version,
        })
    }

    async fn read(&self, query: ReadQuery) -> Result<ReadPage, BackendError> {
        let key = convert::aggregate_key(&query.key);
        let max_batches = query.max_batches.max(1);
        let from = query.from_version.max(1);
        // One batch beyond the page, so a full page knows whether more exist.
        let to = from.saturating_add(u64::try_from(max_batches).unwrap_or(u64::MAX));
        match self.read_range(&key, from, to).await {
            Ok(response) => Ok(convert::page(response, from, max_batches, query.max_bytes)),
            Err(e) if is_missing_aggregate(&e) => Ok(ReadPage {
                batches: Vec::new(),
                next: None,
                tip: 0,
            }),
            // The start was trimmed away: the client must drop what it holds and read
            // from the first batch kept (410 with minVersion), not be served a gap.
            Err(ClientError::Server(ServerError::Read {
                kind:
                    ReadError::UnavailableBatchIndex {
                        minimum_available_version: Some(oldest),
                        ..
                    },
                ..
            })) if oldest > from => Err(BackendError::Trimmed {
                min_version: oldest,
            }),
            Err(e) => Err(backend_error(e)),
        }
    }

    /// Until the watch's operation codes disagree with the kinds read by fields
    /// (`watch::OperationCodes`): a `reset` read as a deletion may then be none (a stream
    /// would forget what it sent on it), so from then on every `reset` is published as a trim
    /// and the streams' `ready`s no longer say their lower versions follow a deletion.
    fn deleted_resets(&self) -> bool {
        !self.mapping.doubted()
    }

    fn records_owners(&self) -> bool {
        true
    }

    async fn access(&self, key: AggregateKey) -> Result<Option<AccessRecord>, BackendError> {
        self.records.read(&key).await
    }

    async fn access_check(
        &self,
        key: AggregateKey,
        members: bool,
    ) -> Result<Option<Arc<AccessRecord>>, BackendError> {
        self.records.get(&key, members).await
    }

    async fn update_access(
        &self,
        key: AggregateKey,
        change: AccessChange,
    ) -> Result<Result<AccessRecord, ApiError>, BackendError> {
        self.records.update(&key, &change).await
    }

    fn keeps_revocations(&self) -> bool {
        true
    }

    fn revocations_changed(&self) -> Option<Arc<tokio::sync::Notify>> {
        Some(self.revocations.changed())
    }

    async fn revocations(&self) -> Result<Vec<Revocation>, BackendError> {
        self.revocations.list().await
    }

    async fn update_revocations(
        &self,
        change: RevocationChange,
    ) -> Result<Result<Vec<Revocation>, ApiError>, BackendError> {
        self.revocations.update(&change).await
    }

    /// Reads the first batch of an aggregate nobody writes (all-zero key) from the leader: a
    /// full round trip, authenticated with the gateway's key, that stores nothing.
    async fn health(&self) -> Result<(), BackendError> {
        match self.read_range(&CeleriantKey::new(0, 0, 0), 1, 1).await {
            Ok(_) => Ok(()),
            Err(e) if is_missing_aggregate(&e) => Ok(()),
            Err(e) => Err(backend_error(e)),
        }
    }
}
