//! Refusing a request proof (`jti`) that this replica already accepted, within bounded memory
//! partitioned by device.
//!
//! A proof is acceptable for at most [`KEEP_MS`] after the gateway first sees it (its `iat` may
//! be 5 s ahead and is then good for 30 s more), so each accepted `jti` is remembered that long,
//! plus a second of margin, and then forgotten: the window refuses it anyway. Entries expire in
//! the order they were admitted (the clock used is never allowed to go back), so one queue
//! drops them in O(1) each.
//!
//! **Bounded and partitioned.** A device (client id) holds at most `per_device` live entries.
//! Once `capacity` entries are live in all, only devices *over their fair share* (`capacity`
//! divided by the live partitions, counting the asking device) are refused; a device within its
//! share is still admitted, so a flood of self-made devices cannot lock out an idle one. That
//! lets the total pass `capacity`; a hard ceiling of twice `capacity` bounds the memory (reaching
//! it takes about e × capacity ÷ `per_device` devices live at once, each within its share, and
//! twice `capacity` requests within [`KEEP_MS`]). Refused means 429 with the time until the
//! oldest relevant entry leaves — never admitted unremembered, and no entry is evicted early,
//! since forgetting a `jti` would let its replay through. Only proofs whose signature verified
//! are remembered, so nobody can fill another device's partition without its key.
//!
//! **A reserve for established devices.** Fresh devices (a session each: only a key pair) can
//! still reach the ceiling together, and then every device is refused. So a further `capacity`
//! ÷ 4 entries ([`reserve`]) are kept for established devices (`crate::auth::established`: a
//! write of theirs landed): one the rules above refuse (but within `per_device`) is admitted
//! into the reserve, at most [`RESERVE_PER_DEVICE`] live entries each there (about two requests
//! a second), and at most [`reserve_per_bucket`] from one address bucket (an eighth of the
//! reserve, never less than one device's part; none with `--rate-per-ip 0`), so one address
//! bucket full of established devices cannot take all of it. Fresh devices never enter it.
//!
//! **Fixed-size entries.** The `jti` (up to 128 bytes) is stored as the first 16 bytes of its
//! SHA-256, in the device's set and in the expiry queue: a collision within one device's live
//! entries (2^-128 per pair) would only refuse a fresh proof as a replay.

use std::collections::{HashMap, HashSet, VecDeque};
use std::net::IpAddr;
use std::sync::Mutex;

use sha2::{Digest, Sha256};
use uuid::Uuid;

use super::proof::{MAX_AGE_SECS, MAX_AHEAD_SECS};

/// How long an accepted `jti` is remembered, in milliseconds.
pub const KEEP_MS: u64 = (MAX_AGE_SECS + MAX_AHEAD_SECS + 1) * 1_000;

/// How many of the total `capacity` may be live at most, as a multiple: room for devices within
/// their fair share once the total is full, still bounded.
pub const CEILING_FACTOR: usize = 2;

/// Most live reserve entries one established device may hold.
pub const RESERVE_PER_DEVICE: usize = 64;

/// The entries kept for established devices beyond the ceiling: a quarter of `capacity`.
pub fn reserve(capacity: usize) -> usize {
    (capacity / 4).max(RESERVE_PER_DEVICE)
}

/// The most live reserve entries the established devices of one address bucket may hold: an
/// eighth of the reserve (`crate::limits::slots::kept_per_bucket`), at least one device's part.
pub fn reserve_per_bucket(capacity: usize) -> usize {
    crate::limits::slots::kept_per_bucket(reserve(capacity)).max(RESERVE_PER_DEVICE)
}

/// A stored `jti`: the first 16 bytes of its SHA-256.
type JtiDigest = [u8; 16];

fn digest(jti: &str) -> JtiDigest {
    let full = Sha256::digest(jti.as_bytes());
    let mut out = [0u8; 16];
    out.copy_from_slice(&full[..16]);
    out
}

/// What the cache says about a proof.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// First time seen: now remembered.
    Fresh,
    /// Already accepted within the window.
    Replayed,
    /// This device's partition, or the whole cache, is full; room frees up in this many ms.
    Full {
        /// When to try again.
        retry_after_ms: u64,
    },
}

