//! Which key a client address counts under, for every per-address limit.
//!
//! An address counts under its **bucket**: the address cut to a prefix, `--ipv4-bucket-prefix`
//! (default 32: the address itself) or `--ipv6-bucket-prefix` (default 56). IPv4 is not cut
//! coarser because carrier-grade NAT puts thousands of unrelated subscribers behind one /24 (a
//! /24 bucket would make them share every per-address limit). IPv6 /64 was too fine: a
//! subscriber usually gets a /56 (often a /48), so one host walked thousands of /64s of its own
//! prefix and got a share in each (3,500 /64s of one /52 once filled the session replay cache,
//! issue 26); /56 gives such a host one bucket (a /48 holder 256). The price: devices of one
//! /56 share every per-address limit (a dense mobile pool can put many in one), so such a
//! network sets `--ipv6-bucket-prefix 64` (docs/protocol.md §15, *Address buckets*).
//! Mapped IPv4 (`::ffff:a.b.c.d`) and NAT64 (`64:ff9b::a.b.c.d`) count as IPv4. Behind a reverse proxy every request has the
//! proxy's address unless the proxy is named with `--trusted-proxy` (`crate::proxy` then puts
//! the client's address in its place).
//!
//! The prefixes are one setting of the process, read by every limiter on every request, so
//! they live in a process-wide cell set once at start ([`configure`]) rather than threaded
//! through each of the nine limiters' constructors.

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};
use std::sync::OnceLock;

use axum::extract::ConnectInfo;
use axum::http::Extensions;

/// The prefix lengths of an address bucket.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Prefixes {
    /// Bits of an IPv4 address kept (8..=32).
    pub v4: u8,
    /// Bits of an IPv6 address kept (32..=128).
    pub v6: u8,
}

impl Default for Prefixes {
    fn default() -> Self {
        Prefixes { v4: 32, v6: 56 }
    }
}

static PREFIXES: OnceLock<Prefixes> = OnceLock::new();

/// Sets the process's bucket prefixes; an error when they are out of range (IPv4 8–32, IPv6
/// 40–128: coarser buckets put a whole provider in one) or were set to other values already
/// (two gateways in one process must agree: every limiter keys by them).
pub fn configure(prefixes: Prefixes) -> Result<(), String> {
    if !(8..=32).contains(&prefixes.v4) || !(40..=128).contains(&prefixes.v6) {
        return Err(format!(
            "address bucket prefixes out of range: IPv4 /{} (8–32), IPv6 /{} (40–128)",
            prefixes.v4, prefixes.v6
        ));
    }
    let set = *PREFIXES.get_or_init(|| prefixes);
    if set == prefixes {
        Ok(())
    } else {
        Err(format!(
            "the address bucket prefixes are {set:?} in this process already; cannot use \
             {prefixes:?}"
        ))
    }
}

/// The process's bucket prefixes (the defaults until [`configure`] sets them).
pub fn prefixes() -> Prefixes {
    PREFIXES.get().copied().unwrap_or_default()
}

/// The key `ip` counts under, with the process's prefixes.
pub fn bucket(ip: IpAddr) -> IpAddr {
    bucket_with(ip, prefixes())
}

/// The key `ip` counts under with `prefixes`.
pub fn bucket_with(ip: IpAddr, prefixes: Prefixes) -> IpAddr {
    match nat64_to_ipv4(ip.to_canonical()) {
        IpAddr::V4(v4) => {
            let keep = u32::MAX
                .checked_shl(32 - u32::from(prefixes.v4.min(32)))
                .unwrap_or(0);
            IpAddr::V4(Ipv4Addr::from(u32::from(v4) & keep))
        }
        IpAddr::V6(v6) => {
            let keep = u128::MAX
                .checked_shl(128 - u32::from(prefixes.v6.min(128)))
                .unwrap_or(0);
            IpAddr::V6(Ipv6Addr::from(u128::from(v6) & keep))
        }
    }
}

/// An address of the well-known NAT64 prefix `64:ff9b::/96` (RFC 6052) as the IPv4 client it
/// stands for: behind an IPv6-only network's translator every IPv4 client arrives in that one
/// /96, which a /56 bucket would make one client. (The local-use prefix `64:ff9b:1::/48` and
/// other translators' prefixes place the IPv4 address where their operator chose: not decoded.)
fn nat64_to_ipv4(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V6(v6) if u128::from(v6) >> 32 == 0x0064_ff9b_u128 << 64 => {
            IpAddr::V4(Ipv4Addr::from(u128::from(v6) as u32))
        }
        other => other,
    }
}

/// The peer address of a request (set by `crate::serve` for each connection); `0.0.0.0` when
/// the request came without one (tests that drive the router without a socket).
pub fn peer(extensions: &Extensions) -> IpAddr {
    extensions
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn ipv6_counts_per_56_by_default_and_mapped_ipv4_as_ipv4() {
        let p = Prefixes::default();
        let b = |s| bucket_with(ip(s), p);
        // One /56: its 256 /64s are one bucket.
        assert_eq!(b("2001:db8:0:1::1"), b("2001:db8:0:ff::ffff:2"));
        assert_eq!(b("2001:db8:0:ff::1"), ip("2001:db8::"));
        assert_ne!(b("2001:db8:0:1::1"), b("2001:db8:0:100::1"));
        assert_eq!(b("::ffff:192.0.2.9"), ip("192.0.2.9"));
        // IPv4 as it is: CGNAT neighbours are not lumped together.
        assert_ne!(b("192.0.2.9"), b("192.0.2.10"));
    }

    #[test]
    fn prefixes_cut_where_they_say() {
        let p = Prefixes { v4: 24, v6: 48 };
        assert_eq!(bucket_with(ip("192.0.2.77"), p), ip("192.0.2.0"));
        assert_eq!(bucket_with(ip("2001:db8:7:ff00::1"), p), ip("2001:db8:7::"));
        let whole = Prefixes { v4: 32, v6: 128 };
        assert_eq!(bucket_with(ip("2001:db8::5"), whole), ip("2001:db8::5"));
        let none = Prefixes { v4: 0, v6: 0 };
        assert_eq!(bucket_with(ip("192.0.2.77"), none), ip("0.0.0.0"));
    }

    #[test]
    fn nat64_addresses_count_as_the_ipv4_client_they_carry() {
        let p = Prefixes::default();
        assert_eq!(bucket_with(ip("64:ff9b::192.0.2.9"), p), ip("192.0.2.9"));
        assert_ne!(
            bucket_with(ip("64:ff9b::192.0.2.9"), p),
            bucket_with(ip("64:ff9b::198.51.100.7"), p)
        );
    }

    #[test]
    fn a_second_setting_must_agree_and_be_in_range() {
        assert!(configure(Prefixes { v4: 32, v6: 32 }).is_err());
        assert!(configure(Prefixes { v4: 7, v6: 56 }).is_err());
        configure(Prefixes::default()).unwrap();
        configure(Prefixes::default()).unwrap();
        assert!(configure(Prefixes { v4: 24, v6: 56 }).is_err());
    }
}
