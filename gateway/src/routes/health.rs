//! `GET /healthz`: 200 when the backend answers, 503 (`retry`) when it does not.

use axum::Json;
use axum::extract::State;
use celeriant_sync_protocol::PROTOCOL_VERSION;
use celeriant_sync_protocol::wire::Health;

use crate::error::ApiError;
use crate::state::AppState;

/// The handler.
pub async fn health(State(state): State<AppState>) -> Result<Json<Health>, ApiError> {
    state
        .backend
        .health()
        .await
        .map_err(|e| ApiError(e.into_outcome()))?;
    Ok(Json(Health {
        status: "ok".into(),
        backend: state.backend.name().into(),
        protocol: PROTOCOL_VERSION,
        faults: state.faults.is_some(),
        reason: None,
        store: None,
    }))
}
