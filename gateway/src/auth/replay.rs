//! Refusing a (public key, nonce) pair that was already accepted within the nonce window.
//!
//! A captured `POST /v1/session` body (a log, a proxy) stays valid for the nonce window, so the
//! gateway remembers each accepted pair — keyed by the client id, which is a hash of the key —
//! until its nonce has left the window (nonce + 2 minutes, plus a second of margin), after which
//! Celeriant's own rule refuses it anyway. Only pairs whose signature verified are remembered,
//! so no one can pre-empt a device's future nonces.
//!
//! **Bounded, and shared by address.** Past `capacity` live entries, only sessions from an
//! address (IPv6: per prefix, `crate::limits::ip`) holding fewer than its fair share —
//! `capacity` ÷ the addresses with live entries, counting the asking one — are admitted, up to
//! a hard ceiling of [`CEILING_FACTOR`] × `capacity`; the others are refused with a retry hint
//! (never admitted unremembered, never an entry forgotten early). Before, 105,000 sessions from
//! 3,500 addresses (the /64s of one IPv6 /52) filled the cache and a brand-new device was
//! refused (429, 42901) for two minutes (issue 26); now the flooding addresses are each over
//! their share and the new device's address, holding none, is admitted. Filling the ceiling
//! takes the whole cache spread over addresses each within its share. Each gateway process has its own cache: replicas do
//! not share it (docs/protocol.md says so).
//!
//! **A reserve for established devices.** Enough addresses, each within its share, still fill
//! the ceiling with fresh keys, and a device behind a flooding address (a shared NAT) is over
//! that address's share. So a further `capacity` ÷ 4 entries ([`reserve`]) are kept for client
//! ids that are established (`crate::auth::established`: a write of theirs landed): when the
//! rules above refuse one of them, it is admitted into the reserve, at most
//! [`RESERVE_PER_CLIENT`] live entries per client id there, and at most
//! [`reserve_per_bucket`] per address bucket (an eighth of the reserve), so filling the reserve
//! takes that many established client ids (each cost a session and a landed write) in eight
//! buckets at least (no bucket cap with `--session-rate-per-minute 0`: [`ReplayCache::bucket_cap`]).
//! Fresh keys never enter the reserve.

use std::collections::{BTreeSet, HashMap, HashSet};
use std::net::IpAddr;
use std::sync::Mutex;

use celeriant_sync_protocol::session::NONCE_MAX_AGE_MS;
use uuid::Uuid;

/// How long after its nonce an entry is kept, in milliseconds.
const KEEP_MS: u64 = NONCE_MAX_AGE_MS + 1_000;

/// Most live entries, as a multiple of `capacity`: room for addresses within their fair share
/// once the cache is full, still bounded.
pub const CEILING_FACTOR: usize = 2;

/// Most live reserve entries one established client id may hold (a device opens one session at
/// a time; two leave room for a retry within the nonce window).
pub const RESERVE_PER_CLIENT: usize = 2;

/// The entries kept for established client ids beyond the ceiling: a quarter of `capacity`.
pub fn reserve(capacity: usize) -> usize {
    (capacity / 4).max(1)
}

/// The most live reserve entries the established client ids of one address bucket may hold:
/// an eighth of the reserve (`crate::limits::slots::kept_per_bucket`), at least one client
/// id's part.
pub fn reserve_per_bucket(capacity: usize) -> usize {
    crate::limits::slots::kept_per_bucket(reserve(capacity)).max(RESERVE_PER_CLIENT)
}

/// What the cache says about a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// First time seen: now remembered.
    Fresh,
    /// Already accepted within the window.
    Replayed,
    /// The cache is full of live entries; the oldest leaves in this many milliseconds.
    Full {
        /// When to try again.
        retry_after_ms: u64,
    },
}

/// The bounded set of recently accepted pairs.
pub struct ReplayCache {
    capacity: usize,
    /// The most live reserve entries per address bucket ([`reserve_per_bucket`], or none:
    /// [`ReplayCache::bucket_cap`]).
    per_bucket: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    seen: HashSet<(Uuid, u64)>,
    /// (expiry, client, nonce, bucket, in the reserve).
    by_expiry: BTreeSet<(u64, Uuid, u64, IpAddr, bool)>,
    /// Live entries outside the reserve, per address bucket.
    per_ip: HashMap<IpAddr, usize>,
    /// Live reserve entries, per client id and per address bucket.
    reserved: HashMap<Uuid, usize>,
    reserved_per_ip: HashMap<IpAddr, usize>,
    /// Live reserve entries in all.
    in_reserve: usize,
}

