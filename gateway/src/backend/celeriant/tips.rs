//! `Backend::tips` on Celeriant: each aggregate's version for a change stream's `ready`, read
//! with one aggregate-details request per aggregate **on the node the upstream watch is open
//! on** (`watch::Node`), never through the pool's read routing.
//!
//! Why that node. A tip lets a client whose cursor equals it skip the aggregate's catch-up, so it
//! must be at least every version that will not be notified on the stream. The pool sends a
//! details request to the cached leader or the first configured address, and on a connection
//! failure to the next node (`celeriant_client_tokio` 0.3.0, `pool.rs`: `aggregate_details` and
//! `read` use `read_route!`, whose candidates come from `read_addresses`; `clear_leader` pins the
//! first seed, a follower whenever the primary leads): a replica that may lag. A lagging answer
//! (version 4 while 5 was committed and notified before the stream was registered) would make a
//! client at 4 skip 5 with nothing on the stream to tell it. On the watch's own node instead,
//! with `t1` the registration and the node read after it (`watch::Node` says it was open on that
//! node at `t1`, or a resync reaches the stream after `t1`): the node answers `v`, every version
//! it applied before; whatever it applies later it notifies on the watch (which covers what
//! happens after the subscription was acknowledged), after `t1`, so on the stream. This relies on
//! the node notifying a version no earlier than its details answers show it, and on one
//! configured address naming one node (not a load balancer over several).
//!
//! Bounded: at most [`PER_STREAM`] connections for one stream's tips and [`CONNECTIONS`] for
//! the whole process, each dialled to the node and identified as the pool's are (its TLS,
//! identity, timeouts and sizes), used for one `ready` and dropped; the whole read is bounded by
//! the upstream request timeout. An aggregate not answered by then, or answered with an error,
//! gets no tip (`None`: the client reads it); when none got one, or no watch is open, there are
//! no tips at all.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use celeriant_client_tokio::{
    CeleriantClient, ClientError, DetailsError, PoolOptions, ServerError,
};
use celeriant_msg::request::requests::AggregateDetailsRequest;
use celeriant_wal::aggregate_key::AggregateKey as CeleriantKey;
use tokio::sync::Semaphore;

use super::{convert, watch};
use crate::backend::AggregateKey;

/// Connections one stream's tips may use at once.
pub const PER_STREAM: usize = 4;

/// Connections every stream's tips may use at once, together.
pub const CONNECTIONS: usize = 16;

/// Reads tips on the watch's node.
pub struct Tips {
    node: Arc<watch::Node>,
    options: PoolOptions,
    connections: Arc<Semaphore>,
}

impl Tips {
    /// `options`: the pool's (how to dial and identify); `node`: where the watch is open.
    pub fn new(options: PoolOptions, node: Arc<watch::Node>) -> Self {
        Tips {
            node,
            options,
            connections: Arc::new(Semaphore::new(CONNECTIONS)),
        }
    }

    /// One entry per key, in order; `None` when no watch is open or no entry could be read.
    pub async fn read(&self, keys: &[AggregateKey]) -> Option<Vec<Option<u64>>> {
        if keys.is_empty() {
            return Some(Vec::new());
        }
        // Read after the caller registered its stream (`crate::routes::watch`).
        let address = self.node.address()?;
        let keys: Vec<CeleriantKey> = keys.iter().map(convert::aggregate_key).collect();
        let tips: Vec<std::sync::Mutex<Option<u64>>> =
            keys.iter().map(|_| std::sync::Mutex::new(None)).collect();
        let next = AtomicUsize::new(0);
        let workers =
            (0..PER_STREAM.min(keys.len())).map(|_| self.worker(&address, &keys, &next, &tips));
        let all = futures_util::future::join_all(workers);
        if tokio::time::timeout(self.options.request_timeout, all)
            .await
            .is_err()
        {
            tracing::info!(
                node = address,
                "celeriant tips: not every tip was read in time; the rest go without"
            );
        }
        let tips: Vec<Option<u64>> = tips
            .into_iter()
            .map(|t| t.into_inner().unwrap_or_else(|p| p.into_inner()))
            .collect();
        tips.iter().any(Option::is_some).then_some(tips)
    }

    /// Takes the next key until none is left, on one connection of its own; stops at the first
    /// failure of the connection (the others go on).
    async fn worker(
        &self,
        address: &str,
        keys: &[CeleriantKey],
        next: &AtomicUsize,
        tips: &[std::sync::Mutex<Option<u64>>],
    ) {
        let Ok(_permit) = self.connections.acquire().await else {
            return;
        };
        let mut client = match self.dial(address).await {
            Ok(client) => client,
            Err(e) => {
                tracing::info!(node = address, error = %e, "celeriant tips: cannot dial the watch's node");
                return;
            }
        };
        loop {
            let i = next.fetch_add(1, Ordering::Relaxed);
            let Some(key) = keys.get(i) else {
                return;
            };
            let details = client
                .aggregate_details(AggregateDetailsRequest {
                    correlation_id: None,
                    aggregate_key: key.clone(),
                })
                .await;
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
                Err(e) => {
                    tracing::info!(node = address, error = %e, "celeriant tips: a details request failed");
                    return;
                }
            };
            *tips[i].lock().unwrap_or_else(|p| p.into_inner()) = Some(tip);
        }
    }

    /// A connection to `address` set up as the pool sets up its own (`pool.rs`, `create_client`).
    async fn dial(&self, address: &str) -> Result<CeleriantClient, ClientError> {
        let o = &self.options;
        let mut client = CeleriantClient::connect_with_timeout(
            address,
            Some(o.connection_timeout),
            o.tls_config.clone(),
        )
        .await?
        .with_timeout(o.request_timeout)
        .with_max_request_size(o.max_request_size)
        .with_max_response_size(o.max_response_size);
        if let Some(identity) = &o.identity_config {
            client.identify(identity).await?;
        }
        Ok(client)
    }
}
