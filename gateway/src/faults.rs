//! Seeded fault injection for `/v1/write`, off unless the gateway runs with `--faults`.
//!
//! The client's guarantees (never lose, never duplicate) are only worth what they were tested
//! against. The injector makes the gateway misbehave the ways a real network and a real cluster
//! do, at configurable rates, reproducibly from a seed: hand the write to the store and await its
//! answer but break the connection instead of answering, delay past the client's timeout, answer
//! 2013 or 503 without applying, break the connection before applying. `GET /v1/faults` reports
//! the rates (with the delays that apply) and how many of each were injected; `PUT /v1/faults`
//! changes the rates at run time.

use std::collections::HashMap;
use std::sync::Mutex;
use std::time::Duration;

use celeriant_sync_protocol::faults::{FaultCounts, FaultRates, FaultReport};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use uuid::Uuid;

/// One injected fault.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    /// The write is handed to the store and its answer awaited, then the connection is broken
    /// instead of answering; the client cannot know whether it landed. This happens whatever
    /// came of it (landed, a 2002, a refusal, no answer within the gateway's request timeout).
    DropAfterCommit,
    /// Wait this long, then handle the write normally.
    Delay(Duration),
    /// Answer 2013 without applying.
    Inflight,
    /// Answer 503 with this Retry-After without applying.
    Busy(Duration),
    /// Break the connection without applying.
    ResetBeforeCommit,
    /// Refuse with 2022 without applying (the write carries the `rejectType`).
    Reject(u64),
}

struct Inner {
    rng: StdRng,
    rates: FaultRates,
    counts: FaultCounts,
    in_flight: HashMap<Uuid, u64>,
}

/// Counts one client's request as in flight until dropped.
pub struct InFlight<'a> {
    injector: &'a FaultInjector,
    client: Uuid,
}

impl Drop for InFlight<'_> {
    fn drop(&mut self) {
        let mut inner = self.injector.lock();
        if let Some(n) = inner.in_flight.get_mut(&self.client) {
            *n -= 1;
            if *n == 0 {
                inner.in_flight.remove(&self.client);
            }
        }
    }
}

/// The injector: one random draw per write request.
pub struct FaultInjector {
    seed: u64,
    inner: Mutex<Inner>,
}

