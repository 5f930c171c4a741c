//! The cap on open connections, overall and per client address, and who gives way when the
//! pool is full.
//!
//! Every open connection costs a file descriptor, a task and hyper's buffers; ~21,000 idle
//! sockets once exhausted the gateway's descriptors, after which nothing (not even `/healthz`)
//! was answered. [`Connections::enter`] admits a connection only under both caps and hands out
//! a guard that gives its place back when the connection ends. The per-address records hold
//! only addresses with a connection open, so there are never more of them than the overall
//! cap.
//!
//! **A full pool is shared fairly (issue 26).** With the caps alone, 8 addresses × 256
//! keep-alive connections held all 2,048 places and every other client was refused. Now, when
//! the pool is full, a newcomer takes the place of a connection of an address that holds at
//! least two more than the newcomer's would (so an eviction never makes the newcomer's address
//! the heaviest), heaviest first: the oldest idle connection of that address — one waiting for
//! a request, sending a request's body, or reading an answer (nothing of those is applied yet,
//! or it is a read the client repeats) — and only if it has none, its oldest change stream (a
//! client reopens those and catches up from its cursor). The one thing never interrupted is a
//! write or members change between its body and its answer ([`Slot::busy`], taken by the route
//! just before the store call): cutting it there would lose an answer the store may have
//! applied. Eviction and `busy` race on one atomic, so a connection is either evicted or busy,
//! never both: a request that finds its connection evicted is answered 429 `retry` (42900) without
//! being applied. The place is moved at once (the evicted connection's task is told to drop it
//! and no longer counts), so the total never passes the cap.
//!
//! Connections from a `--trusted-proxy` named by its single address (an address, or a /32 or
//! /128; counted by that exact address, not its bucket) carry everybody's requests: they are
//! never evicted, and a new one from such a proxy may evict from any other address. The other
//! members of a trusted range are counted like any client (by bucket) and may be evicted: a
//! range is often shared (a CDN's customers, a cluster's pods), and exempting all of it would
//! let any of them hold places that can never be taken back.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use super::ip::bucket;
use crate::proxy::TrustedProxies;

/// The bit of [`Slot::state`] set once the pool evicted the connection; the rest counts the
/// requests in their commit phase.
const EVICTED: usize = 1 << (usize::BITS - 1);

/// What the pool and the task serving a connection share.
#[derive(Debug, Default)]
pub struct Slot {
    /// [`EVICTED`] | requests between their body and their answer.
    state: AtomicUsize,
    /// Change streams served on the connection now.
    streams: AtomicUsize,
    /// Woken when the pool evicts the connection.
    evict: Notify,
}

impl Slot {
    /// Marks a request in its commit phase (its body read, about to be applied) until the guard
    /// is dropped: the connection is not evicted meanwhile. `None` when it was evicted already:
    /// the request must not be applied.
    pub fn busy(self: &Arc<Self>) -> Option<Busy> {
        let before = self.state.fetch_add(1, Ordering::AcqRel);
        if before & EVICTED != 0 {
            self.state.fetch_sub(1, Ordering::AcqRel);
            return None;
        }
        Some(Busy(self.clone()))
    }

    /// Marks a change stream on the connection until the guard is dropped: such a connection
    /// is evicted only when its address has no other idle one.
    pub fn streaming(self: &Arc<Self>) -> StreamMark {
        self.streams.fetch_add(1, Ordering::AcqRel);
        StreamMark(self.clone())
    }

    /// Resolves once the pool evicted the connection: its task should drop it.
    pub async fn evicted(&self) {
        self.evict.notified().await;
    }

    fn is_evicted(&self) -> bool {
        self.state.load(Ordering::Acquire) & EVICTED != 0
    }

    /// Evicts the connection unless a request is in its commit phase.
    fn try_evict(&self) -> bool {
        self.state
            .compare_exchange(0, EVICTED, Ordering::AcqRel, Ordering::Acquire)
            .is_ok()
    }
}

/// The answer to a request whose connection was evicted before it was applied: 429 `retry`
/// (42900), nothing applied; the connection closes right after.
pub fn evicted() -> crate::error::ApiError {
    crate::error::ApiError::code(
        celeriant_sync_protocol::codes::gateway::GATEWAY_BUSY,
        "the connection pool is full and this connection gave way; nothing was applied, retry",
    )
}

/// Marks the connection's commit phase (not evicted until answered); refused 429 (42900),
/// nothing changed, when it was evicted already. `None` for a request without a connection
/// (tests that drive the router directly).
pub fn committing(conn: Option<&Arc<Slot>>) -> Result<Option<Busy>, crate::error::ApiError> {
    match conn.map(|c| c.busy()) {
        Some(None) => Err(evicted()),
        Some(Some(busy)) => Ok(Some(busy)),
        None => Ok(None),
    }
}

