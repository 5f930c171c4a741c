//! A keyed rate (GCRA, the algorithm of the `governor` crate) whose decision can be taken
//! before it is spent, with a bounded number of keys and a choice of what a full table does.
//!
//! Nested limits (`crate::limits::nested`, `crate::auth::rate`) admit a request only when both
//! the `/64`'s half and the bucket's whole admit it, and a refusal by either must spend nothing
//! of the other: a `/64` refused by its half must not drain its bucket (its neighbours' budget),
//! and a request its bucket refuses must not insert or spend a `/64` key (one `/48` walking its
//! 65,536 `/64`s filled the `/64` table that way). `governor` (used here before) only has
//! check-and-spend and cannot say whether it tracks a key, so both levels use this table:
//! [`Rates::test`] decides under the table's lock and [`Pass::commit`] spends, after the
//! bucket has admitted.
//!
//! A full table ([`Rates::capacity`] keys, each still recharging) first drops its idle keys (at
//! most every [`PURGE_EVERY`]: a flood of new keys must not buy a scan each); a
//! key it tracks is always decided by its own rate, never refused for the table being full. A
//! new key of a table still full is refused (a bucket: the address limit must not be dodged by
//! being new) or passed without being tracked (a nested `/64`: its bucket's limit still applies,
//! so a flood of `/64`s costs the others their nesting, never their admission).

use std::collections::HashMap;
use std::hash::Hash;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, MutexGuard};
use std::time::{Duration, Instant};

/// What a full table does with a key it does not track.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WhenFull {
    /// Refuse it, with a one-second wait.
    Refuse,
    /// Admit it untracked (its other limits still apply).
    Pass,
}

/// A rate per key: `burst` at once, then one every `interval`.
pub struct Rates<K: Hash + Eq + Clone> {
    /// Nanoseconds between two admissions (GCRA's T).
    interval: u64,
    /// Nanoseconds of burst tolerance (GCRA's τ: `interval × (burst − 1)`).
    tolerance: u64,
    start: Instant,
    capacity: usize,
    when_full: WhenFull,
    /// Each key's theoretical arrival time, in nanoseconds since `start`.
    tats: Mutex<HashMap<K, u64>>,
    /// When the idle keys were last dropped (nanoseconds since `start`; 0: never).
    purged_at: AtomicU64,
}

/// How often a full table looks for idle keys at most: a scan of all its keys under its lock
/// must not be something every request of a flood of new keys can buy.
pub const PURGE_EVERY: Duration = Duration::from_millis(100);

/// An admission decided but not yet spent; [`Pass::commit`] spends it. Holds the table's lock
/// (other requests of the table wait) until it is committed or dropped.
pub struct Pass<'a, K: Hash + Eq + Clone> {
    tats: MutexGuard<'a, HashMap<K, u64>>,
    spend: Option<(K, u64)>,
}

impl<K: Hash + Eq + Clone> Pass<'_, K> {
    /// Spends the admission (a key passed by a full table stays untracked).
    pub fn commit(mut self) {
        if let Some((key, tat)) = self.spend.take() {
            self.tats.insert(key, tat);
        }
    }
}

impl<K: Hash + Eq + Clone> Rates<K> {
    /// `count` per `period` after a burst of `burst` (at least 1), tracking at most `capacity`
    /// keys.
    pub fn new(
        count: NonZeroU32,
        period: Duration,
        burst: u32,
        capacity: usize,
        when_full: WhenFull,
    ) -> Self {
        let interval = (period.as_nanos() / u128::from(count.get())).max(1) as u64;
        Rates {
            interval,
            tolerance: interval.saturating_mul(u64::from(burst.max(1) - 1)),
            start: Instant::now(),
            capacity,
            when_full,
            tats: Mutex::new(HashMap::new()),
            purged_at: AtomicU64::new(0),
        }
    }

    /// Most keys tracked at once.
    pub fn capacity(&self) -> usize {
        self.capacity
    }

