//! The gateway's configuration: command-line flags, each with an environment-variable twin.
//!
//! `celeriant-gateway --help` lists them. Every flag can also be set through the variable named
//! in its help (`CELERIANT_GATEWAY_*`), which is how container deployments usually configure it.

use std::net::SocketAddr;
use std::path::PathBuf;

use celeriant_sync_protocol::faults::{DEFAULT_DELAY_MS, DEFAULT_RETRY_AFTER_MS, FaultRates};
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
    /// allows its own origin and http(s) origins on localhost, 127.0.0.1 and `[::1]`.
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
}

#[cfg(test)]
mod tests {
    use super::*;
    use clap::CommandFactory;

    #[test]
    fn every_flag_has_an_environment_variable_twin() {
        let command = Config::command();
        let mut checked = 0;
        for arg in command.get_arguments() {
            let id = arg.get_id().as_str();
            if matches!(id, "help" | "version") {
                continue;
            }
            let long = arg.get_long().expect("every option is a long flag");
            let expected = format!(
                "CELERIANT_GATEWAY_{}",
                long.to_uppercase().replace('-', "_")
            );
            let env = arg
                .get_env()
                .unwrap_or_else(|| panic!("--{long} has no environment variable"));
            // One variable is named differently from its flag: the API key's.
            let allowed = match long {
                "celeriant-api-key" => "CELERIANT_GATEWAY_API_KEY".to_owned(),
                _ => expected,
            };
            assert_eq!(env.to_str(), Some(allowed.as_str()), "--{long}");
            checked += 1;
        }
        assert!(checked >= 23, "{checked}");
    }
}