/// A request in its commit phase on a connection (see [`Slot::busy`]).
#[derive(Debug)]
pub struct Busy(Arc<Slot>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.state.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A change stream on a connection (see [`Slot::streaming`]).
#[derive(Debug)]
pub struct StreamMark(Arc<Slot>);

impl Drop for StreamMark {
    fn drop(&mut self) {
        self.0.streams.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Whose connections are counted together.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
enum Key {
    /// A client's address bucket (`super::ip`).
    Bucket(IpAddr),
    /// One `--trusted-proxy`, by its exact address: the rest of its bucket (outside the ranges
    /// named) are ordinary clients (a bucketed match let every neighbour of an IPv6 proxy be
    /// never evicted and evict anyone).
    Proxy(IpAddr),
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    /// Each key's connections, by admission order (oldest first).
    per_ip: HashMap<Key, BTreeMap<u64, Arc<Slot>>>,
    /// (connections, key) for every key in `per_ip`: the heaviest last.
    by_count: BTreeSet<(usize, Key)>,
    next_id: u64,
}

impl Counts {
    fn count(&self, ip: &Key) -> usize {
        self.per_ip.get(ip).map_or(0, BTreeMap::len)
    }

    fn insert(&mut self, ip: Key, id: u64, slot: Arc<Slot>) {
        let conns = self.per_ip.entry(ip).or_default();
        self.by_count.remove(&(conns.len(), ip));
        conns.insert(id, slot);
        self.by_count.insert((conns.len(), ip));
        self.total += 1;
    }

    fn remove(&mut self, ip: Key, id: u64) -> Option<Arc<Slot>> {
        let conns = self.per_ip.get_mut(&ip)?;
        let before = conns.len();
        let slot = conns.remove(&id)?;
        self.by_count.remove(&(before, ip));
        if conns.is_empty() {
            self.per_ip.remove(&ip);
        } else {
            self.by_count.insert((conns.len(), ip));
        }
        self.total -= 1;
        Some(slot)
    }

    /// Evicts one connection of the heaviest addresses holding at least two more than `mine`
    /// (any address for a proxy's connection; never a proxy's). Among the addresses of the
    /// heaviest count: the oldest connection without a stream of any of them, else the oldest
    /// stream of any of them; when every connection of that count is committing, the next
    /// count down. False when there is none.
    ///
    /// The walk is by count, heaviest first: an address holding only streams gives way before
    /// a lighter one with idle connections (a flood of streams must not make lighter clients
    /// pay). Within one count, idle connections go before streams whichever address holds them,
    /// and the oldest first, so the order of the addresses themselves decides nothing (an
    /// attacker choosing low addresses gains no shelter).
    fn evict_for(&mut self, mine: usize, proxy: bool) -> bool {
        let floor = if proxy { 1 } else { mine + 2 };
        let mut heaviest = self
            .by_count
            .iter()
            .rev()
            .take_while(|(count, _)| *count >= floor)
            .filter(|(_, key)| matches!(key, Key::Bucket(_)))
            .peekable();
        let mut victim = None;
        while let Some(&&(count, _)) = heaviest.peek() {
            let group: Vec<Key> = std::iter::from_fn(|| heaviest.next_if(|(c, _)| *c == count))
                .map(|(_, key)| *key)
                .collect();
            let mut candidates: Vec<(bool, u64, Key)> = group
                .iter()
                .flat_map(|key| {
                    self.per_ip.get(key).into_iter().flat_map(move |conns| {
                        conns.iter().map(move |(id, slot)| {
                            (slot.streams.load(Ordering::Acquire) > 0, *id, *key)
                        })
                    })
                })
                .collect();
            // Idle (false) before streams (true), then the oldest (admission order).
            candidates.sort_unstable();
            victim = candidates.into_iter().find(|(_, id, key)| {
                self.per_ip
                    .get(key)
                    .and_then(|conns| conns.get(id))
                    .is_some_and(|slot| slot.try_evict())
            });
            if victim.is_some() {
                break;
            }
        }
        let Some((_, id, key)) = victim else {
            return false;
        };
        if let Some(slot) = self.remove(key, id) {
            // A stored permit: the task sees it even if it is not waiting yet.
            slot.evict.notify_one();
        }
        true
    }
}

/// Open connections, overall and per address.
#[derive(Debug)]
pub struct Connections {
    max: usize,
    max_per_ip: usize,
    /// `--trusted-proxy` addresses and ranges: those named by a single address are never
    /// evicted.
    proxies: TrustedProxies,
    counts: Mutex<Counts>,
}

/// Why a connection was not admitted.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// The overall cap is reached and no heavier address has a connection to give way.
    Total,
    /// This address's cap is reached.
    Address,
}

/// One admitted connection; gives its place back when dropped.
#[derive(Debug)]
pub struct Connection {
    owner: Arc<Connections>,
    ip: Key,
    id: u64,
    slot: Arc<Slot>,
    /// Whether another connection was evicted to admit this one.
    evicted_another: bool,
}

impl Connection {
    /// What the pool and the connection's task share.
    pub fn slot(&self) -> Arc<Slot> {
        self.slot.clone()
    }

    /// Whether another address's connection was evicted to admit this one.
    pub fn evicted_another(&self) -> bool {
        self.evicted_another
    }
}

impl Connections {
    /// At most `max` connections, and `max_per_ip` from one address; connections from a proxy
    /// of `proxies` named by its single address are never evicted.
    pub fn new(max: usize, max_per_ip: usize, proxies: TrustedProxies) -> Arc<Self> {
        Arc::new(Connections {
            max,
            max_per_ip,
            proxies,
            counts: Mutex::new(Counts::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits a connection from `ip` (evicting one of a heavier address when the pool is
    /// full), or says which cap is full.
    pub fn enter(self: &Arc<Self>, ip: IpAddr) -> Result<Connection, Full> {
        let exact = ip.to_canonical();
        let proxy = self.proxies.names_exactly(exact);
        let ip = if proxy {
            Key::Proxy(exact)
        } else {
            Key::Bucket(bucket(ip))
        };
        let mut counts = self.lock();
        let mine = counts.count(&ip);
        if mine >= self.max_per_ip {
            return Err(Full::Address);
        }
        let mut evicted_another = false;
        if counts.total >= self.max {
            if !counts.evict_for(mine, proxy) {
                return Err(Full::Total);
            }
            evicted_another = true;
        }
        let id = counts.next_id;
        counts.next_id += 1;
        let slot = Arc::new(Slot::default());
        counts.insert(ip, id, slot.clone());
        Ok(Connection {
            owner: self.clone(),
            ip,
            id,
            slot,
            evicted_another,
        })
    }

    /// Connections open now.
    pub fn open(&self) -> usize {
        self.lock().total
    }

    /// Addresses with a connection open now (the size of the per-address map).
    pub fn addresses(&self) -> usize {
        self.lock().per_ip.len()
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        if self.slot.is_evicted() {
            return;
        }
        self.owner.lock().remove(self.ip, self.id);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([192, 0, 2, last])
    }

    fn pool(max: usize, per_ip: usize) -> Arc<Connections> {
        Connections::new(max, per_ip, TrustedProxies::default())
    }

    #[test]
    fn both_caps_hold_and_places_come_back() {
        let c = pool(3, 2);
        let (a, b) = (ip(1), ip(2));
        let a1 = c.enter(a).unwrap();
        let _a2 = c.enter(a).unwrap();
        assert_eq!(c.enter(a).unwrap_err(), Full::Address);
        let _b1 = c.enter(b).unwrap();
        // Full: a holds 2, b would hold 2: no eviction in b's favour.
        assert_eq!(c.enter(b).unwrap_err(), Full::Total);
        drop(a1);
        let _b2 = c.enter(b).unwrap();
        assert_eq!(c.open(), 3);
    }

    #[test]
    fn the_map_forgets_addresses_without_connections() {
        let c = pool(10, 10);
        for i in 0..5u8 {
            drop(c.enter(ip(i)).unwrap());
        }
        assert_eq!((c.open(), c.addresses()), (0, 0));
    }

    #[tokio::test]
    async fn a_full_pool_evicts_the_oldest_idle_connection_of_the_heaviest_address() {
        let c = pool(6, 6);
        let mut heavy: Vec<Connection> = (0..4).map(|_| c.enter(ip(1)).unwrap()).collect();
        let light: Vec<Connection> = (0..2).map(|_| c.enter(ip(2)).unwrap()).collect();
        // The oldest of the heaviest address is committing a write: the next one goes.
        let busy = heavy[0].slot().busy().unwrap();
        let newcomer = c.enter(ip(3)).unwrap();
        assert!(newcomer.evicted_another());
        assert_eq!(c.open(), 6, "the total never passes the cap");
        tokio::time::timeout(std::time::Duration::from_secs(1), heavy[1].slot.evicted())
            .await
            .expect("the second-oldest idle connection was told to go");
        assert!(!heavy[0].slot.is_evicted());
        assert!(!light[0].slot.is_evicted());
        // A request arriving on the evicted connection is not let into its commit phase.
        assert!(heavy[1].slot().busy().is_none());
        // Dropping the evicted guard does not count it twice.
        drop(heavy.remove(1));
        assert_eq!(c.open(), 6);
        drop(busy);
        drop(newcomer);
        assert_eq!(c.open(), 5);
    }

    #[test]
    fn streams_give_way_only_after_the_idle_connections_of_their_address() {
        let c = pool(4, 4);
        let held: Vec<Connection> = (0..3).map(|_| c.enter(ip(1)).unwrap()).collect();
        let _streams: Vec<StreamMark> = held[..2].iter().map(|h| h.slot().streaming()).collect();
        let _other = c.enter(ip(2)).unwrap();
        assert!(c.enter(ip(3)).unwrap().evicted_another());
        assert!(
            held[2].slot.is_evicted(),
            "the idle one, although the youngest"
        );
        assert!(!held[0].slot.is_evicted() && !held[1].slot.is_evicted());
    }

    #[test]
    fn a_heavy_address_of_streams_gives_way_before_a_lighter_one_with_idle_connections() {
        let c = pool(7, 7);
        let heavy: Vec<Connection> = (0..4).map(|_| c.enter(ip(1)).unwrap()).collect();
        let _streams: Vec<StreamMark> = heavy.iter().map(|h| h.slot().streaming()).collect();
        let light: Vec<Connection> = (0..3).map(|_| c.enter(ip(2)).unwrap()).collect();
        // ip(2) holds 3 idle connections, enough to qualify (3 >= 0 + 2), but ip(1) is heavier.
        assert!(c.enter(ip(3)).unwrap().evicted_another());
        assert!(heavy[0].slot.is_evicted(), "the heaviest's oldest stream");
        assert!(light.iter().all(|l| !l.slot.is_evicted()));
    }

    #[test]
    fn among_equally_heavy_addresses_idle_connections_go_before_streams() {
        let c = pool(6, 6);
        // A low address with idle connections, a high one with streams, equally heavy.
        let low: Vec<Connection> = (0..3).map(|_| c.enter(ip(1)).unwrap()).collect();
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        let high: Vec<Connection> = (0..3).map(|_| c.enter(v6).unwrap()).collect();
        let _streams: Vec<StreamMark> = high.iter().map(|h| h.slot().streaming()).collect();
        let newcomer = c.enter(ip(3)).unwrap();
        assert!(newcomer.evicted_another());
        assert!(
            low[0].slot.is_evicted(),
            "the oldest idle one, whoever holds it"
        );
        assert!(high.iter().all(|h| !h.slot.is_evicted()));
    }

    #[test]
    fn a_proxy_is_trusted_by_its_exact_address_not_its_prefix() {
        let proxy: IpAddr = "2001:db8::5".parse().unwrap();
        let neighbour: IpAddr = "2001:db8::6".parse().unwrap();
        let c = Connections::new(4, 4, TrustedProxies::new(&[proxy.into()]));
        let near: Vec<Connection> = (0..3).map(|_| c.enter(neighbour).unwrap()).collect();
        let _p = c.enter(proxy).unwrap();
        // A newcomer evicts the proxy's neighbour (3 >= 0 + 2): it is no proxy.
        let newcomer = c.enter(ip(1)).unwrap();
        assert!(newcomer.evicted_another());
        assert!(near[0].slot.is_evicted());
        // And the neighbour's next connection is not a proxy's that may evict anyone.
        assert_eq!(c.enter(neighbour).unwrap_err(), Full::Total);
        // The proxy given as an IPv4-mapped address is matched too.
        let mapped = crate::proxy::parse_trusted("::ffff:192.0.2.9").unwrap();
        let v4 = Connections::new(2, 2, TrustedProxies::new(&[mapped]));
        let _a = v4.enter(ip(1)).unwrap();
        let _b = v4.enter(ip(2)).unwrap();
        assert!(v4.enter(ip(9)).unwrap().evicted_another());
    }

    #[test]
    fn only_a_proxy_named_by_its_single_address_is_exempt_not_a_ranges_members() {
        let range = crate::proxy::parse_trusted("fd00::/8").unwrap();
        let single = crate::proxy::parse_trusted("2001:db8::9/128").unwrap();
        let c = Connections::new(4, 2, TrustedProxies::new(&[range, single]));
        let (a, b): (IpAddr, IpAddr) = ("fd00::1".parse().unwrap(), "fd00::2".parse().unwrap());
        // Members of the range share their /56 bucket like any client.
        let from_a: Vec<Connection> = (0..2).map(|_| c.enter(a).unwrap()).collect();
        assert_eq!(c.enter(b).unwrap_err(), Full::Address);
        // And may be evicted: the pool full, a newcomer takes a place from their bucket.
        let _x = c.enter(ip(1)).unwrap();
        let _y = c.enter(ip(2)).unwrap();
        let z = c.enter(ip(3)).unwrap();
        assert!(z.evicted_another());
        assert!(from_a.iter().any(|p| p.slot.is_evicted()));
        // A /128 is a single address: exempt, and may evict anyone.
        let p: IpAddr = "2001:db8::9".parse().unwrap();
        assert!(c.enter(p).unwrap().evicted_another());
        let exact = Connections::new(2, 2, TrustedProxies::new(&[single]));
        let held: Vec<Connection> = (0..2).map(|_| exact.enter(p).unwrap()).collect();
        assert_eq!(exact.enter(ip(1)).unwrap_err(), Full::Total);
        assert!(held.iter().all(|h| !h.slot.is_evicted()));
    }

    #[test]
    fn no_eviction_that_would_make_the_newcomer_the_heaviest() {
        let c = pool(4, 4);
        let _a: Vec<Connection> = (0..2).map(|_| c.enter(ip(1)).unwrap()).collect();
        let _b: Vec<Connection> = (0..2).map(|_| c.enter(ip(2)).unwrap()).collect();
        // Heaviest holds 2; a newcomer from a fresh address would hold 1: 2 >= 0 + 2, evicts.
        let fresh = c.enter(ip(3)).unwrap();
        assert!(fresh.evicted_another());
        // Now 1 / 2 / 1 (or 2 / 1 / 1): a second connection of the fresh address would hold 2,
        // the heaviest holds 2: refused.
        assert_eq!(c.enter(ip(3)).unwrap_err(), Full::Total);
        assert_eq!(c.open(), 4);
    }

    #[test]
    fn committing_connections_are_never_evicted() {
        let c = pool(3, 3);
        let held: Vec<Connection> = (0..3).map(|_| c.enter(ip(1)).unwrap()).collect();
        let busy: Vec<Busy> = held.iter().map(|h| h.slot().busy().unwrap()).collect();
        assert_eq!(c.enter(ip(2)).unwrap_err(), Full::Total);
        drop(busy);
        assert!(c.enter(ip(2)).unwrap().evicted_another());
    }

    #[test]
    fn a_proxy_is_never_evicted_and_takes_places_back_from_anyone() {
        let proxy = ip(9);
        let c = Connections::new(4, 4, TrustedProxies::new(&[proxy.into()]));
        let from_proxy: Vec<Connection> = (0..3).map(|_| c.enter(proxy).unwrap()).collect();
        let direct = c.enter(ip(1)).unwrap();
        // A direct newcomer: the proxy is the heaviest, but protected; nobody else qualifies.
        assert_eq!(c.enter(ip(2)).unwrap_err(), Full::Total);
        assert!(from_proxy.iter().all(|p| !p.slot.is_evicted()));
        // The proxy's next connection takes the direct client's place.
        assert!(c.enter(proxy).unwrap().evicted_another());
        assert!(direct.slot.is_evicted());
    }

    #[test]
    fn the_search_goes_past_busy_heavy_addresses() {
        let c = pool(30, 30);
        // 9 addresses × 3 committing (sorted above ip(1) on the tie), then ip(1) with 3 idle.
        let mut busy = Vec::new();
        let mut held = Vec::new();
        for a in 0..9u8 {
            for _ in 0..3 {
                let conn = c.enter(ip(10 + a)).unwrap();
                busy.push(conn.slot().busy().unwrap());
                held.push(conn);
            }
        }
        let idle: Vec<Connection> = (0..3).map(|_| c.enter(ip(1)).unwrap()).collect();
        assert!(c.enter(ip(2)).unwrap().evicted_another());
        assert!(idle[0].slot.is_evicted());
    }

    #[test]
    fn a_flood_of_newcomers_from_many_addresses_never_passes_the_cap() {
        let c = pool(64, 64);
        let mut held: Vec<Connection> = (0..64).map(|_| c.enter(ip(1)).unwrap()).collect();
        for i in 0..200u32 {
            let last = (2 + i % 200) as u8;
            if let Ok(conn) = c.enter(ip(last)) {
                held.push(conn);
            }
            assert!(c.open() <= 64);
        }
        // The flooding address gave way down to the others' level.
        let counts = c.lock();
        let one = counts.count(&Key::Bucket(ip(1)));
        assert!(one <= 2, "{one}");
        assert_eq!(counts.total, 64);
    }
}
