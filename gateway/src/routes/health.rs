//! `GET /healthz`: 200 when the backend answers and can take writes; otherwise the reason,
//! with a non-200 status an orchestrator can act on.
//!
//! A degraded answer is both: the health fields (`"status": "degraded"`, `reason`, the store's
//! state) and the outcome fields a protocol client reads (`"outcome": "retry"`, `code`,
//! `retryAfterMs`), with the outcome's status — 503 while the store reopens after an I/O error
//! (50301) or cannot be reached (50300), 507 while its disk is under the free-space floor
//! (50700). The embedded store also reports its free space, its checksum failures and how
//! often it recovered, healthy or not.

use axum::Json;
use axum::body::Body;
use axum::extract::State;
use axum::response::{IntoResponse, Response};
use celeriant_sync_protocol::PROTOCOL_VERSION;
use celeriant_sync_protocol::wire::Health;

use crate::error::outcome_response;
use crate::state::AppState;

/// The handler.
pub async fn health(State(state): State<AppState>) -> Response {
    let mut health = Health {
        status: "ok".into(),
        backend: state.backend.name().into(),
        protocol: PROTOCOL_VERSION,
        faults: state.faults.is_some(),
        reason: None,
        store: state.backend.store_health(),
    };
    let problem = match state.backend.write_gate() {
        Err(e) => Some(e),
        Ok(()) => state.backend.health().await.err(),
    };
    let Some(problem) = problem else {
        return Json(health).into_response();
    };
    let outcome = problem.into_outcome();
    health.status = "degraded".into();
    health.reason = outcome.failure().map(|f| f.message.clone());
    let mut body = serde_json::to_value(&outcome).unwrap_or_default();
    if let (Some(body), Ok(serde_json::Value::Object(fields))) =
        (body.as_object_mut(), serde_json::to_value(&health))
    {
        body.extend(fields);
    }
    let mut response = outcome_response(outcome);
    *response.body_mut() = Body::from(body.to_string());
    response
}
