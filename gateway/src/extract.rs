//! The JSON body extractor whose every rejection is a typed protocol error.
//!
//! axum's own `Json` answers bad input with plain text. [`ProtocolJson`] instead refuses a
//! missing `application/json` content type (41500), a body over the limit (41300, checked on
//! `Content-Length` first and again while reading), invalid JSON (40000) and JSON of the wrong
//! shape (40001, with the path of the offending field, e.g. `writes[0].events[2].clientSeq`).

use axum::body::Body;
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, header};
use celeriant_sync_protocol::codes::gateway as g;
use serde::de::DeserializeOwned;

use crate::error::ApiError;
use crate::state::AppState;

/// A JSON body parsed strictly, with protocol errors.
pub struct ProtocolJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for ProtocolJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let (parts, body) = req.into_parts();
        read_json(&parts.headers, body, state.config.max_body_bytes)
            .await
            .map(ProtocolJson)
    }
}

/// Reads and parses a JSON body of at most `limit` bytes with the checks of [`ProtocolJson`]
/// (for handlers whose limit is not `--max-body-bytes`).
pub async fn read_json<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
) -> Result<T, ApiError> {
    let is_json = headers
        .get(header::CONTENT_TYPE)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.split(';').next())
        .is_some_and(|mime| mime.trim().eq_ignore_ascii_case("application/json"));
    if !is_json {
        return Err(ApiError::code(
            g::UNSUPPORTED_MEDIA_TYPE,
            "the body must be sent with Content-Type: application/json",
        ));
    }
    let too_large = || {
        ApiError::code(
            g::BODY_TOO_LARGE,
            format!("the body is over the {limit}-byte limit"),
        )
    };
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<usize>().ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large());
    }
    let bytes = read_limited(body, limit).await.map_err(|e| match e {
        ReadError::TooLarge => too_large(),
        ReadError::Io(m) => ApiError::code(g::MALFORMED_JSON, format!("body unreadable: {m}")),
    })?;
    parse(&bytes)
}

enum ReadError {
    TooLarge,
    Io(String),
}

async fn read_limited(body: Body, limit: usize) -> Result<axum::body::Bytes, ReadError> {
    axum::body::to_bytes(body, limit).await.map_err(|e| {
        let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
        while let Some(err) = source {
            if err.is::<http_body_util::LengthLimitError>() {
                return ReadError::TooLarge;
            }
            source = err.source();
        }
        ReadError::Io(e.to_string())
    })
}

/// Parses JSON, telling syntax errors (40000) from shape errors (40001, with the field path).
pub fn parse<T: DeserializeOwned>(bytes: &[u8]) -> Result<T, ApiError> {
    let mut de = serde_json::Deserializer::from_slice(bytes);
    let value = serde_path_to_error::deserialize(&mut de).map_err(|e| {
        let path = e.path().to_string();
        let inner = e.into_inner();
        if inner.is_syntax() || inner.is_eof() || inner.is_io() {
            ApiError::code(g::MALFORMED_JSON, format!("malformed JSON: {inner}"))
        } else if path == "." {
            ApiError::code(g::INVALID_FIELD, format!("invalid body: {inner}"))
        } else {
            ApiError::code(g::INVALID_FIELD, format!("invalid field {path}: {inner}"))
        }
    })?;
    de.end()
        .map_err(|e| ApiError::code(g::MALFORMED_JSON, format!("malformed JSON: {e}")))?;
    Ok(value)
}
