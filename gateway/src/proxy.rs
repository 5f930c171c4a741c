//! Behind a reverse proxy: which address a request counts under.
//!
//! Every per-address limit (`crate::limits::ip`) and the session rate limit read the
//! connection's peer address (`ConnectInfo<SocketAddr>`). Behind a proxy that is the proxy's
//! address for every client, so the limits would count all clients as one. `--trusted-proxy`
//! (repeatable: an address, `127.0.0.1`, or a CIDR range, `10.0.0.0/8`, `fd00::/8`) names the
//! proxies whose forwarding headers are believed. A request whose peer is in none of them keeps
//! its peer address, whatever it sends. A trusted peer's request counts under:
//!
//! * **Which header.** `Forwarded` (RFC 7239, its `for=` parameters) when the request has any
//!   `Forwarded` line; otherwise `X-Forwarded-For`. The two are never merged: a proxy that sets
//!   one must remove or replace the other (the tested nginx file clears `Forwarded`), or a
//!   client could send the one the proxy does not set.
//! * **Which entry: the rightmost untrusted one.** Several header lines are one list, in order.
//!   The list is read from the right (the entry the nearest proxy wrote); an entry that is itself
//!   a trusted proxy is skipped (a chain: CDN, then nginx, then the gateway), and the first one
//!   that is not is the client. Entries further left were written by the client and are never
//!   read. If every entry read is trusted, the leftmost read counts.
//! * **What stops the walk.** An entry that is no address (`unknown`, an obfuscated `_name`, a
//!   `Forwarded` element without `for=`, garbage, a header line that is not text): the request
//!   counts under the last trusted hop seen so far (the peer, or the last skipped entry), never
//!   under anything further left. At most [`MAX_HOPS`] list elements are read; past them the
//!   walk stops the same way (a header of thousands of entries costs nothing more).
//! * **Entry syntax.** `X-Forwarded-For`: `192.0.2.1`, `192.0.2.1:5678`, `2001:db8::1`,
//!   `[2001:db8::1]`, `[2001:db8::1]:80`. `Forwarded`: `for=192.0.2.1`, `for="192.0.2.1:5678"`,
//!   `for="[2001:db8::1]:4711"`. IPv4-mapped IPv6 addresses (peer or entry) count as IPv4.
//!
//! The connection caps (`crate::serve`) are decided before a request exists, so they still
//! count the proxy's connections: size `--max-connections-per-ip` for the proxy there (a
//! trusted peer's connections are never evicted, `crate::limits::connections`).

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::HeaderMap;
use axum::http::header::{FORWARDED as FORWARDED_HEADER, GetAll, HeaderValue};
use axum::middleware::Next;
use axum::response::Response;
use ipnet::{IpNet, Ipv4Net};

/// The de-facto header most proxies set (nginx's `$proxy_add_x_forwarded_for`).
pub const FORWARDED_FOR: &str = "x-forwarded-for";

/// The standard header (RFC 7239), read first when a trusted peer sends it.
pub const FORWARDED: &str = "forwarded";

/// Most list elements read from the right of a forwarding header: far more than any real chain
/// of proxies, few enough that a header of thousands of entries costs nothing.
pub const MAX_HOPS: usize = 32;

/// Parses one `--trusted-proxy` value (clap's value parser): an address (one host) or a CIDR
/// range. Refused: anything else, a range with bits set past its prefix (`10.0.0.1/8` is a
/// typo for either an address or `10.0.0.0/8`; trust is not guessed), and a /0 (every peer
/// could then choose the address it counts under). IPv4-mapped IPv6 (`::ffff:192.0.2.1`,
/// `::ffff:10.0.0.0/104`) is kept as the IPv4 it is.
pub fn parse_trusted(value: &str) -> Result<IpNet, String> {
    let value = value.trim();
    let net = if value.contains('/') {
        let net: IpNet = value.parse().map_err(|_| {
            format!(
                "`{value}` is not an IP address or a CIDR range (e.g. 127.0.0.1, 10.0.0.0/8, \
                 fd00::/8)"
            )
        })?;
        if net.addr() != net.network() {
            return Err(format!(
                "`{value}` has bits set past its /{} prefix: write the range {} or the address \
                 {}",
                net.prefix_len(),
                net.trunc(),
                net.addr()
            ));
        }
        net
    } else {
        let ip: IpAddr = value.parse().map_err(|_| {
            format!(
                "`{value}` is not an IP address or a CIDR range (e.g. 127.0.0.1, 10.0.0.0/8, \
                 fd00::/8)"
            )
        })?;
        IpNet::from(ip)
    };
    if net.prefix_len() == 0 {
        return Err(format!(
            "`{value}` would trust every peer: any client could choose the address it counts \
             under; name the proxies' addresses or ranges"
        ));
    }
    Ok(canonical(net))
}

