//! The settings of a gateway in production: the reverse proxy it trusts and its metrics.
//!
//! `crate::proxy` applies `--trusted-proxy`; `crate::observe` serves `/metrics` with
//! `--metrics-listen` and `--metrics-token-file`. docs/deploy.md shows them in use.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::Args;
use ipnet::IpNet;

/// The trusted proxy and the metrics' access.
#[derive(Debug, Clone, Args)]
pub struct OpsConfig {
    /// Address or CIDR range (at least /8) of reverse proxies whose forwarding header
    /// (--forwarded-header) is believed (repeatable): a request from one counts under the
    /// rightmost forwarded entry that is not itself a trusted proxy, for every per-address
    /// limit (`crate::proxy`).
    #[arg(
        long = "trusted-proxy",
        env = "CELERIANT_GATEWAY_TRUSTED_PROXY",
        value_delimiter = ',',
        value_parser = crate::proxy::parse_trusted
    )]
    pub trusted_proxies: Vec<IpNet>,

    /// The one header a trusted proxy's client is read from: `x-forwarded-for` (default; what
    /// nginx and most load balancers set) or `forwarded` (RFC 7239). The other is ignored
    /// entirely: a proxy that sets one often passes a client's other through.
    #[arg(
        long = "forwarded-header",
        env = "CELERIANT_GATEWAY_FORWARDED_HEADER",
        value_enum,
        default_value_t = crate::proxy::ForwardedHeader::XForwardedFor
    )]
    pub forwarded_header: crate::proxy::ForwardedHeader,

    /// Serve `/metrics` (Prometheus text) on a listener of its own at this address (off by
    /// default). Keep it on loopback or a private network, or add --metrics-token-file.
    #[arg(long, env = "CELERIANT_GATEWAY_METRICS_LISTEN")]
    pub metrics_listen: Option<SocketAddr>,

    /// File holding the bearer token `/metrics` requires (at least 32 visible ASCII
    /// characters); with it, `/metrics` is also served on the main listener.
    #[arg(long, env = "CELERIANT_GATEWAY_METRICS_TOKEN_FILE")]
    pub metrics_token_file: Option<PathBuf>,
}
