//! One key's share: a rate (GCRA, `governor`) and a cap on requests in progress at once.
//!
//! Both parts keep per-key state, and both are bounded. The in-progress counts are a map of
//! the keys with a request in flight, an entry removed when its count falls to zero. The rate
//! limiter remembers keys until they are idle again; past [`MAX_TRACKED`] keys the idle ones are
//! dropped, and while that many are all active, new keys are refused too (with a one-second
//! wait) rather than tracked.

use std::collections::HashMap;
use std::hash::Hash;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use governor::clock::Clock as _;
use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

/// Most keys a rate limiter tracks at once.
pub const MAX_TRACKED: usize = 65_536;

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
        let rate = NonZeroU32::new(per_second).map(|rate| {
            let burst = NonZeroU32::new(burst).unwrap_or(rate);
            RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst))
        });
        Arc::new(KeyedLimiter {
            rate,
            concurrency: concurrency as usize,
            in_flight: Mutex::new(HashMap::new()),
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
            if rate.len() >= MAX_TRACKED {
                rate.retain_recent();
                rate.shrink_to_fit();
                if rate.len() >= MAX_TRACKED {
                    return Err(Refusal::Rate(Duration::from_secs(1)));
                }
            }
            rate.check_key(&key)
                .map_err(|not_until| Refusal::Rate(not_until.wait_time_from(rate.clock().now())))?;
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
    fn a_refusal_for_concurrency_spends_no_rate() {
        let l = KeyedLimiter::new(1, 1, 1);
        let held = l.enter(1u32).unwrap();
        assert_eq!(l.enter(1).err(), Some(Refusal::Concurrency(1)));
        drop(held);
        assert!(matches!(l.enter(1).err(), Some(Refusal::Rate(_))));
    }
}
