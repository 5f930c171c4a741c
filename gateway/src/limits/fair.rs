//! Fair share: per-address and per-client rate and concurrency, on writes and reads apart.
//!
//! One device or one address must not take what all the others need. Each request of
//! `POST /v1/write` and `GET /v1/aggregates/…` is admitted first under its address's share
//! (before the session is even checked, so a flood of unauthenticated requests is refused
//! cheaply) and then, once the session proved it, under its client id's share (`--auth none`
//! has no proven client id: only the address counts there). Writes and reads have separate
//! budgets, so reading does not starve writing. A refusal is 429 `retry` with code 42910 and
//! the wait in `retryAfterMs` / `Retry-After`: the time until the rate allows one more, or one
//! second when the concurrency cap is full. The guards are held until the request is finished
//! with (for a write, until the store answered). An IPv6 /64 gets half of its bucket's share
//! (`crate::limits::nested`).

use std::net::IpAddr;
use std::sync::Arc;

use celeriant_sync_protocol::WriteOutcome;
use celeriant_sync_protocol::codes::gateway as g;
use celeriant_sync_protocol::outcome::{Failure, TRANSIENT_RETRY_AFTER_MS};
use uuid::Uuid;

use super::keyed::{InFlight, KeyedLimiter, Refusal};
use super::nested::{AddressLimiter, Admitted};
use super::notice::Throttle;
use crate::config::LimitConfig;
use crate::error::ApiError;

/// Which budget a request draws on.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Kind {
    /// `POST /v1/write`.
    Write,
    /// `GET /v1/aggregates/…/events`.
    Read,
}

impl Kind {
    fn index(self) -> usize {
        match self {
            Kind::Write => 0,
            Kind::Read => 1,
        }
    }

    fn noun(self) -> &'static str {
        match self {
            Kind::Write => "writes",
            Kind::Read => "reads",
        }
    }
}

/// The per-address and per-client limiters, one pair per [`Kind`].
pub struct FairShare {
    ip: [AddressLimiter; 2],
    client: [Arc<KeyedLimiter<Uuid>>; 2],
    throttle: Throttle,
}

/// A request's place in its address's and client's shares, held until it is finished with.
pub struct Share {
    _ip: Admitted,
    _client: Option<InFlight<Uuid>>,
}

impl FairShare {
    /// The limiters of `limits`.
    pub fn new(limits: &LimitConfig) -> Self {
        let ip = || {
            AddressLimiter::new(
                limits.rate_per_ip,
                limits.burst_per_ip,
                limits.concurrency_per_ip,
            )
        };
        let client = || {
            KeyedLimiter::new(
                limits.rate_per_client,
                limits.burst_per_client,
                limits.concurrency_per_client,
            )
        };
        FairShare {
            ip: [ip(), ip()],
            client: [client(), client()],
            throttle: Throttle::new(),
        }
    }

    /// Admits a request of `kind` from `ip` under the address's share.
    pub fn address(&self, kind: Kind, ip: IpAddr) -> Result<Admitted, ApiError> {
        self.ip[kind.index()]
            .enter(ip)
            .map_err(|r| self.refuse(kind, "this address", &ip.to_string(), r))
    }

    /// Adds the client id's share (none under `--auth none`) to an admitted request.
    pub fn client(
        &self,
        kind: Kind,
        address: Admitted,
        client: Option<Uuid>,
    ) -> Result<Share, ApiError> {
        let client = match client {
            None => None,
            Some(id) => Some(
                self.client[kind.index()]
                    .enter(id)
                    .map_err(|r| self.refuse(kind, "this client id", &id.to_string(), r))?,
            ),
        };
        Ok(Share {
            _ip: address,
            _client: client,
        })
    }

    fn refuse(&self, kind: Kind, whose: &str, key: &str, refusal: Refusal) -> ApiError {
        let reason = match refusal {
            Refusal::Rate(_) => "rate",
            Refusal::Concurrency(_) => "concurrency",
        };
        crate::observe::budget_refused(kind.noun(), reason);
        let (retry_after_ms, message) = match refusal {
            Refusal::Rate(wait) => {
                let ms = (wait.as_millis() as u64).max(1);
                (
                    ms,
                    format!("too many {} from {whose}; retry in {ms} ms", kind.noun()),
                )
            }
            Refusal::Concurrency(max) => (
                TRANSIENT_RETRY_AFTER_MS,
                format!(
                    "{whose} has {max} {} in progress already; retry shortly",
                    kind.noun()
                ),
            ),
        };
        if let Some(suppressed) = self.throttle.allow() {
            tracing::info!(key, %message, suppressed, "fair share: request refused");
        }
        ApiError(WriteOutcome::Retry(Failure {
            retry_after_ms: Some(retry_after_ms),
            ..Failure::new(g::RATE_LIMITED, message)
        }))
    }
}
