//! `POST /v1/write`: admit, read, check, inject a fault if asked to, hand to the backend,
//! answer with the protocol outcome.
//!
//! Everything that can refuse a write without reading its body does so first, cheapest first:
//! the address's fair share (429, 42910), the session (401), the client id's fair share (429,
//! 42910), the content type (415) and declared length (413), the store's own gate (a disk under
//! its floor: 507; a store reopening after an I/O error: 503), then admission proper — a slot
//! among `--max-inflight`, the body's first 64 KiB (at most its declared length) within the
//! address's and the client id's share of `--write-buffer-bytes` (an eighth each, at least one
//! largest body; 429, 42910) and then from the budget itself (429, 42900). Only then is the body
//! read, its reservation growing as its bytes arrive (a declared length that never arrives holds
//! nothing more), within `--body-read-timeout-ms` and `--min-body-rate-bytes-per-sec` (408: the
//! slot and bytes released at once, the connection closed) and the body limit (413),
//! checked against the request proof's body hash (401, `crate::auth::proof`), parsed (400), checked against the session (403) and validated (400). Nothing is written in
//! any of these cases.
//!
//! The backend call runs in its own task, holding every admission guard, so a write handed to
//! the store completes (or fails) whatever happens to the HTTP exchange, and its slots are
//! given back exactly when the store answered: a client that times out, a connection the fault
//! injector breaks, or the request deadline (which answers 504 `unknown`, since the write may
//! still land). An injected delay ends early when the client goes away or the deadline passes;
//! the write then proceeds at once.

use std::sync::Arc;
use std::time::Instant;

use axum::body::Body;
use axum::extract::{FromRequestParts, Request, State};
use axum::response::{IntoResponse, Response};
use celeriant_sync_protocol::codes::{celeriant as cc, gateway as g};
use celeriant_sync_protocol::outcome::Failure;
use celeriant_sync_protocol::validate::validate_write;
use celeriant_sync_protocol::{WriteOutcome, WriteRequest};
use tokio::sync::oneshot;

use crate::access::{Actor, Principal};
use crate::auth::Session;
use crate::backend::{AggregateCommand, AggregateKey, WriteCommand};
use crate::error::{ApiError, outcome_response};
use crate::extract::{Pace, check_headers, parse, read_body_paced};
use crate::faults::Fault;
use crate::limits::budget::Reserved;
use crate::limits::connections::Slot as ConnSlot;
use crate::limits::fair::{Kind, Share};
use crate::limits::ip;
use crate::limits::notice::Throttle;
use crate::limits::share_bytes::SharedBytes;
use crate::state::AppState;

/// What a write holds from admission until the store answered.
struct Admitted {
    _share: Share,
    _slot: crate::limits::slots::Slot,
    bytes: Reserved,
    bytes_share: Vec<SharedBytes>,
    peer: std::net::IpAddr,
    client: Option<uuid::Uuid>,
    /// Most the reservation grows to: the declared length, or the body limit.
    wanted: usize,
    /// The connection's place in the pool (none without a socket: tests driving the router).
    conn: Option<Arc<ConnSlot>>,
}

/// Bytes reserved before a body's first byte is read: a declared length is reserved as its
/// bytes arrive, so a connection that declares 8 MiB and sends nothing holds at most this.
pub const FIRST_RESERVATION: usize = 64 << 10;

impl Admitted {
    /// Grows the reservation (budget and shares) to cover `total` bytes that arrived, doubling
    /// (at most to `wanted`) so a large body takes few steps; 429 (42910 / 42900) when they
    /// are not free — the body is then abandoned and the connection closed.
    fn grow(&mut self, state: &AppState, total: usize) -> Result<(), ApiError> {
        let have = self.bytes.bytes();
        if total <= have {
            return Ok(());
        }
        let target = total
            .max(have.saturating_mul(2))
            .min(self.wanted.max(total));
        let more = target - have;
        reserve_allows(state, self.peer, more)?;
        let share = state.write_share.take(self.peer, self.client, more)?;
        let bytes = state.write_bytes.reserve(more)?;
        self.bytes_share.push(share);
        self.bytes.merge(bytes);
        Ok(())
    }
}

/// What an address may hold of the write-body reserve: one body of the client's default
/// `maxBatchBytes`.
pub const LIGHT_BYTES: usize = 1 << 20;

/// The last quarter of `--write-buffer-bytes` is a reserve (`crate::limits::reserve`): taking
/// `more` bytes that would leave less than a quarter free is allowed only while the address
/// then holds at most [`LIGHT_BYTES`] (issue 26, hostile review: a few addresses each uploading
/// a large body fast and then stalling held the whole budget). Without a per-address share
/// (behind a proxy not named with `--trusted-proxy`) there is no reserve.
fn reserve_allows(state: &AppState, peer: std::net::IpAddr, more: usize) -> Result<(), ApiError> {
    crate::limits::reserve::check(
        &state.write_bytes,
        state.write_share.held_by(peer),
        more,
        LIGHT_BYTES,
        "several bodies",
    )
}

