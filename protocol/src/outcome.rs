//! The five outcomes of a write and the table that decides them.
//!
//! Every `/v1/write` response body is a [`WriteOutcome`], tagged by its `outcome` field. A writer
//! needs nothing else to act correctly:
//!
//! | outcome    | HTTP          | meaning                                         | writer's action                 |
//! |------------|---------------|-------------------------------------------------|---------------------------------|
//! | `landed`   | 200           | durable (fresh, or a 2002 duplicate)            | mark synced                     |
//! | `retry`    | 503, 429      | definitely not applied                          | back off, resend identical      |
//! | `unknown`  | 502, 504      | may or may not have been applied                | resend identical                |
//! | `unauthorized` | 401       | no valid session: nothing was applied           | open a new session, resend identical |
//! | `rejected` | 4xx           | permanent for this request                      | stop the aggregate, tell the app|
//!
//! [`classify`] maps a Celeriant or gateway code to its [`Class`], following
//! `shared/celeriant.md`. Codes nobody knows are classified `retry` with the long operator
//! backoff: an unrecognised answer must never cause an event to be dropped.

use serde::{Deserialize, Serialize};

use uuid::Uuid;

use crate::json::{Members, Scalar};
use crate::wire::AggregateRef;

use crate::codes::{celeriant as c, gateway as g};

/// What a writer must do with a code.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Class {
    /// Durable. For Celeriant only 2002 (`CLIENT_IDEMPOTENCY_VIOLATION`) is classified so.
    Landed,
    /// Not applied; resend the identical request after a backoff.
    Retry(RetryKind),
    /// May have been applied; resend the identical request.
    Unknown,
    /// The session is missing, expired or unknown (HTTP 401); nothing was applied. Open a new
    /// session (`POST /v1/session`) and resend the identical request. Never a reason to park or
    /// drop events.
    Unauthorized,
    /// Permanent for this request.
    Rejected,
}

/// How long a retry should wait.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RetryKind {
    /// Transient server conditions (leader change, backpressure, in-flight duplicate).
    Transient,
    /// Needs an operator (credentials, schema compilation, an unknown code): back off long,
    /// never drop, surface the error.
    Operator,
}

/// Suggested wait before resending a transient `retry`, in milliseconds.
pub const TRANSIENT_RETRY_AFTER_MS: u64 = 1_000;
/// Suggested wait before resending an operator `retry`, in milliseconds.
pub const OPERATOR_RETRY_AFTER_MS: u64 = 30_000;

