//! One error type for every HTTP answer that is not a success, rendering the protocol's body.
//!
//! Whatever goes wrong — malformed JSON, a body over the limit, a validation failure, a store
//! that refused or could not be reached, an unknown route — the client receives the same shape:
//! `{"outcome": "...", "code": N, "message": "..."}` with the status the outcome calls for
//! (and `Retry-After` on `retry`). A client never has to parse axum's plain-text rejections.

use axum::Json;
use axum::http::{HeaderValue, StatusCode, header};
use axum::response::{IntoResponse, Response};
use celeriant_sync_protocol::WriteOutcome;
use celeriant_sync_protocol::codes::gateway as g;

/// An answer carrying a protocol outcome (usually a failure).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ApiError(pub WriteOutcome);

impl ApiError {
    /// An error from a code; the outcome follows the classification table.
    pub fn code(code: u32, message: impl Into<String>) -> Self {
        ApiError(WriteOutcome::from_code(code, message))
    }

    /// `404` with the protocol body.
    pub fn not_found() -> Self {
        Self::code(g::NOT_FOUND, "no such route")
    }

    /// The same error with the gateway's clock in its body (`serverTime`, Unix ms), as every
    /// answer of `POST /v1/session` has.
    pub fn with_server_time(mut self, now_ms: u64) -> Self {
        if let Some(f) = self.0.failure_mut() {
            f.server_time = Some(now_ms);
        }
        self
    }
}

impl From<WriteOutcome> for ApiError {
    fn from(outcome: WriteOutcome) -> Self {
        ApiError(outcome)
    }
}

impl IntoResponse for ApiError {
    fn into_response(self) -> Response {
        outcome_response(self.0)
    }
}

/// Renders any outcome with its status and, for `retry`, its `Retry-After` header (whole
/// seconds, rounded up; the body's `retryAfterMs` is exact). An `unauthorized` answer (401)
/// carries `WWW-Authenticate: Bearer`, as HTTP requires of a 401.
pub fn outcome_response(outcome: WriteOutcome) -> Response {
    let status =
        StatusCode::from_u16(outcome.http_status()).unwrap_or(StatusCode::INTERNAL_SERVER_ERROR);
    let retry_after = match &outcome {
        WriteOutcome::Retry(f) => f.retry_after_ms,
        _ => None,
    };
    let unauthorized = matches!(outcome, WriteOutcome::Unauthorized(_));
    let answered = crate::observe::Answered {
        outcome: outcome.tag(),
        code: outcome.code(),
    };
    let mut response = (status, Json(outcome)).into_response();
    response.extensions_mut().insert(answered);
    if unauthorized {
        response.headers_mut().insert(
            header::WWW_AUTHENTICATE,
            HeaderValue::from_static("Bearer realm=\"celeriant-gateway\""),
        );
    }
    if let Some(ms) = retry_after {
        let secs = ms.div_ceil(1000).max(1);
        response
            .headers_mut()
            .insert(header::RETRY_AFTER, HeaderValue::from(secs));
    }
    response
}
