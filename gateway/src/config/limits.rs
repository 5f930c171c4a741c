//! The bounds on what clients can make the gateway hold: connections, time, memory, share.
//!
//! Every input is hostile until proven otherwise, so each resource a request can take has a
//! bound here, with a default sized for one busy device or address (the project's own tests
//! and benchmark drive everything from 127.0.0.1, one address, with these defaults) and a flag
//! with an environment twin. `docs/protocol.md` §12 lists them with the answer past each one.
//! [`LimitConfig::check`] refuses combinations that contradict each other, such as a body limit
//! larger than the memory allowed for bodies (no write could ever be admitted).

use celeriant_sync_protocol::Limits;
use celeriant_sync_protocol::body_size::max_write_body_bytes;
use clap::Args;

/// The default `--max-body-bytes`: the largest legal write body under the protocol's limits
/// (7,541,918 bytes; `celeriant_sync_protocol::body_size`).
pub fn default_max_body_bytes() -> usize {
    max_write_body_bytes(&Limits::default())
}

/// Connections, timeouts, body and page sizes, memory budgets and fair-share limits.
#[derive(Debug, Clone, Args)]
pub struct LimitConfig {
    /// Most connections open at once; one more is answered 429 (42900) and closed at once.
    /// Lowered at start-up to fit the process's open-file limit.
    #[arg(long, env = "CELERIANT_GATEWAY_MAX_CONNECTIONS", default_value_t = 2048,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections: u32,

