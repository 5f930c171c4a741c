//! The gateway's configuration: command-line flags, each with an environment-variable twin.
//!
//! `celeriant-gateway --help` lists them. Every flag can also be set through the variable named
//! in its help (`CELERIANT_GATEWAY_*`), which is how container deployments usually configure it.
//! [`Config::check`] refuses the combinations that would expose a test-only switch or an open
//! CORS policy beyond loopback, and limits that contradict each other. The bounds on what a
//! client can make the gateway hold are in [`LimitConfig`] (`limits.rs`), the embedded store's
//! disk settings in [`StoreConfig`] (`store.rs`), the change stream's in [`WatchConfig`]
//! (`watch.rs`), the trusted proxy and metrics in [`OpsConfig`] (`ops.rs`).

use std::net::{IpAddr, SocketAddr};
use std::path::PathBuf;

use celeriant_sync_protocol::faults::{DEFAULT_DELAY_MS, DEFAULT_RETRY_AFTER_MS, FaultRates};
use clap::{Parser, Subcommand, ValueEnum};
use uuid::Uuid;

mod limits;
mod ops;
mod store;
mod watch;

pub use limits::LimitConfig;
pub use ops::OpsConfig;
pub use store::StoreConfig;
pub use watch::WatchConfig;

/// Which store the gateway writes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendKind {
    /// A durable store inside the gateway with Celeriant's write semantics (the default).
    Embedded,
    /// A real Celeriant cluster through `celeriant_client_tokio`.
    Celeriant,
}

/// Whether writes and reads need a session proving the device's client id.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AuthMode {
    /// Every write and read carries a session token from `POST /v1/session` (the default).
    Device,
    /// No session is needed and `clientId` is taken at face value: local experiments only,
    /// refused unless the gateway listens on loopback.
    None,
}

/// Whether requests under a session must prove possession of the device key.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum ProofMode {
    /// Every write, read, watch and members request carries a `DPoP` proof (the default).
    Required,
    /// The session token alone is enough (a stolen token works until it expires).
    Off,
}

/// How the app's own tokens (at `POST /v1/session`) are signed.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum AppTokenAlg {
    /// HMAC-SHA256 with a shared secret (the key file holds the secret).
    Hs256,
    /// RSASSA-PKCS1-v1_5 / SHA-256 (the key file holds the PEM public key).
    Rs256,
    /// ECDSA P-256 / SHA-256 (the key file holds the PEM public key).
    Es256,
}

/// The default organisation id when none is configured.
pub const DEFAULT_ORG_ID: Uuid = Uuid::from_u128(1);

