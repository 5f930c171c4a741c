//! The gateway's configuration: command-line flags, each with an environment-variable twin.
//!
//! `celeriant-gateway --help` lists them. Every flag can also be set through the variable named
//! in its help (`CELERIANT_GATEWAY_*`), which is how container deployments usually configure it.

use std::net::SocketAddr;
use std::path::PathBuf;

use celeriant_sync_protocol::faults::FaultRates;
use clap::{Parser, ValueEnum};
use uuid::Uuid;

/// Which store the gateway writes to.
#[derive(Debug, Clone, Copy, PartialEq, Eq, ValueEnum)]
pub enum BackendKind {
    /// A durable store inside the gateway with Celeriant's write semantics (the default).
    Embedded,
    /// A real Celeriant cluster through `celeriant_client_tokio`.
    Celeriant,
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

    /// Where the embedded store keeps its database.
    #[arg(
        long,
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

    /// Celeriant seed address(es), HOST:PORT (repeat, or comma-separate in the variable).
    #[arg(
        long = "celeriant-addr",
        env = "CELERIANT_GATEWAY_CELERIANT_ADDR",
        value_delimiter = ','
    )]
    pub celeriant_addrs: Vec<String>,

    /// API key the gateway authenticates to Celeriant with.
    #[arg(long, env = "CELERIANT_GATEWAY_API_KEY", hide_env_values = true)]
    pub celeriant_api_key: Option<String>,

    /// Organisation every write and read is scoped to (never taken from request bodies).
    #[arg(long, env = "CELERIANT_GATEWAY_ORG_ID", default_value_t = DEFAULT_ORG_ID)]
    pub org_id: Uuid,

    /// Origin allowed to call the API from a browser (repeatable). Without any, the gateway
    /// allows its own origin and http(s) origins on localhost, 127.0.0.1 and [::1].
    #[arg(
        long = "allow-origin",
        env = "CELERIANT_GATEWAY_ALLOW_ORIGIN",
        value_delimiter = ','
    )]
    pub allow_origins: Vec<String>,

    /// Directory served at `/` (the demo page).
    #[arg(long, env = "CELERIANT_GATEWAY_WWW", default_value = "www")]
    pub www: PathBuf,

    /// Directory served at `/pkg` (the built npm package).
    #[arg(long, env = "CELERIANT_GATEWAY_PKG", default_value = "pkg")]
    pub pkg: PathBuf,

    /// Most time one request may take before the gateway answers 504 (`unknown`).
    #[arg(
        long,
        env = "CELERIANT_GATEWAY_REQUEST_TIMEOUT_MS",
        default_value_t = 30_000
    )]
    pub request_timeout_ms: u64,

    /// Largest request body accepted, in bytes (larger: 413).
    #[arg(long, env = "CELERIANT_GATEWAY_MAX_BODY_BYTES", default_value_t = 8 << 20)]
    pub max_body_bytes: usize,

    /// Most writes handled at once; more are answered 429 with Retry-After.
    #[arg(long, env = "CELERIANT_GATEWAY_MAX_INFLIGHT", default_value_t = 1024)]
    pub max_inflight: usize,

    /// Embedded store: keep a commit group open this long for more writes (0: commit at once).
    #[arg(long, env = "CELERIANT_GATEWAY_COMMIT_LINGER_MS", default_value_t = 0)]
    pub commit_linger_ms: u64,

    /// Write the bound address (HOST:PORT) to this file once listening.
    #[arg(long, env = "CELERIANT_GATEWAY_PORT_FILE")]
    pub port_file: Option<PathBuf>,

    /// Enable fault injection and the /v1/faults control endpoint (tests and demos only).
    #[arg(long, env = "CELERIANT_GATEWAY_FAULTS")]
    pub faults: bool,

    /// Seed of the fault injector's random generator (default: from the clock; printed).
    #[arg(long, env = "CELERIANT_GATEWAY_FAULT_SEED")]
    pub fault_seed: Option<u64>,

    /// Probability of committing a write and then breaking the connection.
    #[arg(long, default_value_t = 0.0)]
    pub fault_drop_after_commit: f64,

    /// Probability of holding a write for --fault-delay-ms before handling it.
    #[arg(long, default_value_t = 0.0)]
    pub fault_timeout: f64,

    /// Probability of answering 2013 without applying the write.
    #[arg(long, default_value_t = 0.0)]
    pub fault_inflight: f64,

    /// Probability of answering 503 with Retry-After without applying the write.
    #[arg(long, default_value_t = 0.0)]
    pub fault_busy: f64,

    /// Probability of breaking the connection before applying the write.
    #[arg(long, default_value_t = 0.0)]
    pub fault_reset: f64,

    /// Delay of a timeout fault, in milliseconds.
    #[arg(long, default_value_t = 5_000)]
    pub fault_delay_ms: u64,

    /// Retry-After of a busy fault, in milliseconds.
    #[arg(long, default_value_t = 200)]
    pub fault_retry_after_ms: u64,
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
        }
    }

    /// A configuration with every default, as if started with no flags (for tests).
    pub fn defaults() -> Self {
        Config::parse_from(["celeriant-gateway"])
    }
}
