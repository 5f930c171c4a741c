//! The fault-injection control body, shared so tests written in Rust (native or wasm) and the
//! gateway agree on it.
//!
//! `GET /v1/faults` returns a [`FaultReport`]; `PUT /v1/faults` takes a [`FaultRates`] and
//! returns the new report. The endpoint exists only when the gateway was started with
//! `--faults`; otherwise it answers 404 like any unknown route.

use serde::{Deserialize, Serialize};

/// Per-request probabilities (0.0..=1.0) of each injected fault. They are tried in field order
/// from one uniform draw, so their sum must not exceed 1.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields, default)]
pub struct FaultRates {
    /// Commit the write, then break the connection instead of answering (the write landed; the
    /// client sees a network error).
    pub drop_after_commit: f64,
    /// Hold the request for `delayMs` before handling it, longer than the client waits; the
    /// write then proceeds (it may land after the client gave up).
    pub timeout: f64,
    /// Answer 2013 (in-flight duplicate) without applying the write.
    pub inflight: f64,
    /// Answer 503 with `Retry-After` without applying the write.
    pub busy: f64,
    /// Break the connection before the write is applied.
    pub reset_before_commit: f64,
    /// The delay of a `timeout` fault, in milliseconds (default 5000 when 0).
    pub delay_ms: u64,
    /// The `Retry-After` of a `busy` fault, in milliseconds (default 200 when 0).
    pub retry_after_ms: u64,
}

impl FaultRates {
    /// The sum of the probabilities.
    pub fn total(&self) -> f64 {
        self.drop_after_commit + self.timeout + self.inflight + self.busy + self.reset_before_commit
    }

    /// Checks every rate is within 0..=1 and their sum is at most 1.
    pub fn check(&self) -> Result<(), String> {
        let all = [
            ("dropAfterCommit", self.drop_after_commit),
            ("timeout", self.timeout),
            ("inflight", self.inflight),
            ("busy", self.busy),
            ("resetBeforeCommit", self.reset_before_commit),
        ];
        for (name, rate) in all {
            if !(0.0..=1.0).contains(&rate) {
                return Err(format!("{name} = {rate} is not a probability in 0..=1"));
            }
        }
        if self.total() > 1.0 + 1e-9 {
            return Err(format!("the rates sum to {} > 1", self.total()));
        }
        Ok(())
    }
}

/// How many writes were seen and how many of each fault was injected since the gateway started.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultCounts {
    /// Write requests that reached the fault injector.
    pub requests: u64,
    /// Committed, then the connection was broken.
    pub drop_after_commit: u64,
    /// Delayed past the client's timeout.
    pub timeout: u64,
    /// Answered 2013 without applying.
    pub inflight: u64,
    /// Answered 503 without applying.
    pub busy: u64,
    /// Connection broken before applying.
    pub reset_before_commit: u64,
}

/// `GET /v1/faults`.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultReport {
    /// The seed the injector's random generator started from.
    pub seed: u64,
    /// The current rates.
    pub rates: FaultRates,
    /// The counts so far.
    pub counts: FaultCounts,
}
