//! `Backend::tips` on Celeriant: each aggregate's version for a change stream's `ready`, read
//! with one aggregate-details request per aggregate **on the node the upstream watch is open
//! on** (`watch::Node`), and one through the main pool; the tip is the higher of the two.
//!
//! Why that node. A tip lets a client whose cursor equals it skip the aggregate's catch-up, so it
//! must be at least every version that will not be notified on the stream. The main pool sends a
//! details request to the cached leader or the first configured address, and on a connection
//! failure to the next node (`celeriant_client_tokio` 0.3.0, `pool.rs`: `aggregate_details` and
//! `read` use `read_route!`, whose candidates come from `read_addresses`; `clear_leader` pins the
//! first seed, a follower whenever the primary leads): a replica that may lag. A lagging answer
//! (version 4 while 5 was committed and notified before the stream was registered) would make a
//! client at 4 skip 5 with nothing on the stream to tell it. On the watch's own node instead,
//! with `t1` the registration and the node read after it (`watch::Node` says it was open on that
//! node at `t1`, or a resync reaches the stream after `t1`): the node answers `v`, every version
//! it applied before; whatever it applies later it notifies on the watch, after `t1`, so on the
//! stream. This relies on the node notifying a version no earlier than its details answers show
//! it, and on one configured address naming one node ([`resolve`] checks at start-up).
//!
//! And where the main pool reads too: each tip is the **higher** of the watch's node's answer
//! and the main pool's (what `record::tip` and a catch-up page read would see, from the leader
//! when one is known). The watch's node can itself be behind a version committed and notified
//! before the stream was registered (cut off from the cluster, or an address re-resolved to a
//! restarted node still catching up); with the max, a tip is never below what the client's own
//! catch-up read through the main pool would have seen, so tips open no window that page reads
//! do not. A tip too high only costs the client a page read. Either answer failed or late: no
//! tip for that aggregate.
//!
//! Connections: a second `CeleriantPool` whose `address` is the watch's node and which has no
//! seeds, kept while the watch stays on that node and replaced when it moves. Such a pool can
//! reach no other node (0.3.0 `pool.rs`: `read_addresses` is the cached leader, set only by the
//! write-class `leader_route!`, else `address`, then the seeds; `clear_leader` with no leader
//! cached and no seeds changes nothing), and it brings reuse of idle connections, the per-node
//! breaker and the dictionary cache. Each worker borrows one connection
//! (`CeleriantPool::get_connection`) for its share of the keys and gives it back.
//!
//! Bounded, and never a reason to hold `ready` (`share` for the fair part):
//! * the whole read ends at `ask.deadline` (the route, `crate::routes::watch`, gives at most
//!   one second, and never past the request's own deadline), each request (the node's and the
//!   main pool's, sent together, under the same permit) within [`NODE_TIMEOUT`], well inside
//!   that second so that a node that accepts but never answers trips [`DOWN_FOR`] rather than
//!   holding every stream for the whole budget; an aggregate not answered by then, or answered with an error, gets no
//!   tip (`None`: the client reads it); none answered, no tips;
//! * at most [`PER_STREAM`] connections for one stream, [`CONNECTIONS`] for the process,
//!   [`PER_ASKER`] for one asker's streams together, taken with `try_acquire`: none free, no
//!   tips at once;
//! * each asker's aggregates per second ([`Tips::set_rate`]: by default those of
//!   `--rate-per-client` / `--burst-per-client`), a bucket apart from its read rate: a stream
//!   refused tips makes its client read every aggregate, so spending the read rate on tips would
//!   turn that refusal into 429s on the reads that replace them;
//! * after a failure to get a connection to the node, or of a connection (not an error the
//!   node answered), no tips for [`DOWN_FOR`] (not a dial per stream); the log lines are
//!   throttled (`crate::limits::notice`).

mod resolve;
mod share;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use celeriant_client_tokio::{CeleriantPool, ClientError, DetailsError, PoolOptions, ServerError};
use celeriant_msg::request::requests::AggregateDetailsRequest;
use celeriant_wal::aggregate_key::AggregateKey as CeleriantKey;
use tokio::time::Instant;

use super::{convert, record, watch};
use crate::backend::{AggregateKey, Asker, TipsAsk};
use crate::limits::notice::Throttle;

