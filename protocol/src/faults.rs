//! The fault-injection control body, shared so tests written in Rust (native or wasm) and the
//! gateway agree on it.
//!
//! `GET /v1/faults` returns a [`FaultReport`]; `PUT /v1/faults` takes a [`FaultRates`] and
//! returns the new report. The endpoint exists only when the gateway was started with
//! `--faults`; otherwise it answers 404 like any unknown route.

use serde::{Deserialize, Serialize};

/// The delay of a `timeout` fault when `delayMs` is 0 or left out, in milliseconds.
pub const DEFAULT_DELAY_MS: u64 = 5_000;

/// The `Retry-After` of a `busy` fault when `retryAfterMs` is 0 or left out, in milliseconds.
pub const DEFAULT_RETRY_AFTER_MS: u64 = 200;

/// The longest `delayMs` accepted: two minutes. A delay only makes sense up to the gateway's
/// request timeout (after which the gateway answers 504 and the write proceeds), so nothing
/// longer is needed; an unbounded one held admission slots for as long as it lasted.
pub const MAX_DELAY_MS: u64 = 120_000;

/// The longest `retryAfterMs` accepted: ten minutes (a client honours it before resending).
pub const MAX_RETRY_AFTER_MS: u64 = 600_000;

/// Per-request probabilities (0.0..=1.0) of each injected fault. They are tried in field order
/// from one uniform draw, so their sum must not exceed 1.
///
/// Parsed strictly: unknown fields are refused, and so is a JSON array in place of the object.
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct FaultRates {
    /// The write is handed to the store and its answer awaited, then the connection is broken
    /// instead of answering; the client cannot know whether it landed. This happens whatever
    /// came of it (landed, a 2002, a refusal, no answer within the gateway's request timeout).
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
    /// The delay of a `timeout` fault, in milliseconds ([`DEFAULT_DELAY_MS`] when 0; at most
    /// [`MAX_DELAY_MS`]). The delay also ends when the client goes away or the gateway's request
    /// deadline passes; the write then proceeds at once.
    pub delay_ms: u64,
    /// The `Retry-After` of a `busy` fault, in milliseconds ([`DEFAULT_RETRY_AFTER_MS`] when 0;
    /// at most [`MAX_RETRY_AFTER_MS`]).
    pub retry_after_ms: u64,
    /// Refuse, without applying, every write carrying an event of this type: `rejected` (422)
    /// with Celeriant's 2022 (schema validation failed), as a server with a schema for it would.
    /// Deterministic, checked before the random faults; 0 turns it off.
    pub reject_type: u64,
}

/// The parser of [`FaultRates`]: the same fields (each may be left out: 0), derived as a
/// `remote` definition so the public type gets an object-only `Deserialize` (see
/// `crate::strict`).
#[derive(Deserialize)]
#[serde(
    remote = "FaultRates",
    rename = "FaultRates",
    rename_all = "camelCase",
    deny_unknown_fields
)]
struct FaultRatesDef {
    #[serde(default)]
    drop_after_commit: f64,
    #[serde(default)]
    timeout: f64,
    #[serde(default)]
    inflight: f64,
    #[serde(default)]
    busy: f64,
    #[serde(default)]
    reset_before_commit: f64,
    #[serde(default)]
    delay_ms: u64,
    #[serde(default)]
    retry_after_ms: u64,
    #[serde(default)]
    reject_type: u64,
}

crate::strict::object_only!(FaultRates => FaultRatesDef);

impl FaultRates {
    /// The rates with a 0 `delay_ms` or `retry_after_ms` replaced by the default that applies
    /// ([`DEFAULT_DELAY_MS`], [`DEFAULT_RETRY_AFTER_MS`]), so a report shows what is in force.
    pub fn with_defaults(self) -> Self {
        FaultRates {
            delay_ms: if self.delay_ms == 0 {
                DEFAULT_DELAY_MS
            } else {
                self.delay_ms
            },
            retry_after_ms: if self.retry_after_ms == 0 {
                DEFAULT_RETRY_AFTER_MS
            } else {
                self.retry_after_ms
            },
            ..self
        }
    }

