//! Behind a reverse proxy: which address a request counts under.
//!
//! Every per-address limit (`crate::limits::ip`) and the session rate limit read the
//! connection's peer address (`ConnectInfo<SocketAddr>`). Behind a proxy that is the proxy's
//! address for every client, so the limits would count all clients as one. `--trusted-proxy`
//! (repeatable: an address, `127.0.0.1`, or a CIDR range, `10.0.0.0/8`, `fd00::/8`) names the
//! proxies whose forwarding headers are believed. A request whose peer is in none of them keeps
//! its peer address, whatever it sends. A trusted peer's request counts under:
//!
//! * **Which header.** Only the one `--forwarded-header` names: `x-forwarded-for` (the
//!   default, the de-facto header nginx and most load balancers set) or `forwarded` (RFC 7239,
//!   its `for=` parameters). The other is ignored entirely: many proxies set one and pass a
//!   client's other through untouched, so reading it (or letting it win when present) would let
//!   a client choose its address.
//! * **Which entry: the rightmost untrusted one.** Several header lines are one list, in order.
//!   The list is read from the right (the entry the nearest proxy wrote); an entry that is itself
//!   a trusted proxy is skipped (a chain: CDN, then nginx, then the gateway), and the first one
//!   that is not is the client. Entries further left were written by the client and are never
//!   read. If every entry read is trusted, the leftmost read counts.
//! * **What stops the walk.** An entry that is no address (`unknown`, an obfuscated `_name`, a
//!   `Forwarded` element without `for=`, with more than 8 parameters or not strictly
//!   well-formed (`forwarded`), garbage, an element that is not text, an IPv6 zone id), or an
//!   address no client has (unspecified `0.0.0.0` / `::`, multicast, IPv4-compatible
//!   `::a.b.c.d`): the request counts under the last trusted hop seen so far (the peer, or the
//!   last skipped entry), never under anything further left. At most [`MAX_HOPS`] list
//!   elements are read; past them the walk stops the same way. Lines are split from the right,
//!   lazily and as bytes, so a header of thousands of entries costs only the entries read, and
//!   nothing a client writes to the left of a proxy's entry (bytes that are not text, an open
//!   quote) changes how that entry is read.
//! * **Entry syntax.** `X-Forwarded-For`: `192.0.2.1`, `192.0.2.1:5678`, `2001:db8::1`,
//!   `[2001:db8::1]`, `[2001:db8::1]:80`. `Forwarded`: `for=192.0.2.1`, `for="192.0.2.1:5678"`,
//!   `for="[2001:db8::1]:4711"`. IPv4-mapped IPv6 addresses (peer, entry or range) count as
//!   IPv4. NAT64 ones (`64:ff9b::a.b.c.d`) are matched against the ranges as IPv6 (RFC 6052
//!   never carries private IPv4 there, so none is a local proxy); the limits count them as
//!   the IPv4 they carry (`crate::limits::ip`).
//!
//! The connection caps (`crate::serve`) are decided before a request exists, so they still
//! count the proxy's connections: size `--max-connections-per-ip` for the proxy there (the
//! connections of a proxy named by its single address are never evicted,
//! `crate::limits::connections`).

mod forwarded;

