//! `GET`/`PUT /v1/faults`: the fault injector's report and run-time rate changes. Routed only
//! when the gateway runs with `--faults`.

use axum::Json;
use axum::extract::State;
use celeriant_sync_protocol::codes::gateway as g;
use celeriant_sync_protocol::faults::{FaultRates, FaultReport};

use crate::error::ApiError;
use crate::extract::ProtocolJson;
use crate::state::AppState;

fn injector(state: &AppState) -> Result<&crate::faults::FaultInjector, ApiError> {
    state.faults.as_deref().ok_or_else(ApiError::not_found)
}

/// `GET`: seed, rates, counts.
pub async fn report(State(state): State<AppState>) -> Result<Json<FaultReport>, ApiError> {
    Ok(Json(injector(&state)?.report()))
}

/// `PUT`: new rates; answers the new report.
pub async fn set(
    State(state): State<AppState>,
    ProtocolJson(rates): ProtocolJson<FaultRates>,
) -> Result<Json<FaultReport>, ApiError> {
    injector(&state)?
        .set_rates(rates)
        .map(Json)
        .map_err(|m| ApiError::code(g::INVALID_FIELD, m))
}
