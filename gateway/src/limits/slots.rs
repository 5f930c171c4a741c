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
//!
//! **Established devices (issue 26).** Enough light addresses (each with its own fresh keys)
//! still fill the reserve, and a device behind a heavy address (a shared NAT) is refused with
//! it. So a further sixteenth of `--max-inflight` ([`Slots::kept`]) is kept beyond it for
//! established client ids (`crate::auth::established`: a write of theirs landed): one whose
//! write the rules above refuse takes one of those, if it holds no slot already, and if its
//! address bucket holds fewer than an eighth of them ([`kept_per_bucket`]; no bucket cap with
//! `--concurrency-per-ip 0`, [`Slots::with_bucket_cap`]). Filling them takes that many
//! established client ids each with a write in progress, from eight buckets at least; fresh
//! keys never take them.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use uuid::Uuid;

use celeriant_sync_protocol::codes::gateway as g;

use super::ip::bucket;
use crate::error::ApiError;

/// An address holding fewer slots than this may take one from the reserve.
pub const LIGHT: usize = 4;

/// The places kept beyond a pool of `max` for established devices: a sixteenth, at least one
/// (write slots here, change streams and their registrations in `crate::watch::hub`).
pub fn kept_for(max: usize) -> usize {
    (max / 16).max(1)
}

/// The most of `kept` kept places one address bucket may hold: an eighth, at least one, so
/// one address bucket (an IPv4 address or IPv6 /56 at the default prefixes) full of
/// established ids cannot take the whole reserve (filling it takes eight buckets once `kept`
/// is 8 or more; below that, `kept` buckets: one each).
pub fn kept_per_bucket(kept: usize) -> usize {
    (kept / 8).max(1)
}

#[derive(Debug, Default)]
struct Held {
    /// Slots taken, the kept ones included.
    total: usize,
    per_ip: HashMap<IpAddr, usize>,
    /// Kept slots taken, and per address bucket.
    kept: usize,
    kept_per_ip: HashMap<IpAddr, usize>,
    /// Slots held by each established client id.
    per_client: HashMap<Uuid, usize>,
}

/// The pool of write slots.
#[derive(Debug)]
pub struct Slots {
    max: usize,
    reserve: usize,
    kept: usize,
    kept_per_bucket: usize,
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
    /// The established client id counted, and whether the slot is a kept one.
    client: Option<(Uuid, bool)>,
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
    /// `max` slots, the last quarter of them reserved for light addresses, and a sixteenth
    /// more kept for established client ids.
    pub fn new(max: usize) -> Arc<Self> {
        Slots::with_bucket_cap(max, true)
    }

    /// As [`Slots::new`]; `bucket_cap` false: no address bucket's cap on the kept slots, as
    /// with `--concurrency-per-ip 0` (what docs/deploy.md has behind a reverse proxy not named
    /// with `--trusted-proxy`, where every write comes from the proxy's bucket and the cap
    /// would leave every device an eighth of the kept slots).
    pub fn with_bucket_cap(max: usize, bucket_cap: bool) -> Arc<Self> {
        Arc::new(Slots {
            max,
            reserve: max / 4,
            kept: kept_for(max),
            kept_per_bucket: if bucket_cap {
                kept_per_bucket(kept_for(max))
            } else {
                usize::MAX
            },
            held: Mutex::new(Held::default()),
        })
    }

    /// The pool `limits` asks for: `--max-inflight` slots, the kept slots' bucket cap off with
    /// `--concurrency-per-ip 0`.
    pub fn for_limits(limits: &crate::config::LimitConfig) -> Arc<Self> {
        Slots::with_bucket_cap(limits.max_inflight, limits.concurrency_per_ip > 0)
    }

