//! One key's share: a rate (GCRA, `governor`) and a cap on requests in progress at once.
//!
//! Both parts keep per-key state, and both are bounded. The in-progress counts are a map of
//! the keys with a request in flight, an entry removed when its count falls to zero. The rate
//! limiter remembers keys until they are idle again; past [`MAX_TRACKED`] keys the idle ones are
//! dropped (a sweep at most every [`SWEEP_EVERY`], so a full table does not buy every request a
//! walk over 65,536 keys), and while that many are all active, a bucket limiter refuses new keys
//! (with a one-second wait) rather than tracking them, while a nested `/64` limiter
//! ([`Full::Pass`]) lets every request through under its bucket's limit alone: one `/48`
//! walking its `/64`s must not get every IPv6 client refused.

use std::collections::HashMap;
use std::hash::Hash;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use governor::clock::Clock as _;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

/// Most keys a rate limiter tracks at once.
pub const MAX_TRACKED: usize = 65_536;

/// Least time between two sweeps of a full table's idle keys.
pub const SWEEP_EVERY: Duration = Duration::from_millis(100);

/// What a full rate table (every key still recharging) does with a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Full {
    /// Refuse it (one second): the bucket level, whose keys are what is limited.
    Refuse,
    /// Let it through unchecked: the nested `/64` level, under a bucket that still limits.
    Pass,
}

/// When a full table was last swept.
pub struct Sweeps {
    base: Instant,
    last_ms: AtomicU64,
}

impl Default for Sweeps {
    fn default() -> Self {
        Sweeps {
            base: Instant::now(),
            last_ms: AtomicU64::new(0),
        }
    }
}

impl Sweeps {
    /// Whether a sweep may run now (at most one per [`SWEEP_EVERY`]); claims it if so.
    pub(crate) fn claim(&self) -> bool {
        let now = self.base.elapsed().as_millis() as u64 + SWEEP_EVERY.as_millis() as u64;
        let last = self.last_ms.load(Ordering::Relaxed);
        now >= last + SWEEP_EVERY.as_millis() as u64
            && self
                .last_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
    }
}

/// Checks (and spends) `key` in `rate`, keeping the keys tracked at most `capacity`: past it
/// the idle keys are swept (see [`Sweeps`]), and while it is still full `full` decides.
pub fn check_bounded<K: Hash + Eq + Clone>(
    rate: &DefaultKeyedRateLimiter<K>,
    key: &K,
    capacity: usize,
    full: Full,
    sweeps: &Sweeps,
) -> Result<(), Duration> {
    if rate.len() >= capacity {
        if sweeps.claim() {
            rate.retain_recent();
            rate.shrink_to_fit();
        }
        if rate.len() >= capacity {
            return match full {
                Full::Refuse => Err(Duration::from_secs(1)),
                Full::Pass => Ok(()),
            };
        }
    }
    rate.check_key(key)
        .map_err(|not_until| not_until.wait_time_from(rate.clock().now()))
}

/// Why a key was refused.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// Over its rate: wait this long.
    Rate(Duration),
    /// Already this many in progress (the cap).
    Concurrency(usize),
}

/// A rate and a concurrency cap per key (either can be off).
pub struct KeyedLimiter<K: Hash + Eq + Clone> {
    rate: Option<DefaultKeyedRateLimiter<K>>,
    concurrency: usize,
    in_flight: Mutex<HashMap<K, usize>>,
    full: Full,
    capacity: usize,
    sweeps: Sweeps,
}

/// One admitted request of a key; gives its place back when dropped.
pub struct InFlight<K: Hash + Eq + Clone> {
    owner: Arc<KeyedLimiter<K>>,
    key: K,
}

impl<K: Hash + Eq + Clone> KeyedLimiter<K> {
    /// `per_second` requests per key per second after a burst of `burst` (0: no rate), and at
    /// most `concurrency` in progress per key (0: no cap).
    pub fn new(per_second: u32, burst: u32, concurrency: u32) -> Arc<Self> {
        Self::with(per_second, burst, concurrency, Full::Refuse, MAX_TRACKED)
    }