/// The bounded, per-device memory of recently accepted proofs.
pub struct ProofReplay {
    per_device: usize,
    capacity: usize,
    /// The most live reserve entries per address bucket ([`reserve_per_bucket`], or none:
    /// [`ProofReplay::bucket_cap`]).
    per_bucket: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Live entries per device.
    devices: HashMap<Uuid, Partition>,
    /// Every live entry, oldest first: (expiry, device, jti, the address bucket of a reserve
    /// entry).
    order: VecDeque<(u64, Uuid, JtiDigest, Option<IpAddr>)>,
    /// Live reserve entries in all, and per address bucket (an entry only while it has one).
    in_reserve: usize,
    reserve_by_bucket: HashMap<IpAddr, usize>,
    /// The latest clock reading seen, so expiries never go back.
    clock: u64,
}

/// One device's live entries.
#[derive(Default)]
struct Partition {
    seen: HashSet<JtiDigest>,
    /// Their expiries, oldest first (the same order as `Inner::order`).
    expiries: VecDeque<u64>,
    /// How many of them are in the reserve.
    reserved: usize,
}

impl ProofReplay {
    /// At most `per_device` live entries per device; past `capacity` in all, only devices within
    /// their fair share are admitted, up to [`CEILING_FACTOR`] × `capacity`.
    pub fn new(per_device: usize, capacity: usize) -> Self {
        ProofReplay {
            per_device,
            capacity,
            per_bucket: reserve_per_bucket(capacity),
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Whether the reserve is capped per address bucket: not without a per-address request
    /// rate (`--rate-per-ip 0`, what docs/deploy.md has behind a reverse proxy not named with
    /// `--trusted-proxy`, where every request comes from the proxy's bucket and the cap would
    /// leave every device an eighth of the reserve).
    pub fn bucket_cap(mut self, on: bool) -> Self {
        if !on {
            self.per_bucket = usize::MAX;
        }
        self
    }

    /// The most live reserve entries one address bucket may hold.
    #[cfg(test)]
    pub(crate) fn bucket_part(&self) -> usize {
        self.per_bucket
    }

    /// The clock to check a proof's freshness against: `wall_ms`, or the latest reading this
    /// cache has seen if that is later. Entries expire by that latest reading, so checking
    /// freshness against a clock stepped back would accept again proofs already forgotten.
    pub fn now_ms(&self, wall_ms: u64) -> u64 {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        inner.clock = inner.clock.max(wall_ms);
        inner.clock
    }

    /// Remembers `jti` for `device` at `now_ms`, unless it is there already or there is no room
    /// (for an established device, `established` naming its address bucket, in its part of the
    /// reserve and its bucket's either).
    pub fn admit(
        &self,
        device: Uuid,
        jti: &str,
        now_ms: u64,
        established: Option<IpAddr>,
    ) -> Admit {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let now = now_ms.max(inner.clock);
        inner.clock = now;
        while inner.order.front().is_some_and(|e| e.0 <= now) {
            let Some((_, d, j, bucket)) = inner.order.pop_front() else {
                break;
            };
            let reserved = bucket.is_some();
            inner.in_reserve -= usize::from(reserved);
            if let Some(b) = bucket
                && let Some(n) = inner.reserve_by_bucket.get_mut(&b)
            {
                *n -= 1;
                if *n == 0 {
                    inner.reserve_by_bucket.remove(&b);
                }
            }
            if let Some(partition) = inner.devices.get_mut(&d) {
                partition.seen.remove(&j);
                partition.expiries.pop_front();
                partition.reserved -= usize::from(reserved);
                if partition.seen.is_empty() {
                    inner.devices.remove(&d);
                }
            }
        }
        let jti = digest(jti);
        let own = inner.devices.get(&device);
        if own.is_some_and(|p| p.seen.contains(&jti)) {
            return Admit::Replayed;
        }
        let retry = |expiry: Option<u64>| Admit::Full {
            retry_after_ms: expiry.map_or(1_000, |e| e.saturating_sub(now)).max(1),
        };
        if let Some(p) = own.filter(|p| p.seen.len() >= self.per_device) {
            return retry(p.expiries.front().copied());
        }
        let total = inner.order.len() - inner.in_reserve;
        let mut refused = None;
        if total >= self.capacity {
            let held = own.map_or(0, |p| p.seen.len() - p.reserved);
            let partitions = inner.devices.len() + usize::from(own.is_none());
            let fair_share = (self.capacity / partitions.max(1)).max(1);
            if held >= fair_share {
                refused = Some(retry(own.and_then(|p| p.expiries.front().copied())));
            } else if total >= self.capacity.saturating_mul(CEILING_FACTOR) {
                refused = Some(retry(inner.order.front().map(|e| e.0)));
            }
        }
        let reserved = refused.is_some();
        let mut bucket = None;
        if let Some(refusal) = refused {
            let mine = own.map_or(0, |p| p.reserved);
            let Some(b) = established else {
                return refusal;
            };
            let theirs = inner.reserve_by_bucket.get(&b).copied().unwrap_or(0);
            if mine >= RESERVE_PER_DEVICE
                || inner.in_reserve >= reserve(self.capacity)
                || theirs >= self.per_bucket
            {
                return refusal;
            }
            inner.in_reserve += 1;
            *inner.reserve_by_bucket.entry(b).or_insert(0) += 1;
            bucket = Some(b);
        }
        let expiry = now.saturating_add(KEEP_MS);
        let partition = inner.devices.entry(device).or_default();
        partition.seen.insert(jti);
        partition.expiries.push_back(expiry);
        partition.reserved += usize::from(reserved);
        inner.order.push_back((expiry, device, jti, bucket));
        Admit::Fresh
    }

    /// Live entries (for tests).
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .order
            .len()
    }

    /// Whether no entry is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn home() -> IpAddr {
        IpAddr::from([192, 0, 2, 1])
    }