    /// The slots kept for established client ids beyond `max`.
    pub fn kept(&self) -> usize {
        self.kept
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Held> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// A slot for a request from `ip`, by `established` (the client id, when it is
    /// established).
    pub fn take(self: &Arc<Self>, ip: IpAddr, established: Option<Uuid>) -> Result<Slot, NoSlot> {
        let ip = bucket(ip);
        let mut held = self.lock();
        let taken = held.total - held.kept;
        let mine = held.per_ip.get(&ip).copied().unwrap_or(0);
        let refused = if taken >= self.max {
            Some(NoSlot::Full)
        } else if self.max - taken <= self.reserve && mine >= LIGHT {
            Some(NoSlot::Reserved)
        } else {
            None
        };
        let mut kept = false;
        if let Some(why) = refused {
            let theirs = established.map(|c| held.per_client.get(&c).copied().unwrap_or(0));
            let bucket_kept = held.kept_per_ip.get(&ip).copied().unwrap_or(0);
            if theirs != Some(0) || held.kept >= self.kept || bucket_kept >= self.kept_per_bucket {
                return Err(why);
            }
            kept = true;
            held.kept += 1;
            *held.kept_per_ip.entry(ip).or_insert(0) += 1;
        }
        held.total += 1;
        *held.per_ip.entry(ip).or_insert(0) += 1;
        if let Some(client) = established {
            *held.per_client.entry(client).or_insert(0) += 1;
        }
        Ok(Slot {
            owner: self.clone(),
            ip,
            client: established.map(|c| (c, kept)),
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
        if let Some((client, kept)) = self.client {
            if kept {
                held.kept -= 1;
                if let Some(n) = held.kept_per_ip.get_mut(&self.ip) {
                    *n -= 1;
                    if *n == 0 {
                        held.kept_per_ip.remove(&self.ip);
                    }
                }
            }
            if let Some(n) = held.per_client.get_mut(&client) {
                *n -= 1;
                if *n == 0 {
                    held.per_client.remove(&client);
                }
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

    impl Slots {
        /// A slot for a fresh key.
        fn take_as(self: &Arc<Self>, ip: IpAddr) -> Result<Slot, NoSlot> {
            self.take(ip, None)
        }
    }

    #[test]
    fn heavy_addresses_take_three_quarters_and_light_ones_the_reserve() {
        let slots = Slots::new(16);
        let heavy: Vec<Slot> = (0..12).map(|_| slots.take_as(ip(1)).unwrap()).collect();
        assert_eq!(slots.take_as(ip(1)).unwrap_err(), NoSlot::Reserved);
        // Light addresses fill the reserve, each up to LIGHT.
        let light: Vec<Slot> = (0..LIGHT).map(|_| slots.take_as(ip(2)).unwrap()).collect();
        assert_eq!(slots.take_as(ip(3)).unwrap_err(), NoSlot::Full);
        drop(light);
        assert_eq!(slots.taken(), 12);
        let _one = slots.take_as(ip(3)).unwrap();
        drop(heavy);
        assert_eq!(slots.taken(), 1);
    }

    #[test]
    fn a_light_address_stops_at_its_share_in_the_reserve() {
        let slots = Slots::new(8);
        let _heavy: Vec<Slot> = (0..6).map(|_| slots.take_as(ip(1)).unwrap()).collect();
        let _a: Vec<Slot> = (0..2).map(|_| slots.take_as(ip(2)).unwrap()).collect();
        assert_eq!(slots.take_as(ip(2)).unwrap_err(), NoSlot::Full);
        let slots = Slots::new(40);
        let _heavy: Vec<Slot> = (0..30).map(|_| slots.take_as(ip(1)).unwrap()).collect();
        let _b: Vec<Slot> = (0..LIGHT).map(|_| slots.take_as(ip(2)).unwrap()).collect();
        assert_eq!(slots.take_as(ip(2)).unwrap_err(), NoSlot::Reserved);
        assert!(slots.take_as(ip(3)).is_ok());
    }

    #[test]
    fn the_map_forgets_addresses_without_slots() {
        let slots = Slots::new(4);
        for i in 0..10 {
            drop(slots.take_as(ip(i)).unwrap());
        }
        assert_eq!(slots.taken(), 0);
        assert!(slots.lock().per_ip.is_empty());
    }

    #[test]
    fn established_clients_have_kept_slots_fresh_keys_cannot_take() {
        let slots = Slots::new(32);
        assert_eq!(slots.kept(), 2);
        // Light addresses with fresh keys take every slot, reserve included.
        let fresh: Vec<Slot> = (0..32u8)
            .map(|n| slots.take(ip(10 + n), None).unwrap())
            .collect();
        assert_eq!(slots.take(ip(100), None).unwrap_err(), NoSlot::Full);
        // An established device gets a kept slot, even from a flooding address; one at a time.
        let (a, b, c) = (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3));
        let first = slots.take(ip(10), Some(a)).unwrap();
        assert_eq!(slots.take(ip(10), Some(a)).unwrap_err(), NoSlot::Full);
        let _second = slots.take(ip(101), Some(b)).unwrap();
        // The kept slots are taken: a third established device waits.
        assert_eq!(slots.take(ip(102), Some(c)).unwrap_err(), NoSlot::Full);
        assert_eq!(slots.taken(), 34);
        drop(first);
        let _third = slots.take(ip(102), Some(c)).unwrap();
        drop(fresh);
        // With room, an established device takes ordinary slots (and then holds one).
        let ordinary = slots.take(ip(10), Some(a)).unwrap();
        assert_eq!(slots.lock().kept, 2);
        drop(ordinary);
        drop((_second, _third));
        let held = slots.lock();
        assert_eq!((held.total, held.kept), (0, 0));
        assert!(held.per_client.is_empty() && held.per_ip.is_empty());
    }

    #[test]
    fn one_bucket_takes_at_most_an_eighth_of_the_kept_slots() {
        let slots = Slots::new(256);
        assert_eq!((slots.kept(), kept_per_bucket(slots.kept())), (16, 2));
        let _fresh: Vec<Slot> = (0..=255u8)
            .map(|n| slots.take(IpAddr::from([198, 51, n, 1]), None).unwrap())
            .collect();
        // Established ids of one address bucket take 2 kept slots, then are refused.
        let one = |n: u128| slots.take(ip(1), Some(Uuid::from_u128(n)));
        let held = [one(1).unwrap(), one(2).unwrap()];
        assert_eq!(one(3).unwrap_err(), NoSlot::Full);
        // Another bucket's established device still finds one.
        let other = slots.take(ip(2), Some(Uuid::from_u128(4))).unwrap();
        assert_eq!(slots.lock().kept_per_ip.len(), 2);
        drop((held, other));
        assert!(slots.lock().kept_per_ip.is_empty());
    }

    #[test]
    fn without_a_per_address_concurrency_the_kept_slots_have_no_bucket_cap() {
        // Behind a proxy not named with `--trusted-proxy` every write comes from the proxy's
        // bucket (`--concurrency-per-ip 0` there): every established device must find all 16
        // kept slots, not the proxy bucket's 2.
        let proxy = ip(1);
        for (cap, want) in [(false, 16), (true, 2)] {
            let slots = Slots::with_bucket_cap(256, cap);
            let _fresh: Vec<Slot> = (0..256)
                .map_while(|_| slots.take(proxy, None).ok())
                .collect();
            let kept: Vec<Slot> = (0..40u128)
                .filter_map(|n| slots.take(proxy, Some(Uuid::from_u128(n))).ok())
                .collect();
            assert_eq!(kept.len(), want, "bucket cap {cap}");
        }
        // The flag switches it.
        let mut limits = crate::config::Config::defaults().limits;
        assert_eq!(Slots::for_limits(&limits).kept_per_bucket, 8);
        limits.concurrency_per_ip = 0;
        assert_eq!(Slots::for_limits(&limits).kept_per_bucket, usize::MAX);
    }
}