    /// Most connections open at once from one client address (per address bucket: IPv6 /56 by default); one more is
    /// answered 429 (42900) and closed at once.
    #[arg(long, env = "CELERIANT_GATEWAY_MAX_CONNECTIONS_PER_IP", default_value_t = 256,
          value_parser = clap::value_parser!(u32).range(1..))]
    pub max_connections_per_ip: u32,

    /// Most time to receive a request's headers; the connection is closed past it. hyper starts
    /// it as soon as a connection waits for a request, so it also bounds how long an idle
    /// keep-alive connection stays open.
    #[arg(long, env = "CELERIANT_GATEWAY_HEADER_READ_TIMEOUT_MS", default_value_t = 10_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub header_read_timeout_ms: u64,

    /// Most time to receive a request's body once its headers arrived; past it the gateway
    /// answers 408 (40800, `retry`) and closes the connection.
    #[arg(long, env = "CELERIANT_GATEWAY_BODY_READ_TIMEOUT_MS", default_value_t = 20_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub body_read_timeout_ms: u64,

    /// Slowest a request body may arrive, in bytes per second, after a grace of 2 s (the
    /// body's first byte may arrive up to 2 s after its headers, its n-th by 2 s + n / rate);
    /// a body that falls behind is abandoned at once — its reservation and write slot released
    /// — and answered 408 (40800, `retry`), the connection closed. 0: no minimum. The default,
    /// 1 KiB/s, is a fifth of a poor GPRS link (~5 KB/s): any working mobile link keeps up.
    #[arg(
        long,
        env = "CELERIANT_GATEWAY_MIN_BODY_RATE_BYTES_PER_SEC",
        default_value_t = 1024
    )]
    pub min_body_rate_bytes_per_sec: u64,

    /// Slowest a read page may leave the gateway, in bytes per second acknowledged by the
    /// client, after a grace of --idle-timeout-ms (its n-th byte by idle timeout + n / rate
    /// from its first byte): a connection whose page falls behind is closed (reset) and the
    /// page's share of the read budget released. 0: no minimum (only --idle-timeout-ms). The
    /// default, 1 KiB/s, is that of request bodies: a fifth of a poor GPRS link.
    #[arg(
        long,
        env = "CELERIANT_GATEWAY_MIN_PAGE_RATE_BYTES_PER_SEC",
        default_value_t = 1024
    )]
    pub min_page_rate_bytes_per_sec: u64,

    /// A connection on which no byte moves either way for this long is closed, whatever it was
    /// doing (a stalled upload, a client that stopped reading its answer). Must exceed
    /// --request-timeout-ms, so a slow store is answered 504 rather than cut off.
    #[arg(long, env = "CELERIANT_GATEWAY_IDLE_TIMEOUT_MS", default_value_t = 60_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub idle_timeout_ms: u64,

    /// Every request is answered within this long of its headers: a write past it gets 504
    /// (50400, `unknown`: it may still land), any other route 504 too.
    #[arg(long, env = "CELERIANT_GATEWAY_REQUEST_TIMEOUT_MS", default_value_t = 30_000,
          value_parser = clap::value_parser!(u64).range(1..))]
    pub request_timeout_ms: u64,

    /// Largest request body accepted, in bytes; larger is refused (413, 41300) before it is
    /// read. The default is the largest legal write request (protocol limits, compact JSON).
    #[arg(long, env = "CELERIANT_GATEWAY_MAX_BODY_BYTES", default_value_t = default_max_body_bytes(),
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=u64::from(u32::MAX)))]
    pub max_body_bytes: usize,

    /// Most bytes of write bodies held at once (each write reserves its Content-Length, or
    /// --max-body-bytes when it has none, until the store answered); past it 429 (42900).
    #[arg(long, env = "CELERIANT_GATEWAY_WRITE_BUFFER_BYTES", default_value_t = 64 << 20)]
    pub write_buffer_bytes: usize,

    /// Most bytes of write bodies one client address may hold at once (per address bucket; at
    /// least --max-body-bytes); past it 429 (42910). Default: an eighth of
    /// --write-buffer-bytes. 0: no per-address share (behind a reverse proxy, where every
    /// request has the proxy's address). Each session client id holds at most an eighth too.
    #[arg(long, env = "CELERIANT_GATEWAY_WRITE_BUFFER_BYTES_PER_IP")]
    pub write_buffer_bytes_per_ip: Option<usize>,

    /// Most writes handled at once; more are answered 429 (42900) before their body is read.
    #[arg(long, env = "CELERIANT_GATEWAY_MAX_INFLIGHT", default_value_t = 1024)]
    pub max_inflight: usize,

    /// Byte budget of one read response: a page ends before the batch that would take it over
    /// (a single batch larger than this is served alone).
    #[arg(long, env = "CELERIANT_GATEWAY_READ_PAGE_BYTES", default_value_t = 2 << 20,
          value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1024..=u64::from(u32::MAX)))]
    pub read_page_bytes: usize,

    /// Most bytes of read responses held at once (until sent); past it 429 (42900). The last
    /// quarter is kept for light addresses: a page that would leave less free is given only to
    /// an address then holding at most one page (--read-page-bytes); 429 (42900) for the others.
    #[arg(long, env = "CELERIANT_GATEWAY_READ_BUFFER_BYTES", default_value_t = 64 << 20)]
    pub read_buffer_bytes: usize,

    /// Most bytes of read responses one client address may hold unsent at once (per
    /// address bucket; at least the largest page); past it 429 (42910). Default: an eighth of
    /// --read-buffer-bytes. 0: no per-address share (behind a reverse proxy). Each session
    /// client id holds at most an eighth too.
    #[arg(long, env = "CELERIANT_GATEWAY_READ_BUFFER_BYTES_PER_IP")]
    pub read_buffer_bytes_per_ip: Option<usize>,

    /// Writes per second one client id may make, and reads per second, each (session client
    /// id; 0: no limit); past it 429 (42910) with the wait in Retry-After.
    #[arg(
        long,
        env = "CELERIANT_GATEWAY_RATE_PER_CLIENT",
        default_value_t = 1_000
    )]
    pub rate_per_client: u32,

    /// Writes (and reads) one client id may make in a burst before --rate-per-client applies.
    #[arg(
        long,
        env = "CELERIANT_GATEWAY_BURST_PER_CLIENT",
        default_value_t = 2_000
    )]
    pub burst_per_client: u32,

    /// Writes one client id may have in progress at once, and reads, each (0: no limit).
    #[arg(
        long,
        env = "CELERIANT_GATEWAY_CONCURRENCY_PER_CLIENT",
        default_value_t = 32
    )]
    pub concurrency_per_client: u32,

    /// Writes per second one client address may make, and reads per second, each (per address
    /// bucket; 0: no limit); past it 429 (42910).
    #[arg(long, env = "CELERIANT_GATEWAY_RATE_PER_IP", default_value_t = 20_000)]
    pub rate_per_ip: u32,

    /// Writes (and reads) one address may make in a burst before --rate-per-ip applies.
    #[arg(long, env = "CELERIANT_GATEWAY_BURST_PER_IP", default_value_t = 20_000)]
    pub burst_per_ip: u32,

    /// Writes one address may have in progress at once, and reads, each (0: no limit).
    #[arg(
        long,
        env = "CELERIANT_GATEWAY_CONCURRENCY_PER_IP",
        default_value_t = 256
    )]
    pub concurrency_per_ip: u32,

    /// `GET /healthz` and static files one client address may ask for per second, after a
    /// burst of --static-burst-per-ip (per address bucket); past it 429 (42911) with the wait
    /// in `Retry-After`. 0: no limit.
    #[arg(
        long,
        env = "CELERIANT_GATEWAY_STATIC_RATE_PER_IP",
        default_value_t = 50
    )]
    pub static_rate_per_ip: u32,

    /// `GET /healthz` and static files one client address may ask for in a burst.
    #[arg(
        long,
        env = "CELERIANT_GATEWAY_STATIC_BURST_PER_IP",
        default_value_t = 200
    )]
    pub static_burst_per_ip: u32,

    /// Requests with a wrong method (405) and requests for a `Host` the gateway does not
    /// answer to (421 / 400) one client address may make per second, together, after a burst
    /// of --refusal-burst-per-ip (per address bucket); past it 429 (42911) with the wait in
    /// `Retry-After`, and the connection closed. 0: no limit. CORS preflights have their own
    /// budget (--preflight-rate-per-ip).
    #[arg(
        long,
        env = "CELERIANT_GATEWAY_REFUSAL_RATE_PER_IP",
        default_value_t = 100
    )]
    pub refusal_rate_per_ip: u32,

    /// 405s and `Host` refusals one client address may make in a burst.
    #[arg(
        long,
        env = "CELERIANT_GATEWAY_REFUSAL_BURST_PER_IP",
        default_value_t = 1_000
    )]
    pub refusal_burst_per_ip: u32,

    /// CORS preflights (`OPTIONS`) one client address may make per second after a burst of
    /// --preflight-burst-per-ip (per address bucket); past it 429 (42911) with the wait in
    /// `Retry-After`, and the connection closed. Apart from --refusal-rate-per-ip, so a flood
    /// of wrong methods or foreign `Host`s does not refuse the same address's app its
    /// preflights. 0: no limit.
    #[arg(
        long,
        env = "CELERIANT_GATEWAY_PREFLIGHT_RATE_PER_IP",
        default_value_t = 100
    )]
    pub preflight_rate_per_ip: u32,

    /// CORS preflights one client address may make in a burst (a cross-origin app's first
    /// sync preflights each aggregate's URL once).
    #[arg(
        long,
        env = "CELERIANT_GATEWAY_PREFLIGHT_BURST_PER_IP",
        default_value_t = 1_000
    )]
    pub preflight_burst_per_ip: u32,

    /// Bits of a client's IPv4 address that make its bucket, the key of every per-address
    /// limit (32: each address on its own; carrier-grade NAT puts many subscribers behind one
    /// /24, so coarser buckets make them share).
    #[arg(long, env = "CELERIANT_GATEWAY_IPV4_BUCKET_PREFIX", default_value_t = 32,
          value_parser = clap::value_parser!(u8).range(8..=32))]
    pub ipv4_bucket_prefix: u8,

    /// Bits of a client's IPv6 address that make its bucket (56: a subscriber's usual
    /// delegation; per /64 one host had thousands of buckets of its own).
    #[arg(long, env = "CELERIANT_GATEWAY_IPV6_BUCKET_PREFIX", default_value_t = 56,
          value_parser = clap::value_parser!(u8).range(40..=128))]
    pub ipv6_bucket_prefix: u8,
}

impl LimitConfig {
    /// Refuses limits that contradict each other, saying which flag to change.
    pub fn check(&self) -> Result<(), String> {
        if self.idle_timeout_ms <= self.request_timeout_ms {
            return Err(format!(
                "--idle-timeout-ms ({}) must exceed --request-timeout-ms ({}): a request waiting \
                 for the store would be cut off instead of answered",
                self.idle_timeout_ms, self.request_timeout_ms
            ));
        }
        if self.write_buffer_bytes < self.max_body_bytes {
            return Err(format!(
                "--write-buffer-bytes ({}) is below --max-body-bytes ({}): a body of the \
                 largest size could never be admitted",
                self.write_buffer_bytes, self.max_body_bytes
            ));
        }
        if self.read_buffer_bytes < self.read_page_bytes.max(self.max_body_bytes) {
            return Err(format!(
                "--read-buffer-bytes ({}) is below --read-page-bytes ({}) or --max-body-bytes \
                 ({}): a full page, or one batch of the largest write, could never be served",
                self.read_buffer_bytes, self.read_page_bytes, self.max_body_bytes
            ));
        }
        Ok(())
    }
}
