//! What a reply means, and what the drain loop does about it.
//!
//! [`classify`] turns whatever came back — a protocol body, a bare status, a broken connection,
//! a timeout — into one of four [`Outcome`]s. The protocol body is authoritative when it agrees
//! with the status; anything that cannot prove the write landed is *not* `landed`.
//!
//! [`decide`] turns an outcome into an [`Action`] for the pinned batch:
//!
//! | outcome                                   | action                                             |
//! |-------------------------------------------|----------------------------------------------------|
//! | `landed`, fresh or 2002 with `lastClientSeq >= last` | settle the whole batch                  |
//! | 2002 with `first <= lastClientSeq < last` | settle that prefix, re-pin the rest                |
//! | 2002 without `lastClientSeq`              | settle the first event only (all a 2002 proves)    |
//! | 2002 with `lastClientSeq < first`         | impossible answer: park, never settle              |
//! | 2002 short of `last` on a conditional batch | impossible (a guarded write is atomic): park, flagged as possibly landed |
//! | `retry` (2013, 503, 429, ...)             | back off (honouring Retry-After), resend identical |
//! | `unknown` (network, timeout, 502/504)     | back off, resend identical                         |
//! | `rejected`, several events                | isolate: re-pin the first event alone              |
//! | `rejected`, one event                     | park the aggregate, tell the app                   |
//! | 2003 on a conditional batch               | verify: read the aggregate back first              |
//! | any other `rejected`, conditional batch   | park the whole batch (never isolated)              |
//! | `landed` (fresh or 2002) on an atomic write | settle every leg (it is atomic, and pinned: only it could have advanced these sequences) |
//! | 2002 with `lastClientSeq` short of every leg's last on an atomic write | impossible answer: park |
//! | any `rejected` on an atomic write         | park every leg (never isolated); 2003 with a guarded leg: verify first; 9001 names the routing rule |
//!
//! A conditional batch (a conditional append, `expectedVersion`) is judged whole: its guard is
//! about all of it, so it is never re-cut to isolate an event. A 2003 on it is never taken as a
//! conflict before the aggregate was read back (`docs/protocol.md` 6.1, the trap: Celeriant checks
//! the guard before idempotency, so a write that landed but whose answer was lost gets 2003 on its
//! identical resend); the drain decides on what the read finds. A 2003 on an unconditional batch
//! cannot happen (it carries no guard) and is a `rejected` like any other.
//!
//! Only `landed` settles. A rejection means nothing of the request was applied, so re-cutting
//! it to find the offending event is safe; any other failure keeps the batch byte-identical.

use celeriant_sync_protocol::codes::celeriant::{
    OPTIMISTIC_CONCURRENCY_VIOLATION, SHARD_ROUTING_MULTIPLE_SHARDS,
};
use celeriant_sync_protocol::codes::gateway as g;
use celeriant_sync_protocol::outcome::{GuardConflict, WriteOutcome};

use super::env::{NoAnswer, Reply};
use super::model::{AggregateRef, Batch};

/// What one attempt established.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Durable.
    Landed {
        /// A 2002: the sequence had already landed.
        duplicate: bool,
        /// For a 2002: the highest sequence the server holds.
        last_client_seq: Option<u64>,
    },
    /// Definitely not applied; resend identical after the delay.
    Retry {
        /// The code, if the gateway gave one.
        code: Option<u32>,
        /// Why.
        message: String,
        /// The server's requested delay.
        retry_after_ms: Option<u64>,
    },
    /// May or may not have been applied; resend identical.
    Unknown {
        /// The code, if the gateway gave one.
        code: Option<u32>,
        /// Why.
        message: String,
        /// Set when no HTTP answer came at all.
        cause: Option<NoAnswer>,
    },
    /// The session is missing, expired or unknown; nothing of it was applied. Not a judgement
    /// on the events: open a new session and resend identical.
    Unauthorized {
        /// The code.
        code: u32,
        /// Why.
        message: String,
    },
    /// Permanent for this request; nothing of it was applied.
    Rejected {
        /// The code.
        code: u32,
        /// Why.
        message: String,
        /// For a 2003 whose body names it: the aggregate whose version guard failed and its
        /// current version, so a write can later be parked with it. `None` for every other
        /// code, even if its body carried the fields.
        conflict: Option<GuardConflict>,
    },
}