/// `net` with an IPv4-mapped IPv6 range written as the IPv4 range it is (peers are compared
/// as `IpAddr::to_canonical`).
fn canonical(net: IpNet) -> IpNet {
    if let IpNet::V6(v6) = net
        && v6.prefix_len() >= 96
        && let Some(v4) = v6.network().to_ipv4_mapped()
        && let Ok(v4) = Ipv4Net::new(v4, v6.prefix_len() - 96)
    {
        return IpNet::V4(v4);
    }
    net
}

/// The proxies whose forwarding headers are believed.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies(Arc<Vec<IpNet>>);

/// One list element of a forwarding header, read from the right.
#[derive(Debug, PartialEq, Eq)]
enum Hop {
    /// An empty element (`a,,b`): RFC 9110 §5.6.1 has recipients ignore them.
    Empty,
    /// A node's address.
    Address(IpAddr),
    /// Anything else: stops the walk.
    Opaque,
}

impl TrustedProxies {
    /// The proxies in `ranges` (each as [`parse_trusted`] gives it; a single address is a /32
    /// or /128).
    pub fn new(ranges: &[IpNet]) -> Self {
        TrustedProxies(Arc::new(ranges.iter().copied().map(canonical).collect()))
    }

    /// Whether any proxy is trusted.
    pub fn any(&self) -> bool {
        !self.0.is_empty()
    }

    /// Whether `ip` (IPv4-mapped or not) is a trusted proxy.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.iter().any(|net| net.contains(&ip))
    }

    /// The client address of a request from `peer` with `headers` (the module's rules); the
    /// port stays the peer's.
    pub fn client(&self, peer: SocketAddr, headers: &HeaderMap) -> SocketAddr {
        if !self.contains(peer.ip()) {
            return peer;
        }
        let peer_ip = peer.ip().to_canonical();
        let ip = if headers.contains_key(FORWARDED_HEADER) {
            self.walk(peer_ip, headers.get_all(FORWARDED_HEADER), forwarded_for)
        } else {
            self.walk(peer_ip, headers.get_all(FORWARDED_FOR), x_forwarded_for)
        };
        SocketAddr::new(ip, peer.port())
    }

    /// The rightmost untrusted address of `lines` (one list, in order), each element read by
    /// `hop`; `peer` (trusted) when there is none.
    fn walk(&self, peer: IpAddr, lines: GetAll<'_, HeaderValue>, hop: fn(&str) -> Hop) -> IpAddr {
        let mut last_trusted = peer;
        let mut read = 0;
        for line in lines.iter().rev() {
            // Not visible ASCII: no address a proxy writes.
            let Ok(line) = line.to_str() else {
                return last_trusted;
            };
            for element in line.rsplit(',') {
                read += 1;
                if read > MAX_HOPS {
                    return last_trusted;
                }
                match hop(element.trim()) {
                    Hop::Empty => {}
                    Hop::Address(ip) => {
                        let ip = ip.to_canonical();
                        if !self.contains(ip) {
                            return ip;
                        }
                        last_trusted = ip;
                    }
                    Hop::Opaque => return last_trusted,
                }
            }
        }
        last_trusted
    }
}

/// One `X-Forwarded-For` element: an address, with or without a port (IPv6 in brackets then).
/// The de-facto header has no grammar to give to a crate; the standard library parses both
/// forms.
fn x_forwarded_for(element: &str) -> Hop {
    if element.is_empty() {
        return Hop::Empty;
    }
    if let Ok(ip) = element.parse::<IpAddr>() {
        return Hop::Address(ip);
    }
    if let Ok(at) = element.parse::<SocketAddr>() {
        return Hop::Address(at.ip());
    }
    match element
        .strip_prefix('[')
        .and_then(|e| e.strip_suffix(']'))
        .map(str::parse::<Ipv6Addr>)
    {
        Some(Ok(ip)) => Hop::Address(IpAddr::V6(ip)),
        _ => Hop::Opaque,
    }
}

