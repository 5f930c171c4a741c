//! One key's share: a rate (GCRA, `crate::limits::rates`) and a cap on requests in progress at once.
//!
//! Both parts keep per-key state, and both are bounded. The in-progress counts are a map of
//! the keys with a request in flight, an entry removed when its count falls to zero. The rate
//! (`crate::limits::rates`) remembers keys until they are idle again; past [`MAX_TRACKED`] keys
//! the idle ones are dropped, and while that many are all active, new keys are refused (with a
//! one-second wait) or, for a nested `/64`'s limiter, passed untracked ([`WhenFull`]); a key
//! already tracked is never refused for the table being full. [`KeyedLimiter::enter_then`]
//! admits a key only if a second limiter admits the request too, spending nothing of the first
//! when the second refuses.

use std::collections::HashMap;
use std::hash::Hash;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use super::rates::Rates;
pub use super::rates::WhenFull;

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
    rate: Option<Rates<K>>,
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
        Self::bounded(
            per_second,
            burst,
            concurrency,
            MAX_TRACKED,
            WhenFull::Refuse,
        )
    }

    /// As [`KeyedLimiter::new`], with the rate tracking at most `capacity` keys and doing
    /// `when_full` with a new key while that many are all recharging.
    pub fn bounded(
        per_second: u32,
        burst: u32,
        concurrency: u32,
        capacity: usize,
        when_full: WhenFull,
    ) -> Arc<Self> {
        let rate = NonZeroU32::new(per_second).map(|rate| {
            let burst = if burst == 0 { per_second } else { burst };
            Rates::new(rate, Duration::from_secs(1), burst, capacity, when_full)
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
        self.enter_then(key, || Ok(()))
            .map(|(admitted, ())| admitted)
    }

    /// Admits one request of `key` if `then` (another limiter's admission, run once this one
    /// would admit) admits it too. Nothing of `key`'s rate or concurrency is spent, and no key
    /// is tracked, unless both admit.
    pub fn enter_then<T>(
        self: &Arc<Self>,
        key: K,
        then: impl FnOnce() -> Result<T, Refusal>,
    ) -> Result<(InFlight<K>, T), Refusal> {
        let mut in_flight = self.lock();
        if self.concurrency > 0 {
            let n = in_flight.get(&key).copied().unwrap_or(0);
            if n >= self.concurrency {
                return Err(Refusal::Concurrency(self.concurrency));
            }
        }
        let pass = match &self.rate {
            Some(rate) => Some(rate.test(&key).map_err(Refusal::Rate)?),
            None => None,
        };
        let then = then()?;
        if let Some(pass) = pass {
            pass.commit();
        }
        *in_flight.entry(key.clone()).or_insert(0) += 1;
        let admitted = InFlight {
            owner: self.clone(),
            key,
        };
        Ok((admitted, then))
    }

    /// Keys the rate tracks now.
    pub fn keys_tracked(&self) -> usize {
        self.rate.as_ref().map_or(0, Rates::tracked)
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