pub use resolve::one_node_each;

/// Connections one stream's tips may use at once.
pub const PER_STREAM: usize = 4;

/// Connections every stream's tips may use at once, together (the node pool's size too).
pub const CONNECTIONS: usize = 16;

/// Connections one asker's streams may use at once, together: a quarter of [`CONNECTIONS`].
pub const PER_ASKER: usize = 4;

/// How long tips are off after a connection to the watch's node could not be had, or failed.
pub const DOWN_FOR: Duration = Duration::from_secs(5);

/// Longest a connection to the node may take to set up, and one details request (to the node,
/// or through the main pool) to answer: well under the route's one-second budget, so that a
/// node that never answers is found failed (and left alone for [`DOWN_FOR`]) within it.
pub const NODE_TIMEOUT: Duration = Duration::from_millis(400);

/// Aggregates per second per asker by default (the defaults of `--rate-per-client` and
/// `--burst-per-client`).
const RATE: (u32, u32) = (1_000, 2_000);

/// The pool of connections to one node.
struct NodePool {
    address: String,
    pool: Arc<CeleriantPool>,
}

/// Reads tips on the watch's node.
pub struct Tips {
    node: Arc<watch::Node>,
    /// The main pool: each tip is at least its answer.
    main: Arc<CeleriantPool>,
    /// How to dial and identify (the main pool's), with [`NODE_TIMEOUT`].
    options: PoolOptions,
    /// `Err(why)`: an address names several nodes, no tips ([`resolve`]).
    enabled: Result<(), String>,
    permits: share::Permits<Asker>,
    rate: share::Rate<Asker>,
    pool: Mutex<Option<NodePool>>,
    down: Mutex<Option<(String, Instant)>>,
    logs: [Throttle; 3],
}

/// Which throttled log line.
#[derive(Clone, Copy)]
enum Log {
    Late = 0,
    Down = 1,
    Failed = 2,
}

impl Tips {
    /// `main`: the main pool (its options say how to dial and identify); `node`: where the
    /// watch is open; `enabled`: [`one_node_each`] of the configured addresses.
    pub fn new(
        main: Arc<CeleriantPool>,
        node: Arc<watch::Node>,
        enabled: Result<(), String>,
    ) -> Self {
        let mut options = main.options().clone();
        options.seed_addresses = Vec::new();
        options.max_connections_per_node = CONNECTIONS;
        options.connection_timeout = options.connection_timeout.min(NODE_TIMEOUT);
        options.request_timeout = options.request_timeout.min(NODE_TIMEOUT);
        Tips {
            node,
            main,
            options,
            enabled,
            permits: share::Permits::new(CONNECTIONS, PER_ASKER),
            rate: share::Rate::new(RATE.0, RATE.1),
            pool: Mutex::new(None),
            down: Mutex::new(None),
            logs: [Throttle::new(), Throttle::new(), Throttle::new()],
        }
    }

    /// Each asker may have tips read for `per_second` aggregates per second after a burst of
    /// `burst` (0: no limit).
    pub fn set_rate(&mut self, per_second: u32, burst: u32) {
        self.rate = share::Rate::new(per_second, burst);
    }

    /// One entry per key, in order; `None` when tips are off, no watch is open, the node is
    /// down, no permit is free, the asker is over its rate, or no entry was read by the deadline.
    pub async fn read(&self, keys: &[AggregateKey], ask: TipsAsk) -> Option<Vec<Option<u64>>> {
        if keys.is_empty() {
            return Some(Vec::new());
        }
        self.enabled.as_ref().ok()?;
        // Read after the caller registered its stream (`crate::routes::watch`).
        let address = self.node.address()?;
        if self.is_down(&address) || ask.deadline <= Instant::now() {
            return None;
        }
        let held = self.permits.take(ask.asker, PER_STREAM.min(keys.len()))?;
        if !self.rate.spend(&ask.asker, keys.len()) {
            return None;
        }
        let pool = self.pool_for(&address);
        let keys: Vec<CeleriantKey> = keys.iter().map(convert::aggregate_key).collect();
        let tips: Vec<Mutex<Option<u64>>> = keys.iter().map(|_| Mutex::new(None)).collect();
        let next = AtomicUsize::new(0);
        let workers = (0..held.count()).map(|_| self.worker(&pool, &address, &keys, &next, &tips));
        let all = futures_util::future::join_all(workers);
        if tokio::time::timeout_at(ask.deadline, all).await.is_err() {
            self.log(
                Log::Late,
                &address,
                "not every tip was read in time; the rest go without",
                None,
            );
        }
        drop(held);
        let tips: Vec<Option<u64>> = tips
            .into_iter()
            .map(|t| t.into_inner().unwrap_or_else(|p| p.into_inner()))
            .collect();
        tips.iter().any(Option::is_some).then_some(tips)
    }