/// One `Forwarded` element (`for=…;proto=…;by=…`), by the `rfc7239` crate: its `for=` node when
/// that is an address (quoted or not, IPv6 in brackets, with or without a port); `unknown`, an
/// obfuscated `_name`, no `for=`, or a malformed element are opaque. The crate splits elements
/// at every `,` and `;`, even inside a quoted value: such an element then fails to parse and
/// stops the walk (a proxy's own element never quotes a comma into `for=`; at worst the
/// request counts under the trusted hop, never under an address the client wrote). The
/// elements are split here (from the right, so the walk can stop early) and each is given to the
/// crate alone.
fn forwarded_for(element: &str) -> Hop {
    if element.is_empty() {
        return Hop::Empty;
    }
    match rfc7239::parse(element).next() {
        Some(Ok(node)) => match node.forwarded_for.as_ref().and_then(|n| n.ip()) {
            Some(ip) => Hop::Address(*ip),
            None => Hop::Opaque,
        },
        _ => Hop::Opaque,
    }
}

/// Middleware: replaces the peer address of a trusted proxy's request with its client's.
pub async fn forwarded(
    State(trusted): State<TrustedProxies>,
    mut request: Request,
    next: Next,
) -> Response {
    if trusted.any()
        && let Some(ConnectInfo(peer)) = request
            .extensions()
            .get::<ConnectInfo<SocketAddr>>()
            .copied()
    {
        let client = trusted.client(peer, request.headers());
        request.extensions_mut().insert(ConnectInfo(client));
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    const PROXY: &str = "127.0.0.1:5000";

    fn trusted(ranges: &[&str]) -> TrustedProxies {
        let ranges: Vec<IpNet> = ranges.iter().map(|r| parse_trusted(r).unwrap()).collect();
        TrustedProxies::new(&ranges)
    }

    /// A chain's proxies: nginx on loopback, a CDN in 10.0.0.0/8 and fd00::/8.
    fn chain() -> TrustedProxies {
        trusted(&["127.0.0.1", "10.0.0.0/8", "fd00::/8"])
    }

    fn lines(name: &str, values: &[&str]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for value in values {
            headers.append(
                axum::http::HeaderName::from_bytes(name.as_bytes()).unwrap(),
                HeaderValue::from_str(value).unwrap(),
            );
        }
        headers
    }

    /// The address a request from `peer` with `name: values` counts under.
    fn client(t: &TrustedProxies, peer: &str, name: &str, values: &[&str]) -> String {
        let peer: SocketAddr = peer.parse().unwrap();
        t.client(peer, &lines(name, values)).ip().to_string()
    }

    fn xff(t: &TrustedProxies, values: &[&str]) -> String {
        client(t, PROXY, FORWARDED_FOR, values)
    }

    fn fwd(t: &TrustedProxies, values: &[&str]) -> String {
        client(t, PROXY, FORWARDED, values)
    }

    #[test]
    fn trusted_proxies_are_addresses_or_ranges_and_bad_values_are_refused() {
        let ok = |v: &str| parse_trusted(v).unwrap().to_string();
        assert_eq!(ok("127.0.0.1"), "127.0.0.1/32");
        assert_eq!(ok(" 10.0.0.0/8 "), "10.0.0.0/8");
        assert_eq!(ok("fd00::/8"), "fd00::/8");
        assert_eq!(ok("2001:db8::5"), "2001:db8::5/128");
        // IPv4-mapped is kept as the IPv4 it is.
        assert_eq!(ok("::ffff:192.0.2.9"), "192.0.2.9/32");
        assert_eq!(ok("::ffff:10.0.0.0/104"), "10.0.0.0/8");
        let refused = |v: &str| parse_trusted(v).unwrap_err();
        assert!(
            refused("10.0.0.1/8").contains("write the range 10.0.0.0/8 or the address 10.0.0.1")
        );
        assert!(refused("0.0.0.0/0").contains("would trust every peer"));
        assert!(refused("::/0").contains("would trust every peer"));
        for bad in [
            "nginx",
            "10.0.0.0/33",
            "",
            "127.0.0.1:80",
            "10.0.0.0/",
            "fd00::/129",
        ] {
            assert!(
                refused(bad).contains("is not an IP address or a CIDR range"),
                "{bad}"
            );
        }
    }

    #[test]
    fn a_peer_is_trusted_by_range_and_as_mapped_ipv4() {
        let t = chain();
        for yes in ["127.0.0.1", "10.200.3.4", "::ffff:10.1.2.3", "fd12::1"] {
            assert!(t.contains(yes.parse().unwrap()), "{yes}");
        }
        for no in [
            "127.0.0.2",
            "11.0.0.1",
            "fe80::1",
            "::ffff:127.0.0.2",
            "2001:db8::1",
        ] {
            assert!(!t.contains(no.parse().unwrap()), "{no}");
        }
        assert!(!TrustedProxies::default().any());
        // A mapped range given matches plain IPv4 peers.
        assert!(trusted(&["::ffff:10.0.0.0/104"]).contains("10.9.9.9".parse().unwrap()));
    }

    #[test]
    fn an_untrusted_peers_headers_are_ignored() {
        let t = trusted(&["127.0.0.1/32"]);
        for peer in ["127.0.0.2:5000", "192.0.2.1:5000", "[2001:db8::1]:5000"] {
            let own = peer.parse::<SocketAddr>().unwrap().ip().to_string();
            assert_eq!(client(&t, peer, FORWARDED_FOR, &["198.51.100.7"]), own);
            assert_eq!(client(&t, peer, FORWARDED, &["for=198.51.100.7"]), own);
        }
        // Nothing trusted: nobody's headers.
        let none = TrustedProxies::default();
        assert_eq!(xff(&none, &["198.51.100.7"]), "127.0.0.1");
    }

    #[test]
    fn one_proxy_its_own_entry_counts_and_the_clients_entries_are_never_read() {
        let t = trusted(&["127.0.0.1"]);
        assert_eq!(xff(&t, &["10.9.9.9, 198.51.100.7"]), "198.51.100.7");
        assert_eq!(xff(&t, &["198.51.100.7"]), "198.51.100.7");
        // No header, or no entry: the proxy's own address.
        assert_eq!(xff(&t, &[]), "127.0.0.1");
        assert_eq!(xff(&t, &[""]), "127.0.0.1");
        // A client claiming to be the proxy itself, to the left: never reached.
        assert_eq!(xff(&t, &["127.0.0.1, 198.51.100.7"]), "198.51.100.7");
    }

    #[test]
    fn a_chain_is_walked_from_the_right_to_the_first_untrusted_entry() {
        let t = chain();
        // Client-written 203.0.113.9, the CDN's entry for the client, nginx's entry for the CDN.
        assert_eq!(
            xff(&t, &["203.0.113.9, 198.51.100.7, 10.0.0.5"]),
            "198.51.100.7"
        );
        assert_eq!(
            fwd(
                &t,
                &["for=203.0.113.9, for=198.51.100.7, for=\"[fd00::5]:443\""]
            ),
            "198.51.100.7"
        );
        // Every entry trusted: the leftmost.
        assert_eq!(xff(&t, &["10.0.0.7, 10.0.0.5"]), "10.0.0.7");
        assert_eq!(fwd(&t, &["for=10.0.0.7, for=10.0.0.5"]), "10.0.0.7");
        // Several lines are one list, in order.
        assert_eq!(
            xff(&t, &["203.0.113.9, 198.51.100.7", "10.0.0.5"]),
            "198.51.100.7"
        );
        assert_eq!(xff(&t, &["198.51.100.8", "198.51.100.7"]), "198.51.100.7");
        assert_eq!(
            fwd(
                &t,
                &[
                    "for=203.0.113.9",
                    "for=198.51.100.7;proto=https, for=10.0.0.5"
                ]
            ),
            "198.51.100.7"
        );
        // Empty elements are skipped.
        assert_eq!(xff(&t, &["198.51.100.7, , 10.0.0.5,"]), "198.51.100.7");
    }

    #[test]
    fn an_entry_that_is_no_address_stops_the_walk_at_the_last_trusted_hop() {
        let t = chain();
        // The client's address further left is never used.
        assert_eq!(xff(&t, &["198.51.100.66, garbage, 10.0.0.5"]), "10.0.0.5");
        assert_eq!(xff(&t, &["198.51.100.66, unknown"]), "127.0.0.1");
        assert_eq!(xff(&t, &["198.51.100.66, 10.0.0.5 10.0.0.6"]), "127.0.0.1");
        assert_eq!(xff(&t, &["198.51.100.66", "garbage"]), "127.0.0.1");
        for opaque in [
            "for=unknown",
            "for=_hidden",
            "for=\"_hidden.2\"",
            "proto=https;by=10.0.0.5",
            "for=2001:db8::1",
            "for=[2001:db8::1",
            "for=192.0.2.1:99999",
            "garbage",
            "for=192.0.2.1;",
        ] {
            assert_eq!(
                fwd(&t, &[&format!("for=198.51.100.66, {opaque}, for=10.0.0.5")]),
                "10.0.0.5",
                "{opaque}"
            );
        }
        // A header line that is not text stops it too.
        let mut headers = lines(FORWARDED_FOR, &["198.51.100.66"]);
        headers.append(
            FORWARDED_FOR,
            HeaderValue::from_bytes(b"198.51.100.7\xff").unwrap(),
        );
        assert_eq!(
            t.client(PROXY.parse().unwrap(), &headers).ip().to_string(),
            "127.0.0.1"
        );
    }

    #[test]
    fn entries_may_carry_ports_and_ipv6_in_either_header() {
        let t = trusted(&["127.0.0.1"]);
        for (entry, ip) in [
            ("192.0.2.1:5678", "192.0.2.1"),
            ("[2001:db8::1]:80", "2001:db8::1"),
            ("[2001:db8::1]", "2001:db8::1"),
            ("2001:db8::1", "2001:db8::1"),
            ("::ffff:198.51.100.7", "198.51.100.7"),
        ] {
            assert_eq!(xff(&t, &[entry]), ip, "{entry}");
        }
        for (element, ip) in [
            ("for=192.0.2.60;proto=http;by=203.0.113.43", "192.0.2.60"),
            ("For=192.0.2.60", "192.0.2.60"),
            ("for=\"192.0.2.60:8080\"", "192.0.2.60"),
            ("for=\"[2001:db8:cafe::17]:4711\"", "2001:db8:cafe::17"),
            ("for=\"[2001:db8:cafe::17]\"", "2001:db8:cafe::17"),
            ("proto=https;for=192.0.2.60", "192.0.2.60"),
        ] {
            assert_eq!(fwd(&t, &[element]), ip, "{element}");
        }
        // Mapped peers are the IPv4 proxy; mapped trusted entries are skipped.
        let chain = chain();
        assert_eq!(
            client(
                &chain,
                "[::ffff:127.0.0.1]:5000",
                FORWARDED_FOR,
                &["198.51.100.7, ::ffff:10.0.0.5"]
            ),
            "198.51.100.7"
        );
    }

    #[test]
    fn forwarded_wins_over_x_forwarded_for_and_the_two_are_never_merged() {
        let t = trusted(&["127.0.0.1"]);
        let mut both = lines(FORWARDED, &["for=198.51.100.7"]);
        both.append(FORWARDED_FOR, HeaderValue::from_static("203.0.113.9"));
        let peer: SocketAddr = PROXY.parse().unwrap();
        assert_eq!(t.client(peer, &both).ip().to_string(), "198.51.100.7");
        // A `Forwarded` without a usable entry: the proxy's address, not `X-Forwarded-For`'s.
        let mut opaque = lines(FORWARDED, &["for=unknown"]);
        opaque.append(FORWARDED_FOR, HeaderValue::from_static("203.0.113.9"));
        assert_eq!(t.client(peer, &opaque).ip().to_string(), "127.0.0.1");
        // The port stays the peer's.
        assert_eq!(t.client(peer, &both).port(), 5000);
    }

    #[test]
    fn the_walk_reads_at_most_max_hops_elements() {
        let t = chain();
        let hops = |client: &str, trusted_after: usize| {
            let mut list = vec![client.to_owned()];
            list.extend((0..trusted_after).map(|i| format!("10.0.{}.{}", i / 250, i % 250 + 1)));
            list.join(", ")
        };
        // The client behind 31 trusted hops is the 32nd element: read.
        assert_eq!(xff(&t, &[&hops("198.51.100.7", 31)]), "198.51.100.7");
        // Behind 32 it is not: the last trusted hop read counts, never a client-written entry.
        assert_eq!(xff(&t, &[&hops("198.51.100.7", 32)]), "10.0.0.1");
        assert_eq!(xff(&t, &[&hops("198.51.100.7", 99)]), "10.0.0.68");
        // A header of 100 lines of 100 entries each (the 32 KiB header cap of `crate::serve`
        // aside): the rightmost untrusted, at once.
        let wide: Vec<String> = (0..100)
            .map(|l| {
                (0..100)
                    .map(|i| format!("198.51.{l}.{}", i + 1))
                    .collect::<Vec<_>>()
                    .join(",")
            })
            .collect();
        let wide: Vec<&str> = wide.iter().map(String::as_str).collect();
        let started = std::time::Instant::now();
        assert_eq!(xff(&t, &wide), "198.51.99.100");
        let forwarded: Vec<String> = (0..10_000).map(|_| "for=10.0.0.5".to_owned()).collect();
        assert_eq!(fwd(&t, &[&forwarded.join(",")]), "10.0.0.5");
        assert!(started.elapsed() < std::time::Duration::from_secs(1));
    }
}