    /// Keys tracked now.
    pub fn tracked(&self) -> usize {
        self.lock().len()
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<K, u64>> {
        self.tats.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Decides whether `key` may go now, spending nothing: `Ok` with the admission to commit,
    /// or how long to wait.
    pub fn test(&self, key: &K) -> Result<Pass<'_, K>, Duration> {
        let mut tats = self.lock();
        let now = self.start.elapsed().as_nanos() as u64;
        let tat = match tats.get(key) {
            Some(&tat) => tat,
            None => {
                let purged_at = self.purged_at.load(Ordering::Relaxed);
                if tats.len() >= self.capacity
                    && (purged_at == 0 || now - purged_at >= PURGE_EVERY.as_nanos() as u64)
                {
                    // Idle keys (fully recharged) lose nothing by being forgotten.
                    tats.retain(|_, tat| *tat > now);
                    tats.shrink_to_fit();
                    self.purged_at.store(now.max(1), Ordering::Relaxed);
                }
                if tats.len() >= self.capacity {
                    return match self.when_full {
                        WhenFull::Refuse => Err(Duration::from_secs(1)),
                        WhenFull::Pass => Ok(Pass { tats, spend: None }),
                    };
                }
                now
            }
        };
        let earliest = tat.saturating_sub(self.tolerance);
        if now < earliest {
            return Err(Duration::from_nanos(earliest - now));
        }
        let spend = Some((key.clone(), tat.max(now) + self.interval));
        Ok(Pass { tats, spend })
    }

    /// Admits `key` now and spends it, or says how long to wait.
    pub fn check(&self, key: &K) -> Result<(), Duration> {
        self.test(key).map(Pass::commit)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rates(per_second: u32, burst: u32, capacity: usize, when_full: WhenFull) -> Rates<u32> {
        Rates::new(
            NonZeroU32::new(per_second).unwrap(),
            Duration::from_secs(1),
            burst,
            capacity,
            when_full,
        )
    }

    #[test]
    fn a_burst_then_a_wait_and_an_uncommitted_test_spends_nothing() {
        let r = rates(10, 3, 8, WhenFull::Refuse);
        for _ in 0..100 {
            drop(r.test(&1).unwrap());
        }
        assert_eq!(r.tracked(), 0, "a test never committed tracks nothing");
        for _ in 0..3 {
            r.check(&1).unwrap();
        }
        let wait = r.check(&1).unwrap_err();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_millis(100),
            "{wait:?}"
        );
        assert!(r.check(&2).is_ok(), "another key has its own burst");
    }

    #[test]
    fn a_full_table_refuses_or_passes_new_keys_but_decides_tracked_ones_by_their_rate() {
        for when_full in [WhenFull::Refuse, WhenFull::Pass] {
            let r = rates(1, 2, 2, when_full);
            r.check(&1).unwrap();
            r.check(&2).unwrap();
            // Full of recharging keys: a tracked key still has the rest of its burst.
            assert!(r.check(&1).is_ok(), "{when_full:?}");
            assert!(r.check(&1).is_err(), "{when_full:?}: then its rate");
            let new = r.check(&3);
            match when_full {
                WhenFull::Refuse => assert_eq!(new, Err(Duration::from_secs(1))),
                WhenFull::Pass => assert!(new.is_ok()),
            }
            assert_eq!(r.tracked(), 2, "{when_full:?}: the new key is not tracked");
        }
    }

    #[test]
    fn a_full_table_drops_its_idle_keys_but_scans_at_most_every_purge_interval() {
        // One a millisecond: a key is idle 1 ms after its admission.
        let r = rates(1000, 1, 2, WhenFull::Refuse);
        r.check(&1).unwrap();
        r.check(&2).unwrap();
        std::thread::sleep(Duration::from_millis(5));
        let scanned = Instant::now();
        assert!(r.check(&3).is_ok(), "the idle keys were dropped");
        r.check(&4).unwrap();
        assert_eq!(r.tracked(), 2);
        std::thread::sleep(Duration::from_millis(5));
        let again = r.check(&5);
        // (Only decidable when this machine was not stalled past the interval meanwhile.)
        if scanned.elapsed() < PURGE_EVERY {
            assert_eq!(
                again,
                Err(Duration::from_secs(1)),
                "no second scan within the interval"
            );
        }
        std::thread::sleep(PURGE_EVERY);
        assert!(r.check(&5).is_ok(), "the next scan after it");
    }
}
