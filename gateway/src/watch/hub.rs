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

/// An address with fewer streams open than this may open one in the reserve (see
/// `Hub::check_reserve`).
pub const RESERVE_STREAMS: usize = 2;

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
    /// Kept streams open (counted in `streams` too), and their registrations.
    kept: usize,
    kept_registrations: usize,
    /// Kept streams and their registrations per address bucket (an entry only while it has a
    /// kept stream).
    kept_by_ip: HashMap<IpAddr, (usize, usize)>,
}

/// The registry of open streams.
pub struct Hub {
    limits: WatchLimits,
    /// Streams and registrations kept beyond the pool for established devices (see
    /// [`Hub::register`]), and their caps: the most aggregates one kept stream may name, the
    /// most kept streams and kept registrations one address bucket may hold (`usize::MAX`
    /// with `--watch-max-streams-per-ip 0`).
    kept_streams: usize,
    kept_registrations: usize,
    kept_aggregates: usize,
    kept_per_bucket: usize,
    kept_registrations_per_bucket: usize,
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
    /// Whether it holds one of the places kept for established devices.
    kept: bool,
}

impl Registration {
    /// Whether the stream holds one of the places kept for established devices.
    pub fn kept(&self) -> bool {
        self.kept
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.hub.unregister(&self.slot, self.bucket, self.kept);
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
        use crate::limits::slots::{kept_for, kept_per_bucket};
        let kept_streams = kept_for(limits.max_streams);
        let kept_registrations = kept_for(limits.max_registrations);
        let kept_aggregates = (kept_registrations / kept_streams).max(1);
        // Behind a proxy not named with `--trusted-proxy` every stream is in the proxy's
        // bucket: there (`--watch-max-streams-per-ip 0`) a bucket cap would cut every device
        // to an eighth of the reserve.
        let per_bucket = |cap: usize| {
            if limits.max_streams_per_ip == 0 {
                usize::MAX
            } else {
                cap
            }
        };
        Arc::new(Hub {
            limits,
            kept_streams,
            kept_registrations,
            kept_aggregates,
            kept_per_bucket: per_bucket(kept_per_bucket(kept_streams)),
            // Implied by the two caps before it (a bucket's kept streams × a kept stream's
            // part), and checked all the same, so the bound docs/protocol.md §15 states is the
            // one the code enforces.
            kept_registrations_per_bucket: per_bucket(
                kept_per_bucket(kept_registrations).max(kept_aggregates),
            ),
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

    /// The last quarter of the stream places and of the registrations is a reserve for
    /// addresses with fewer than [`RESERVE_STREAMS`] streams open (a device holds one): one
    /// address with 50 keys once took every registration, so no other device could watch
    /// (issue 26); with `--watch-max-streams-per-ip` 64, four addresses still could. A few heavy
    /// addresses now get three quarters at most. Off with `--watch-max-streams-per-ip 0`
    /// (behind a proxy not named with `--trusted-proxy`, where every stream is the proxy's).
    fn check_reserve(
        &self,
        registry: &Registry,
        bucket: IpAddr,
        adding: usize,
    ) -> Result<(), ApiError> {
        let limits = self.limits;
        let open = registry.by_ip.get(&bucket).copied().unwrap_or(0);
        if limits.max_streams_per_ip == 0 || open < RESERVE_STREAMS {
            return Ok(());
        }
        let streams_left = limits
            .max_streams
            .saturating_sub(registry.streams.len() - registry.kept + 1);
        let registrations_left = limits
            .max_registrations
            .saturating_sub(registry.registrations - registry.kept_registrations + adding);
        if streams_left < limits.max_streams / 4
            || registrations_left < limits.max_registrations / 4
        {
            return Err(retry(
                g::WATCH_STREAMS_FULL,
                format!(
                    "the gateway's change streams are nearly at their limit and this address \
                     has {open} open; the rest is kept for addresses with fewer; retry shortly"
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

    /// The pool's own rules: its size, its registrations and the reserve for light addresses.
    fn check_pool(
        &self,
        registry: &Registry,
        bucket: IpAddr,
        adding: usize,
    ) -> Result<(), ApiError> {
        let limits = self.limits;
        let open = registry.streams.len() - registry.kept;
        if open >= limits.max_streams {
            return Err(retry(
                g::WATCH_STREAMS_FULL,
                format!("the gateway has {open} change streams open, its limit; retry shortly"),
            ));
        }
        let registrations = registry.registrations - registry.kept_registrations;
        if registrations + adding > limits.max_registrations {
            return Err(retry(
                g::WATCH_STREAMS_FULL,
                format!(
                    "the gateway's change streams watch {registrations} aggregates in all, and \
                     {adding} more would pass its limit of {}; retry shortly",
                    limits.max_registrations
                ),
            ));
        }
        self.check_reserve(registry, bucket, adding)
    }

    /// Whether a stream the pool refused may take a kept place: its client id is established
    /// and has no stream open, it names at most a kept stream's part of the kept registrations,
    /// a kept place and its registrations are free, and its address bucket holds fewer than its
    /// part of both.
    fn may_keep(
        &self,
        registry: &Registry,
        client: Option<Uuid>,
        established: bool,
        bucket: IpAddr,
        adding: usize,
    ) -> bool {
        let (streams, registrations) = registry.kept_by_ip.get(&bucket).copied().unwrap_or((0, 0));
        established
            && client.is_some()
            && !registry.by_client.contains_key(&client)
            && adding <= self.kept_aggregates
            && registry.kept < self.kept_streams
            && registry.kept_registrations + adding <= self.kept_registrations
            && streams < self.kept_per_bucket
            && registrations + adding <= self.kept_registrations_per_bucket
    }

    /// Registers a stream of `client` (`established`: `crate::auth::established`), from
    /// address `ip`, watching `aggregates`, under the limits. Once this returns, every change
    /// the hub receives for them reaches the stream's slot.
    ///
    /// **Established devices (issue 26).** Enough light addresses, each with fresh keys, still
    /// fill the pool and its reserve. So a sixteenth of `--watch-max-streams` and of
    /// `--watch-max-registrations` (at least one) is kept beyond them for established client
    /// ids, one stream each (a client id with no stream open), taken only when the pool's rules
    /// refuse. A kept stream names at most the kept registrations ÷ the kept streams (20 at the
    /// defaults): one stream could name `--watch-max-aggregates` (1,000), and 13 such streams
    /// took all 12,500 kept registrations, so every other established device's watch was
    /// refused; with that part, the kept registrations run out only when the kept streams do.
    /// One address bucket may hold at most an eighth of the kept streams and an eighth of the
    /// kept registrations (never less than one stream's part), so one /32 or /56 of
    /// established ids cannot take them all; both bucket caps are off with
    /// `--watch-max-streams-per-ip 0` (behind a proxy not named with `--trusted-proxy`). The
    /// per-address cap and the per-client cap apply to kept streams too.
    pub fn register(
        self: &Arc<Self>,
        client: Option<Uuid>,
        established: bool,
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
        let kept = match self.check_pool(&registry, bucket, aggregates.len()) {
            Ok(()) => false,
            Err(refused) => {
                if !self.may_keep(&registry, client, established, bucket, aggregates.len()) {
                    return Err(refused);
                }
                true
            }
        };
        let open = registry.by_client.get(&client).copied().unwrap_or(0);
        if client.is_some() && open >= limits.max_streams_per_client {
            return Err(retry(
                g::WATCH_STREAMS_PER_CLIENT,
                format!(
                    "this client id has {open} change streams open, its limit; close one (one \
                     stream per 1,000 watched aggregates is enough) or retry shortly"
                ),
            ));
        }
        if kept {
            registry.kept += 1;
            registry.kept_registrations += aggregates.len();
            let mine = registry.kept_by_ip.entry(bucket).or_insert((0, 0));
            mine.0 += 1;
            mine.1 += aggregates.len();
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
            kept,
        })
    }

    fn unregister(&self, slot: &Slot, bucket: IpAddr, kept: bool) {
        let mut registry = self.lock();
        if registry.streams.remove(&slot.id).is_none() {
            return;
        }
        registry.registrations -= slot.aggregates.len();
        if kept {
            registry.kept -= 1;
            registry.kept_registrations -= slot.aggregates.len();
            if let Some(mine) = registry.kept_by_ip.get_mut(&bucket) {
                mine.0 -= 1;
                mine.1 -= slot.aggregates.len();
                if mine.0 == 0 {
                    registry.kept_by_ip.remove(&bucket);
                }
            }
        }
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
            Change::Reset { key, deleted } if key.org == self.org => {
                for slot in registry
                    .by_aggregate
                    .get(&key.aggregate)
                    .into_iter()
                    .flat_map(|slots| slots.values())
                {
                    slot.reset(key.aggregate, deleted);
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

#[cfg(test)]
mod tests;
