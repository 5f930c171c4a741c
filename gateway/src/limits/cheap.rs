//! A rate per address on the routes that need no session: `GET /healthz` and static files.
//!
//! They are cheap one at a time, but nothing else bounds them: a few thousand requests a
//! second from one address made every write several times slower. Each address bucket
//! ([`crate::limits::ip`]) gets `--static-rate-per-ip` of them per second after a burst of
//! `--static-burst-per-ip` (GCRA, [`KeyedLimiter`]); past it the answer is 429 `retry`, code
//! 42911, with the wait in `Retry-After`, decided before the file system or the store is
//! touched. The default is far above what load balancers' health checks and a browser loading
//! the app ask for from one address.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use celeriant_sync_protocol::WriteOutcome;
use celeriant_sync_protocol::codes::gateway as g;
use celeriant_sync_protocol::outcome::{Failure, TRANSIENT_RETRY_AFTER_MS};

use super::ip::{bucket, peer};
use super::keyed::{KeyedLimiter, Refusal};
use super::notice::Throttle;
use crate::config::LimitConfig;
use crate::error::ApiError;

/// The limiter of the cheap routes.
pub struct CheapRate {
    limiter: Arc<KeyedLimiter<IpAddr>>,
    throttle: Throttle,
}

impl CheapRate {
    /// The limiter of `limits` (`--static-rate-per-ip`, `--static-burst-per-ip`).
    pub fn new(limits: &LimitConfig) -> Arc<Self> {
        Arc::new(CheapRate {
            limiter: KeyedLimiter::new(limits.static_rate_per_ip, limits.static_burst_per_ip, 0),
            throttle: Throttle::new(),
        })
    }
}

/// The middleware: admits the request under its address's rate, or answers 429 (42911).
pub async fn limit(State(rate): State<Arc<CheapRate>>, request: Request, next: Next) -> Response {
    let ip = peer(request.extensions());
    match rate.limiter.enter(bucket(ip)) {
        // No concurrency cap: the guard holds nothing worth keeping.
        Ok(_admitted) => next.run(request).await,
        Err(refusal) => {
            crate::observe::budget_refused("static", "rate");
            let retry_after_ms = match refusal {
                Refusal::Rate(wait) => (wait.as_millis() as u64).max(1),
                Refusal::Concurrency(_) => TRANSIENT_RETRY_AFTER_MS,
            };
            if let Some(suppressed) = rate.throttle.allow() {
                tracing::info!(%ip, suppressed, "health check or static file refused: over the address's rate");
            }
            ApiError(WriteOutcome::Retry(Failure {
                retry_after_ms: Some(retry_after_ms),
                ..Failure::new(
                    g::STATIC_RATE_LIMITED,
                    format!(
                        "too many health checks or static files from this address; retry in \
                         {retry_after_ms} ms"
                    ),
                )
            }))
            .into_response()
        }
    }
}