/// Everything before the body: fair share, session, headers, the store's gate, admission.
async fn admit(state: &AppState, request: Request) -> Result<(Session, Admitted, Body), ApiError> {
    let (mut parts, body) = request.into_parts();
    let peer = ip::peer(&parts.extensions);
    let conn = parts.extensions.get::<Arc<ConnSlot>>().cloned();
    let address = state.fair.address(Kind::Write, peer)?;
    let session = Session::from_request_parts(&mut parts, state).await?;
    let share = state.fair.client(Kind::Write, address, session.client_id)?;
    let limit = state.config.limits.max_body_bytes;
    let declared = check_headers(&parts.headers, limit)?;
    state
        .backend
        .write_gate()
        .map_err(|e| ApiError(e.into_outcome()))?;
    let established = session
        .client_id
        .filter(|c| state.auth.established.contains(c));
    let slot = state
        .admission
        .take(peer, established)
        .map_err(crate::limits::slots::refusal)?;
    let wanted = declared.unwrap_or(limit);
    let first = wanted.min(FIRST_RESERVATION);
    reserve_allows(state, peer, first)?;
    let bytes_share = state.write_share.take(peer, session.client_id, first)?;
    let bytes = state.write_bytes.reserve(first)?;
    let client = session.client_id;
    Ok((
        session,
        Admitted {
            _share: share,
            _slot: slot,
            bytes,
            bytes_share: vec![bytes_share],
            peer,
            client,
            wanted,
            conn,
        },
        body,
    ))
}

/// The handler.
pub async fn write(State(state): State<AppState>, request: Request) -> Response {
    let deadline = Instant::now() + state.request_timeout();
    let (session, mut admitted, body) = match admit(&state, request).await {
        Ok(admitted) => admitted,
        Err(e) => return e.into_response(),
    };
    let body_timeout = state
        .body_read_timeout()
        .min(deadline.saturating_duration_since(Instant::now()));
    let pace = Pace {
        timeout: body_timeout,
        min_rate: state.config.limits.min_body_rate_bytes_per_sec,
    };
    let limit = state.config.limits.max_body_bytes;
    let bytes = match read_body_paced(body, limit, pace, |total| admitted.grow(&state, total)).await
    {
        Ok(bytes) => bytes,
        // A body abandoned half-read (too slow, too late, no room for its bytes): what it
        // held goes back now, and its connection is closed (the rest of the body is not read).
        Err(e) => {
            drop(admitted);
            let mut response = e.into_response();
            response.headers_mut().insert(
                axum::http::header::CONNECTION,
                axum::http::HeaderValue::from_static("close"),
            );
            return response;
        }
    };
    let request: WriteRequest = match session.check_body(&bytes).and_then(|()| parse(&bytes)) {
        Ok(request) => request,
        Err(e) => return e.into_response(),
    };
    if let Err(e) = authorize(&session, &request) {
        // Throttled: a session may send refused writes as fast as its rate allows.
        static REFUSED_LOG: Throttle = Throttle::new();
        if let Some(suppressed) = REFUSED_LOG.allow() {
            tracing::warn!(summary = %Summary::of(&request), session = ?session.client_id, code = e.0.code(), suppressed, "write refused");
        }
        return e.into_response();
    }
    if let Err(e) = validate_write(&request, &state.limits) {
        return ApiError::code(e.code(), e.to_string()).into_response();
    }
    // From here the write may be applied: its connection must not be evicted until it is
    // answered; if it was evicted already, nothing is applied.
    let _committing = match admitted.conn.as_ref().map(|c| c.busy()) {
        Some(None) => return crate::limits::connections::evicted().into_response(),
        Some(Some(busy)) => Some(busy),
        None => None,
    };
    let summary = Summary::of(&request);
    let _in_flight = state.faults.as_ref().map(|f| f.enter(request.client_id));
    let types = request
        .writes
        .iter()
        .flat_map(|w| w.events.iter().map(|e| e.event_type));
    let fault = state.faults.as_ref().and_then(|f| f.draw(types));
    let command = to_command(&state, &session, request);
    let writer = session.client_id;
    let mut delay = None;
    match fault {
        Some(Fault::Reject(event_type)) => {
            let message = format!("injected fault: events of type {event_type} fail their schema");
            let outcome = WriteOutcome::from_code(cc::SCHEMA_VALIDATION_FAILED, message);
            return answered(&summary, fault, outcome);
        }
        Some(Fault::Inflight) => {
            return answered(&summary, fault, inflight_outcome(&command));
        }
        Some(Fault::Busy(retry_after)) => {
            let outcome = WriteOutcome::Retry(Failure {
                retry_after_ms: Some(retry_after.as_millis() as u64),
                ..Failure::new(cc::REPLICATION_BACKPRESSURE, "injected fault: server busy")
            });
            return answered(&summary, fault, outcome);
        }
        Some(Fault::ResetBeforeCommit) => {
            tracing::info!(%summary, ?fault, "write not applied; connection broken");
            return broken_connection();
        }
        Some(Fault::Delay(d)) => delay = Some(d),
        Some(Fault::DropAfterCommit) | None => {}
    }

    // Dropped with this handler: when the client goes away, or the deadline answers first.
    let (_present, gone) = oneshot::channel::<()>();
    let backend = state.backend.clone();
    let task = tokio::spawn(async move {
        let _admitted = admitted;
        if let Some(d) = delay {
            tokio::select! {
                () = tokio::time::sleep(d) => {}
                _ = gone => {}
            }
        }
        backend.write(command).await
    });
    let outcome = match tokio::time::timeout_at(deadline.into(), task).await {
        Err(_) => WriteOutcome::from_code(
            g::GATEWAY_TIMEOUT,
            format!(
                "no answer from the store within {:?}; the write may still land",
                state.request_timeout()
            ),
        ),
        Ok(Err(join)) => WriteOutcome::from_code(g::INTERNAL, format!("write task failed: {join}")),
        Ok(Ok(Ok(ack))) => {
            // A write of this device landed: it is established (`crate::auth::established`).
            if let Some(client) = writer {
                state.auth.established.mark(client);
            }
            WriteOutcome::landed(ack.aggregate_version)
        }
        Ok(Ok(Err(e))) => e.into_outcome(),
    };
    if fault == Some(Fault::DropAfterCommit) {
        tracing::info!(%summary, outcome = outcome.tag(), "write handled; response dropped");
        return broken_connection();
    }
    answered(&summary, fault, outcome)
}