/// Classifies a code as `shared/celeriant.md` prescribes.
pub fn classify(code: u32) -> Class {
    match code {
        c::CLIENT_IDEMPOTENCY_VIOLATION => Class::Landed,
        c::INFLIGHT_DUPLICATE
        | c::REPLICATION_ERROR..=c::REPLICATION_BACKPRESSURE
        | c::REGISTER_SCHEMA_COORDINATION_FAILED
        | c::SERVER_BUSY => Class::Retry(RetryKind::Transient),
        c::SCHEMA_COMPILATION_FAILED | c::IDENTITY_FIRST..=c::IDENTITY_LAST => {
            Class::Retry(RetryKind::Operator)
        }
        c::EMPTY_EVENTS_LIST
        | c::ZERO_EVENT_TYPE
        | c::OPTIMISTIC_CONCURRENCY_VIOLATION
        | c::FAILED_TO_SERIALISE_DATABLOCKS
        | c::AGGREGATE_NOT_EXISTS
        | c::AGGREGATE_RECREATE_NOT_ALLOWED
        | c::MALFORMED_GUARD_ENTRY
        | c::CONFLICT_RESPONSE_TOO_LARGE
        | c::SCHEMA_VALIDATION_FAILED
        | c::SHARD_ROUTING_NO_KEY..=c::SHARD_ROUTING_INCOMPATIBLE_FILTERS => Class::Rejected,
        g::MALFORMED_JSON
        | g::INVALID_FIELD
        | g::NO_WRITES
        | g::EMPTY_EVENTS
        | g::CLIENT_SEQ_ZERO
        | g::CLIENT_SEQ_NOT_INCREASING
        | g::EVENT_TYPE_ZERO
        | g::INVALID_IV
        | g::DUPLICATE_AGGREGATE
        | g::TOO_MANY_EVENTS
        | g::EVENT_TOO_LARGE
        | g::WRITE_TOO_LARGE
        | g::TOO_MANY_AGGREGATES
        | g::INVALID_QUERY
        | g::INVALID_PUBLIC_KEY
        | g::INVALID_NONCE
        | g::INVALID_SIGNATURE
        | g::CLIENT_ID_MISMATCH
        | g::AGGREGATE_TYPE_FORBIDDEN
        | g::AGGREGATE_FORBIDDEN
        | g::NOT_OWNER
        | g::MEMBERS_NOT_ALLOWED
        | g::TOO_MANY_MEMBERS
        | g::TOO_MANY_REVOCATIONS
        | g::OPERATOR_REQUIRED
        | g::STORAGE_QUOTA_EXCEEDED
        | g::NOT_FOUND
        | g::METHOD_NOT_ALLOWED
        | g::BODY_TOO_LARGE
        | g::UNSUPPORTED_MEDIA_TYPE
        | g::WATCH_TOO_MANY_AGGREGATES
        | g::DUPLICATE_HOST => Class::Rejected,
        g::SESSION_REQUIRED
        | g::SESSION_INVALID
        | g::SESSION_EXPIRED
        | g::SESSION_REVOKED
        | g::DEVICE_SIGNATURE_INVALID
        | g::NONCE_OUT_OF_WINDOW
        | g::NONCE_REPLAYED
        | g::APP_TOKEN_REQUIRED
        | g::APP_TOKEN_INVALID
        | g::APP_TOKEN_EXPIRED
        | g::PROOF_REQUIRED
        | g::PROOF_INVALID
        | g::PROOF_MISMATCH
        | g::PROOF_STALE
        | g::PROOF_REPLAYED
        | g::FAULTS_SECRET_REQUIRED => Class::Unauthorized,
        g::GATEWAY_BUSY
        | g::SESSION_RATE_LIMITED
        | g::SUBJECT_LIMIT
        | g::PROOF_REPLAY_FULL
        | g::RATE_LIMITED
        | g::WATCH_STREAMS_PER_CLIENT
        | g::WATCH_STREAMS_FULL
        | g::WATCH_STREAMS_PER_IP
        | g::STATIC_RATE_LIMITED
        | g::REQUEST_TIMEOUT
        | g::UPSTREAM_UNAVAILABLE
        | g::STORE_DEGRADED => Class::Retry(RetryKind::Transient),
        // Both need an operator (free disk space, restore damaged data); never the events' fault.
        g::DATA_CORRUPT | g::INSUFFICIENT_STORAGE => Class::Retry(RetryKind::Operator),
        // A Host the gateway does not answer to is a deployment problem, not the events' fault.
        g::HOST_NOT_ALLOWED => Class::Retry(RetryKind::Operator),
        g::UPSTREAM_OUTCOME_UNKNOWN | g::INTERNAL | g::GATEWAY_TIMEOUT => Class::Unknown,
        // Everything else, including unassigned numbers in the gateway's 40000-59999 space.
        _ => Class::Retry(RetryKind::Operator),
    }
}

/// The body of every `/v1/write` response.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(tag = "outcome", rename_all = "camelCase")]
pub enum WriteOutcome {
    /// Durable.
    Landed(Landed),
    /// Not applied; resend identical after `retryAfterMs`.
    Retry(Failure),
    /// May have been applied; resend identical.
    Unknown(Failure),
    /// No valid session (HTTP 401): not applied; open a new session and resend identical.
    Unauthorized(Failure),
    /// Permanent for this request.
    Rejected(Failure),
}

/// The body of a `landed` outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Landed {
    /// `true` when the sequence had already landed (Celeriant 2002).
    pub duplicate: bool,
    /// The aggregate's version after a fresh write of one aggregate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub aggregate_version: Option<u64>,
    /// 2002 on a duplicate.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub code: Option<u32>,
    /// On a duplicate: the highest sequence the server holds for this (aggregate, client).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_client_seq: Option<u64>,
    /// On a duplicate: the lowest sequence of the refused write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempted_client_seq: Option<u64>,
}

/// The body of a `retry`, `unknown` or `rejected` outcome.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Failure {
    /// A Celeriant code or a gateway code (see [`crate::codes`]).
    pub code: u32,
    /// A human-readable explanation.
    pub message: String,
    /// For `retry`: how long to wait before resending (also sent as `Retry-After`).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
    /// For 2013 in a `retry`: the highest sequence the server holds for this (aggregate, client).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_client_seq: Option<u64>,
    /// For 2013 in a `retry`: the lowest sequence of the refused write.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub attempted_client_seq: Option<u64>,
    /// On every answer of `POST /v1/session`: the gateway's clock, Unix milliseconds, so a
    /// client whose clock is off can correct its next nonce (the `Date` header is not readable
    /// cross-origin).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub server_time: Option<u64>,
    /// For 2003: which aggregate's version guard failed, and its versions, as the flat fields
    /// `aggregateTypeId`, `aggregateId`, `expectedVersion`, `currentVersion` (boxed: it is
    /// rare, and keeps every other answer small).
    #[serde(flatten)]
    pub conflict: Option<Box<GuardConflict>>,
}

