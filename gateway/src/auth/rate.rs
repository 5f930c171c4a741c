//! Per-address rate limit on session creation.
//!
//! Verifying a signature costs the gateway far more than it costs a caller to send garbage, and
//! every accepted session takes a replay-cache entry, so `POST /v1/session` is limited per client
//! address (GCRA from `governor`): `--session-burst` at once, then `--session-rate-per-minute`.
//! Addresses count per bucket (IPv6 per /56 by default, the block one subscriber usually
//! gets), so one host cannot dodge the limit by walking its own prefix (`crate::limits::ip`),
//! and each /64 of a bucket gets half of it (`crate::limits::nested`: one host cannot spend its
//! whole /56's sessions). The per-address memory is bounded: past
//! [`MAX_TRACKED`] addresses the idle ones are dropped, and while that many are all active, new
//! addresses are refused too. Behind a reverse proxy every request has the proxy's address;
//! size the limit for that (docs/protocol.md).

use std::net::IpAddr;
use std::num::NonZeroU32;
use std::time::Duration;

use governor::{DefaultKeyedRateLimiter, Quota, RateLimiter};

use crate::limits::ip::bucket;
use crate::limits::keyed::{Full, Sweeps, check_bounded};
use crate::limits::nested::{nested, nested_part};

/// Most addresses tracked at once.
pub const MAX_TRACKED: usize = crate::limits::keyed::MAX_TRACKED;

/// The session-creation limiter (`None` inside when the rate is 0: no limit).
pub struct SessionLimiter {
    limiter: Option<DefaultKeyedRateLimiter<IpAddr>>,
    /// Half of it per nested IPv6 /64.
    nested: Option<DefaultKeyedRateLimiter<IpAddr>>,
    /// The /64 table's capacity ([`MAX_TRACKED`]; smaller in tests).
    nested_capacity: usize,
    sweeps: [Sweeps; 2],
}

impl SessionLimiter {
    /// `per_minute` creations per address per minute after a burst of `burst` (0: no limit).
    pub fn new(per_minute: u32, burst: u32) -> Self {
        let make = |per_minute: u32, burst: u32| {
            NonZeroU32::new(per_minute).map(|rate| {
                let burst = NonZeroU32::new(burst).unwrap_or(NonZeroU32::MIN);
                RateLimiter::keyed(Quota::per_minute(rate).allow_burst(burst))
            })
        };
        SessionLimiter {
            limiter: make(per_minute, burst),
            nested: make(nested_part(per_minute), nested_part(burst)),
            nested_capacity: MAX_TRACKED,
            sweeps: Default::default(),
        }
    }

    /// `Ok` when `ip` may create a session now; otherwise how long it should wait.
    pub fn check(&self, ip: IpAddr) -> Result<(), Duration> {
        let Some(limiter) = &self.limiter else {
            return Ok(());
        };
        // The /64's half first: a /64 refused by it spends nothing of its bucket's. A full /64
        // table (one /48 walking its /64s) passes new /64s under their bucket alone: refusing
        // them would refuse every IPv6 client.
        if let (Some(sub), Some(half)) = (nested(ip), &self.nested) {
            check_bounded(
                half,
                &sub,
                self.nested_capacity,
                Full::Pass,
                &self.sweeps[0],
            )?;
        }
        check_bounded(
            limiter,
            &bucket(ip),
            MAX_TRACKED,
            Full::Refuse,
            &self.sweeps[1],
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_full_64_table_refuses_nobody_for_being_full() {
        let mut limiter = SessionLimiter::new(60, 4);
        limiter.nested_capacity = 512;
        // One /48 walking 512 of its /64s (two /56 buckets): the /64 table fills.
        for i in 0..512u32 {
            let ip = IpAddr::from(std::net::Ipv6Addr::new(
                0x2001, 0xdb8, 0, i as u16, 0, 0, 0, 1,
            ));
            let _ = limiter.check(ip);
        }
        assert!(limiter.nested.as_ref().unwrap().len() >= 512);
        let fresh: IpAddr = "2001:db8:1::1".parse().unwrap();
        assert!(
            limiter.check(fresh).is_ok(),
            "a new /64 of another /56 gets in"
        );
        assert!(limiter.check(fresh).is_ok());
        assert!(limiter.check(fresh).is_ok());
        assert!(limiter.check(fresh).is_ok());
        assert!(
            limiter.check(fresh).is_err(),
            "under its bucket's limit (burst 4)"
        );
    }

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