impl Outcome {
    /// The version-guard conflict a 2003 reported, if this is one that named it.
    pub fn conflict(&self) -> Option<&GuardConflict> {
        match self {
            Outcome::Rejected { conflict, .. } => conflict.as_ref(),
            _ => None,
        }
    }
}

/// Parses a `Retry-After` header: delta-seconds (HTTP dates are not used by the gateway).
fn retry_after_header(value: Option<&str>) -> Option<u64> {
    value?
        .trim()
        .parse::<u64>()
        .ok()
        .map(|s| s.saturating_mul(1000))
}

/// Classifies one reply.
pub(crate) fn classify(reply: &Reply) -> Outcome {
    match reply {
        Reply::Failed { cause, message } => Outcome::Unknown {
            code: None,
            message: match cause {
                NoAnswer::Network => format!("network error: {message}"),
                NoAnswer::Timeout => message.clone(),
            },
            cause: Some(*cause),
        },
        Reply::Http {
            status,
            retry_after,
            body,
        } => {
            let header_ms = retry_after_header(retry_after.as_deref());
            let body = match body {
                Ok(body) => body,
                Err(e) => {
                    return Outcome::Unknown {
                        code: None,
                        message: format!("HTTP {status}, response body lost: {e}"),
                        cause: None,
                    };
                }
            };
            match WriteOutcome::parse(body) {
                Some(outcome) => from_protocol(*status, outcome, header_ms),
                None => from_bare_status(*status, header_ms),
            }
        }
    }
}

fn from_protocol(status: u16, outcome: WriteOutcome, header_ms: Option<u64>) -> Outcome {
    match outcome {
        WriteOutcome::Landed(l) if status == 200 => Outcome::Landed {
            duplicate: l.duplicate,
            last_client_seq: l.last_client_seq,
        },
        WriteOutcome::Retry(f) => Outcome::Retry {
            code: Some(f.code),
            message: f.message,
            retry_after_ms: f.retry_after_ms.or(header_ms),
        },
        WriteOutcome::Unauthorized(f) if status == 401 => Outcome::Unauthorized {
            code: f.code,
            message: f.message,
        },
        WriteOutcome::Rejected(f) if (400..500).contains(&status) => Outcome::Rejected {
            conflict: f
                .conflict
                .filter(|_| f.code == OPTIMISTIC_CONCURRENCY_VIOLATION)
                .map(|c| *c),
            code: f.code,
            message: f.message,
        },
        WriteOutcome::Unknown(f) => Outcome::Unknown {
            code: Some(f.code),
            message: f.message,
            cause: None,
        },
        // A body that contradicts its status proves nothing: treat it as unknown.
        other => Outcome::Unknown {
            code: other.code(),
            message: format!("HTTP {status} with a contradicting '{}' body", other.tag()),
            cause: None,
        },
    }
}

fn from_bare_status(status: u16, header_ms: Option<u64>) -> Outcome {
    let message = format!("HTTP {status} without a protocol body");
    match status {
        429 | 503 => Outcome::Retry {
            code: None,
            message,
            retry_after_ms: header_ms,
        },
        413 => Outcome::Rejected {
            code: g::BODY_TOO_LARGE,
            message,
            conflict: None,
        },
        // A proxy or misconfiguration (401, 403, 404, 3xx, ...): never drop, wait long.
        300..=499 => Outcome::Retry {
            code: None,
            message,
            retry_after_ms: Some(
                header_ms.unwrap_or(celeriant_sync_protocol::outcome::OPERATOR_RETRY_AFTER_MS),
            ),
        },
        // 5xx and anything else, including a 200 we cannot read: may have landed.
        _ => Outcome::Unknown {
            code: None,
            message,
            cause: None,
        },
    }
}