    /// The sum of the probabilities.
    pub fn total(&self) -> f64 {
        self.drop_after_commit + self.timeout + self.inflight + self.busy + self.reset_before_commit
    }

    /// Checks every rate is within 0..=1 and their sum is at most 1, and that `delayMs` and
    /// `retryAfterMs` are within [`MAX_DELAY_MS`] and [`MAX_RETRY_AFTER_MS`].
    pub fn check(&self) -> Result<(), String> {
        if self.delay_ms > MAX_DELAY_MS {
            return Err(format!(
                "delayMs = {} is over the {MAX_DELAY_MS} ms maximum",
                self.delay_ms
            ));
        }
        if self.retry_after_ms > MAX_RETRY_AFTER_MS {
            return Err(format!(
                "retryAfterMs = {} is over the {MAX_RETRY_AFTER_MS} ms maximum",
                self.retry_after_ms
            ));
        }
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
    /// Handed to the store and its answer awaited, then the connection was broken.
    pub drop_after_commit: u64,
    /// Delayed past the client's timeout.
    pub timeout: u64,
    /// Answered 2013 without applying.
    pub inflight: u64,
    /// Answered 503 without applying.
    pub busy: u64,
    /// Connection broken before applying.
    pub reset_before_commit: u64,
    /// Refused because of `rejectType`.
    pub rejected: u64,
    /// The most write requests of one client id the gateway was handling at the same time. A
    /// client with one drain loop keeps it at 1 — unless a `timeout` fault holds a request the
    /// client already gave up on, which still counts until the gateway finishes with it.
    pub max_in_flight_per_client: u64,
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rates_are_an_object_with_every_field_optional() {
        let r: FaultRates = serde_json::from_str(r#"{"busy":0.5}"#).unwrap();
        assert_eq!(
            r,
            FaultRates {
                busy: 0.5,
                ..FaultRates::default()
            }
        );
        assert_eq!(
            serde_json::from_str::<FaultRates>("{}").unwrap(),
            FaultRates::default()
        );
        let e = serde_json::from_str::<FaultRates>("[0.1, 0, 0, 0, 0, 0, 0]")
            .unwrap_err()
            .to_string();
        assert!(
            e.contains("invalid type: array, expected a JSON object for struct FaultRates"),
            "{e}"
        );
        let e = serde_json::from_str::<FaultRates>(r#"{"drop":1}"#)
            .unwrap_err()
            .to_string();
        assert!(e.contains("unknown field `drop`"), "{e}");
    }

    #[test]
    fn durations_are_bounded() {
        let at_most = FaultRates {
            delay_ms: MAX_DELAY_MS,
            retry_after_ms: MAX_RETRY_AFTER_MS,
            ..FaultRates::default()
        };
        assert!(at_most.check().is_ok());
        let e = FaultRates {
            delay_ms: u64::MAX,
            timeout: 1.0,
            ..FaultRates::default()
        }
        .check()
        .unwrap_err();
        assert!(e.contains("delayMs = 18446744073709551615"), "{e}");
        let e = FaultRates {
            retry_after_ms: MAX_RETRY_AFTER_MS + 1,
            ..FaultRates::default()
        }
        .check()
        .unwrap_err();
        assert!(e.contains("retryAfterMs"), "{e}");
    }

    #[test]
    fn with_defaults_fills_in_only_zero_durations() {
        let r = FaultRates {
            busy: 1.0,
            ..FaultRates::default()
        }
        .with_defaults();
        assert_eq!(
            (r.busy, r.delay_ms, r.retry_after_ms),
            (1.0, DEFAULT_DELAY_MS, DEFAULT_RETRY_AFTER_MS)
        );
        let r = FaultRates {
            delay_ms: 7,
            retry_after_ms: 9,
            ..FaultRates::default()
        };
        assert_eq!(r.with_defaults(), r);
    }
}
