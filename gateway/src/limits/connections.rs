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
//! the pool is full, a newcomer takes the place of a connection of the address that holds the
//! most, as long as that address holds at least two more than the newcomer's would (so an
//! eviction never makes the newcomer's address the heaviest): the oldest of its connections on
//! which no request is being answered (idle keep-alives, connections that have not sent a
//! request yet, change streams — a client reconnects those and catches up from its cursor).
//! A connection with a request in progress is never chosen. The place is moved at once (the
//! evicted connection's task is told to drop it and no longer counts), so the total never
//! passes the cap. A handful of addresses can fill the pool, but then every new client pushes
//! one of them out instead of being refused; only when every heavier address is busy with
//! requests is a newcomer refused.

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::net::IpAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use tokio::sync::Notify;

use super::ip::bucket;

/// How many of the heaviest addresses are searched for a connection to evict.
const EVICTION_CANDIDATES: usize = 8;

/// What the pool and the task serving a connection share.
#[derive(Debug, Default)]
pub struct Slot {
    /// Requests being answered on the connection now.
    requests: AtomicUsize,
    /// Set once the pool evicted the connection (its place is no longer counted).
    evicted: AtomicBool,
    /// Woken when the pool evicts the connection.
    evict: Notify,
}

impl Slot {
    /// Marks a request in progress until the guard is dropped: the connection is not evicted
    /// meanwhile.
    pub fn busy(self: &Arc<Self>) -> Busy {
        self.requests.fetch_add(1, Ordering::AcqRel);
        Busy(self.clone())
    }

    /// Resolves once the pool evicted the connection: its task should drop it.
    pub async fn evicted(&self) {
        self.evict.notified().await;
    }
}

/// A request in progress on a connection (see [`Slot::busy`]).
#[derive(Debug)]
pub struct Busy(Arc<Slot>);

impl Drop for Busy {
    fn drop(&mut self) {
        self.0.requests.fetch_sub(1, Ordering::AcqRel);
    }
}

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    /// Each address's connections, by admission order (oldest first).
    per_ip: HashMap<IpAddr, BTreeMap<u64, Arc<Slot>>>,
    /// (connections, address) for every address in `per_ip`: the heaviest last.
    by_count: BTreeSet<(usize, IpAddr)>,
    next_id: u64,
}

impl Counts {
    fn count(&self, ip: &IpAddr) -> usize {
        self.per_ip.get(ip).map_or(0, BTreeMap::len)
    }

    fn insert(&mut self, ip: IpAddr, id: u64, slot: Arc<Slot>) {
        let conns = self.per_ip.entry(ip).or_default();
        self.by_count.remove(&(conns.len(), ip));
        conns.insert(id, slot);
        self.by_count.insert((conns.len(), ip));
        self.total += 1;
    }

    fn remove(&mut self, ip: IpAddr, id: u64) -> Option<Arc<Slot>> {
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

    /// Evicts the oldest idle connection of the heaviest addresses holding at least two more
    /// than `mine`; false when there is none.
    fn evict_for(&mut self, mine: usize) -> bool {
        let victim = self
            .by_count
            .iter()
            .rev()
            .take(EVICTION_CANDIDATES)
            .take_while(|(count, _)| *count >= mine + 2)
            .find_map(|(_, ip)| {
                self.per_ip[ip]
                    .iter()
                    .find(|(_, slot)| slot.requests.load(Ordering::Acquire) == 0)
                    .map(|(id, _)| (*ip, *id))
            });
        let Some((ip, id)) = victim else {
            return false;
        };
        if let Some(slot) = self.remove(ip, id) {
            slot.evicted.store(true, Ordering::Release);
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
    ip: IpAddr,
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
    /// At most `max` connections, and `max_per_ip` from one address.
    pub fn new(max: usize, max_per_ip: usize) -> Arc<Self> {
        Arc::new(Connections {
            max,
            max_per_ip,
            counts: Mutex::new(Counts::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Counts> {
        self.counts.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits a connection from `ip` (evicting one of a heavier address when the pool is
    /// full), or says which cap is full.
    pub fn enter(self: &Arc<Self>, ip: IpAddr) -> Result<Connection, Full> {
        let ip = bucket(ip);
        let mut counts = self.lock();
        let mine = counts.count(&ip);
        if mine >= self.max_per_ip {
            return Err(Full::Address);
        }
        let mut evicted_another = false;
        if counts.total >= self.max {
            if !counts.evict_for(mine) {
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
        if self.slot.evicted.load(Ordering::Acquire) {
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

    #[test]
    fn both_caps_hold_and_places_come_back() {
        let c = Connections::new(3, 2);
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
        let c = Connections::new(10, 10);
        for i in 0..5u8 {
            drop(c.enter(ip(i)).unwrap());
        }
        assert_eq!((c.open(), c.addresses()), (0, 0));
    }

    #[tokio::test]
    async fn a_full_pool_evicts_the_oldest_idle_connection_of_the_heaviest_address() {
        let c = Connections::new(6, 6);
        let heavy: Vec<Connection> = (0..4).map(|_| c.enter(ip(1)).unwrap()).collect();
        let light: Vec<Connection> = (0..2).map(|_| c.enter(ip(2)).unwrap()).collect();
        // The oldest of the heaviest address is busy: the next one goes.
        let busy = heavy[0].slot().busy();
        let newcomer = c.enter(ip(3)).unwrap();
        assert!(newcomer.evicted_another());
        assert_eq!(c.open(), 6, "the total never passes the cap");
        tokio::time::timeout(std::time::Duration::from_secs(1), heavy[1].slot.evicted())
            .await
            .expect("the second-oldest idle connection was told to go");
        assert!(!heavy[0].slot.evicted.load(Ordering::Acquire));
        assert!(!light[0].slot.evicted.load(Ordering::Acquire));
        // Dropping the evicted guard does not count it twice.
        let mut heavy = heavy;
        drop(heavy.remove(1));
        assert_eq!(c.open(), 6);
        drop(busy);
        drop(newcomer);
        assert_eq!(c.open(), 5);
    }

    #[test]
    fn no_eviction_that_would_make_the_newcomer_the_heaviest() {
        let c = Connections::new(4, 4);
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
    fn busy_connections_are_never_evicted() {
        let c = Connections::new(3, 3);
        let held: Vec<Connection> = (0..3).map(|_| c.enter(ip(1)).unwrap()).collect();
        let busy: Vec<Busy> = held.iter().map(|h| h.slot().busy()).collect();
        assert_eq!(c.enter(ip(2)).unwrap_err(), Full::Total);
        drop(busy);
        assert!(c.enter(ip(2)).unwrap().evicted_another());
    }

    #[test]
    fn a_flood_of_newcomers_from_many_addresses_never_passes_the_cap() {
        let c = Connections::new(64, 64);
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
        assert!(counts.count(&ip(1)) <= 2, "{}", counts.count(&ip(1)));
        assert_eq!(counts.total, 64);
    }
}
