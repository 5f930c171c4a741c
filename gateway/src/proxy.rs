//! Behind a reverse proxy: which address a request counts under.
//!
//! Every per-address limit (`crate::limits::ip`) and the session rate limit read the
//! connection's peer address (`ConnectInfo<SocketAddr>`). Behind a proxy that is the proxy's
//! address for every client, so the limits would count all clients as one. With
//! `--trusted-proxy IP` (repeatable), a request whose connection comes from one of those
//! addresses counts under the address in the **last** `X-Forwarded-For` entry — the one the
//! trusted proxy itself wrote (the tested nginx file sets the header to `$remote_addr`,
//! replacing whatever the client sent). Entries before it were written by the client and are
//! never read; a request from any other peer keeps its peer address, whatever it sends, and a
//! trusted peer's request without a readable entry keeps the proxy's.
//!
//! The connection caps (`crate::serve`) are decided before a request exists, so they still
//! count the proxy's connections: size `--max-connections-per-ip` for the proxy there.

use std::net::{IpAddr, SocketAddr};
use std::sync::Arc;

use axum::extract::{ConnectInfo, Request, State};
use axum::middleware::Next;
use axum::response::Response;

/// The header a trusted proxy sets.
pub const FORWARDED_FOR: &str = "x-forwarded-for";

/// The proxies whose `X-Forwarded-For` is believed.
#[derive(Debug, Clone, Default)]
pub struct TrustedProxies(Arc<Vec<IpAddr>>);

impl TrustedProxies {
    /// The proxies at `addresses`.
    pub fn new(addresses: &[IpAddr]) -> Self {
        TrustedProxies(Arc::new(
            addresses.iter().map(|a| a.to_canonical()).collect(),
        ))
    }

    /// Whether any proxy is trusted.
    pub fn any(&self) -> bool {
        !self.0.is_empty()
    }

    /// The client address of a request from `peer` with `forwarded` (the header's values).
    pub fn client(&self, peer: SocketAddr, forwarded: Option<&str>) -> SocketAddr {
        if !self.0.contains(&peer.ip().to_canonical()) {
            return peer;
        }
        forwarded
            .and_then(|f| f.rsplit(',').next())
            .and_then(|last| last.trim().parse::<IpAddr>().ok())
            .map_or(peer, |ip| SocketAddr::new(ip, peer.port()))
    }
}

/// Middleware: replaces the peer address of a trusted proxy's request with its client's.
pub async fn forwarded(
    State(trusted): State<TrustedProxies>,
    mut request: Request,
    next: Next,
) -> Response {
    if let Some(ConnectInfo(peer)) = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .copied()
    {
        // Several header lines count as one list, in order; the last line's last entry is the
        // proxy's.
        let last_line = request
            .headers()
            .get_all(FORWARDED_FOR)
            .iter()
            .next_back()
            .and_then(|v| v.to_str().ok());
        let client = trusted.client(peer, last_line);
        request.extensions_mut().insert(ConnectInfo(client));
    }
    next.run(request).await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_a_trusted_peer_is_believed_and_only_its_own_entry() {
        let proxy: SocketAddr = "127.0.0.1:5000".parse().unwrap();
        let other: SocketAddr = "192.0.2.1:5000".parse().unwrap();
        let trusted = TrustedProxies::new(&["127.0.0.1".parse().unwrap()]);
        let spoofed = Some("10.9.9.9, 198.51.100.7");
        assert_eq!(
            trusted.client(proxy, spoofed).ip().to_string(),
            "198.51.100.7"
        );
        assert_eq!(trusted.client(other, spoofed), other);
        assert_eq!(trusted.client(proxy, Some("not an address")), proxy);
        assert_eq!(trusted.client(proxy, None), proxy);
        let mapped: SocketAddr = "[::ffff:127.0.0.1]:5000".parse().unwrap();
        assert_eq!(
            trusted.client(mapped, Some("2001:db8::1")).ip().to_string(),
            "2001:db8::1"
        );
        assert_eq!(TrustedProxies::default().client(proxy, spoofed), proxy);
    }
}
