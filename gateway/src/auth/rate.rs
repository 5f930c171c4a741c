//! Per-address rate limit on session creation.
//!
//! Verifying a signature costs the gateway far more than it costs a caller to send garbage, and
//! every accepted session takes a replay-cache entry, so `POST /v1/session` is limited per client
//! address (GCRA, `crate::limits::rates`): `--session-burst` at once, then
//! `--session-rate-per-minute`.
//! Addresses count per bucket (IPv6 per /56 by default, the block one subscriber usually
//! gets), so one host cannot dodge the limit by walking its own prefix (`crate::limits::ip`),
//! and each /64 of a bucket gets half of it (`crate::limits::nested`: one host cannot spend its
//! whole /56's sessions). The bucket is checked before the /64's half is spent: a request its
//! bucket refuses tracks no /64, and a /64 refused by its half spends nothing of its bucket.
//! The per-address memory is bounded: past [`MAX_TRACKED`] addresses the idle ones are
//! dropped; while that many buckets are all recharging, new buckets are refused, and while
//! that many /64s are, a new /64 is admitted under its bucket's limit alone (one /48 walking
//! its 65,536 /64s once refused every IPv6 client this way). A tracked address is never
//! refused for the table being full. Behind a reverse proxy every request has the proxy's address;
//! size the limit for that (docs/protocol.md).

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use crate::limits::ip::bucket;
use crate::limits::nested::{nested, nested_part};
use crate::limits::rates::{Rates, WhenFull};

/// Most addresses tracked at once.
pub const MAX_TRACKED: usize = 65_536;

/// The session-creation limiter (`None` inside when the rate is 0: no limit).
pub struct SessionLimiter {
    limiter: Option<Rates<IpAddr>>,
    /// Half of it per nested IPv6 /64.
    nested: Option<Rates<IpAddr>>,
}

impl SessionLimiter {
    /// `per_minute` creations per address per minute after a burst of `burst` (0: no limit).
    pub fn new(per_minute: u32, burst: u32) -> Self {
        Self::with_capacity(per_minute, burst, MAX_TRACKED)
    }

    /// As [`SessionLimiter::new`], tracking at most `capacity` buckets and as many /64s.
    pub fn with_capacity(per_minute: u32, burst: u32, capacity: usize) -> Self {
        let make = |per_minute: u32, burst: u32, when_full| {
            NonZeroU32::new(per_minute)
                .map(|rate| Rates::new(rate, Duration::from_secs(60), burst, capacity, when_full))
        };
        SessionLimiter {
            limiter: make(per_minute, burst, WhenFull::Refuse),
            nested: make(nested_part(per_minute), nested_part(burst), WhenFull::Pass),
        }
    }

    /// `Ok` when `ip` may create a session now; otherwise how long it should wait.
    pub fn check(&self, ip: IpAddr) -> Result<(), Duration> {
        let Some(limiter) = &self.limiter else {
            return Ok(());
        };
        // The /64's half is decided first but spent only once the bucket admits: a /64 refused
        // by its half spends nothing of its bucket's, a request the bucket refuses nothing of
        // its /64's.
        let half = match (nested(ip), &self.nested) {
            (Some(sub), Some(half)) => Some(half.test(&sub)?),
            _ => None,
        };
        limiter.check(&bucket(ip))?;
        if let Some(half) = half {
            half.commit();
        }
        Ok(())
    }

