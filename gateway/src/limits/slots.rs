//! Write slots (`--max-inflight`), with a reserve that only light addresses may take.
//!
//! A write holds a slot from admission until the store answered, including while its body
//! arrives (at `--min-body-rate-bytes-per-sec` at worst, for up to `--body-read-timeout-ms`).
//! With a plain semaphore, 4 addresses × `--concurrency-per-ip` (256) trickling bodies held all
//! 1,024 slots, and every other client's writes were refused 429 (42900) — issue 26. Now the
//! last quarter of the pool is a reserve: once fewer than a quarter of the slots are free, an
//! address already holding [`LIGHT`] slots or more is refused, and only addresses holding fewer
//! (a device sends one write at a time; a household behind one address a few) may take the
//! rest. A handful of heavy addresses can take three quarters of the pool at most; filling the
//! reserve takes a quarter of the pool ÷ [`LIGHT`] addresses (64 at the default; a pool of 16
//! or fewer has a reserve one address fills). The bytes of write bodies have a reserve of the
//! same kind (`crate::routes::write`).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use celeriant_sync_protocol::codes::gateway as g;

use super::ip::bucket;
use crate::error::ApiError;

/// An address holding fewer slots than this may take one from the reserve.
pub const LIGHT: usize = 4;

#[derive(Debug, Default)]
struct Held {
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
}

/// The pool of write slots.
#[derive(Debug)]
pub struct Slots {
    max: usize,
    reserve: usize,
    held: Mutex<Held>,
}

/// Why no slot was given.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoSlot {
    /// Every slot is taken.
    Full,
    /// Only the reserve is left, and this address is not light.
    Reserved,
}

/// One slot, given back when dropped.
#[derive(Debug)]
pub struct Slot {
    owner: Arc<Slots>,
    ip: IpAddr,
}

/// The answer to a write that got no slot: 429 (42900, `retry`, `Retry-After: 1`).
pub fn refusal(why: NoSlot) -> ApiError {
    crate::observe::budget_refused(
        "write slots",
        match why {
            NoSlot::Full => "total",
            NoSlot::Reserved => "reserve",
        },
    );
    ApiError::code(
        g::GATEWAY_BUSY,
        match why {
            NoSlot::Full => "too many writes in progress; retry shortly",
            NoSlot::Reserved => {
                "too many writes in progress, and this address has several; retry shortly"
            }
        },
    )
}

impl Slots {
    /// `max` slots, the last quarter of them reserved for light addresses.
    pub fn new(max: usize) -> Arc<Self> {
        Arc::new(Slots {
            max,
            reserve: max / 4,
            held: Mutex::new(Held::default()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for a request from `ip`.
    pub fn take(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, NoSlot> {
        let ip = bucket(ip);
        let mut held = self.lock();
        if held.total >= self.max {
            return Err(NoSlot::Full);
        }
        let mine = held.per_ip.get(&ip).copied().unwrap_or(0);
        if self.max - held.total <= self.reserve && mine >= LIGHT {
            return Err(NoSlot::Reserved);
        }
        held.total += 1;
        *held.per_ip.entry(ip).or_insert(0) += 1;
        Ok(Slot {
            owner: self.clone(),
            ip,
        })
    }

    /// Slots taken now.
    pub fn taken(&self) -> usize {
        self.lock().total
    }
}

impl Drop for Slot {
    fn drop(&mut self) {
        let mut held = self.owner.lock();
        held.total -= 1;
        if let Some(n) = held.per_ip.get_mut(&self.ip) {
            *n -= 1;
            if *n == 0 {
                held.per_ip.remove(&self.ip);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(last: u8) -> IpAddr {
        IpAddr::from([192, 0, 2, last])
    }

    #[test]
    fn heavy_addresses_take_three_quarters_and_light_ones_the_reserve() {
        let slots = Slots::new(16);
        let heavy: Vec<Slot> = (0..12).map(|_| slots.take(ip(1)).unwrap()).collect();
        assert_eq!(slots.take(ip(1)).unwrap_err(), NoSlot::Reserved);
        // Light addresses fill the reserve, each up to LIGHT.
        let light: Vec<Slot> = (0..LIGHT).map(|_| slots.take(ip(2)).unwrap()).collect();
        assert_eq!(slots.take(ip(3)).unwrap_err(), NoSlot::Full);
        drop(light);
        assert_eq!(slots.taken(), 12);
        let _one = slots.take(ip(3)).unwrap();
        drop(heavy);
        assert_eq!(slots.taken(), 1);
    }

    #[test]
    fn a_light_address_stops_at_its_share_in_the_reserve() {
        let slots = Slots::new(8);
        let _heavy: Vec<Slot> = (0..6).map(|_| slots.take(ip(1)).unwrap()).collect();
        let _a: Vec<Slot> = (0..2).map(|_| slots.take(ip(2)).unwrap()).collect();
        assert_eq!(slots.take(ip(2)).unwrap_err(), NoSlot::Full);
        let slots = Slots::new(40);
        let _heavy: Vec<Slot> = (0..30).map(|_| slots.take(ip(1)).unwrap()).collect();
        let _b: Vec<Slot> = (0..LIGHT).map(|_| slots.take(ip(2)).unwrap()).collect();
        assert_eq!(slots.take(ip(2)).unwrap_err(), NoSlot::Reserved);
        assert!(slots.take(ip(3)).is_ok());
    }

    #[test]
    fn the_map_forgets_addresses_without_slots() {
        let slots = Slots::new(4);
        for i in 0..10 {
            drop(slots.take(ip(i)).unwrap());
        }
        assert_eq!(slots.taken(), 0);
        assert!(slots.lock().per_ip.is_empty());
    }
}
