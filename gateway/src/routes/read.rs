//! `GET /v1/aggregates/{typeId}/{id}/events?from=N`: one size-bounded page of an aggregate's
//! batches, in version order. An unknown aggregate reads as an empty page. Needs a session
//! (401 without one) whose access list includes the aggregate's type (403 otherwise).

use std::collections::HashMap;

use axum::Json;
use axum::extract::{Path, Query, State};
use celeriant_sync_protocol::codes::gateway as g;
use celeriant_sync_protocol::encoding::MAX_SAFE_INTEGER;
use celeriant_sync_protocol::{AggregateRef, ReadResponse};
use uuid::Uuid;

use crate::auth::Session;
use crate::backend::{AggregateKey, ReadQuery};
use crate::error::ApiError;
use crate::state::AppState;

/// Payload bytes after which a page is closed.
pub const PAGE_BYTES: usize = 1 << 20;
/// Most batches in a page.
pub const PAGE_BATCHES: usize = 1_000;

fn uuid_param(name: &str, value: &str) -> Result<Uuid, ApiError> {
    Uuid::parse_str(value).map_err(|e| {
        ApiError::code(
            g::INVALID_QUERY,
            format!("{name} {value:?} is not a UUID: {e}"),
        )
    })
}

fn u64_param(params: &HashMap<String, String>, name: &str, default: u64) -> Result<u64, ApiError> {
    match params.get(name) {
        None => Ok(default),
        Some(v) => v
            .parse::<u64>()
            .ok()
            .filter(|n| *n <= MAX_SAFE_INTEGER)
            .ok_or_else(|| {
                ApiError::code(
                    g::INVALID_QUERY,
                    format!("{name}={v:?} is not an integer in 0..2^53"),
                )
            }),
    }
}

/// The handler.
pub async fn events(
    State(state): State<AppState>,
    session: Session,
    Path((type_id, id)): Path<(String, String)>,
    Query(params): Query<HashMap<String, String>>,
) -> Result<Json<ReadResponse>, ApiError> {
    let aggregate = AggregateRef {
        type_id: uuid_param("typeId", &type_id)?,
        id: uuid_param("id", &id)?,
    };
    session.check_type(aggregate.type_id)?;
    if let Some(unknown) = params
        .keys()
        .find(|k| !matches!(k.as_str(), "from" | "limit"))
    {
        return Err(ApiError::code(
            g::INVALID_QUERY,
            format!("unknown query parameter {unknown:?}"),
        ));
    }
    let from_version = u64_param(&params, "from", 1)?.max(1);
    let max_batches =
        (u64_param(&params, "limit", PAGE_BATCHES as u64)? as usize).clamp(1, PAGE_BATCHES);
    let query = ReadQuery {
        key: AggregateKey {
            org: state.config.org_id,
            aggregate,
        },
        from_version,
        max_bytes: PAGE_BYTES,
        max_batches,
    };
    let page = state
        .backend
        .read(query)
        .await
        .map_err(|e| ApiError(e.into_outcome()))?;
    Ok(Json(ReadResponse {
        batches: page.batches,
        next: page.next,
    }))
}