/// What to do with the pinned batch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Its events up to `through` landed; the rest (if any) stays pinned.
    Settle {
        /// Highest landed sequence within the batch.
        through: u64,
        /// The answer was a 2002.
        duplicate: bool,
    },
    /// Resend it unchanged after `delay_ms`.
    Resend {
        /// The wait.
        delay_ms: u64,
        /// The failure's code, if any.
        code: Option<u32>,
        /// Why.
        message: String,
        /// Whether nothing reached the gateway (a network error): the client may be offline.
        network: bool,
    },
    /// The session was refused: open a new one, then resend it unchanged after `delay_ms`
    /// (0 the first time: an expired session is expected and renewed at once).
    Reauthenticate {
        /// The wait before the new session is asked for.
        delay_ms: u64,
        /// The refusal's code.
        code: u32,
        /// Why.
        message: String,
    },
    /// Rejected with several events: pin its first event alone to find the offending one.
    Isolate {
        /// The rejection's code.
        code: u32,
        /// Why.
        message: String,
    },
    /// Stop the aggregate and surface the batch to the app.
    Park {
        /// The rejection's code.
        code: u32,
        /// Why.
        message: String,
    },
    /// Stop the aggregate and surface the batch to the app, flagged as possibly landed: an
    /// answer says part of a conditional batch landed, which an atomic guarded write cannot.
    ParkLanded {
        /// The code it is parked with.
        code: u32,
        /// Why.
        message: String,
    },
    /// A conditional batch got 2003: read the aggregate back to find out whether the batch
    /// itself landed (its own earlier attempt) before taking it as a conflict.
    Verify {
        /// Why (the 2003's message).
        message: String,
        /// The aggregate's version the 2003 reported, if its body named it.
        current_version: Option<u64>,
        /// The aggregate and the expected version the 2003 named, if its body did (checked
        /// against the batch before its `current_version` is trusted).
        named: Option<(AggregateRef, u64)>,
    },
}

impl Action {
    /// A 2003 on a conditional batch: read back first, with what the 2003 named.
    fn verify(message: String, conflict: Option<GuardConflict>) -> Self {
        Action::Verify {
            message,
            current_version: conflict.as_ref().map(|c| c.current_version),
            named: conflict.map(|c| (c.aggregate(), c.expected_version)),
        }
    }
}

/// Code used when a server's answer contradicts itself (a 2002 below the batch).
pub(crate) const PROTOCOL_VIOLATION: u32 = 0;

/// The message a 9001 parks an atomic write with: what the cluster's rule is and what to do.
pub(crate) fn shard_message(message: &str) -> String {
    format!(
        "{message} (the aggregates of this atomic write live on different shards of the \
         Celeriant cluster, so they can never be written together there: a cluster routes each \
         aggregate to shard `routing_id % num_shards`, where `routing_id` is its org id, \
         aggregate type id or aggregate id as fixed when the cluster was initialised; co-locate \
         aggregates that must change together, e.g. ids with equal `id % num_shards`, then \
         discard this write and append it again)"
    )
}

/// Decides what an outcome means for `batch` (`conditional`: a conditional append's batch,
/// carrying its version guard, or an atomic write with a guarded leg). `delay_ms(retry_after)` computes the backoff; `attempt` counts
/// the batch's failed attempts so far.
pub fn decide(
    batch: &Batch,
    conditional: bool,
    outcome: Outcome,
    attempt: u32,
    delay_ms: impl FnOnce(Option<u64>) -> u64,
) -> Action {
    if batch.atomic.is_some() {
        return decide_atomic(batch, conditional, outcome, attempt, delay_ms);
    }
    match outcome {
        Outcome::Landed {
            duplicate: false, ..
        } => Action::Settle {
            through: batch.last_seq,
            duplicate: false,
        },
        // A guarded write lands whole or not at all: a 2002 that proves less than all of a
        // conditional batch contradicts that. Never settle a prefix and re-pin the rest (that
        // would resend part of it under the same guard): park it, possibly landed.
        Outcome::Landed {
            duplicate: true,
            last_client_seq,
        } if conditional && last_client_seq.is_none_or(|l| l < batch.last_seq) => {
            Action::ParkLanded {
                code: PROTOCOL_VIOLATION,
                message: format!(
                    "the server answered 2002 on a conditional write with lastClientSeq {}, \
                     short of its last sequence {}: a guarded write lands whole or not at all; \
                     check the aggregate, then discard or append again",
                    last_client_seq.map_or_else(|| "missing".into(), |l| l.to_string()),
                    batch.last_seq
                ),
            }
        }
        Outcome::Landed {
            duplicate: true,
            last_client_seq: None,
        } => Action::Settle {
            through: batch.first_seq,
            duplicate: true,
        },
        Outcome::Landed {
            duplicate: true,
            last_client_seq: Some(last),
        } => {
            if last < batch.first_seq {
                Action::Park {
                    code: PROTOCOL_VIOLATION,
                    message: format!(
                        "the server answered 2002 with lastClientSeq {last}, below this batch's \
                         lowest sequence {}: another writer may be using this client id",
                        batch.first_seq
                    ),
                }
            } else {
                Action::Settle {
                    through: last.min(batch.last_seq),
                    duplicate: true,
                }
            }
        }
        Outcome::Retry {
            code,
            message,
            retry_after_ms,
        } => Action::Resend {
            delay_ms: delay_ms(retry_after_ms),
            code,
            message,
            network: false,
        },
        Outcome::Unknown {
            code,
            message,
            cause,
        } => Action::Resend {
            delay_ms: delay_ms(None),
            network: cause == Some(NoAnswer::Network),
            code,
            message,
        },
        Outcome::Unauthorized { code, message } => Action::Reauthenticate {
            delay_ms: if attempt == 0 { 0 } else { delay_ms(None) },
            code,
            message,
        },
        Outcome::Rejected {
            code: OPTIMISTIC_CONCURRENCY_VIOLATION,
            message,
            conflict,
        } if conditional => Action::verify(message, conflict),
        Outcome::Rejected { code, message, .. } if conditional => Action::Park { code, message },
        Outcome::Rejected { code, message, .. } if batch.count > 1 => {
            Action::Isolate { code, message }
        }
        Outcome::Rejected { code, message, .. } => Action::Park { code, message },
    }
}