    /// The pool of connections to `address`, made (and the previous node's dropped) when the
    /// watch moved there.
    fn pool_for(&self, address: &str) -> Arc<CeleriantPool> {
        let mut current = self.pool.lock().unwrap_or_else(|p| p.into_inner());
        match &*current {
            Some(p) if p.address == address => p.pool.clone(),
            _ => {
                let options = PoolOptions {
                    address: address.to_owned(),
                    ..self.options.clone()
                };
                let pool = Arc::new(CeleriantPool::new(options));
                *current = Some(NodePool {
                    address: address.to_owned(),
                    pool: pool.clone(),
                });
                pool
            }
        }
    }

    fn is_down(&self, address: &str) -> bool {
        let down = self.down.lock().unwrap_or_else(|p| p.into_inner());
        matches!(&*down, Some((node, until)) if node == address && Instant::now() < *until)
    }

    fn set_down(&self, address: &str) {
        *self.down.lock().unwrap_or_else(|p| p.into_inner()) =
            Some((address.to_owned(), Instant::now() + DOWN_FOR));
    }

    fn log(&self, which: Log, node: &str, what: &str, error: Option<&ClientError>) {
        if let Some(suppressed) = self.logs[which as usize].allow() {
            let error = error.map(ToString::to_string).unwrap_or_default();
            tracing::info!(node, error, suppressed, "celeriant tips: {what}");
        }
    }

    /// Takes the next key until none is left, on one pooled connection to the node; stops at
    /// the first failure of the connection (the others go on).
    async fn worker(
        &self,
        pool: &CeleriantPool,
        address: &str,
        keys: &[CeleriantKey],
        next: &AtomicUsize,
        tips: &[Mutex<Option<u64>>],
    ) {
        let mut conn = match pool.get_connection().await {
            Ok(conn) => conn,
            Err(e) => {
                self.set_down(address);
                let what = "no connection to the watch's node; no tips for a while";
                self.log(Log::Down, address, what, Some(&e));
                return;
            }
        };
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(key) = keys.get(i) else {
                return;
            };
            let request = AggregateDetailsRequest {
                correlation_id: None,
                aggregate_key: key.clone(),
            };
            // The main pool's answer, asked at the same time (its own timeout may be longer).
            let (details, main) = tokio::join!(
                conn.client().aggregate_details(request),
                tokio::time::timeout(NODE_TIMEOUT, record::tip(&self.main, key)),
            );
            let main = match main {
                Ok(Ok(record::Tip::At(v))) => Some(v),
                Ok(Ok(record::Tip::Missing | record::Tip::Deleted)) => Some(0),
                Ok(Err(_)) | Err(_) => None,
            };
            let tip = match details {
                // What a page says of it: nothing to read.
                Ok(d) if d.is_deleted => 0,
                Ok(d) => d.max_aggregate_version,
                Err(ClientError::Server(ServerError::Details {
                    kind: DetailsError::AggregateNotExists,
                    ..
                })) => 0,
                // Answered, so the connection is still in step: the next key may do better.
                Err(ClientError::Server(_)) => continue,
                // The connection failed (without an identity to send, a node that closes
                // every connection shows here, not in `get_connection`) or timed out.
                Err(e) => {
                    conn.mark_broken();
                    self.set_down(address);
                    let what = "a details request failed; no tips for a while";
                    self.log(Log::Failed, address, what, Some(&e));
                    return;
                }
            };
            // No answer from the main pool: no tip (the client reads it).
            let Some(main) = main else {
                continue;
            };
            *tips[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(tip.max(main));
        }
    }
}
