//! What one stream's tips may take, and one asker's (client id, else address bucket) streams
//! together: connections to the watch's node now ([`Permits`]), aggregates per second
//! ([`Rate`]).
//!
//! Both are decided at once, never waited for: a stream that finds no permit free, or its
//! asker over its rate, gets no tips (its client reads every aggregate, as without them), so
//! `ready` is not held behind other streams' tips. Each asker may hold at most
//! [`Permits::per_asker`] of the process's permits, so one client opening many streams (or
//! streams of many aggregates on a slow node) leaves the rest to the others.

use std::collections::HashMap;
use std::hash::Hash;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use crate::limits::keyed::{MAX_TRACKED, Sweeps};

/// The process's permits (one per connection in use for tips) and each asker's share of them.
pub struct Permits<K: Hash + Eq + Clone> {
    total: Arc<Semaphore>,
    per_asker: usize,
    held: Arc<Mutex<HashMap<K, usize>>>,
}

/// Permits taken by one stream; given back when dropped.
pub struct Held<K: Hash + Eq + Clone> {
    _permits: OwnedSemaphorePermit,
    count: usize,
    key: K,
    held: Arc<Mutex<HashMap<K, usize>>>,
}

impl<K: Hash + Eq + Clone> Held<K> {
    /// How many permits (connections) the stream may use.
    pub fn count(&self) -> usize {
        self.count
    }
}

impl<K: Hash + Eq + Clone> Drop for Held<K> {
    fn drop(&mut self) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(n) = held.get_mut(&self.key) {
            *n = n.saturating_sub(self.count);
            if *n == 0 {
                held.remove(&self.key);
            }
        }
    }
}

impl<K: Hash + Eq + Clone> Permits<K> {
    /// `total` permits, each asker holding at most `per_asker` of them at once.
    pub fn new(total: usize, per_asker: usize) -> Self {
        Permits {
            total: Arc::new(Semaphore::new(total)),
            per_asker: per_asker.clamp(1, total.max(1)),
            held: Arc::default(),
        }
    }

    /// Up to `want` permits for `key` now: as many as are free, within its share; `None` when
    /// not one is (nothing is waited for).
    pub fn take(&self, key: K, want: usize) -> Option<Held<K>> {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        let mine = held.get(&key).copied().unwrap_or(0);
        let mut n = want
            .min(self.per_asker.saturating_sub(mine))
            .min(self.total.available_permits());
        // Another asker may take some between the count and the try: take fewer then.
        let permits = loop {
            if n == 0 {
                return None;
            }
            match self.total.clone().try_acquire_many_owned(n as u32) {
                Ok(p) => break p,
                Err(_) => n = n.min(self.total.available_permits()),
            }
        };
        *held.entry(key.clone()).or_insert(0) += n;
        Some(Held {
            _permits: permits,
            count: n,
            key,
            held: self.held.clone(),
        })
    }

    /// Askers holding permits now.
    #[cfg(test)]
    pub fn askers(&self) -> usize {
        self.held.lock().unwrap_or_else(|p| p.into_inner()).len()
    }
}

/// Aggregates per second each asker may have tips read for (GCRA, `governor`).
pub struct Rate<K: Hash + Eq + Clone> {
    rate: Option<DefaultKeyedRateLimiter<K>>,
    sweeps: Sweeps,
}

impl<K: Hash + Eq + Clone> Rate<K> {
    /// `per_second` aggregates per asker after a burst of `burst` (`per_second` 0: no limit).
    pub fn new(per_second: u32, burst: u32) -> Self {
        let rate = NonZeroU32::new(per_second).map(|rate| {
            let burst = NonZeroU32::new(burst).unwrap_or(rate);
            RateLimiter::keyed(Quota::per_second(rate).allow_burst(burst))
        });
        Rate {
            rate,
            sweeps: Sweeps::default(),
        }
    }

    /// Spends `n` of `key`'s aggregates, all or none: `false` (nothing spent) when it has not
    /// that many left, or more than its burst is asked, or [`MAX_TRACKED`] askers are all
    /// recharging.
    pub fn spend(&self, key: &K, n: usize) -> bool {
        let Some(rate) = &self.rate else {
            return true;
        };
        let Some(n) = NonZeroU32::new(n.min(u32::MAX as usize) as u32) else {
            return true;
        };
        if rate.len() >= MAX_TRACKED {
            if self.sweeps.claim() {
                rate.retain_recent();
                rate.shrink_to_fit();
            }
            if rate.len() >= MAX_TRACKED {
                return false;
            }
        }
        matches!(rate.check_key_n(key, n), Ok(Ok(_)))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_asker_holds_at_most_its_share_and_nothing_is_waited_for() {
        let p = Permits::new(16, 4);
        let a = p.take(1u32, 4).unwrap();
        assert_eq!(a.count(), 4);
        assert!(p.take(1, 4).is_none(), "its share is held");
        let b: Vec<_> = (2..=4u32).map(|k| p.take(k, 8).unwrap()).collect();
        assert!(b.iter().all(|h| h.count() == 4), "capped at the share");
        assert!(p.take(5, 1).is_none(), "all 16 taken: none, at once");
        drop(a);
        let c = p.take(5, 4).unwrap();
        assert_eq!(c.count(), 4);
        drop((b, c));
        assert_eq!(p.askers(), 0, "no entry outlives its permits");
        assert_eq!(p.take(6, 2).unwrap().count(), 2, "no more than wanted");
    }

    #[test]
    fn fewer_than_wanted_when_fewer_are_free() {
        let p = Permits::new(5, 4);
        let _a = p.take(1u32, 4).unwrap();
        assert_eq!(p.take(2, 4).unwrap().count(), 1);
    }

    #[test]
    fn the_rate_is_spent_all_or_nothing_per_asker() {
        let r = Rate::new(10, 100);
        assert!(r.spend(&1u32, 60));
        assert!(!r.spend(&1, 60), "only 40 left");
        assert!(r.spend(&1, 40));
        assert!(!r.spend(&2, 101), "more than the burst");
        assert!(r.spend(&2, 100), "another asker has its own");
        assert!(Rate::new(0, 0).spend(&1u32, 1_000_000), "0: no limit");
    }
}