use std::net::{IpAddr, Ipv6Addr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::http::HeaderMap;
use axum::http::header::FORWARDED as FORWARDED_HEADER;
use axum::middleware::Next;
use axum::response::Response;
use clap::ValueEnum;
use ipnet::{IpNet, Ipv4Net};

/// The de-facto header most proxies set (nginx's `$proxy_add_x_forwarded_for`).
pub const FORWARDED_FOR: &str = "x-forwarded-for";

/// The standard header (RFC 7239).
pub const FORWARDED: &str = "forwarded";

/// Which forwarding header a trusted proxy's request is read from (`--forwarded-header`); the
/// other is never read.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, ValueEnum)]
pub enum ForwardedHeader {
    /// `X-Forwarded-For` (nginx's `$proxy_add_x_forwarded_for`, most load balancers).
    #[default]
    XForwardedFor,
    /// `Forwarded` (RFC 7239).
    Forwarded,
}

/// The shortest prefix trusted for a private range: IPv4 inside 10/8, 172.16/12, 192.168/16,
/// 127/8 or 100.64/10, IPv6 inside unique-local `fc00::/7`. A network's own proxies live there.
pub const MIN_PREFIX: u8 = 8;

/// The shortest prefix trusted for any other (public) IPv4 range: a public /8 is one cloud's
/// whole address space (`3.0.0.0/8`), whose every tenant could then choose the address it
/// counts under; the widest range a CDN publishes for its edges is a /13 (Cloudflare's
/// `104.16.0.0/13`).
pub const MIN_PREFIX_PUBLIC_V4: u8 = 13;

/// The shortest prefix trusted for any other (public) IPv6 range: a /8 of IPv6 is a regional
/// registry's share of the Internet (`2a00::/8`); the widest a CDN publishes is a /28 (AWS
/// CloudFront's `2600:9000::/28`).
pub const MIN_PREFIX_V6: u8 = 28;

/// Most list elements read from the right of a forwarding header: far more than any real chain
/// of proxies, few enough that a header of thousands of entries costs nothing.
pub const MAX_HOPS: usize = 32;

/// Parses one `--trusted-proxy` value (clap's value parser): an address (one host) or a CIDR
/// range. Refused: anything else, a range with bits set past its prefix (`10.0.0.1/8` is a
/// typo for either an address or `10.0.0.0/8`; trust is not guessed), a prefix shorter than
/// [`MIN_PREFIX`] (private ranges), [`MIN_PREFIX_PUBLIC_V4`] or [`MIN_PREFIX_V6`] (a /0 would
/// let every peer choose the address it counts under), and an IPv6 range overlapping a prefix
/// where any IPv4 host can appear (IPv4-mapped, NAT64, Teredo, 6to4). IPv4-mapped IPv6
/// (`::ffff:192.0.2.1`, `::ffff:10.0.0.0/104`) is kept as the IPv4 it is, and checked as that
/// (`::ffff:0.0.0.0/96` is 0.0.0.0/0).
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
    let net = canonical(net);
    let minimum = if private().iter().any(|p| p.contains(&net)) {
        MIN_PREFIX
    } else if net.addr().is_ipv4() {
        MIN_PREFIX_PUBLIC_V4
    } else {
        MIN_PREFIX_V6
    };
    if net.prefix_len() < minimum {
        return Err(format!(
            "`{value}` is {net}, a range wider than /{minimum}: it would trust nearly every \
             peer, and any client could choose the address it counts under; name the proxies' \
             addresses or ranges"
        ));
    }
    // Any IPv4 host can appear in these prefixes; a range overlapping one would trust
    // clients of the whole IPv4 Internet. (A mapped /96 or narrower is read as IPv4 above.)
    for (carrier, what) in [
        ("::ffff:0:0/96", "IPv4-mapped"),
        ("64:ff9b::/96", "NAT64"),
        ("2001::/32", "Teredo"),
        ("2002::/16", "6to4"),
    ] {
        let carrier: IpNet = carrier.parse().expect("a valid range");
        if net.contains(&carrier) || carrier.contains(&net) {
            return Err(format!(
                "`{value}` overlaps the {what} prefix {carrier}, where any IPv4 host can \
                 appear: name the proxies' addresses or ranges"
            ));
        }
    }
    Ok(net)
}

/// `net` with an IPv4-mapped IPv6 range (a /96 or narrower inside `::ffff:0:0/96`) written as
/// the IPv4 range it is: peers and entries are compared as `IpAddr::to_canonical` gives them.
/// NAT64 (`64:ff9b::/96`) is not: RFC 6052 never carries private or loopback IPv4 there, so a
/// peer `64:ff9b::7f00:1` is no local proxy (the limits still count NAT64 as IPv4).
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

/// Private ranges (RFC 1918, loopback, shared CGNAT space, unique-local IPv6), where
/// [`MIN_PREFIX`] applies.
fn private() -> [IpNet; 6] {
    [
        "10.0.0.0/8",
        "172.16.0.0/12",
        "192.168.0.0/16",
        "127.0.0.0/8",
        "100.64.0.0/10",
        "fc00::/7",
    ]
    .map(|r| r.parse().expect("a valid range"))
}