/// The body of a 2003 besides its code and message: the aggregate whose version guard failed
/// (the first such in the request's order when several did) and its versions.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GuardConflict {
    /// The aggregate's type id.
    pub aggregate_type_id: Uuid,
    /// The aggregate's id.
    pub aggregate_id: Uuid,
    /// The `expectedVersion` the write carried for it.
    pub expected_version: u64,
    /// Its version when the write was refused (0: it does not exist).
    pub current_version: u64,
}

impl GuardConflict {
    /// The aggregate it names.
    pub fn aggregate(&self) -> AggregateRef {
        AggregateRef {
            type_id: self.aggregate_type_id,
            id: self.aggregate_id,
        }
    }
}

impl Failure {
    /// A failure with a code and message only.
    pub fn new(code: u32, message: impl Into<String>) -> Self {
        Failure {
            code,
            message: message.into(),
            retry_after_ms: None,
            last_client_seq: None,
            attempted_client_seq: None,
            server_time: None,
            conflict: None,
        }
    }
}

impl WriteOutcome {
    /// Parses a response body, leniently (unknown fields are ignored, for bodies from newer
    /// gateways); `None` when it is not a protocol body: not one JSON object, no known
    /// `outcome`, a failure without a `code`, or a known field of the wrong type or given
    /// twice. Equivalent to the derived `Deserialize` of a flat struct of every field (a test
    /// checks it), written by hand so the browser client carries no JSON library
    /// ([`crate::json`]).
    pub fn parse(json: &str) -> Option<WriteOutcome> {
        let members = Members::parse(json)?;
        let get = |name: &str| members.get(name).ok();
        let u64_field = |name: &str| -> Option<Option<u64>> {
            match get(name)? {
                None | Some(Scalar::Null) => Some(None),
                Some(Scalar::Int(n)) => Some(Some(*n)),
                Some(_) => None,
            }
        };
        let outcome = match get("outcome")? {
            Some(Scalar::Str(s)) => s.as_str(),
            _ => return None,
        };
        let duplicate = match get("duplicate")? {
            None => false,
            Some(Scalar::Bool(b)) => *b,
            Some(_) => return None,
        };
        let code = match u64_field("code")? {
            Some(n) => Some(u32::try_from(n).ok()?),
            None => None,
        };
        let message = match get("message")? {
            None | Some(Scalar::Null) => None,
            Some(Scalar::Str(s)) => Some(s.clone()),
            Some(_) => return None,
        };
        let aggregate_version = u64_field("aggregateVersion")?;
        let retry_after_ms = u64_field("retryAfterMs")?;
        let last_client_seq = u64_field("lastClientSeq")?;
        let attempted_client_seq = u64_field("attemptedClientSeq")?;
        let server_time = u64_field("serverTime")?;
        let uuid_field = |name: &str| -> Option<Option<Uuid>> {
            match get(name)? {
                None | Some(Scalar::Null) => Some(None),
                Some(Scalar::Str(s)) => Some(Some(Uuid::parse_str(s).ok()?)),
                Some(_) => None,
            }
        };
        let aggregate_type_id = uuid_field("aggregateTypeId")?;
        let aggregate_id = uuid_field("aggregateId")?;
        let expected_version = u64_field("expectedVersion")?;
        let current_version = u64_field("currentVersion")?;
        // All four, or no conflict (as serde's flattened `Option` reads it).
        let conflict = match (
            aggregate_type_id,
            aggregate_id,
            expected_version,
            current_version,
        ) {
            (Some(t), Some(i), Some(e), Some(c)) => Some(Box::new(GuardConflict {
                aggregate_type_id: t,
                aggregate_id: i,
                expected_version: e,
                current_version: c,
            })),
            _ => None,
        };
        let failure = || {
            Some(Failure {
                code: code?,
                message: message.clone().unwrap_or_default(),
                retry_after_ms,
                last_client_seq,
                attempted_client_seq,
                server_time,
                conflict: conflict.clone(),
            })
        };
        Some(match outcome {
            "landed" => WriteOutcome::Landed(Landed {
                duplicate,
                aggregate_version,
                code,
                last_client_seq,
                attempted_client_seq,
            }),
            "retry" => WriteOutcome::Retry(failure()?),
            "unknown" => WriteOutcome::Unknown(failure()?),
            "unauthorized" => WriteOutcome::Unauthorized(failure()?),
            "rejected" => WriteOutcome::Rejected(failure()?),
            _ => return None,
        })
    }

    /// A fresh landing.
    pub fn landed(aggregate_version: Option<u64>) -> Self {
        WriteOutcome::Landed(Landed {
            duplicate: false,
            aggregate_version,
            code: None,
            last_client_seq: None,
            attempted_client_seq: None,
        })
    }