/// `celeriant-gateway`: HTTP+JSON protocol v1 in front of Celeriant or the embedded store.
#[derive(Debug, Clone, Parser)]
#[command(name = "celeriant-gateway", version, about, long_about = None)]
pub struct Config {
    /// Address to listen on (port 0 picks a free port; see --port-file).
    #[arg(
        long,
        env = "CELERIANT_GATEWAY_LISTEN",
        default_value = "127.0.0.1:8080"
    )]
    pub listen: SocketAddr,

    /// Where the embedded store keeps its database (also the directory `verify` checks).
    #[arg(
        long,
        global = true,
        env = "CELERIANT_GATEWAY_DATA_DIR",
        default_value = ".data/gateway"
    )]
    pub data_dir: PathBuf,

    /// Which store to write to.
    #[arg(
        long,
        env = "CELERIANT_GATEWAY_BACKEND",
        value_enum,
        default_value = "embedded"
    )]
    pub backend: BackendKind,

    /// Celeriant seed address(es), HOST:PORT (repeat, or comma-separate in the variable). Each
    /// must name one node, not a load balancer: one that resolves to several IP addresses
    /// turns the change streams' `tips` off (a warning at start-up).
    #[arg(
        long = "celeriant-addr",
        env = "CELERIANT_GATEWAY_CELERIANT_ADDR",
        value_delimiter = ','
    )]
    pub celeriant_addrs: Vec<String>,

    /// API key the gateway authenticates to Celeriant with.
    #[arg(long, env = "CELERIANT_GATEWAY_API_KEY", hide_env_values = true)]
    pub celeriant_api_key: Option<String>,

    /// Seconds one upstream Celeriant watch is kept before it is renewed (closed, reopened,
    /// every change stream sent `resync`). A Celeriant watch sends no keepalive, so a silently
    /// dead one (a hung node, a half-open connection) is noticed at the latest after this long.
    #[arg(long, env = "CELERIANT_GATEWAY_CELERIANT_WATCH_RENEW_SECS", default_value_t = 300,
          value_parser = clap::value_parser!(u64).range(1..=86_400))]
    pub celeriant_watch_renew_secs: u64,

    /// Milliseconds one replica may decide a members check (read, watch, append by a member)
    /// from its cached copy of an aggregate's access record (Celeriant backend): how long a
    /// member revoked through another replica keeps its access here. Owners never change and
    /// are cached without expiry. 0: every members check reads the record.
    #[arg(long, env = "CELERIANT_GATEWAY_MEMBERS_CACHE_MS", default_value_t = 5_000,
          value_parser = clap::value_parser!(u64).range(0..=600_000))]
    pub members_cache_ms: u64,

    /// Organisation every write and read is scoped to (never taken from request bodies).
    #[arg(long, env = "CELERIANT_GATEWAY_ORG_ID", default_value_t = DEFAULT_ORG_ID)]
    pub org_id: Uuid,

    /// Origin allowed to call the API from a browser (repeatable). Without any, the gateway
    /// allows http(s) origins on localhost, 127.0.0.1 and `[::1]`; a gateway listening beyond
    /// loopback refuses to start without this list.
    #[arg(
        long = "allow-origin",
        env = "CELERIANT_GATEWAY_ALLOW_ORIGIN",
        value_delimiter = ','
    )]
    pub allow_origins: Vec<String>,

    /// Host name clients use to reach the gateway (repeatable), besides IP addresses,
    /// `localhost` and the hosts of --allow-origin; any other `Host` header is refused (421).
    #[arg(
        long = "public-host",
        env = "CELERIANT_GATEWAY_PUBLIC_HOST",
        value_delimiter = ','
    )]
    pub public_hosts: Vec<String>,

    /// Whether writes and reads need a session (`none`: local experiments, loopback only).
    #[arg(
        long,
        env = "CELERIANT_GATEWAY_AUTH",
        value_enum,
        default_value = "device"
    )]
    pub auth: AuthMode,

    /// File holding the secret session tokens are signed with (at least 32 bytes). Without it
    /// (or --session-secret), one is generated into the data directory on first start.
    #[arg(long, env = "CELERIANT_GATEWAY_SESSION_SECRET_FILE")]
    pub session_secret_file: Option<PathBuf>,

    /// The session-token secret itself (at least 32 bytes); prefer the variable or a file.
    #[arg(long, env = "CELERIANT_GATEWAY_SESSION_SECRET", hide_env_values = true)]
    pub session_secret: Option<String>,

    /// How long a session token is accepted, in seconds.
    #[arg(
        long,
        env = "CELERIANT_GATEWAY_SESSION_TTL_SECS",
        default_value_t = 3600,
        value_parser = clap::value_parser!(u64).range(1..=604_800)
    )]
    pub session_ttl_secs: u64,

    /// Session creations allowed per client address per minute (0: no limit).
    #[arg(
        long,
        env = "CELERIANT_GATEWAY_SESSION_RATE_PER_MINUTE",
        default_value_t = 60
    )]
    pub session_rate_per_minute: u32,

    /// Session creations one client address may make at once before the rate applies.
    #[arg(long, env = "CELERIANT_GATEWAY_SESSION_BURST", default_value_t = 30)]
    pub session_burst: u32,

    /// Most (public key, nonce) pairs remembered to refuse replays (in memory, per replica).
    #[arg(
        long,
        env = "CELERIANT_GATEWAY_SESSION_REPLAY_CAPACITY",
        default_value_t = 100_000
    )]
    pub session_replay_capacity: usize,

    /// Whether every write, read, watch and members request under a session must carry a
    /// `DPoP` proof signed by the device's key (`required`, the default) or not (`off`: a
    /// stolen session token is then enough to act as the device until it expires).
    #[arg(
        long,
        env = "CELERIANT_GATEWAY_PROOFS",
        value_enum,
        default_value = "required"
    )]
    pub proofs: ProofMode,

    /// Most request proofs (`jti`) one device may have remembered at once (in memory, per
    /// replica; each is kept 36 s). Past it, that device's requests are refused (429).
    /// 1024 is about 28 requests a second sustained, or a burst of 1024 (the benchmark's 500
    /// sequential proofed reads from one device fit with room; the chaos e2e, 3 tabs draining,
    /// reading and watching 3000 events, passed with this at 128 and never hit it).
    #[arg(
        long,
        env = "CELERIANT_GATEWAY_PROOF_REPLAY_PER_DEVICE",
        default_value_t = 1_024
    )]
    pub proof_replay_per_device: usize,

    /// Request proofs (`jti`) remembered in all (in memory, per replica) past which only
    /// devices within their fair share (this ÷ devices with live entries) are admitted, up to
    /// twice this; the others are refused (429) until their oldest leave.
    #[arg(
        long,
        env = "CELERIANT_GATEWAY_PROOF_REPLAY_CAPACITY",
        default_value_t = 262_144
    )]
    pub proof_replay_capacity: usize,

    /// With app tokens: most devices one subject (user) may hold with live sessions, per
    /// replica (0: no cap).
    #[arg(
        long,
        env = "CELERIANT_GATEWAY_MAX_DEVICES_PER_SUBJECT",
        default_value_t = 32
    )]
    pub max_devices_per_subject: usize,

    /// With app tokens: most live sessions one subject (user) may hold, per replica (0: no
    /// cap).
    #[arg(
        long,
        env = "CELERIANT_GATEWAY_MAX_SESSIONS_PER_SUBJECT",
        default_value_t = 256
    )]
    pub max_sessions_per_subject: usize,

    /// Require the app's own token at POST /v1/session, signed with this algorithm.
    #[arg(long, env = "CELERIANT_GATEWAY_APP_TOKEN_ALG", value_enum)]
    pub app_token_alg: Option<AppTokenAlg>,

    /// The app-token key: the HS256 secret, or the RS256/ES256 public key in PEM.
    #[arg(long, env = "CELERIANT_GATEWAY_APP_TOKEN_KEY_FILE")]
    pub app_token_key_file: Option<PathBuf>,

    /// Required `iss` of app tokens (required, non-empty, with --app-token-alg).
    #[arg(long, env = "CELERIANT_GATEWAY_APP_TOKEN_ISSUER")]
    pub app_token_issuer: Option<String>,

    /// Required `aud` of app tokens (required, non-empty, with --app-token-alg).
    #[arg(long, env = "CELERIANT_GATEWAY_APP_TOKEN_AUDIENCE")]
    pub app_token_audience: Option<String>,

    /// The access policy file (`.toml` or `.json`): a preset per aggregate type. Without it,
    /// every type is `owner` (only the principal that created an aggregate uses it).
    #[arg(long, env = "CELERIANT_GATEWAY_POLICY")]
    pub policy: Option<PathBuf>,

    /// File holding the operator credential (at least 32 characters), sent as
    /// `Authorization: Operator <secret>`: reads every aggregate, writes none. No default.
    #[arg(long, env = "CELERIANT_GATEWAY_OPERATOR_TOKEN_FILE")]
    pub operator_token_file: Option<PathBuf>,

    /// How often each gateway reloads the revocations from its store, in seconds: a revocation
    /// made on another replica is in force here within this time (with the Celeriant backend
    /// usually sooner: the upstream watch notifies the change).
    #[arg(
        long,
        env = "CELERIANT_GATEWAY_REVOCATION_REFRESH_SECS",
        default_value_t = 5,
        value_parser = clap::value_parser!(u64).range(1..=3600)
    )]
    pub revocation_refresh_secs: u64,

    /// Most revocations kept (standing, and lifted ones until their old tokens expire); a
    /// revocation past it is refused (40022), none is ever evicted. At most 12000 with the
    /// Celeriant backend (the whole list is one write there).
    #[arg(
        long,
        env = "CELERIANT_GATEWAY_MAX_REVOCATIONS",
        default_value_t = 10_000,
        value_parser = clap::value_parser!(u64).range(1..=1_000_000)
    )]
    pub max_revocations: u64,

    /// Directory served at `/` (the demo page).
    #[arg(long, env = "CELERIANT_GATEWAY_WWW", default_value = "www")]
    pub www: PathBuf,

    /// Directory served at `/pkg` (the built npm package).
    #[arg(long, env = "CELERIANT_GATEWAY_PKG", default_value = "pkg")]
    pub pkg: PathBuf,

    /// Embedded store: keep a commit group open this long for more writes (0: commit at once).
    #[arg(long, env = "CELERIANT_GATEWAY_COMMIT_LINGER_MS", default_value_t = 0)]
    pub commit_linger_ms: u64,

    /// Write the bound address (HOST:PORT) to this file once listening.
    #[arg(long, env = "CELERIANT_GATEWAY_PORT_FILE")]
    pub port_file: Option<PathBuf>,

    /// Enable fault injection and the /v1/faults control endpoint (tests and demos only;
    /// loopback only).
    #[arg(long, env = "CELERIANT_GATEWAY_FAULTS")]
    pub faults: bool,

    /// File holding the secret every /v1/faults request must send in the
    /// `celeriant-faults-secret` header (at least 32 printable bytes). Without it, one is
    /// generated at start.
    #[arg(long, env = "CELERIANT_GATEWAY_FAULTS_SECRET_FILE")]
    pub faults_secret_file: Option<PathBuf>,

    /// Write the generated faults secret to this file (mode 0600) before the port file;
    /// without it, the generated secret is printed once on standard output.
    #[arg(long, env = "CELERIANT_GATEWAY_FAULTS_SECRET_OUT")]
    pub faults_secret_out: Option<PathBuf>,

    /// Seed of the fault injector's random generator (default: from the clock; printed).
    #[arg(long, env = "CELERIANT_GATEWAY_FAULT_SEED")]
    pub fault_seed: Option<u64>,

    /// Probability of handing a write to the store and awaiting its answer, then breaking the
    /// connection instead of answering (the client cannot know whether it landed).
    #[arg(
        long,
        env = "CELERIANT_GATEWAY_FAULT_DROP_AFTER_COMMIT",
        default_value_t = 0.0
    )]
    pub fault_drop_after_commit: f64,

    /// Probability of holding a write for --fault-delay-ms before handling it.
    #[arg(long, env = "CELERIANT_GATEWAY_FAULT_TIMEOUT", default_value_t = 0.0)]
    pub fault_timeout: f64,

    /// Probability of answering 2013 without applying the write.
    #[arg(long, env = "CELERIANT_GATEWAY_FAULT_INFLIGHT", default_value_t = 0.0)]
    pub fault_inflight: f64,

    /// Probability of answering 503 with Retry-After without applying the write.
    #[arg(long, env = "CELERIANT_GATEWAY_FAULT_BUSY", default_value_t = 0.0)]
    pub fault_busy: f64,

    /// Probability of breaking the connection before applying the write.
    #[arg(long, env = "CELERIANT_GATEWAY_FAULT_RESET", default_value_t = 0.0)]
    pub fault_reset: f64,

    /// Delay of a timeout fault, in milliseconds (0: the default, 5000).
    #[arg(
        long,
        env = "CELERIANT_GATEWAY_FAULT_DELAY_MS",
        default_value_t = DEFAULT_DELAY_MS
    )]
    pub fault_delay_ms: u64,

    /// Retry-After of a busy fault, in milliseconds (0: the default, 200).
    #[arg(
        long,
        env = "CELERIANT_GATEWAY_FAULT_RETRY_AFTER_MS",
        default_value_t = DEFAULT_RETRY_AFTER_MS
    )]
    pub fault_retry_after_ms: u64,

    /// Refuse (422, code 2022) every write carrying an event of this type (0: off).
    #[arg(long, env = "CELERIANT_GATEWAY_FAULT_REJECT_TYPE", default_value_t = 0)]
    pub fault_reject_type: u64,

    /// Connections, time, sizes and fair share.
    #[command(flatten)]
    pub limits: LimitConfig,

    /// The embedded store's disk and quota.
    #[command(flatten)]
    pub store: StoreConfig,

    /// The change stream's heartbeat and limits.
    #[command(flatten)]
    pub watch: WatchConfig,

    /// Running in production: the trusted proxy and metrics.
    #[command(flatten)]
    pub ops: OpsConfig,

    /// What to do (default: serve).
    #[command(subcommand)]
    pub command: Option<Command>,
}

