//! `GET`/`PUT /v1/faults`: the fault injector's report and run-time rate changes, and
//! `POST /v1/faults/trim`, the trim test hook. Routed only when the gateway runs with
//! `--faults` (which is refused beyond loopback), behind the faults secret
//! (`crate::auth::faults_secret`, checked before these handlers run).
//!
//! The report's `counts` also carry the open change streams: `watchStreams` and
//! `watchStreamsByClient` (`{clientId: n}`), so a test can check "one stream per device".

use axum::Json;
use axum::extract::State;
use celeriant_sync_protocol::AggregateRef;
use celeriant_sync_protocol::codes::gateway as g;
use celeriant_sync_protocol::encoding::MAX_SAFE_INTEGER;
use celeriant_sync_protocol::faults::FaultRates;
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::backend::AggregateKey;

use crate::error::ApiError;
use crate::extract::ProtocolJson;
use crate::state::AppState;

fn injector(state: &AppState) -> Result<&crate::faults::FaultInjector, ApiError> {
    state.faults.as_deref().ok_or_else(ApiError::not_found)
}

fn with_streams(state: &AppState, report: impl serde::Serialize) -> Result<Json<Value>, ApiError> {
    let mut report =
        serde_json::to_value(report).map_err(|e| ApiError::code(g::INTERNAL, e.to_string()))?;
    let (streams, by_client) = state.watch.counts();
    if let Some(counts) = report.get_mut("counts").and_then(Value::as_object_mut) {
        counts.insert("watchStreams".into(), json!(streams));
        counts.insert("watchStreamsByClient".into(), json!(by_client));
    }
    Ok(Json(report))
}

/// `GET`: seed, rates, counts (with the open change streams).
pub async fn report(State(state): State<AppState>) -> Result<Json<Value>, ApiError> {
    with_streams(&state, injector(&state)?.report())
}

/// `PUT`: new rates; answers the new report.
pub async fn set(
    State(state): State<AppState>,
    ProtocolJson(rates): ProtocolJson<FaultRates>,
) -> Result<Json<Value>, ApiError> {
    let report = injector(&state)?
        .set_rates(rates)
        .map_err(|m| ApiError::code(g::INVALID_FIELD, m))?;
    with_streams(&state, report)
}

/// The trim hook's body.
#[derive(Debug, Deserialize)]
#[serde(rename_all = "camelCase", deny_unknown_fields)]
pub struct TrimRequest {
    /// The aggregate's type.
    pub type_id: Uuid,
    /// The aggregate's id.
    pub id: Uuid,
    /// Remove the batches below this version; it becomes the lowest available.
    pub before: u64,
}

/// `POST /v1/faults/trim`: trims an aggregate (embedded store), answers
/// `{"minVersion": N}`; watchers of it get `reset`.
pub async fn trim(
    State(state): State<AppState>,
    ProtocolJson(request): ProtocolJson<TrimRequest>,
) -> Result<Json<Value>, ApiError> {
    injector(&state)?;
    if request.before == 0 || request.before > MAX_SAFE_INTEGER {
        return Err(ApiError::code(
            g::INVALID_FIELD,
            "before must be an integer in 1..2^53",
        ));
    }
    let key = AggregateKey {
        org: state.config.org_id,
        aggregate: AggregateRef {
            type_id: request.type_id,
            id: request.id,
        },
    };
    let min = state
        .backend
        .trim(key, request.before)
        .await
        .map_err(|e| ApiError(e.into_outcome()))?;
    Ok(Json(json!({ "minVersion": min })))
}
