//! What every handler shares: the backend, the configuration, the fault injector, the admission
//! limit and the session machinery.

use std::sync::Arc;

use celeriant_sync_protocol::Limits;
use tokio::sync::Semaphore;

use crate::auth::Auth;
use crate::backend::Backend;
use crate::config::Config;
use crate::faults::FaultInjector;

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
    /// Admission control for writes (`--max-inflight`).
    pub admission: Arc<Semaphore>,
    /// Sessions: keys, app tokens, replay cache, rate limit.
    pub auth: Arc<Auth>,
}

impl AppState {
    /// State for `config` over `backend`, with the fault injector when `config.faults` is set,
    /// after [`Config::check`]; loads (or generates) the session secret.
    pub fn new(config: Config, backend: Arc<dyn Backend>) -> Result<Self, String> {
        config.check()?;
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
        Ok(AppState {
            backend,
            admission: Arc::new(Semaphore::new(config.max_inflight)),
            auth: Arc::new(Auth::from_config(&config)?),
            config: Arc::new(config),
            limits: Limits::default(),
            faults,
        })
    }
}