/// The gateway's subcommands; without one it serves.
#[derive(Debug, Clone, PartialEq, Eq, Subcommand)]
pub enum Command {
    /// Check a whole embedded store offline (the gateway must not be running on it): every
    /// batch against its checksum, every version and sequence record, every client's usage.
    /// Prints a report; exits 0 when the store is sound, 1 when something is damaged, 2 when
    /// it cannot be checked.
    Verify,
    /// Offline, on an embedded store (the gateway stopped): set a device's highest-sequence
    /// record on one aggregate back to the end of the device's own contiguous run of stored
    /// sequences — the repair for a device whose record a stolen token pushed up (every later
    /// write answered 2002 and dropped). Prints what it did; exit 0 done, 2 refused.
    RepairSequence {
        /// The aggregate type (UUID).
        #[arg(long = "type")]
        type_id: Uuid,
        /// The aggregate id (UUID).
        #[arg(long)]
        id: Uuid,
        /// The device's client id (UUID).
        #[arg(long)]
        client: Uuid,
        /// Show what would change without writing.
        #[arg(long)]
        dry_run: bool,
    },
}

impl Config {
    /// The initial fault rates from the flags.
    pub fn fault_rates(&self) -> FaultRates {
        FaultRates {
            drop_after_commit: self.fault_drop_after_commit,
            timeout: self.fault_timeout,
            inflight: self.fault_inflight,
            busy: self.fault_busy,
            reset_before_commit: self.fault_reset,
            delay_ms: self.fault_delay_ms,
            retry_after_ms: self.fault_retry_after_ms,
            reject_type: self.fault_reject_type,
        }
    }

