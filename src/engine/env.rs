//! What the drain needs from its surroundings: a clock, timers, the network's apparent state,
//! randomness for jitter, a lock check and a transport. Injected so the same drain runs in the
//! browser and in native tests with a simulated clock and server.

use std::future::Future;

use uuid::Uuid;

use super::model::AggregateRef;

/// Clock, timers, connectivity and randomness.
pub trait Env {
    /// Unix milliseconds now.
    fn now_ms(&self) -> u64;
    /// Resolves after `ms` milliseconds; dropping it cancels the timer.
    fn sleep(&self, ms: u64) -> impl Future<Output = ()>;
    /// The platform's belief that the network is up (`navigator.onLine`).
    fn is_online(&self) -> bool;
    /// A uniform number in `[0, 1)`.
    fn random(&self) -> f64;
    /// Whether this context may still send: `false` once another context took over draining.
    fn may_send(&self) -> impl Future<Output = bool> {
        std::future::ready(true)
    }
}

/// Why a request got no HTTP answer, as data (never recovered from message text).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoAnswer {
    /// The request failed without a response: the network, DNS, a refused or reset
    /// connection, CORS (fetch's `TypeError`).
    Network,
    /// No response within the client's request timeout (the request was aborted).
    Timeout,
}

/// What came back from one request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reply {
    /// An HTTP response.
    Http {
        /// Its status.
        status: u16,
        /// Its `Retry-After` header, if any.
        retry_after: Option<String>,
        /// Its body, or why the body could not be read (the connection broke mid-response).
        body: Result<String, String>,
    },
    /// No response: why, and what the platform said.
    Failed {
        /// The cause.
        cause: NoAnswer,
        /// The platform's message (for `lastError`; never inspected).
        message: String,
    },
}

impl Reply {
    /// A network failure with the platform's message.
    pub fn network(message: impl Into<String>) -> Self {
        Reply::Failed {
            cause: NoAnswer::Network,
            message: message.into(),
        }
    }

    /// A timeout.
    pub fn timeout() -> Self {
        Reply::Failed {
            cause: NoAnswer::Timeout,
            message: "request timed out".into(),
        }
    }
}

/// A batch of an aggregate's log, as a read-back found it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WrittenBatch {
    /// The aggregate version it created.
    pub version: u64,
    /// The client id that wrote it.
    pub client_id: Uuid,
    /// Its events' sequences.
    pub client_seqs: Vec<u64>,
}

/// What reading an aggregate back at one version found (after a 2003 on a conditional batch,
/// `docs/protocol.md` 6.1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadBack {
    /// The first batch at or after the version asked for (`None`: the log ends before it).
    Found(Option<WrittenBatch>),
    /// The version was trimmed away (410): nobody can tell any more.
    Trimmed,
    /// No usable answer (network, timeout, 5xx, 429, an expired session (401), a body that did
    /// not parse): worth trying again.
    Failed(String),
    /// A permanent refusal (a 4xx other than 401, 408, 410 and 429: forbidden, not found, a bad
    /// request): reading again would get the same.
    Refused(String),
}

/// Sends one request body to the gateway's write endpoint, and reads an aggregate back.
pub trait Transport {
    /// Posts `body` with the session's bearer `token`; dropping the future aborts the request.
    fn send(&self, body: String, token: String) -> impl Future<Output = Reply>;
    /// Reads `aggregate`'s first batch at or after `version` (`GET …/events?from=version&limit=1`)
    /// under the session's bearer `token`.
    fn read_back(
        &self,
        aggregate: AggregateRef,
        version: u64,
        token: String,
    ) -> impl Future<Output = ReadBack>;
}
