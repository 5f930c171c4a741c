//! `POST /v1/write`: check the session, validate, inject a fault if asked to, hand to the
//! backend, answer with the protocol outcome.
//!
//! A missing or invalid session is refused (401) before the body is read; a body whose
//! `clientId` is not the session's, or that names an aggregate type outside the session's
//! access list, is refused (403) before validation. Nothing is written in either case.
//!
//! The backend call runs in its own task, so a write handed to the store completes (or fails)
//! whatever happens to the HTTP exchange: a client that times out, a connection the fault
//! injector breaks, or the gateway's own request timeout (which answers 504 `unknown`, since the
//! write may still land).

use std::time::Duration;

use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use celeriant_sync_protocol::codes::{celeriant as cc, gateway as g};
use celeriant_sync_protocol::outcome::Failure;
use celeriant_sync_protocol::validate::validate_write;
use celeriant_sync_protocol::{WriteOutcome, WriteRequest};

use crate::auth::Session;
use crate::backend::{AggregateCommand, AggregateKey, WriteCommand};
use crate::error::{ApiError, outcome_response};
use crate::extract::ProtocolJson;
use crate::faults::Fault;
use crate::state::AppState;

/// The handler.
pub async fn write(
    State(state): State<AppState>,
    session: Session,
    ProtocolJson(request): ProtocolJson<WriteRequest>,
) -> Response {
    if let Err(e) = authorize(&session, &request) {
        tracing::warn!(summary = %Summary::of(&request), session = ?session.client_id, code = e.0.code(), "write refused");
        return e.into_response();
    }
    if let Err(e) = validate_write(&request, &state.limits) {
        return ApiError::code(e.code(), e.to_string()).into_response();
    }
    let Ok(permit) = state.admission.clone().try_acquire_owned() else {
        return ApiError::code(
            g::GATEWAY_BUSY,
            "too many writes in progress; retry shortly",
        )
        .into_response();
    };
    let summary = Summary::of(&request);
    let _in_flight = state.faults.as_ref().map(|f| f.enter(request.client_id));
    let types = request
        .writes
        .iter()
        .flat_map(|w| w.events.iter().map(|e| e.event_type));
    let fault = state.faults.as_ref().and_then(|f| f.draw(types));
    let command = to_command(&state, request);
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

    let backend = state.backend.clone();
    let task = tokio::spawn(async move {
        let _permit = permit;
        if let Some(d) = delay {
            tokio::time::sleep(d).await;
        }
        backend.write(command).await
    });
    let timeout = Duration::from_millis(state.config.request_timeout_ms);
    let outcome = match tokio::time::timeout(timeout, task).await {
        Err(_) => WriteOutcome::from_code(
            g::GATEWAY_TIMEOUT,
            format!("no answer from the store within {timeout:?}; the write may still land"),
        ),
        Ok(Err(join)) => WriteOutcome::from_code(g::INTERNAL, format!("write task failed: {join}")),
        Ok(Ok(Ok(ack))) => WriteOutcome::landed(ack.aggregate_version),
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

fn to_command(state: &AppState, request: WriteRequest) -> WriteCommand {
    let org = state.config.org_id;
    WriteCommand {
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
                expected_version: None,
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

/// What a write request was, for the log line: client, aggregates, sequence ranges.
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
        }
        Summary(s)
    }
}

impl std::fmt::Display for Summary {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}
