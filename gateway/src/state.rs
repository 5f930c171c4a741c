//! What every handler shares: the backend, the configuration, the fault injector, admission
//! (writes in progress, memory budgets, fair share), the session machinery and the change
//! streams' hub.

use std::sync::Arc;
use std::time::Duration;

use crate::limits::slots::Slots;
use celeriant_sync_protocol::Limits;

use crate::access::Policy;
use crate::auth::Auth;
use crate::auth::faults_secret::FaultsSecret;
use crate::backend::Backend;
use crate::config::Config;
use crate::faults::FaultInjector;
use crate::limits::budget::Budget;
use crate::limits::cheap::CheapRate;
use crate::limits::fair::FairShare;
use crate::limits::share_bytes::ByteShare;
use crate::watch::Hub;

/// Shared state of the HTTP application (cheap to clone).
#[derive(Clone)]
pub struct AppState {
    /// Where writes go.
    pub backend: Arc<dyn Backend>,
    /// The gateway's configuration (`listen` is the bound address once serving).
    pub config: Arc<Config>,
    /// The protocol's request limits.
    pub limits: Limits,
    /// Present when fault injection is enabled.
    pub faults: Option<Arc<FaultInjector>>,
    /// The secret every `/v1/faults` request must carry; present with `faults`.
    pub faults_secret: Option<Arc<FaultsSecret>>,
    /// Admission control for writes (`--max-inflight`).
    pub admission: Arc<Slots>,
    /// Bytes of write bodies held at once (`--write-buffer-bytes`).
    pub write_bytes: Arc<Budget>,
    /// Each address's and client id's share of `write_bytes` (an eighth, at least one body).
    pub write_share: Arc<ByteShare>,
    /// Bytes of read responses held at once (`--read-buffer-bytes`).
    pub read_bytes: Arc<Budget>,
    /// Each address's and client id's share of `read_bytes`, held with it until sent.
    pub read_share: Arc<ByteShare>,
    /// Per-address and per-client rates and concurrency.
    pub fair: Arc<FairShare>,
    /// Each address's rate of 405s and `Host` refusals (`--refusal-rate-per-ip`; preflights have
    /// their own, `crate::limits::cheap::CheapRate::preflights`).
    pub refusals: Arc<CheapRate>,
    /// Sessions: keys, app tokens, replay cache, rate limit.
    pub auth: Arc<Auth>,
    /// The change streams and the fan-out of the backend's changes.
    pub watch: Arc<Hub>,
    /// The access policy (`--policy`; every type `owner` without it).
    pub policy: Arc<Policy>,
}

/// Refuses a policy that could not be enforced: any policy with `--auth none` (nobody is
/// proven, so nothing would be), and a policy that needs owners over a backend that records
/// none (both backends record owners today; the check guards a future one) — never silently
/// unenforced.
fn check_policy(config: &Config, policy: &Policy, backend: &dyn Backend) -> Result<(), String> {
    if config.auth == crate::config::AuthMode::None {
        if config.policy.is_some() {
            return Err(
                "--policy needs sessions: with --auth none nobody is proven and no \
                        policy could be enforced; drop one of them"
                    .into(),
            );
        }
        return Ok(());
    }
    if !backend.records_owners() && !policy.all_authenticated() {
        return Err(format!(
            "the {} backend does not record owners yet, so it can only run with a policy \
             where every type is `authenticated` (any proven principal may do everything): \
             give --policy with default = \"authenticated\" and no other rule, knowing that \
             this shares every aggregate",
            backend.name()
        ));
    }
    Ok(())
}

impl AppState {
    /// State for `config` over `backend`, with the fault injector when `config.faults` is set,
    /// after [`Config::check`]; loads (or generates) the session secret and, with faults, the
    /// faults secret.
    pub fn new(config: Config, backend: Arc<dyn Backend>) -> Result<Self, String> {
        config.check()?;
        let policy = match &config.policy {
            Some(path) => Policy::load(path)?,
            None => Policy::default(),
        };
        check_policy(&config, &policy, backend.as_ref())?;
        let faults = if config.faults {
            let seed = config.fault_seed.unwrap_or_else(|| {
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .map_or(0, |d| d.as_nanos() as u64)
            });
            Some(Arc::new(FaultInjector::new(seed, config.fault_rates())?))
        } else {
            None
        };
        let faults_secret = match config.faults {
            true => Some(Arc::new(FaultsSecret::load(&config)?)),
            false => None,
        };
        let auth = Auth::from_config(&config)?;
        let limits = &config.limits;
        // Last of what can refuse the configuration, before the tasks are spawned: the
        // prefixes are the process's from here on.
        crate::limits::ip::configure(crate::limits::ip::Prefixes {
            v4: limits.ipv4_bucket_prefix,
            v6: limits.ipv6_bucket_prefix,
        })?;
        let watch = Hub::new(config.watch.limits(), config.org_id);
        // The pump needs a runtime; a state built outside one (unit tests) has no fan-out.
        if let (Some(changes), Ok(runtime)) =
            (backend.changes(), tokio::runtime::Handle::try_current())
        {
            runtime.spawn(watch.clone().pump(changes));
        }
        if !backend.keeps_revocations() {
            if config.auth != crate::config::AuthMode::None {
                tracing::warn!(
                    backend = backend.name(),
                    "this backend keeps no revocations: /v1/revocations answers 404 and no \
                     session is revoked before it expires (rotate the session secret instead)"
                );
            }
            auth.revocations.replace(Vec::new());
        } else if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(crate::auth::revoke::refresh_loop(
                auth.revocations.clone(),
                backend.clone(),
                Duration::from_secs(config.revocation_refresh_secs),
            ));
        }
        // Without a runtime (unit tests) the list is never loaded and every session is
        // refused: revocations fail closed.
        Ok(AppState {
            watch,
            backend,
            admission: Slots::for_limits(limits),
            write_bytes: Arc::new(Budget::new("write bodies", limits.write_buffer_bytes)),
            write_share: Arc::new(ByteShare::new(
                "write-body",
                limits.write_buffer_bytes,
                limits.max_body_bytes,
                limits.write_buffer_bytes_per_ip,
            )),
            read_bytes: Arc::new(Budget::new("read responses", limits.read_buffer_bytes)),
            read_share: Arc::new(ByteShare::new(
                "read-response",
                limits.read_buffer_bytes,
                limits.read_page_bytes.max(limits.max_body_bytes),
                limits.read_buffer_bytes_per_ip,
            )),
            fair: Arc::new(FairShare::new(limits)),
            refusals: CheapRate::refusals(limits),
            auth: Arc::new(auth),
            config: Arc::new(config),
            policy: Arc::new(policy),
            limits: Limits::default(),
            faults,
            faults_secret,
        })
    }

    /// `--request-timeout-ms`.
    pub fn request_timeout(&self) -> Duration {
        Duration::from_millis(self.config.limits.request_timeout_ms)
    }

    /// `--body-read-timeout-ms`.
    pub fn body_read_timeout(&self) -> Duration {
        Duration::from_millis(self.config.limits.body_read_timeout_ms)
    }

    /// `--body-read-timeout-ms` and `--min-body-rate-bytes-per-sec`.
    pub fn body_pace(&self) -> crate::extract::Pace {
        crate::extract::Pace {
            timeout: self.body_read_timeout(),
            min_rate: self.config.limits.min_body_rate_bytes_per_sec,
        }
    }
}