/// The session may write as this client id, to these aggregate types.
fn authorize(session: &Session, request: &WriteRequest) -> Result<(), ApiError> {
    if session.actor == Actor::Operator {
        return Err(ApiError::code(
            g::AGGREGATE_FORBIDDEN,
            "the operator credential reads every aggregate and writes none",
        ));
    }
    session.check_client(request.client_id)?;
    request
        .writes
        .iter()
        .try_for_each(|w| session.check_type(w.aggregate.type_id))
}

fn answered(summary: &Summary, fault: Option<Fault>, outcome: WriteOutcome) -> Response {
    tracing::info!(
        %summary,
        ?fault,
        outcome = outcome.tag(),
        code = outcome.code(),
        "write answered"
    );
    outcome_response(outcome)
}

/// The injected 2013, shaped like a real one: an identical write is in flight, so the highest
/// sequence the server holds is that write's highest and the attempted one its lowest. Like
/// Celeriant's 2013, it speaks of one aggregate: the request's first write.
fn inflight_outcome(command: &WriteCommand) -> WriteOutcome {
    let events = command.writes.first().map_or(&[][..], |w| &w.events[..]);
    let lowest = events.first().map_or(0, |e| e.client_seq);
    let highest = events.last().map_or(0, |e| e.client_seq);
    WriteOutcome::Retry(Failure {
        retry_after_ms: Some(celeriant_sync_protocol::outcome::TRANSIENT_RETRY_AFTER_MS),
        last_client_seq: Some(highest),
        attempted_client_seq: Some(lowest),
        ..Failure::new(
            cc::INFLIGHT_DUPLICATE,
            "injected fault: identical write in flight",
        )
    })
}

fn to_command(state: &AppState, session: &Session, request: WriteRequest) -> WriteCommand {
    let org = state.config.org_id;
    let (principal, policy) = match &session.actor {
        Actor::Principal(p) => (p.clone(), Some(state.policy.clone())),
        // Refused in `authorize`; `--auth none`: the claimed device owns what it creates.
        Actor::Operator | Actor::Unchecked => (Principal::device(request.client_id), None),
    };
    WriteCommand {
        principal: Some(principal),
        policy,
        client_id: request.client_id,
        writes: request
            .writes
            .into_iter()
            .map(|w| AggregateCommand {
                key: AggregateKey {
                    org,
                    aggregate: w.aggregate,
                },
                allow_create: w.allow_create,
                expected_version: w.expected_version,
                enforce_client_idempotency: true,
                events: w.events,
            })
            .collect(),
    }
}

/// A response whose body fails at once, so hyper aborts the connection: the client sees a
/// network error and cannot know whether the write was applied.
fn broken_connection() -> Response {
    let failing = futures_util::stream::once(async {
        Err::<axum::body::Bytes, std::io::Error>(std::io::Error::new(
            std::io::ErrorKind::ConnectionReset,
            "injected fault: connection broken",
        ))
    });
    Response::new(Body::from_stream(failing))
}

/// What a write request was, for the log line: client, aggregates, sequence ranges, guards.
struct Summary(String);

impl Summary {
    fn of(request: &WriteRequest) -> Self {
        let mut s = format!("client={}", request.client_id);
        for w in &request.writes {
            let first = w.events.first().map_or(0, |e| e.client_seq);
            let last = w.events.last().map_or(0, |e| e.client_seq);
            s.push_str(&format!(
                " aggregate={}/{} seq={first}..={last}",
                w.aggregate.type_id, w.aggregate.id
            ));
            if let Some(expected) = w.expected_version {
                s.push_str(&format!(" expected={expected}"));
            }
        }
        Summary(s)
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