    #[test]
    fn a_jti_is_refused_within_the_window_per_device_and_forgotten_after() {
        let cache = ProofReplay::new(10, 100);
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let now = 1_000_000;
        assert_eq!(cache.admit(a, "x", now, None), Admit::Fresh);
        assert_eq!(cache.admit(a, "x", now + 5, None), Admit::Replayed);
        assert_eq!(
            cache.admit(b, "x", now + 5, None),
            Admit::Fresh,
            "another device"
        );
        assert_eq!(
            cache.admit(a, "x", now + KEEP_MS - 1, None),
            Admit::Replayed
        );
        assert_eq!(cache.admit(a, "x", now + KEEP_MS, None), Admit::Fresh);
        assert_eq!(cache.len(), 2, "b's entry expired too, a's is new");
    }

    #[test]
    fn a_device_over_its_partition_is_refused_alone_and_the_total_is_bounded() {
        let cache = ProofReplay::new(3, 5);
        let (a, b, c) = (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3));
        let now = 5_000_000;
        for (i, jti) in ["1", "2", "3"].into_iter().enumerate() {
            assert_eq!(cache.admit(a, jti, now + i as u64, None), Admit::Fresh);
        }
        assert_eq!(
            cache.admit(a, "4", now + 10, None),
            Admit::Full {
                retry_after_ms: KEEP_MS - 10
            },
            "a's partition is full: refused, not forgotten"
        );
        assert_eq!(cache.admit(a, "1", now + 10, None), Admit::Replayed);
        assert_eq!(
            cache.admit(b, "1", now + 10, None),
            Admit::Fresh,
            "b is unaffected"
        );
        assert_eq!(cache.admit(b, "2", now + 10, None), Admit::Fresh);
        assert_eq!(cache.len(), 5, "the total is full");
        assert_eq!(
            cache.admit(c, "1", now + 10, None),
            Admit::Fresh,
            "c holds nothing, within its share (5 / 3 partitions = 1)"
        );
        assert_eq!(
            cache.admit(c, "2", now + 10, None),
            Admit::Full {
                retry_after_ms: KEEP_MS
            },
            "c at its share, the total full: refused until its own oldest leaves"
        );
        assert_eq!(
            cache.admit(b, "3", now + 10, None),
            Admit::Full {
                retry_after_ms: KEEP_MS
            },
            "b is over its share"
        );
        assert_eq!(cache.len(), 6);
        assert_eq!(
            cache.admit(a, "4", now + KEEP_MS, None),
            Admit::Full { retry_after_ms: 1 },
            "one of a's left, still 5 in all and a over its share"
        );
        assert_eq!(cache.admit(a, "4", now + KEEP_MS + 20, None), Admit::Fresh);
        assert_eq!(cache.admit(c, "2", now + KEEP_MS + 20, None), Admit::Fresh);
    }

    #[test]
    fn a_flood_of_devices_filling_the_cache_does_not_refuse_an_idle_device() {
        // The defaults' shape, scaled down: 64 devices at their own limit fill the total.
        let (per_device, capacity) = (64, 64 * 64);
        let cache = ProofReplay::new(per_device, capacity);
        let now = 7_000_000;
        for d in 0..64u128 {
            for i in 0..per_device {
                let jti = format!("flood-{i}");
                assert_eq!(
                    cache.admit(Uuid::from_u128(d), &jti, now, None),
                    Admit::Fresh
                );
            }
        }
        assert_eq!(cache.len(), capacity);
        let flooder = Uuid::from_u128(0);
        assert!(
            matches!(
                cache.admit(flooder, "more", now + 1, None),
                Admit::Full { .. }
            ),
            "the per-device cap still refuses the flooder"
        );
        // A flooder's 65th device, over its share once it holds capacity / partitions.
        let idle = Uuid::from_u128(1_000);
        for i in 0..40 {
            assert_eq!(
                cache.admit(idle, &format!("first-{i}"), now + 2, None),
                Admit::Fresh,
                "an idle device's first proofs are admitted although the total is full"
            );
        }
        assert_eq!(cache.admit(idle, "first-0", now + 3, None), Admit::Replayed);
        let fair = capacity / 65;
        for i in 40..fair {
            assert_eq!(
                cache.admit(idle, &format!("first-{i}"), now + 3, None),
                Admit::Fresh
            );
        }
        assert!(
            matches!(cache.admit(idle, "over", now + 3, None), Admit::Full { .. }),
            "past its fair share it is refused too"
        );
        assert_eq!(cache.len(), capacity + fair);
    }

    #[test]
    fn the_total_never_passes_the_ceiling() {
        let cache = ProofReplay::new(4, 4);
        let now = 9_000_000;
        let mut admitted = 0;
        for d in 0..100u128 {
            for i in 0..4 {
                if cache.admit(Uuid::from_u128(d), &i.to_string(), now, None) == Admit::Fresh {
                    admitted += 1;
                }
            }
        }
        assert_eq!(cache.len(), admitted);
        assert!(cache.len() <= 4 * CEILING_FACTOR, "{}", cache.len());
        assert!(
            cache.len() > 4,
            "devices within their share got in past the capacity"
        );
    }

    #[test]
    fn a_proof_forgotten_before_the_clock_stepped_back_stays_stale() {
        use super::super::proof::check_fresh;
        let cache = ProofReplay::new(10, 10);
        let a = Uuid::from_u128(1);
        let t0 = 1_700_000_000_000;
        let iat = t0 / 1000;
        assert!(check_fresh(iat, cache.now_ms(t0)).is_ok());
        assert_eq!(cache.admit(a, "x", t0, None), Admit::Fresh);
        // The clock steps 60 s forward: "x" is forgotten.
        let later = t0 + 60_000;
        assert_eq!(cache.admit(a, "y", later, None), Admit::Fresh);
        assert_eq!(cache.len(), 1, "x expired");
        // Then back to t0: by the raw clock, x's iat is fresh again and x is not remembered.
        assert!(
            check_fresh(iat, t0).is_ok(),
            "the raw clock would accept it"
        );
        assert_eq!(cache.now_ms(t0), later);
        assert!(
            check_fresh(iat, cache.now_ms(t0)).is_err(),
            "checked against the cache's clock it stays stale"
        );
    }

    #[test]
    fn a_clock_going_back_never_shortens_what_is_remembered() {
        let cache = ProofReplay::new(10, 10);
        let a = Uuid::from_u128(1);
        assert_eq!(cache.admit(a, "x", 10_000_000, None), Admit::Fresh);
        assert_eq!(cache.admit(a, "y", 1_000, None), Admit::Fresh);
        assert_eq!(
            cache.admit(a, "x", 10_000_000 + KEEP_MS - 1, None),
            Admit::Replayed
        );
        assert_eq!(
            cache.admit(a, "y", 10_000_000 + KEEP_MS - 1, None),
            Admit::Replayed
        );
    }

    #[test]
    fn established_devices_have_a_reserve_fresh_devices_cannot_take() {
        let cache = ProofReplay::new(1_000, 200);
        let now = 20_000_000;
        // Fresh devices, each within its share (one proof each), fill the ceiling (twice the
        // capacity).
        let mut n = 0u128;
        while cache.len() < 400 {
            let device = Uuid::from_u128(1_000 + n);
            let _ = cache.admit(device, &format!("f{n}"), now, None);
            n += 1;
            assert!(n < 100_000, "the flood did not reach the ceiling");
        }
        let idle = Uuid::from_u128(7);
        assert!(matches!(
            cache.admit(idle, "a", now, None),
            Admit::Full { .. }
        ));
        // An established device is admitted into the reserve, up to its part of it.
        for i in 0..RESERVE_PER_DEVICE {
            assert_eq!(
                cache.admit(idle, &format!("e{i}"), now, Some(home())),
                Admit::Fresh
            );
        }
        assert!(matches!(
            cache.admit(idle, "over", now, Some(home())),
            Admit::Full { .. }
        ));
        assert_eq!(cache.admit(idle, "e0", now, Some(home())), Admit::Replayed);
        // The reserve is bounded in all (a quarter of the capacity, at least one device's part).
        let mut others = 0;
        for d in 0..10u128 {
            for i in 0..RESERVE_PER_DEVICE {
                if cache.admit(Uuid::from_u128(50 + d), &format!("o{i}"), now, Some(home()))
                    == Admit::Fresh
                {
                    others += 1;
                }
            }
        }
        assert_eq!(RESERVE_PER_DEVICE + others, reserve(200));
        assert_eq!(cache.len(), 400 + reserve(200));
        // Reserve entries expire like the others.
        assert_eq!(
            cache.admit(idle, "later", now + KEEP_MS, None),
            Admit::Fresh
        );
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn one_bucket_takes_at_most_an_eighth_of_the_reserve() {
        let cache = ProofReplay::new(1_000, 4_096);
        assert_eq!((reserve(4_096), reserve_per_bucket(4_096)), (1_024, 128));
        let now = 30_000_000;
        let mut n = 0u128;
        while cache.len() < 2 * 4_096 {
            let _ = cache.admit(Uuid::from_u128(100_000 + n), &format!("f{n}"), now, None);
            n += 1;
            assert!(n < 1_000_000, "the flood did not reach the ceiling");
        }
        // Established devices of one bucket: two devices' parts (128), then refused.
        let mut admitted = 0;
        for d in 0..3u128 {
            for i in 0..RESERVE_PER_DEVICE {
                let jti = format!("e{i}");
                if cache.admit(Uuid::from_u128(d), &jti, now, Some(home())) == Admit::Fresh {
                    admitted += 1;
                }
            }
        }
        assert_eq!(admitted, 128);
        // Another bucket's established device still has room.
        let elsewhere = IpAddr::from([198, 51, 100, 1]);
        assert_eq!(
            cache.admit(Uuid::from_u128(9), "x", now, Some(elsewhere)),
            Admit::Fresh
        );
        // Expired, the reserve's entries are forgotten, per bucket too.
        assert_eq!(
            cache.admit(Uuid::from_u128(2), "later", now + KEEP_MS, Some(home())),
            Admit::Fresh
        );
        let inner = cache.inner.lock().unwrap();
        assert_eq!((inner.in_reserve, inner.reserve_by_bucket.len()), (0, 0));
    }

    #[test]
    fn without_a_per_address_rate_the_reserve_has_no_bucket_cap() {
        // Behind a proxy not named with `--trusted-proxy` every request comes from the proxy's
        // bucket (`--rate-per-ip 0` there): established devices must find the whole reserve
        // (1,024), not the proxy bucket's eighth (128).
        let now = 30_000_000;
        for (cap, want) in [(false, 1_024), (true, 128)] {
            let cache = ProofReplay::new(1_000, 4_096).bucket_cap(cap);
            let mut n = 0u128;
            while cache.len() < 2 * 4_096 {
                let _ = cache.admit(Uuid::from_u128(100_000 + n), &format!("f{n}"), now, None);
                n += 1;
            }
            let mut admitted = 0;
            for d in 0..20u128 {
                for i in 0..RESERVE_PER_DEVICE {
                    let jti = format!("e{i}");
                    if cache.admit(Uuid::from_u128(d), &jti, now, Some(home())) == Admit::Fresh {
                        admitted += 1;
                    }
                }
            }
            assert_eq!(admitted, want, "bucket cap {cap}");
        }
    }
}
