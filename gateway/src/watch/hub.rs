//! The watch hub: which stream watches which aggregate, the stream limits, and the fan-out of
//! a backend's changes.
//!
//! Streams register their aggregates here ([`Hub::register`], refused over
//! `--watch-max-aggregates`, `--watch-max-streams-per-client`, `--watch-max-streams-per-ip`
//! (per address bucket, `crate::limits::ip`), `--watch-max-streams` or
//! `--watch-max-registrations`, the aggregates summed over all streams) and
//! unregister when their [`Registration`] is dropped. The registry maps each aggregate to the
//! streams that watch it, so a change costs one hash lookup whatever the number of streams
//! (and nothing more when nobody watches that aggregate). [`Hub::pump`] reads the backend's
//! broadcast channel; a pump that lagged behind it (notifications lost) sends `resync` to every
//! stream. The hub never waits for a stream: it only writes into its [`Slot`].

use std::collections::{BTreeMap, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use celeriant_sync_protocol::AggregateRef;
use celeriant_sync_protocol::codes::gateway as g;
use celeriant_sync_protocol::outcome::{Failure, TRANSIENT_RETRY_AFTER_MS, WriteOutcome};
use tokio::sync::broadcast;
use tokio::sync::broadcast::error::RecvError;
use uuid::Uuid;

use super::slot::Slot;
use crate::backend::Change;
use crate::error::ApiError;

/// The stream limits (`--watch-max-*`).
#[derive(Debug, Clone, Copy)]
pub struct WatchLimits {
    /// Most aggregates one stream may name.
    pub max_aggregates: usize,
    /// Most streams one client id may hold open.
    pub max_streams_per_client: usize,
    /// Most streams one address bucket may hold open (0: no cap).
    pub max_streams_per_ip: usize,
    /// Most streams open in the process.
    pub max_streams: usize,
    /// Most registrations (aggregates summed over the open streams) in the process.
    pub max_registrations: usize,
}

#[derive(Default)]
struct Registry {
    streams: HashMap<u64, Arc<Slot>>,
    /// Per aggregate, its streams by id: removing one stream is one lookup per aggregate it
    /// watches, whatever the number of streams watching the same aggregates.
    by_aggregate: HashMap<AggregateRef, HashMap<u64, Arc<Slot>>>,
    by_client: HashMap<Option<Uuid>, usize>,
    /// Open streams per address bucket (an entry only while it has one).
    by_ip: HashMap<IpAddr, usize>,
    /// Aggregates summed over the open streams.
    registrations: usize,
}

/// The registry of open streams.
pub struct Hub {
    limits: WatchLimits,
    org: Uuid,
    registry: Mutex<Registry>,
    next_id: AtomicU64,
    closing: tokio::sync::watch::Sender<bool>,
}

/// One stream's place in the hub; unregisters when dropped.
pub struct Registration {
    hub: Arc<Hub>,
    /// The stream's slot.
    pub slot: Arc<Slot>,
    /// The address bucket it counts under.
    bucket: IpAddr,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.hub.unregister(&self.slot, self.bucket);
    }
}

fn retry(code: u32, message: String) -> ApiError {
    crate::observe::budget_refused("change streams", "streams");
    ApiError(WriteOutcome::Retry(Failure {
        retry_after_ms: Some(TRANSIENT_RETRY_AFTER_MS),
        ..Failure::new(code, message)
    }))
}

