//! Which key a client address counts under, for every per-address limit.
//!
//! IPv4 addresses count as they are (also when mapped into IPv6); IPv6 addresses per /64, the
//! block one subscriber usually gets, so one host cannot dodge a limit by walking its own
//! prefix. Behind a reverse proxy every request has the proxy's address unless the proxy is
//! named with `--trusted-proxy` (`crate::proxy` then puts the client's address in its place).

use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

use axum::extract::ConnectInfo;
use axum::http::Extensions;

/// The key `ip` counts under.
pub fn bucket(ip: IpAddr) -> IpAddr {
    match ip {
        IpAddr::V4(_) => ip,
        IpAddr::V6(v6) => match v6.to_ipv4_mapped() {
            Some(v4) => IpAddr::V4(v4),
            None => {
                let s = v6.segments();
                IpAddr::V6(Ipv6Addr::new(s[0], s[1], s[2], s[3], 0, 0, 0, 0))
            }
        },
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

    #[test]
    fn ipv6_counts_per_64_and_mapped_ipv4_as_ipv4() {
        let a: IpAddr = "2001:db8::1".parse().unwrap();
        let b: IpAddr = "2001:db8::ffff:2".parse().unwrap();
        let c: IpAddr = "2001:db8:0:1::1".parse().unwrap();
        assert_eq!(bucket(a), bucket(b));
        assert_ne!(bucket(a), bucket(c));
        let mapped: IpAddr = "::ffff:192.0.2.9".parse().unwrap();
        assert_eq!(bucket(mapped), "192.0.2.9".parse::<IpAddr>().unwrap());
    }
}