/// The proxies whose forwarding headers are believed, and which header they set.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies {
    nets: Arc<Vec<IpNet>>,
    header: ForwardedHeader,
}

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
    /// or /128), read from `X-Forwarded-For` (see [`Self::reading`]).
    pub fn new(ranges: &[IpNet]) -> Self {
        TrustedProxies {
            nets: Arc::new(ranges.iter().copied().map(canonical).collect()),
            header: ForwardedHeader::default(),
        }
    }

    /// These proxies, read from `header` only.
    pub fn reading(self, header: ForwardedHeader) -> Self {
        TrustedProxies { header, ..self }
    }

    /// Whether any proxy is trusted.
    pub fn any(&self) -> bool {
        !self.nets.is_empty()
    }

    /// Whether `ip` (IPv4-mapped or not) is a trusted proxy.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.nets.iter().any(|net| net.contains(&ip))
    }

    /// Whether `ip` (IPv4-mapped or not) was named as a single address (an address, or a /32 or
    /// /128 range), not merely inside a wider range: only those proxies' connections are
    /// exempt from eviction (`crate::limits::connections`).
    pub fn names_exactly(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.nets
            .iter()
            .any(|net| net.prefix_len() == net.max_prefix_len() && net.addr() == ip)
    }

    /// The client address of a request from `peer` with `headers` (the module's rules); the
    /// port stays the peer's.
    pub fn client(&self, peer: SocketAddr, headers: &HeaderMap) -> SocketAddr {
        if !self.contains(peer.ip()) {
            return peer;
        }
        let peer_ip = peer.ip().to_canonical();
        // Each line is split from the right, as bytes: only the elements read must be text,
        // so bytes a client put further left (`\xff`, an open quote) cannot make the gateway
        // drop the proxy's own element and count the request under the proxy.
        let ip = match self.header {
            ForwardedHeader::XForwardedFor => self.walk(
                peer_ip,
                headers
                    .get_all(FORWARDED_FOR)
                    .iter()
                    .rev()
                    .flat_map(|line| line.as_bytes().rsplit(|b| *b == b',')),
                x_forwarded_for,
            ),
            ForwardedHeader::Forwarded => self.walk(
                peer_ip,
                headers
                    .get_all(FORWARDED_HEADER)
                    .iter()
                    .rev()
                    .flat_map(|line| forwarded::elements_from_right(line.as_bytes())),
                forwarded::for_node,
            ),
        };
        SocketAddr::new(ip, peer.port())
    }

    /// The rightmost untrusted address of `elements` (every line's, from the right), each read
    /// by `hop`; `peer` (trusted) when there is none.
    fn walk<'a>(
        &self,
        peer: IpAddr,
        elements: impl Iterator<Item = &'a [u8]>,
        hop: fn(&str) -> Hop,
    ) -> IpAddr {
        let mut last_trusted = peer;
        for (read, element) in elements.enumerate() {
            if read >= MAX_HOPS {
                return last_trusted;
            }
            // Not UTF-8: no address a proxy writes.
            let Ok(element) = std::str::from_utf8(element) else {
                return last_trusted;
            };
            match hop(element.trim_matches([' ', '\t'])) {
                Hop::Empty => {}
                Hop::Address(ip) => {
                    let Some(ip) = client_address(ip) else {
                        return last_trusted;
                    };
                    if !self.contains(ip) {
                        return ip;
                    }
                    last_trusted = ip;
                }
                Hop::Opaque => return last_trusted,
            }
        }
        last_trusted
    }
}

/// `ip` as counted (IPv4-mapped as IPv4), or `None` for an address no client connects from:
/// unspecified (`0.0.0.0`, `::`), multicast, or IPv4-compatible (`::a.b.c.d`, deprecated;
/// `::1` is loopback and kept).
fn client_address(ip: IpAddr) -> Option<IpAddr> {
    let ip = ip.to_canonical();
    let compatible = match ip {
        IpAddr::V6(v6) => v6.segments()[..6] == [0; 6] && !v6.is_loopback(),
        IpAddr::V4(_) => false,
    };
    (!ip.is_unspecified() && !ip.is_multicast() && !compatible).then_some(ip)
}

/// One `X-Forwarded-For` element: an address, with or without a port (IPv6 in brackets then).
/// The de-facto header has no grammar to give to a crate; the standard library parses both
/// forms.
fn x_forwarded_for(element: &str) -> Hop {
    if element.is_empty() {
        return Hop::Empty;
    }
    // A zone id (`fe80::1%3`) is the writer's interface, no client's: unreadable, as in
    // `Forwarded` (the standard library would take a numeric one in `[..]:port`).
    if element.contains('%') {
        return Hop::Opaque;
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
mod tests;