    /// A configuration with every default, as if started with no flags (for tests).
    pub fn defaults() -> Self {
        Config::parse_from(["celeriant-gateway"])
    }

    /// Whether the gateway listens on loopback only (127.0.0.0/8 or `::1`).
    pub fn listens_on_loopback(&self) -> bool {
        is_loopback(self.listen.ip())
    }

    /// Refuses the combinations that are only safe on loopback (also when a `--public-host`
    /// says the gateway is reached from beyond it through a proxy), and incomplete app-token
    /// settings, with a message saying what to change.
    pub fn check(&self) -> Result<(), String> {
        if !self.listens_on_loopback() {
            let listen = self.listen;
            if self.auth == AuthMode::None {
                return Err(format!(
                    "--auth none is refused when listening beyond loopback ({listen}): anyone \
                     could write under any client id; listen on 127.0.0.1 or drop --auth none"
                ));
            }
            if self.faults {
                return Err(format!(
                    "--faults is refused when listening beyond loopback ({listen}): fault \
                     injection is for tests and demos; listen on 127.0.0.1 or drop --faults"
                ));
            }
            if self.allow_origins.is_empty() {
                return Err(format!(
                    "listening beyond loopback ({listen}) needs an explicit --allow-origin list \
                     (CELERIANT_GATEWAY_ALLOW_ORIGIN): the origins of the apps that may call it"
                ));
            }
        }
        // A public host name means the gateway is reached through something (a reverse proxy,
        // a tunnel) that connects from loopback: the listen address proves nothing then.
        if !self.public_hosts.is_empty() {
            let hosts = self.public_hosts.join(",");
            if self.auth == AuthMode::None {
                return Err(format!(
                    "--auth none is refused with --public-host ({hosts}): the gateway is reached \
                    beyond this machine (through a proxy, from loopback), and anyone could write \
                    under any client id; drop --auth none or --public-host"
                ));
            }
            if self.faults {
                return Err(format!(
                    "--faults is refused with --public-host ({hosts}): the gateway is reached \
                    beyond this machine (through a proxy, from loopback), and fault injection \
                    is for tests and demos; drop --faults or --public-host"
                ));
            }
        }
        self.limits.check()?;
        match (self.app_token_alg, &self.app_token_key_file) {
            (Some(_), None) => Err("--app-token-alg needs --app-token-key-file".into()),
            (None, Some(_)) => Err("--app-token-key-file needs --app-token-alg".into()),
            (Some(_), Some(_))
                if self.app_token_issuer.as_deref().is_none_or(str::is_empty)
                    || self.app_token_audience.as_deref().is_none_or(str::is_empty) =>
            {
                Err(
                    "--app-token-alg needs --app-token-issuer and --app-token-audience: \
                     without them an app token minted by another issuer, or for another \
                     service, would open sessions here"
                        .into(),
                )
            }
            _ if self.app_token_alg.is_none()
                && (self.app_token_issuer.is_some() || self.app_token_audience.is_some()) =>
            {
                Err("--app-token-issuer and --app-token-audience need --app-token-alg".into())
            }
            _ if !self.faults
                && (self.faults_secret_file.is_some() || self.faults_secret_out.is_some()) =>
            {
                Err("--faults-secret-file and --faults-secret-out need --faults".into())
            }
            _ if self.faults_secret_file.is_some() && self.faults_secret_out.is_some() => Err(
                "give --faults-secret-file or --faults-secret-out, not both (a secret read from a file is not written out)".into(),
            ),
            _ if self.session_secret.is_some() && self.session_secret_file.is_some() => {
                Err("give --session-secret or --session-secret-file, not both".into())
            }
            _ => Ok(()),
        }
    }
}

/// Whether `ip` is a loopback address (an IPv4-mapped IPv6 loopback counts too).
pub fn is_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(v4) => v4.is_loopback(),
        IpAddr::V6(v6) => {
            v6.is_loopback() || v6.to_ipv4_mapped().is_some_and(|v4| v4.is_loopback())
        }
    }
}

#[cfg(test)]
mod tests;