/// [`decide`] for an atomic write (`docs/client.md`, "Atomic writes"): it lands whole or not at
/// all and is never re-cut. A 2002 on it says some leg's lowest sequence is already held by this
/// client id; since the write is pinned, resent only identically, and heads each of its
/// aggregates (nothing of this client id after it was sent before it), only this very write
/// can have put it there: the whole write landed.
fn decide_atomic(
    batch: &Batch,
    conditional: bool,
    outcome: Outcome,
    attempt: u32,
    delay_ms: impl FnOnce(Option<u64>) -> u64,
) -> Action {
    match outcome {
        // The aggregate it is about holds through `last`: landed atomically, that is through
        // its leg's last sequence. Short of every leg's last, it contradicts the write landing
        // whole: never settled.
        Outcome::Landed {
            duplicate: true,
            last_client_seq: Some(last),
        } if batch
            .atomic
            .as_deref()
            .map_or(&[][..], Vec::as_slice)
            .iter()
            .all(|leg| last < leg.last_seq) =>
        {
            Action::Park {
                code: PROTOCOL_VIOLATION,
                message: format!(
                    "the server answered 2002 on an atomic write with lastClientSeq {last}, short \
                 of every leg's last sequence: an atomic write lands whole, so either another \
                 writer uses this client id or the server broke atomicity; check the \
                 aggregates, then discard or append again"
                ),
            }
        }
        Outcome::Landed { duplicate, .. } => Action::Settle {
            through: batch.last_seq,
            duplicate,
        },
        Outcome::Rejected {
            code: OPTIMISTIC_CONCURRENCY_VIOLATION,
            message,
            conflict,
        } if conditional => Action::verify(message, conflict),
        Outcome::Rejected {
            code: SHARD_ROUTING_MULTIPLE_SHARDS,
            message,
            ..
        } => Action::Park {
            code: SHARD_ROUTING_MULTIPLE_SHARDS,
            message: shard_message(&message),
        },
        Outcome::Rejected { code, message, .. } => Action::Park { code, message },
        // Retry, unknown, unauthorized: as for any batch (identical resend).
        other => {
            let plain = Batch::plain(batch.aggregate, batch.first_seq, batch.last_seq, 1);
            decide(&plain, false, other, attempt, delay_ms)
        }
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
#[path = "classify_tests.rs"]
mod tests;

#[cfg(all(test, not(target_arch = "wasm32")))]
#[path = "classify_conflict_tests.rs"]
mod conflict_tests;

#[cfg(all(test, not(target_arch = "wasm32")))]
#[path = "classify_atomic_tests.rs"]
mod atomic_tests;
