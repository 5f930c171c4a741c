//! The change stream's settings (`POST /v1/watch`): heartbeat and the stream limits.
//!
//! Each open stream holds a connection (counted in `--max-connections`), a slot of pending
//! notifications bounded by the aggregates it names, and registry entries; these flags bound
//! how many of each a client, or everyone, can make the gateway hold.

use std::time::Duration;

use clap::Args;

use crate::watch::WatchLimits;

/// Heartbeat and limits of the change streams.
#[derive(Debug, Clone, Args)]
pub struct WatchConfig {
    /// Seconds between `heartbeat` events on a change stream (a client treats 30 s without a
    /// byte as a dead connection). Half of --idle-timeout-ms applies when that is shorter.
    #[arg(long, env = "CELERIANT_GATEWAY_WATCH_HEARTBEAT_SECS", default_value_t = 15,
          value_parser = clap::value_parser!(u64).range(1..=3600))]
    pub watch_heartbeat_secs: u64,

    /// Most aggregates one change stream may name (after removing duplicates); more is
    /// refused (400, 40020, `rejected`).
    #[arg(long, env = "CELERIANT_GATEWAY_WATCH_MAX_AGGREGATES", default_value_t = 1000,
          value_parser = clap::value_parser!(u32).range(1..=100_000))]
    pub watch_max_aggregates: u32,

    /// Most change streams one client id may hold open; one more is refused (429, 42920,
    /// `retry`).
    #[arg(long, env = "CELERIANT_GATEWAY_WATCH_MAX_STREAMS_PER_CLIENT", default_value_t = 4,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub watch_max_streams_per_client: u32,

    /// Most change streams one client address may hold open (per address bucket: IPv6 /56 by default);
    /// one more is refused (429, 42922, `retry`). 0: no cap (behind a reverse proxy not named
    /// with --trusted-proxy, where every stream has the proxy's address).
    #[arg(long, env = "CELERIANT_GATEWAY_WATCH_MAX_STREAMS_PER_IP", default_value_t = 64,
          value_parser = clap::value_parser!(u32))]
    pub watch_max_streams_per_ip: u32,

    /// A change stream whose next bytes find no room in its connection's send buffer for this
    /// long (its client stopped reading) is closed and its slots freed.
    #[arg(long, env = "CELERIANT_GATEWAY_WATCH_WRITE_TIMEOUT_MS", default_value_t = 30_000,
          value_parser = clap::value_parser!(u64).range(100..=3_600_000))]
    pub watch_write_timeout_ms: u64,

    /// Longest a change stream lasts, whatever its session's expiry: it then ends cleanly and
    /// the client reconnects (each stream ends somewhere in the last quarter of it, so streams
    /// opened together do not all reconnect together).
    #[arg(long, env = "CELERIANT_GATEWAY_WATCH_MAX_LIFETIME_SECS", default_value_t = 1800,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub watch_max_lifetime_secs: u64,

    /// Most change streams open in the gateway; one more is refused (429, 42921, `retry`).
    #[arg(long, env = "CELERIANT_GATEWAY_WATCH_MAX_STREAMS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub watch_max_streams: u32,

    /// Most registrations in the gateway: aggregates summed over every open change stream
    /// (each costs a registry entry and a slot entry); a stream that would pass it is refused
    /// (429, 42921, `retry`).
    #[arg(long, env = "CELERIANT_GATEWAY_WATCH_MAX_REGISTRATIONS", default_value_t = 200_000,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub watch_max_registrations: u32,
}

impl WatchConfig {
    /// The hub's limits.
    pub fn limits(&self) -> WatchLimits {
        WatchLimits {
            max_aggregates: self.watch_max_aggregates as usize,
            max_streams_per_client: self.watch_max_streams_per_client as usize,
            max_streams_per_ip: self.watch_max_streams_per_ip as usize,
            max_streams: self.watch_max_streams as usize,
            max_registrations: self.watch_max_registrations as usize,
        }
    }

    /// How long a stream's bytes may wait for room in its send buffer.
    pub fn write_timeout(&self) -> Duration {
        Duration::from_millis(self.watch_write_timeout_ms)
    }

    /// The lifetime of stream number `id`: `--watch-max-lifetime-secs`, less up to a quarter
    /// of it (spread by the id).
    pub fn max_lifetime(&self, id: u64) -> Duration {
        let full = Duration::from_secs(self.watch_max_lifetime_secs);
        let spread = (id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 54) as u32; // 0..1024
        full - full / 4 * spread / 1024
    }

    /// The heartbeat interval that applies: `--watch-heartbeat-secs`, or half of
    /// `--idle-timeout-ms` when that is shorter, so an idle stream is never cut off between
    /// heartbeats.
    pub fn heartbeat(&self, idle_timeout_ms: u64) -> Duration {
        Duration::from_secs(self.watch_heartbeat_secs)
            .min(Duration::from_millis((idle_timeout_ms / 2).max(1)))
    }
}
