//! Per-address limits nested in two levels for IPv6: the bucket (`/56` by default) and, under
//! it, each `/64`, which may take at most half of its bucket's budget.
//!
//! A `/56` bucket keeps one subscriber from getting 256 budgets out of its own delegation
//! (`crate::limits::ip`), but it makes every device of the `/56` share one budget: where a
//! carrier puts unrelated phones, each in its own `/64`, into one `/56`, one of them spending
//! the bucket's rate refused all the others. So an IPv6 address is admitted under its `/64`'s
//! half first and then under its bucket's whole: one `/64` (one host, usually) leaves at least
//! half of every rate and every concurrency cap to the rest of its `/56`, and the `/56` as a
//! whole still gets no more than one bucket's. A `/64` refused by its half spends nothing of
//! the bucket's. At most [`MAX_TRACKED`] `/64`s are tracked: while that many are all recharging
//! (one `/48` walking its `/64`s), a new `/64` is admitted under its bucket's limit alone, never
//! refused for the table being full. Not nested: IPv4 (and mapped or NAT64 IPv4), and buckets of `/64` or finer
//! (`--ipv6-bucket-prefix 64`), where the bucket is the `/64` already.
//!
//! Applied to the per-address rates and concurrency of writes and reads (`crate::limits::fair`)
//! and of cheap requests (`crate::limits::cheap`); the session-creation rate
//! (`crate::auth::rate`) nests the same way.

use std::net::{IpAddr, Ipv6Addr};
use std::sync::Arc;

use super::ip::{Prefixes, bucket, bucket_with, prefixes};
use super::keyed::{Full, InFlight, KeyedLimiter, MAX_TRACKED, Refusal};

/// The prefix of the nested key.
pub const NESTED_PREFIX: u8 = 64;

/// The part of its bucket's budget one nested `/64` may take: one half.
pub fn nested_part(budget: u32) -> u32 {
    if budget == 0 { 0 } else { (budget / 2).max(1) }
}

/// The `/64` `ip` counts under inside its bucket, with the process's prefixes.
pub fn nested(ip: IpAddr) -> Option<IpAddr> {
    nested_with(ip, prefixes())
}

/// The `/64` `ip` counts under inside its bucket with `prefixes`: for every IPv6 address
/// (not mapped or NAT64 IPv4) when the IPv6 bucket is coarser than a `/64`, and never
/// otherwise. Decided by the prefix length, not by comparing keys: the `/64` of subnet 0 has
/// the same key as its `/56`, and is nested all the same.
pub fn nested_with(ip: IpAddr, prefixes: Prefixes) -> Option<IpAddr> {
    if prefixes.v6 >= NESTED_PREFIX {
        return None;
    }
    // The address itself, canonical, with mapped and NAT64 IPv4 as IPv4.
    let whole = Prefixes { v4: 32, v6: 128 };
    let IpAddr::V6(v6) = bucket_with(ip, whole) else {
        return None;
    };
    let keep = u128::MAX << (128 - u32::from(NESTED_PREFIX));
    Some(IpAddr::V6(Ipv6Addr::from(u128::from(v6) & keep)))
}

/// A rate and a concurrency cap per address bucket, with half of each per nested `/64`.
pub struct AddressLimiter {
    bucket: Arc<KeyedLimiter<IpAddr>>,
    nested: Arc<KeyedLimiter<IpAddr>>,
}

/// One admitted request of an address: its places in its `/64` and its bucket.
pub struct Admitted {
    _nested: Option<InFlight<IpAddr>>,
    _bucket: InFlight<IpAddr>,
}

impl AddressLimiter {
    /// `per_second` per bucket after a burst of `burst` (0: no rate), `concurrency` in
    /// progress per bucket (0: no cap); half of each per nested `/64`.
    pub fn new(per_second: u32, burst: u32, concurrency: u32) -> Self {
        let burst = if burst == 0 { per_second } else { burst };
        AddressLimiter {
            bucket: KeyedLimiter::new(per_second, burst, concurrency),
            // A full /64 table passes new /64s under their bucket rather than refusing them.
            nested: KeyedLimiter::with(
                nested_part(per_second),
                nested_part(burst),
                nested_part(concurrency),
                Full::Pass,
                MAX_TRACKED,
            ),
        }
    }

