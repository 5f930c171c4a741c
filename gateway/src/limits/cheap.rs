//! Per-address rates on the requests that need no session and cost the gateway little each:
//! `GET /healthz` and static files, and the cheap refusals — CORS preflights (`OPTIONS`),
//! wrong methods (405) and `Host` names the gateway does not answer to (421 / 400).
//!
//! They are cheap one at a time, but nothing else bounds them: a few thousand requests a
//! second from one address made every write several times slower, and each refused `Host`
//! was a log line. Each address bucket ([`crate::limits::ip`]) gets three budgets (GCRA,
//! [`AddressLimiter`]: an IPv6 /64 gets half of its bucket's):
//!
//! * [`CheapRate::statics`]: `/healthz`, static files and unknown `/v1/…` paths (their 404),
//!   `--static-rate-per-ip` per second after a burst of `--static-burst-per-ip`;
//! * [`CheapRate::refusals`]: 405s and `Host` refusals, `--refusal-rate-per-ip` per second
//!   after a burst of `--refusal-burst-per-ip`;
//! * [`CheapRate::preflights`]: CORS preflights, `--preflight-rate-per-ip` per second after a
//!   burst of `--preflight-burst-per-ip`. Apart from the others, so a cross-origin app's
//!   preflights (one per URL per ten minutes: an initial sync of many aggregates sends many)
//!   do not use up its pages' budget, a page's reloads do not refuse its preflights, and a
//!   flood of requests no app sends (wrong methods, foreign `Host`s) from an address does not
//!   refuse the app on that address (a NAT's neighbours) its preflights.
//!
//! Past any of them the answer is 429 `retry`, code 42911, with the wait in `Retry-After`, decided
//! before the file system, the store or the CORS machinery is touched. A refused cheap refusal
//! also closes its connection (`Connection: close`): a flood kept on one keep-alive connection
//! must pay a new handshake per request, under the connection limits (`crate::serve`). The
//! defaults are far above what load balancers' health checks and a browser ask for from one
//! address.

use std::net::IpAddr;
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::{HeaderValue, Method, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use celeriant_sync_protocol::WriteOutcome;
use celeriant_sync_protocol::codes::gateway as g;
use celeriant_sync_protocol::outcome::{Failure, TRANSIENT_RETRY_AFTER_MS};

use super::ip::peer;
use super::keyed::Refusal;
use super::nested::AddressLimiter;
use super::notice::Throttle;
use crate::config::LimitConfig;
use crate::error::ApiError;

/// One per-address budget of cheap requests.
pub struct CheapRate {
    limiter: AddressLimiter,
    throttle: Throttle,
    /// What the budget covers, for the message.
    what: &'static str,
    /// The metric's `kind` label.
    kind: &'static str,
    /// Whether a refusal closes the connection.
    close: bool,
}

impl CheapRate {
    /// The budget of `/healthz` and static files (`--static-rate-per-ip`,
    /// `--static-burst-per-ip`).
    pub fn statics(limits: &LimitConfig) -> Arc<Self> {
        Arc::new(CheapRate {
            limiter: AddressLimiter::new(limits.static_rate_per_ip, limits.static_burst_per_ip, 0),
            throttle: Throttle::new(),
            what: "health checks or static files",
            kind: "static",
            close: false,
        })
    }

    /// The budget of 405s and `Host` refusals (`--refusal-rate-per-ip`,
    /// `--refusal-burst-per-ip`).
    pub fn refusals(limits: &LimitConfig) -> Arc<Self> {
        Arc::new(CheapRate {
            limiter: AddressLimiter::new(
                limits.refusal_rate_per_ip,
                limits.refusal_burst_per_ip,
                0,
            ),
            throttle: Throttle::new(),
            what: "wrong methods or refused host names",
            kind: "cheap refusals",
            close: true,
        })
    }

    /// The budget of CORS preflights (`--preflight-rate-per-ip`, `--preflight-burst-per-ip`).
    pub fn preflights(limits: &LimitConfig) -> Arc<Self> {
        Arc::new(CheapRate {
            limiter: AddressLimiter::new(
                limits.preflight_rate_per_ip,
                limits.preflight_burst_per_ip,
                0,
            ),
            throttle: Throttle::new(),
            what: "CORS preflights",
            kind: "preflights",
            close: true,
        })
    }

    /// Charges one request from `ip`; the 429 (42911) to answer instead when it is over.
    pub fn refused(&self, ip: IpAddr) -> Option<Response> {
        self.refused_with(ip, |error| error)
    }

    /// [`CheapRate::refused`], with `shape` applied to the error first (`POST /v1/session`
    /// adds its `serverTime`).
    pub fn refused_with(
        &self,
        ip: IpAddr,
        shape: impl FnOnce(ApiError) -> ApiError,
    ) -> Option<Response> {
        let refusal = match self.limiter.enter(ip) {
            // No concurrency cap: the guard holds nothing worth keeping.
            Ok(_admitted) => return None,
            Err(refusal) => refusal,
        };
        crate::observe::budget_refused(self.kind, "rate");
        let retry_after_ms = match refusal {
            Refusal::Rate(wait) => (wait.as_millis() as u64).max(1),
            Refusal::Concurrency(_) => TRANSIENT_RETRY_AFTER_MS,
        };
        if let Some(suppressed) = self.throttle.allow() {
            tracing::info!(%ip, suppressed, what = self.what, "cheap request refused: over the address's rate");
        }
        let error = ApiError(WriteOutcome::Retry(Failure {
            retry_after_ms: Some(retry_after_ms),
            ..Failure::new(
                g::STATIC_RATE_LIMITED,
                format!(
                    "too many {} from this address; retry in {retry_after_ms} ms",
                    self.what
                ),
            )
        }));
        let mut response = shape(error).into_response();
        if self.close {
            response
                .headers_mut()
                .insert(header::CONNECTION, HeaderValue::from_static("close"));
        }
        Some(response)
    }
}

/// The middleware of the static budget: admits the request under its address's rate, or
/// answers 429 (42911).
pub async fn limit(State(rate): State<Arc<CheapRate>>, request: Request, next: Next) -> Response {
    match rate.refused(peer(request.extensions())) {
        None => next.run(request).await,
        Some(refused) => refused,
    }
}

/// The middleware outside the CORS layer (which answers preflights itself): charges every
/// `OPTIONS` request to the preflight budget.
pub async fn preflight(
    State(rate): State<Arc<CheapRate>>,
    request: Request,
    next: Next,
) -> Response {
    if request.method() == Method::OPTIONS
        && let Some(refused) = rate.refused(peer(request.extensions()))
    {
        return refused;
    }
    next.run(request).await
}
