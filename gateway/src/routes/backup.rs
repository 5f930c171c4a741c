//! `POST /v1/backup`: the operator takes a consistent copy of the embedded store while the
//! gateway runs (`crate::backend::embedded::backup` says how and what the copy is).
//!
//! Only the operator credential is accepted (like `/v1/revocations`), and every use is logged
//! at WARN. One backup runs at a time (42900 while another does); a disk without room for the
//! copy above `--min-free-bytes` is 507 (50700), nothing written. The Celeriant backend holds
//! no data of its own: 404 (40400), back up the cluster.

use axum::Json;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::revocations::operator_only;
use crate::error::ApiError;
use crate::limits::fair::Kind;
use crate::limits::ip;
use crate::state::AppState;

/// The route.
pub const BACKUP_PATH: &str = "/v1/backup";

/// `POST /v1/backup` → `{"dir", "rows", "bytes", "tookMs"}`.
pub async fn backup(State(state): State<AppState>, request: Request) -> Response {
    match make(&state, request).await {
        Ok(value) => Json(value).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn make(state: &AppState, request: Request) -> Result<Value, ApiError> {
    let (parts, _) = request.into_parts();
    let _address = state
        .fair
        .address(Kind::Read, ip::peer(&parts.extensions))?;
    operator_only(state, &parts)?;
    tracing::warn!("backup requested with the operator credential");
    let made = state
        .backend
        .backup()
        .await
        .map_err(|e| ApiError(e.into_outcome()))?;
    Ok(json!({
        "dir": made.dir.display().to_string(),
        "rows": made.rows,
        "bytes": made.bytes,
        "tookMs": made.took_ms,
    }))
}