    /// As [`KeyedLimiter::new`], with what a full table does and its capacity.
    pub fn with(
        per_second: u32,
        burst: u32,
        concurrency: u32,
        full: Full,
        capacity: usize,
    ) -> Arc<Self> {
        let rate = NonZeroU32::new(per_second).map(|rate| {
            let burst = NonZeroU32::new(burst).unwrap_or(rate);
            RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst))
        });
        Arc::new(KeyedLimiter {
            rate,
            concurrency: concurrency as usize,
            in_flight: Mutex::new(HashMap::new()),
            full,
            capacity,
            sweeps: Sweeps::default(),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, usize>> {
        self.in_flight.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Admits one request of `key`, or says why not. A request refused for concurrency does not
    /// use up any of the key's rate.
    pub fn enter(self: &Arc<Self>, key: K) -> Result<InFlight<K>, Refusal> {
        let mut in_flight = self.lock();
        if self.concurrency > 0 {
            let n = in_flight.get(&key).copied().unwrap_or(0);
            if n >= self.concurrency {
                return Err(Refusal::Concurrency(self.concurrency));
            }
        }
        if let Some(rate) = &self.rate {
            check_bounded(rate, &key, self.capacity, self.full, &self.sweeps)
                .map_err(Refusal::Rate)?;
        }
        *in_flight.entry(key.clone()).or_insert(0) += 1;
        Ok(InFlight {
            owner: self.clone(),
            key,
        })
    }

    /// Keys with a request in progress now.
    pub fn keys_in_flight(&self) -> usize {
        self.lock().len()
    }
}

impl<K: Hash + Eq + Clone> Drop for InFlight<K> {
    fn drop(&mut self) {
        let mut in_flight = self.owner.lock();
        if let Some(n) = in_flight.get_mut(&self.key) {
            *n -= 1;
            if *n == 0 {
                in_flight.remove(&self.key);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn concurrency_is_capped_per_key_and_freed_on_drop() {
        let l = KeyedLimiter::new(0, 0, 2);
        let a = l.enter(1u32).unwrap();
        let _b = l.enter(1).unwrap();
        assert_eq!(l.enter(1).err(), Some(Refusal::Concurrency(2)));
        let _other = l.enter(2).unwrap();
        drop(a);
        let _c = l.enter(1).unwrap();
        drop((_b, _c, _other));
        assert_eq!(l.keys_in_flight(), 0, "no entry outlives its requests");
    }

    #[test]
    fn the_rate_allows_a_burst_then_says_how_long_to_wait() {
        let l = KeyedLimiter::new(10, 3, 0);
        for _ in 0..3 {
            drop(l.enter(7u32).unwrap());
        }
        match l.enter(7).err() {
            Some(Refusal::Rate(wait)) => {
                assert!(
                    wait > Duration::ZERO && wait <= Duration::from_millis(100),
                    "{wait:?}"
                )
            }
            other => panic!("{other:?}"),
        }
        assert!(l.enter(8).is_ok(), "another key has its own budget");
    }

    #[test]
    fn a_full_table_refuses_new_keys_at_the_bucket_level_and_passes_them_nested() {
        let (refusing, passing) = (
            KeyedLimiter::with(1, 1, 0, Full::Refuse, 64),
            KeyedLimiter::with(1, 1, 0, Full::Pass, 64),
        );
        for l in [&refusing, &passing] {
            for k in 0..64u32 {
                drop(l.enter(k).unwrap()); // 64 keys, all recharging for a second
            }
        }
        assert!(
            matches!(refusing.enter(1000).err(), Some(Refusal::Rate(w)) if w == Duration::from_secs(1))
        );
        for _ in 0..5 {
            assert!(
                passing.enter(1000).is_ok(),
                "nested: passed under its bucket"
            );
        }
    }

    #[test]
    fn a_full_table_is_swept_at_most_every_100_ms() {
        let sweeps = Sweeps::default();
        assert!(sweeps.claim());
        assert!(!sweeps.claim(), "not twice at once");
        std::thread::sleep(SWEEP_EVERY + Duration::from_millis(20));
        assert!(sweeps.claim());
    }

    #[test]
    fn a_refusal_for_concurrency_spends_no_rate() {
        let l = KeyedLimiter::new(1, 1, 1);
        let held = l.enter(1u32).unwrap();
        assert_eq!(l.enter(1).err(), Some(Refusal::Concurrency(1)));
        drop(held);
        assert!(matches!(l.enter(1).err(), Some(Refusal::Rate(_))));
    }
}