    /// Buckets and /64s tracked now.
    #[cfg(test)]
    fn tracked(&self) -> (usize, usize) {
        let len = |r: &Option<Rates<IpAddr>>| r.as_ref().map_or(0, Rates::tracked);
        (len(&self.limiter), len(&self.nested))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_burst_then_a_wait_per_address() {
        let limiter = SessionLimiter::new(60, 2);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        assert!(limiter.check(a).is_ok());
        assert!(limiter.check(a).is_ok());
        let wait = limiter.check(a).unwrap_err();
        assert!(
            wait > Duration::ZERO && wait <= Duration::from_secs(1),
            "{wait:?}"
        );
        assert!(
            limiter.check(b).is_ok(),
            "another address has its own budget"
        );
    }

    #[test]
    fn one_64_spends_half_of_its_56() {
        let limiter = SessionLimiter::new(60, 4);
        let a: IpAddr = "2001:db8:0:1::1".parse().unwrap();
        assert!(limiter.check(a).is_ok() && limiter.check(a).is_ok());
        assert!(limiter.check(a).is_err(), "the /64's half is spent");
        let b: IpAddr = "2001:db8:0:2::1".parse().unwrap();
        assert!(limiter.check(b).is_ok() && limiter.check(b).is_ok());
        let c: IpAddr = "2001:db8:0:3::1".parse().unwrap();
        assert!(limiter.check(c).is_err(), "the /56's whole is spent");
    }

    #[test]
    fn an_address_in_subnet_0_spends_half_of_its_56() {
        let limiter = SessionLimiter::new(60, 4);
        let zero: IpAddr = "2001:db8::5".parse().unwrap();
        assert!(limiter.check(zero).is_ok() && limiter.check(zero).is_ok());
        assert!(limiter.check(zero).is_err(), "subnet 0's /64 has half too");
        let b: IpAddr = "2001:db8:0:2::1".parse().unwrap();
        assert!(limiter.check(b).is_ok() && limiter.check(b).is_ok());
    }

    #[test]
    fn a_request_its_bucket_refuses_tracks_no_64() {
        let limiter = SessionLimiter::new(60, 4);
        for sub in 1..=4u16 {
            let ip = IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, sub, 0, 0, 0, 1));
            assert!(limiter.check(ip).is_ok());
        }
        assert_eq!(limiter.tracked(), (1, 4));
        for sub in 5..=200u16 {
            let ip = IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, sub, 0, 0, 0, 1));
            assert!(limiter.check(ip).is_err(), "the /56's burst is spent");
        }
        assert_eq!(limiter.tracked(), (1, 4), "refused /64s are not tracked");
    }

    #[test]
    fn a_full_64_table_passes_new_64s_under_their_bucket_and_keeps_tracked_ones() {
        // 4 /64s tracked at most; a burst of 4 per /56, 2 per /64.
        let limiter = SessionLimiter::with_capacity(60, 4, 4);
        let v6 =
            |a: u16, b: u16| IpAddr::V6(std::net::Ipv6Addr::new(0x2001, 0xdb8, a, b, 0, 0, 0, 1));
        // Four /64s of two /56s fill the /64 table, each spending half of its /64's burst.
        for (a, b) in [(1, 1), (1, 2), (2, 1), (2, 2)] {
            assert!(limiter.check(v6(a, b)).is_ok());
        }
        assert_eq!(limiter.tracked(), (2, 4));
        // A tracked /64 is decided by its own half, never refused for the table being full.
        assert!(
            limiter.check(v6(1, 1)).is_ok(),
            "a tracked /64 keeps its half"
        );
        assert!(limiter.check(v6(1, 1)).is_err(), "then its half is spent");
        // A new /56 while the /64 table is full of recharging /64s: admitted under its
        // bucket alone, its /64 untracked.
        let other = v6(3, 7);
        for _ in 0..4 {
            assert!(
                limiter.check(other).is_ok(),
                "a full /64 table refuses nobody"
            );
        }
        assert!(limiter.check(other).is_err(), "its bucket still limits it");
        assert_eq!(limiter.tracked(), (3, 4));
    }

    #[test]
    fn ipv6_counts_per_56_and_zero_means_no_limit() {
        let limiter = SessionLimiter::new(60, 2);
        assert!(limiter.check("2001:db8::1".parse().unwrap()).is_ok());
        assert!(
            limiter.check("2001:db8:0:ff::1".parse().unwrap()).is_ok(),
            "another /64 of the same /56: the bucket's second"
        );
        assert!(
            limiter.check("2001:db8:0:fe::1".parse().unwrap()).is_err(),
            "a third /64 of the same /56: the bucket is spent"
        );
        assert!(limiter.check("2001:db8:0:100::1".parse().unwrap()).is_ok());
        assert!(limiter.check("::ffff:192.0.2.9".parse().unwrap()).is_ok());
        assert!(limiter.check("192.0.2.9".parse().unwrap()).is_ok());
        assert!(
            limiter.check("192.0.2.9".parse().unwrap()).is_err(),
            "mapped is the same, and IPv4 is not nested"
        );
        let open = SessionLimiter::new(0, 0);
        let ip: IpAddr = "192.0.2.3".parse().unwrap();
        assert!((0..1000).all(|_| open.check(ip).is_ok()));
    }
}
