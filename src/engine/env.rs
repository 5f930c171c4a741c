//! What the drain loop needs from its surroundings: a clock, timers, the network's apparent
//! state, randomness for jitter, and a transport. Injected so the loop runs unchanged in the
//! browser and in native tests with a simulated clock and server.

use std::future::Future;

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
    /// The request failed without a response (fetch's `TypeError`).
    Network(String),
    /// No response within the client's request timeout.
    Timeout,
}

/// Sends one request body to the gateway's write endpoint.
pub trait Transport {
    /// Posts `body`; dropping the future aborts the request.
    fn send(&self, body: String) -> impl Future<Output = Reply>;
}