impl FaultInjector {
    /// An injector with these rates, reproducible from `seed`. A 0 `delay_ms` or
    /// `retry_after_ms` is replaced by its default ([`FaultRates::with_defaults`]), so the
    /// report shows the values that apply.
    pub fn new(seed: u64, rates: FaultRates) -> Result<Self, String> {
        rates.check()?;
        Ok(FaultInjector {
            seed,
            inner: Mutex::new(Inner {
                rng: StdRng::seed_from_u64(seed),
                rates: rates.with_defaults(),
                counts: FaultCounts::default(),
                in_flight: HashMap::new(),
            }),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    /// Marks a request of `client` as being handled until the guard is dropped, keeping the
    /// highest concurrency seen per client in the counts.
    pub fn enter(&self, client: Uuid) -> InFlight<'_> {
        let mut inner = self.lock();
        let n = inner.in_flight.entry(client).or_insert(0);
        *n += 1;
        let n = *n;
        let max = &mut inner.counts.max_in_flight_per_client;
        *max = (*max).max(n);
        InFlight {
            injector: self,
            client,
        }
    }

    /// Draws the fault (if any) for the next write request, whose events have `event_types`,
    /// and counts it. `rejectType` is checked first and draws nothing.
    pub fn draw(&self, mut event_types: impl Iterator<Item = u64>) -> Option<Fault> {
        let mut inner = self.lock();
        inner.counts.requests += 1;
        let r = inner.rates;
        if r.reject_type != 0 && event_types.any(|t| t == r.reject_type) {
            inner.counts.rejected += 1;
            return Some(Fault::Reject(r.reject_type));
        }
        let x: f64 = inner.rng.random();
        // `new` and `set_rates` replaced zero durations by their defaults.
        let delay = Duration::from_millis(r.delay_ms);
        let retry_after = Duration::from_millis(r.retry_after_ms);
        let table = [
            (r.drop_after_commit, Fault::DropAfterCommit),
            (r.timeout, Fault::Delay(delay)),
            (r.inflight, Fault::Inflight),
            (r.busy, Fault::Busy(retry_after)),
            (r.reset_before_commit, Fault::ResetBeforeCommit),
        ];
        let mut edge = 0.0;
        for (rate, fault) in table {
            edge += rate;
            if x < edge {
                let c = &mut inner.counts;
                match fault {
                    Fault::DropAfterCommit => c.drop_after_commit += 1,
                    Fault::Delay(_) => c.timeout += 1,
                    Fault::Inflight => c.inflight += 1,
                    Fault::Busy(_) => c.busy += 1,
                    Fault::ResetBeforeCommit => c.reset_before_commit += 1,
                    Fault::Reject(_) => c.rejected += 1,
                }
                return Some(fault);
            }
        }
        None
    }

    /// Replaces the rates (counts and the random sequence continue). A 0 `delay_ms` or
    /// `retry_after_ms` is replaced by its default, as in [`FaultInjector::new`].
    pub fn set_rates(&self, rates: FaultRates) -> Result<FaultReport, String> {
        rates.check()?;
        self.lock().rates = rates.with_defaults();
        Ok(self.report())
    }

    /// The seed, the rates and the counts so far.
    pub fn report(&self) -> FaultReport {
        let inner = self.lock();
        FaultReport {
            seed: self.seed,
            rates: inner.rates,
            counts: inner.counts,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rates(drop: f64, timeout: f64, inflight: f64, busy: f64, reset: f64) -> FaultRates {
        FaultRates {
            drop_after_commit: drop,
            timeout,
            inflight,
            busy,
            reset_before_commit: reset,
            ..FaultRates::default()
        }
    }

    #[test]
    fn the_same_seed_injects_the_same_faults() {
        let r = rates(0.2, 0.1, 0.1, 0.1, 0.05);
        let a = FaultInjector::new(42, r).unwrap();
        let b = FaultInjector::new(42, r).unwrap();
        let run = |f: &FaultInjector| {
            (0..500)
                .map(|_| f.draw(std::iter::empty()))
                .collect::<Vec<_>>()
        };
        assert_eq!(run(&a), run(&b));
        assert_eq!(a.report().counts, b.report().counts);
    }

    #[test]
    fn observed_frequencies_follow_the_rates() {
        let f = FaultInjector::new(7, rates(0.3, 0.1, 0.1, 0.0, 0.0)).unwrap();
        for _ in 0..10_000 {
            f.draw(std::iter::empty());
        }
        let c = f.report().counts;
        assert_eq!(c.requests, 10_000);
        assert!((2700..3300).contains(&c.drop_after_commit), "{c:?}");
        assert!((800..1200).contains(&c.timeout), "{c:?}");
        assert!((800..1200).contains(&c.inflight), "{c:?}");
        assert_eq!((c.busy, c.reset_before_commit), (0, 0));
    }

    #[test]
    fn zero_rates_inject_nothing_and_bad_rates_are_refused() {
        let f = FaultInjector::new(1, FaultRates::default()).unwrap();
        assert!((0..1000).all(|_| f.draw(std::iter::empty()).is_none()));
        assert!(FaultInjector::new(1, rates(0.7, 0.7, 0.0, 0.0, 0.0)).is_err());
        assert!(f.set_rates(rates(-0.1, 0.0, 0.0, 0.0, 0.0)).is_err());
        assert_eq!(
            f.set_rates(rates(1.0, 0.0, 0.0, 0.0, 0.0))
                .unwrap()
                .rates
                .drop_after_commit,
            1.0
        );
        assert_eq!(f.draw(std::iter::empty()), Some(Fault::DropAfterCommit));
    }

    #[test]
    fn zero_durations_are_reported_and_applied_as_their_defaults() {
        let f = FaultInjector::new(3, rates(0.0, 0.5, 0.0, 0.5, 0.0)).unwrap();
        let r = f.report().rates;
        assert_eq!((r.delay_ms, r.retry_after_ms), (5_000, 200));
        for _ in 0..100 {
            match f.draw(std::iter::empty()) {
                Some(Fault::Delay(d)) => assert_eq!(d, Duration::from_millis(5_000)),
                Some(Fault::Busy(d)) => assert_eq!(d, Duration::from_millis(200)),
                other => panic!("{other:?}"),
            }
        }
        let set = FaultRates {
            delay_ms: 10,
            ..rates(0.0, 1.0, 0.0, 0.0, 0.0)
        };
        let r = f.set_rates(set).unwrap().rates;
        assert_eq!((r.delay_ms, r.retry_after_ms), (10, 200));
        assert_eq!(
            f.draw(std::iter::empty()),
            Some(Fault::Delay(Duration::from_millis(10)))
        );
    }
}