    /// Admits one request from `ip` under its `/64`'s part, then its bucket's whole.
    pub fn enter(&self, ip: IpAddr) -> Result<Admitted, Refusal> {
        let nested = match nested(ip) {
            Some(sub) => Some(self.nested.enter(sub)?),
            None => None,
        };
        Ok(Admitted {
            _bucket: self.bucket.enter(bucket(ip))?,
            _nested: nested,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn only_ipv6_buckets_coarser_than_a_64_nest() {
        assert_eq!(nested(ip("2001:db8:0:1::5")), Some(ip("2001:db8:0:1::")));
        assert_eq!(nested(ip("192.0.2.1")), None);
        assert_eq!(nested(ip("::ffff:192.0.2.1")), None);
        assert_eq!(nested(ip("64:ff9b::192.0.2.1")), None);
    }

    #[test]
    fn nesting_is_decided_by_the_prefix_length_not_by_the_key() {
        let p = |v6| Prefixes { v4: 32, v6 };
        // Subnet 0 of its /56: the same key as the bucket, nested all the same.
        assert_eq!(
            nested_with(ip("2001:db8::5"), p(56)),
            Some(ip("2001:db8::"))
        );
        assert_eq!(nested(ip("2001:db8:0:0::5")), Some(ip("2001:db8::")));
        assert_eq!(
            nested_with(ip("2001:db8:7:ff00::1"), p(48)),
            Some(ip("2001:db8:7:ff00::"))
        );
        // A bucket of a /64 or finer is the /64 already, or finer: never nested.
        assert_eq!(nested_with(ip("2001:db8:0:1::5"), p(64)), None);
        assert_eq!(nested_with(ip("2001:db8::5"), p(128)), None);
        assert_eq!(nested_with(ip("2001:db8:0:1::5"), p(128)), None);
    }

    #[test]
    fn an_address_in_subnet_0_takes_half_of_its_56() {
        let l = AddressLimiter::new(0, 0, 8);
        let zero = ip("2001:db8::5");
        let held: Vec<Admitted> = (0..4).map(|_| l.enter(zero).unwrap()).collect();
        assert_eq!(l.enter(zero).err(), Some(Refusal::Concurrency(4)));
        let other: Vec<Admitted> = (0..4)
            .map(|_| l.enter(ip("2001:db8:0:9::1")).unwrap())
            .collect();
        assert_eq!(held.len() + other.len(), 8);
    }

    #[test]
    fn one_64_takes_half_its_56_and_leaves_the_rest_to_the_others() {
        let l = AddressLimiter::new(0, 0, 8);
        let (a, b, c) = (
            ip("2001:db8:0:1::1"),
            ip("2001:db8:0:2::1"),
            ip("2001:db8:0:3::1"),
        );
        let held_a: Vec<Admitted> = (0..4).map(|_| l.enter(a).unwrap()).collect();
        assert_eq!(l.enter(a).err(), Some(Refusal::Concurrency(4)));
        // A neighbour /64 of the same /56 still has the other half.
        let held_b: Vec<Admitted> = (0..4).map(|_| l.enter(b).unwrap()).collect();
        // The /56 as a whole has its one budget.
        assert_eq!(l.enter(c).err(), Some(Refusal::Concurrency(8)));
        drop(held_a);
        assert!(l.enter(c).is_ok());
        drop(held_b);
        // IPv4 is not nested: the whole budget.
        let v4: Vec<Admitted> = (0..8).map(|_| l.enter(ip("192.0.2.1")).unwrap()).collect();
        assert_eq!(v4.len(), 8);
    }

    #[test]
    fn a_64_over_its_rate_spends_nothing_of_its_56() {
        let l = AddressLimiter::new(1, 4, 0);
        let a = ip("2001:db8:0:1::1");
        for _ in 0..2 {
            drop(l.enter(a).unwrap());
        }
        // Refused by its half: the bucket's burst is untouched by these refusals.
        for _ in 0..100 {
            assert!(matches!(l.enter(a).err(), Some(Refusal::Rate(_))));
        }
        for _ in 0..2 {
            drop(l.enter(ip("2001:db8:0:2::1")).unwrap());
        }
        assert!(matches!(
            l.enter(ip("2001:db8:0:3::1")).err(),
            Some(Refusal::Rate(_))
        ));
    }
}
