//! `POST /v1/backup` and `GET /v1/backup`: the operator starts a consistent copy of the
//! embedded store while the gateway runs, and asks how it went
//! (`crate::backend::embedded::backup` says how and what the copy is).
//!
//! A backup is a job: the POST answers 202 with the directory the copy will have as soon as it
//! started (a copy of a large store outlasts any request deadline), and the GET says whether
//! one runs and how the last one ended. Only the operator credential is accepted (like
//! `/v1/revocations`), and every use is logged at WARN. One backup runs at a time (42900 while
//! another does); a disk without room for the copy is 507 (50700), nothing written. The
//! Celeriant backend holds no data of its own: 404 (40400), back up the cluster.

use axum::Json;
use axum::extract::{Request, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use serde_json::{Value, json};

use super::revocations::operator_only;
use crate::backend::embedded::backup::Status;
use crate::error::ApiError;
use crate::limits::fair::Kind;
use crate::limits::ip;
use crate::state::AppState;

/// The route.
pub const BACKUP_PATH: &str = "/v1/backup";

/// `POST /v1/backup` → 202 `{"dir", "state": "running"}`.
pub async fn start(State(state): State<AppState>, request: Request) -> Response {
    let started = (|| {
        let (parts, _) = request.into_parts();
        let _address = state
            .fair
            .address(Kind::Read, ip::peer(&parts.extensions))?;
        operator_only(&state, &parts)?;
        tracing::warn!("backup started with the operator credential");
        let dir = state
            .backend
            .backup()
            .map_err(|e| ApiError(e.into_outcome()))?;
        Ok::<_, ApiError>(json!({"dir": dir.display().to_string(), "state": "running"}))
    })();
    match started {
        Ok(value) => (StatusCode::ACCEPTED, Json(value)).into_response(),
        Err(e) => e.into_response(),
    }
}

/// `GET /v1/backup` → `{"running": dir | null, "last": {"dir", "state": "made", "rows",
/// "bytes", "tookMs"} | {"dir", "state": "failed", "error"} | null}`.
pub async fn get(State(state): State<AppState>, request: Request) -> Response {
    let answered = (|| {
        let (parts, _) = request.into_parts();
        let _address = state
            .fair
            .address(Kind::Read, ip::peer(&parts.extensions))?;
        operator_only(&state, &parts)?;
        let status = state
            .backend
            .backup_status()
            .map_err(|e| ApiError(e.into_outcome()))?;
        Ok::<_, ApiError>(describe(&status))
    })();
    match answered {
        Ok(value) => Json(value).into_response(),
        Err(e) => e.into_response(),
    }
}

fn describe(status: &Status) -> Value {
    let last = match &status.last {
        None => Value::Null,
        Some(Ok(b)) => json!({
            "dir": b.dir.display().to_string(),
            "state": "made",
            "rows": b.rows,
            "bytes": b.bytes,
            "tookMs": b.took_ms,
        }),
        Some(Err((dir, why))) => json!({
            "dir": dir.display().to_string(),
            "state": "failed",
            "error": why,
        }),
    };
    json!({
        "running": status.running.as_ref().map(|d| d.display().to_string()),
        "last": last,
    })
}