fn decrement<K: std::hash::Hash + Eq>(map: &mut HashMap<K, usize>, key: &K) {
    if let Some(n) = map.get_mut(key) {
        *n -= 1;
        if *n == 0 {
            map.remove(key);
        }
    }
}

impl ReplayCache {
    /// A cache holding at most `capacity` live pairs.
    pub fn new(capacity: usize) -> Self {
        ReplayCache {
            capacity,
            per_bucket: reserve_per_bucket(capacity),
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Whether the reserve is capped per address bucket: not without a per-address session
    /// rate (`--session-rate-per-minute 0`, what docs/deploy.md has behind a reverse proxy not
    /// named with `--trusted-proxy`, where every session comes from the proxy's bucket and the
    /// cap would leave every device an eighth of the reserve).
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

    /// Remembers (client, nonce), asked from `ip` at `now_ms`, unless it is there already or
    /// the cache is full for that address (and, for an `established` client id, its part of
    /// the reserve is taken too).
    pub fn admit(
        &self,
        client: Uuid,
        nonce_ms: u64,
        ip: IpAddr,
        now_ms: u64,
        established: bool,
    ) -> Admit {
        let ip = crate::limits::ip::bucket(ip);
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(&first) = inner.by_expiry.first() {
            if first.0 > now_ms {
                break;
            }
            inner.by_expiry.pop_first();
            inner.seen.remove(&(first.1, first.2));
            if first.4 {
                decrement(&mut inner.reserved, &first.1);
                decrement(&mut inner.reserved_per_ip, &first.3);
                inner.in_reserve -= 1;
            } else {
                decrement(&mut inner.per_ip, &first.3);
            }
        }
        if inner.seen.contains(&(client, nonce_ms)) {
            return Admit::Replayed;
        }
        let mine = inner.per_ip.get(&ip).copied().unwrap_or(0);
        let live = inner.seen.len() - inner.in_reserve;
        let mut reserved = false;
        if live >= self.capacity {
            let addresses = inner.per_ip.len() + usize::from(mine == 0);
            let share = self.capacity / addresses.max(1);
            if mine >= share || live >= self.capacity.saturating_mul(CEILING_FACTOR) {
                let held = inner.reserved.get(&client).copied().unwrap_or(0);
                let bucket_held = inner.reserved_per_ip.get(&ip).copied().unwrap_or(0);
                if established
                    && held < RESERVE_PER_CLIENT
                    && inner.in_reserve < reserve(self.capacity)
                    && bucket_held < self.per_bucket
                {
                    reserved = true;
                } else {
                    // When room frees up for this address: its own oldest entry leaves (over
                    // its share), or the oldest of all (at the ceiling).
                    let oldest = inner
                        .by_expiry
                        .iter()
                        .find(|e| !e.4 && (mine == 0 || mine < share || e.3 == ip))
                        .map_or(now_ms + 1_000, |e| e.0);
                    return Admit::Full {
                        retry_after_ms: oldest.saturating_sub(now_ms).max(1),
                    };
                }
            }
        }
        inner.seen.insert((client, nonce_ms));
        inner.by_expiry.insert((
            nonce_ms.saturating_add(KEEP_MS),
            client,
            nonce_ms,
            ip,
            reserved,
        ));
        if reserved {
            *inner.reserved.entry(client).or_insert(0) += 1;
            *inner.reserved_per_ip.entry(ip).or_insert(0) += 1;
            inner.in_reserve += 1;
        } else {
            *inner.per_ip.entry(ip).or_insert(0) += 1;
        }
        Admit::Fresh
    }

    /// Live entries (for tests and logs).
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .seen
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

    const IP: IpAddr = IpAddr::V4(std::net::Ipv4Addr::new(192, 0, 2, 1));

    #[test]
    fn a_pair_is_refused_within_the_window_and_forgotten_after() {
        let cache = ReplayCache::new(10);
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let now = 1_000_000;
        assert_eq!(cache.admit(a, now, IP, now, false), Admit::Fresh);
        assert_eq!(cache.admit(a, now, IP, now + 5, false), Admit::Replayed);
        assert_eq!(
            cache.admit(b, now, IP, now + 5, false),
            Admit::Fresh,
            "another key"
        );
        assert_eq!(
            cache.admit(a, now + 1, IP, now + 5, false),
            Admit::Fresh,
            "another nonce"
        );
        assert_eq!(
            cache.admit(a, now, IP, now + KEEP_MS - 1, false),
            Admit::Replayed
        );
        assert_eq!(
            cache.admit(a, now, IP, now + KEEP_MS, false),
            Admit::Fresh,
            "expired, then the window refuses it anyway"
        );
    }

    #[test]
    fn the_cache_is_bounded_and_says_when_room_frees_up() {
        let cache = ReplayCache::new(3);
        let now = 5_000_000;
        for n in 0..3 {
            assert_eq!(
                cache.admit(Uuid::from_u128(n), now + n as u64, IP, now, false),
                Admit::Fresh
            );
        }
        assert_eq!(
            cache.admit(Uuid::from_u128(9), now, IP, now, false),
            Admit::Full {
                retry_after_ms: KEEP_MS
            }
        );
        assert_eq!(cache.len(), 3);
        assert_eq!(
            cache.admit(Uuid::from_u128(9), now, IP, now + KEEP_MS, false),
            Admit::Fresh,
            "the oldest left"
        );
        assert_eq!(cache.len(), 3);
        assert_eq!(
            cache.admit(Uuid::from_u128(8), now, IP, now + KEEP_MS + 2, false),
            Admit::Fresh
        );
        assert_eq!(cache.len(), 1, "expired entries were dropped");
    }

    #[test]
    fn past_capacity_only_addresses_within_their_share_are_admitted() {
        let cache = ReplayCache::new(100);
        let now = 9_000_000;
        let from =
            |n: u32| IpAddr::from((0x2001_0db8_0000_u128 << 80 | (n as u128) << 72).to_be_bytes());
        // 35 addresses (each its own /56) × 3 sessions: 105 > 100 attempted.
        let mut refused = 0;
        for a in 0..35u32 {
            for k in 0..3u32 {
                let client = Uuid::from_u128((a * 10 + k) as u128);
                if cache.admit(client, now, from(a), now, false) != Admit::Fresh {
                    refused += 1;
                }
            }
        }
        // Past 100, each address is admitted up to its share (100 / 35 = 2): 103 live, 2 refused.
        assert_eq!(
            (cache.len(), refused),
            (103, 2),
            "the flood fills the cache"
        );
        // A brand-new device on an address of its own: within its share (100 / 36 > 0).
        assert_eq!(
            cache.admit(Uuid::from_u128(999), now, from(1_000), now, false),
            Admit::Fresh
        );
        // A flooding address stays refused, told when its own oldest entry leaves.
        assert_eq!(
            cache.admit(Uuid::from_u128(998), now, from(0), now + 10, false),
            Admit::Full {
                retry_after_ms: KEEP_MS - 10
            }
        );
        // The /56 is one address: a neighbour in another /64 of the same /56 is the flooder.
        let neighbour =
            IpAddr::from((0x2001_0db8_0000_u128 << 80 | 0xff << 64 | 0xffff).to_be_bytes());
        assert_ne!(
            cache.admit(Uuid::from_u128(997), now, neighbour, now + 10, false),
            Admit::Fresh
        );
    }

    #[test]
    fn the_ceiling_bounds_the_cache_whatever_the_addresses() {
        let cache = ReplayCache::new(10);
        let now = 9_000_000;
        for n in 0..1_000u32 {
            let ip = IpAddr::from([10, (n >> 16) as u8, (n >> 8) as u8, n as u8]);
            let _ = cache.admit(Uuid::from_u128(n as u128), now, ip, now, false);
        }
        assert!(cache.len() <= 10 * CEILING_FACTOR, "{}", cache.len());
    }

    #[test]
    fn established_devices_have_a_reserve_fresh_keys_cannot_take() {
        let cache = ReplayCache::new(8);
        let now = 9_000_000;
        let from = |n: u8| IpAddr::from([10, 0, 0, n]);
        // Fresh keys from 40 addresses: the cache fills, then every new address is refused.
        for n in 0..40u8 {
            for k in 0..4u128 {
                let _ = cache.admit(
                    Uuid::from_u128(u128::from(n) * 10 + k),
                    now,
                    from(n),
                    now,
                    false,
                );
            }
        }
        let full = cache.len();
        assert!(full >= 8, "{full}");
        let fresh = cache.admit(Uuid::from_u128(5_000), now, from(200), now, false);
        assert!(matches!(fresh, Admit::Full { .. }), "{fresh:?}");
        // The same request from an established device is admitted, from a flooding address too.
        let device = Uuid::from_u128(7_000);
        assert_eq!(cache.admit(device, now, from(0), now, true), Admit::Fresh);
        assert_eq!(
            cache.admit(device, now + 1, from(200), now, true),
            Admit::Fresh
        );
        // Its part of the reserve is RESERVE_PER_CLIENT entries.
        assert!(matches!(
            cache.admit(device, now + 2, from(200), now, true),
            Admit::Full { .. }
        ));
        // Other established ids fill the rest of the reserve, then are refused.
        let room = reserve(8) - RESERVE_PER_CLIENT;
        for n in 0..room as u128 {
            assert_eq!(
                cache.admit(Uuid::from_u128(8_000 + n), now, from(1), now, true),
                Admit::Fresh
            );
        }
        assert!(matches!(
            cache.admit(Uuid::from_u128(9_999), now, from(1), now, true),
            Admit::Full { .. }
        ));
        assert_eq!(cache.len(), full + reserve(8));
        // Reserve entries expire like the others and give their room back.
        assert_eq!(
            cache.admit(device, now + 3, from(0), now + KEEP_MS + 1, true),
            Admit::Fresh
        );
        assert_eq!(cache.len(), 1);
    }

    #[test]
    fn one_bucket_takes_at_most_an_eighth_of_the_reserve() {
        let cache = ReplayCache::new(400);
        assert_eq!((reserve(400), reserve_per_bucket(400)), (100, 12));
        let now = 9_000_000;
        let from = |n: u8| IpAddr::from([10, 0, 0, n]);
        // Fresh keys from 4 addresses fill the cache; each is then over its share.
        for n in 0..4u8 {
            for k in 0..200u128 {
                let id = Uuid::from_u128(u128::from(n) * 1_000 + k);
                let _ = cache.admit(id, now, from(n), now, false);
            }
        }
        // Established ids behind one flooding address: 12 reserve entries, then refused.
        let admitted = (0..20u128)
            .filter(|n| {
                cache.admit(Uuid::from_u128(50_000 + n), now, from(0), now, true) == Admit::Fresh
            })
            .count();
        assert_eq!(admitted, 12);
        // Behind another flooding address, an established id still finds room.
        let other = cache.admit(Uuid::from_u128(60_000), now, from(1), now, true);
        assert_eq!(other, Admit::Fresh);
        // Expired, they are forgotten per bucket too.
        let _ = cache.admit(
            Uuid::from_u128(1),
            now + KEEP_MS,
            from(9),
            now + KEEP_MS,
            false,
        );
        assert!(cache.inner.lock().unwrap().reserved_per_ip.is_empty());
    }

    #[test]
    fn without_a_per_address_session_rate_the_reserve_has_no_bucket_cap() {
        // Behind a proxy not named with `--trusted-proxy` every session comes from the proxy's
        // bucket (`--session-rate-per-minute 0` there): established devices must find the
        // whole reserve (100), not the proxy bucket's eighth (12).
        let proxy = IpAddr::from([10, 0, 0, 1]);
        let now = 9_000_000;
        for (cap, want) in [(false, 100), (true, 12)] {
            let cache = ReplayCache::new(400).bucket_cap(cap);
            for k in 0..400u128 {
                assert_eq!(
                    cache.admit(Uuid::from_u128(k), now, proxy, now, false),
                    Admit::Fresh
                );
            }
            let admitted = (0..200u128)
                .filter(|n| {
                    cache.admit(Uuid::from_u128(50_000 + n), now, proxy, now, true) == Admit::Fresh
                })
                .count();
            assert_eq!(admitted, want, "bucket cap {cap}");
        }
    }
}
