//! The embedded store's settings beyond its directory: disk floor, per-client quota, cache.
//!
//! A full disk, one client filling it, and a page cache that grows with the data were each a
//! way to take the gateway down; these are their bounds. They apply to the embedded store only
//! (a Celeriant cluster has its own).

use clap::Args;

/// The embedded store's disk and memory settings.
#[derive(Debug, Clone, Args)]
pub struct StoreConfig {
    /// Embedded store: refuse writes early (507, 50700, `retry`) while the data directory's
    /// file system has less than this many bytes free; `/healthz` says degraded meanwhile.
    #[arg(long, env = "CELERIANT_GATEWAY_MIN_FREE_BYTES", default_value_t = 256 << 20)]
    pub min_free_bytes: u64,

    /// Embedded store: most bytes of batches one client id may have stored; a write that would
    /// go over is refused (403, 40310, `rejected`). 0: no quota.
    #[arg(long, env = "CELERIANT_GATEWAY_STORE_QUOTA_BYTES", default_value_t = 1 << 30)]
    pub store_quota_bytes: u64,

    /// Embedded store: the database's page cache, in bytes.
    #[arg(long, env = "CELERIANT_GATEWAY_STORE_CACHE_BYTES", default_value_t = 64 << 20)]
    pub store_cache_bytes: usize,
}
