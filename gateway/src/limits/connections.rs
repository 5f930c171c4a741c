//! The cap on open connections, overall and per client address.
//!
//! Every open connection costs a file descriptor, a task and hyper's buffers; ~21,000 idle
//! sockets once exhausted the gateway's descriptors, after which nothing (not even `/healthz`)
//! was answered. [`Connections::enter`] admits a connection only under both caps and hands out
//! a guard that gives its place back when the connection ends. The per-address counts are a
//! map holding only addresses with a connection open, so it never has more entries than the
//! overall cap.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use super::ip::bucket;

#[derive(Debug, Default)]
struct Counts {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
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
    /// The overall cap is reached.
    Total,
    /// This address's cap is reached.
    Address,
}

/// One admitted connection; gives its place back when dropped.
#[derive(Debug)]
pub struct Connection {
    owner: Arc<Connections>,
    ip: IpAddr,
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

    /// Admits a connection from `ip`, or says which cap is full.
    pub fn enter(self: &Arc<Self>, ip: IpAddr) -> Result<Connection, Full> {
        let ip = bucket(ip);
        let mut counts = self.lock();
        if counts.total >= self.max {
            return Err(Full::Total);
        }
        if counts.per_ip.get(&ip).copied().unwrap_or(0) >= self.max_per_ip {
            return Err(Full::Address);
        }
        *counts.per_ip.entry(ip).or_insert(0) += 1;
        counts.total += 1;
        Ok(Connection {
            owner: self.clone(),
            ip,
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
        let mut counts = self.owner.lock();
        counts.total = counts.total.saturating_sub(1);
        if let Some(n) = counts.per_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                counts.per_ip.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn both_caps_hold_and_places_come_back() {
        let c = Connections::new(3, 2);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let a1 = c.enter(a).unwrap();
        let _a2 = c.enter(a).unwrap();
        assert_eq!(c.enter(a).unwrap_err(), Full::Address);
        let _b1 = c.enter(b).unwrap();
        assert_eq!(c.enter(b).unwrap_err(), Full::Total);
        drop(a1);
        let _b2 = c.enter(b).unwrap();
        assert_eq!(c.open(), 3);
    }

    #[test]
    fn the_map_forgets_addresses_without_connections() {
        let c = Connections::new(10, 10);
        for i in 0..5u8 {
            drop(c.enter(IpAddr::from([192, 0, 2, i])).unwrap());
        }
        assert_eq!((c.open(), c.addresses()), (0, 0));
    }
}