    /// A 2002: the sequence had already landed.
    pub fn duplicate(last_client_seq: u64, attempted_client_seq: u64) -> Self {
        WriteOutcome::Landed(Landed {
            duplicate: true,
            aggregate_version: None,
            code: Some(c::CLIENT_IDEMPOTENCY_VIOLATION),
            last_client_seq: Some(last_client_seq),
            attempted_client_seq: Some(attempted_client_seq),
        })
    }

    /// A 2003: the version guard of `aggregate` failed; nothing of the write was appended.
    /// `current` is the aggregate's version the server holds (0: it does not exist).
    pub fn conflict(
        message: impl Into<String>,
        aggregate: AggregateRef,
        expected: u64,
        current: u64,
    ) -> Self {
        WriteOutcome::Rejected(Failure {
            conflict: Some(Box::new(GuardConflict {
                aggregate_type_id: aggregate.type_id,
                aggregate_id: aggregate.id,
                expected_version: expected,
                current_version: current,
            })),
            ..Failure::new(c::OPTIMISTIC_CONCURRENCY_VIOLATION, message)
        })
    }

    /// The outcome a code calls for, with the suggested retry delay filled in for `retry`.
    /// A 2002 becomes `landed` with `duplicate: true` (the sequences, when known, are added by
    /// the caller through [`WriteOutcome::duplicate`]).
    pub fn from_code(code: u32, message: impl Into<String>) -> Self {
        let failure = Failure::new(code, message);
        match classify(code) {
            Class::Landed => WriteOutcome::Landed(Landed {
                duplicate: true,
                aggregate_version: None,
                code: Some(code),
                last_client_seq: None,
                attempted_client_seq: None,
            }),
            Class::Retry(kind) => WriteOutcome::Retry(Failure {
                retry_after_ms: Some(match kind {
                    RetryKind::Transient => TRANSIENT_RETRY_AFTER_MS,
                    RetryKind::Operator => OPERATOR_RETRY_AFTER_MS,
                }),
                ..failure
            }),
            Class::Unknown => WriteOutcome::Unknown(failure),
            Class::Unauthorized => WriteOutcome::Unauthorized(failure),
            Class::Rejected => WriteOutcome::Rejected(failure),
        }
    }

    /// The HTTP status this outcome travels with: a gateway code's first three digits (see
    /// [`g::http_status`]); otherwise 200 for `landed`, 503 for `retry`, 502 for `unknown`, 401
    /// for `unauthorized` and 422 for `rejected`. A code nobody knows, even an unassigned one in 40000–59999, is a
    /// `retry` (see [`classify`]) and so travels with 503.
    pub fn http_status(&self) -> u16 {
        match self {
            WriteOutcome::Landed(_) => 200,
            WriteOutcome::Retry(f) => g::http_status(f.code).unwrap_or(503),
            WriteOutcome::Unknown(f) => g::http_status(f.code).unwrap_or(502),
            WriteOutcome::Unauthorized(f) => g::http_status(f.code).unwrap_or(401),
            WriteOutcome::Rejected(f) => g::http_status(f.code).unwrap_or(422),
        }
    }

    /// The code carried, if any (`landed` fresh writes carry none).
    pub fn code(&self) -> Option<u32> {
        match self {
            WriteOutcome::Landed(l) => l.code,
            WriteOutcome::Retry(f)
            | WriteOutcome::Unknown(f)
            | WriteOutcome::Unauthorized(f)
            | WriteOutcome::Rejected(f) => Some(f.code),
        }
    }

    /// The failure carried, if any (`landed` carries none).
    pub fn failure(&self) -> Option<&Failure> {
        match self {
            WriteOutcome::Landed(_) => None,
            WriteOutcome::Retry(f)
            | WriteOutcome::Unknown(f)
            | WriteOutcome::Unauthorized(f)
            | WriteOutcome::Rejected(f) => Some(f),
        }
    }

    /// The failure carried, if any, to amend (e.g. with `serverTime`).
    pub fn failure_mut(&mut self) -> Option<&mut Failure> {
        match self {
            WriteOutcome::Landed(_) => None,
            WriteOutcome::Retry(f)
            | WriteOutcome::Unknown(f)
            | WriteOutcome::Unauthorized(f)
            | WriteOutcome::Rejected(f) => Some(f),
        }
    }

    /// The outcome's tag as it appears in JSON.
    pub fn tag(&self) -> &'static str {
        match self {
            WriteOutcome::Landed(_) => "landed",
            WriteOutcome::Retry(_) => "retry",
            WriteOutcome::Unknown(_) => "unknown",
            WriteOutcome::Unauthorized(_) => "unauthorized",
            WriteOutcome::Rejected(_) => "rejected",
        }
    }
}

#[cfg(test)]
#[path = "outcome_tests.rs"]
mod tests;