impl Hub {
    /// An empty hub for organisation `org` (changes of other organisations are ignored).
    pub fn new(limits: WatchLimits, org: Uuid) -> Arc<Self> {
        Arc::new(Hub {
            limits,
            org,
            registry: Mutex::new(Registry::default()),
            next_id: AtomicU64::new(1),
            closing: tokio::sync::watch::Sender::new(false),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Registry> {
        self.registry.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Refuses a stream naming `n` aggregates, over `--watch-max-aggregates`.
    pub fn check_size(&self, n: usize) -> Result<(), ApiError> {
        if n > self.limits.max_aggregates {
            return Err(ApiError::code(
                g::WATCH_TOO_MANY_AGGREGATES,
                format!(
                    "the stream names {n} aggregates; at most {} are allowed per stream",
                    self.limits.max_aggregates
                ),
            ));
        }
        Ok(())
    }

    fn check_bucket(&self, registry: &Registry, bucket: IpAddr) -> Result<(), ApiError> {
        let open = registry.by_ip.get(&bucket).copied().unwrap_or(0);
        if self.limits.max_streams_per_ip > 0 && open >= self.limits.max_streams_per_ip {
            return Err(retry(
                g::WATCH_STREAMS_PER_IP,
                format!(
                    "this address has {open} change streams open, its limit; close one or \
                     retry shortly"
                ),
            ));
        }
        Ok(())
    }

    /// Refuses a stream from `ip` when its address bucket already holds
    /// `--watch-max-streams-per-ip` streams: asked before the access checks, which would be
    /// wasted on it ([`Hub::register`] asks again).
    pub fn check_address(&self, ip: IpAddr) -> Result<(), ApiError> {
        self.check_bucket(&self.lock(), crate::limits::ip::bucket(ip))
    }

    /// Registers a stream of `client`, from address `ip`, watching `aggregates`, under the
    /// limits. Once this returns, every change the hub receives for them reaches the stream's
    /// slot.
    pub fn register(
        self: &Arc<Self>,
        client: Option<Uuid>,
        ip: IpAddr,
        aggregates: HashSet<AggregateRef>,
    ) -> Result<Registration, ApiError> {
        let limits = self.limits;
        self.check_size(aggregates.len())?;
        let bucket = crate::limits::ip::bucket(ip);
        let mut registry = self.lock();
        // First: a bucket at its cap is refused whatever the pool holds, so its retries never
        // count as the gateway being full.
        self.check_bucket(&registry, bucket)?;
        if registry.streams.len() >= limits.max_streams {
            return Err(retry(
                g::WATCH_STREAMS_FULL,
                format!(
                    "the gateway has {} change streams open, its limit; retry shortly",
                    registry.streams.len()
                ),
            ));
        }
        if registry.registrations + aggregates.len() > limits.max_registrations {
            return Err(retry(
                g::WATCH_STREAMS_FULL,
                format!(
                    "the gateway's change streams watch {} aggregates in all, and {} more would \
                     pass its limit of {}; retry shortly",
                    registry.registrations,
                    aggregates.len(),
                    limits.max_registrations
                ),
            ));
        }
        let open = registry.by_client.get(&client).copied().unwrap_or(0);
        if client.is_some() && open >= limits.max_streams_per_client {
            return Err(retry(
                g::WATCH_STREAMS_PER_CLIENT,
                format!(
                    "this client id has {open} change streams open, its limit; close one (one \
                     stream per device is enough) or retry shortly"
                ),
            ));
        }
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let slot = Arc::new(Slot::new(id, client, aggregates));
        for aggregate in &slot.aggregates {
            registry
                .by_aggregate
                .entry(*aggregate)
                .or_default()
                .insert(id, slot.clone());
        }
        registry.registrations += slot.aggregates.len();
        *registry.by_client.entry(client).or_insert(0) += 1;
        *registry.by_ip.entry(bucket).or_insert(0) += 1;
        registry.streams.insert(id, slot.clone());
        Ok(Registration {
            hub: self.clone(),
            slot,
            bucket,
        })
    }

    fn unregister(&self, slot: &Slot, bucket: IpAddr) {
        let mut registry = self.lock();
        if registry.streams.remove(&slot.id).is_none() {
            return;
        }
        registry.registrations -= slot.aggregates.len();
        for aggregate in &slot.aggregates {
            if let Some(slots) = registry.by_aggregate.get_mut(aggregate) {
                slots.remove(&slot.id);
                if slots.is_empty() {
                    registry.by_aggregate.remove(aggregate);
                }
            }
        }
        if let Some(n) = registry.by_client.get_mut(&slot.client) {
            *n -= 1;
            if *n == 0 {
                registry.by_client.remove(&slot.client);
            }
        }
        if let Some(n) = registry.by_ip.get_mut(&bucket) {
            *n -= 1;
            if *n == 0 {
                registry.by_ip.remove(&bucket);
            }
        }
    }

    /// Hands one change to the streams concerned.
    pub fn dispatch(&self, change: Change) {
        let registry = self.lock();
        match change {
            Change::Changed { key, version } if key.org == self.org => {
                for slot in registry
                    .by_aggregate
                    .get(&key.aggregate)
                    .into_iter()
                    .flat_map(|slots| slots.values())
                {
                    slot.changed(key.aggregate, version);
                }
            }
            Change::Reset { key } if key.org == self.org => {
                for slot in registry
                    .by_aggregate
                    .get(&key.aggregate)
                    .into_iter()
                    .flat_map(|slots| slots.values())
                {
                    slot.reset(key.aggregate);
                }
            }
            Change::Resync => {
                for slot in registry.streams.values() {
                    slot.resync();
                }
            }
            _ => {}
        }
    }

    /// Reads `changes` until the backend closes it, dispatching each; after a lag, `resync`
    /// to everyone.
    pub async fn pump(self: Arc<Self>, mut changes: broadcast::Receiver<Change>) {
        loop {
            match changes.recv().await {
                Ok(change) => self.dispatch(change),
                Err(RecvError::Lagged(missed)) => {
                    tracing::warn!(missed, "watch: the hub lagged behind the store; resync");
                    self.dispatch(Change::Resync);
                }
                Err(RecvError::Closed) => return,
            }
        }
    }

    /// Streams open now, in total and per client id (`"none"` under `--auth none`).
    pub fn counts(&self) -> (usize, BTreeMap<String, usize>) {
        let registry = self.lock();
        let by_client = registry
            .by_client
            .iter()
            .map(|(c, n)| (c.map_or_else(|| "none".to_owned(), |c| c.to_string()), *n))
            .collect();
        (registry.streams.len(), by_client)
    }

    /// Ends every stream (the gateway is shutting down) and refuses none afterwards: a stream
    /// that sees [`Hub::closing`] turn true ends.
    pub fn close(&self) {
        self.closing.send_replace(true);
    }

    /// Whether the gateway is shutting down, to wait on.
    pub fn closing(&self) -> tokio::sync::watch::Receiver<bool> {
        self.closing.subscribe()
    }
}
