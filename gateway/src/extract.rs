//! Reading request bodies: bounded in size and in time, and every rejection a typed protocol
//! error.
//!
//! axum's own `Json` answers bad input with plain text and reads whatever arrives, for as long
//! as it takes. Here a body is refused on its headers first — a missing `application/json`
//! content type (41500), a declared `Content-Length` over the limit (41300) — so a route can
//! decide admission *before* reading it ([`check_headers`]); then it is read with the limit
//! counted again (chunked bodies declare nothing) and within a deadline (408, 40800, `retry`:
//! a slow body holds nothing for long) ([`read_body`]; a write's body also at a minimum rate,
//! growing its reservation as its bytes arrive: [`read_body_paced`]); then parsed, telling invalid JSON
//! (40000) from JSON of the wrong shape (40001, with the path of the offending field, e.g.
//! `writes[0].events[2].clientSeq`) ([`parse`]).

use std::time::Duration;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequest, Request};
use axum::http::{HeaderMap, header};
use celeriant_sync_protocol::codes::gateway as g;
use celeriant_sync_protocol::encoding::parse_decimal;
use serde::de::DeserializeOwned;

use crate::error::ApiError;
use crate::state::AppState;

/// The body limit of [`ProtocolJson`]: control bodies (`PUT /v1/faults`) are small.
pub const CONTROL_BODY_BYTES: usize = 4096;

/// A small JSON control body parsed strictly, with protocol errors (at most
/// [`CONTROL_BODY_BYTES`], read within `--body-read-timeout-ms`).
pub struct ProtocolJson<T>(pub T);

impl<T: DeserializeOwned> FromRequest<AppState> for ProtocolJson<T> {
    type Rejection = ApiError;

    async fn from_request(req: Request, state: &AppState) -> Result<Self, Self::Rejection> {
        let (parts, body) = req.into_parts();
        read_json(
            &parts.headers,
            body,
            CONTROL_BODY_BYTES,
            state.body_read_timeout(),
        )
        .await
        .map(ProtocolJson)
    }
}

/// Reads and parses a JSON body of at most `limit` bytes within `timeout`, with every check of
/// this module.
pub async fn read_json<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    timeout: Duration,
) -> Result<T, ApiError> {
    check_headers(headers, limit)?;
    let bytes = read_body(body, limit, timeout).await?;
    parse(&bytes)
}

/// [`read_json`] at `pace`: the minimum rate too.
pub async fn read_json_paced<T: DeserializeOwned>(
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    pace: Pace,
) -> Result<T, ApiError> {
    check_headers(headers, limit)?;
    let bytes = read_body_paced(body, limit, pace, |_| Ok(())).await?;
    parse(&bytes)
}

/// [`read_json`] for a request under `session`, at `pace` (the minimum rate too: these
/// routes hold a write slot or a stream's place while they read): the body is checked against
/// the request proof's body hash (401) before it is parsed.
pub async fn read_json_proven<T: DeserializeOwned>(
    session: &crate::auth::Session,
    headers: &HeaderMap,
    body: Body,
    limit: usize,
    pace: Pace,
) -> Result<T, ApiError> {
    check_headers(headers, limit)?;
    let bytes = read_body_paced(body, limit, pace, |_| Ok(())).await?;
    session.check_body(&bytes)?;
    parse(&bytes)
}

/// The checks that need only the headers: `Content-Type: application/json` (415), then a
/// declared `Content-Length` within `limit` (413). Returns the declared length, if any.
pub fn check_headers(headers: &HeaderMap, limit: usize) -> Result<Option<usize>, ApiError> {
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
    let declared = headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(parse_decimal)
        .and_then(|n| usize::try_from(n).ok());
    if declared.is_some_and(|n| n > limit) {
        return Err(too_large(limit));
    }
    Ok(declared)
}

fn too_large(limit: usize) -> ApiError {
    ApiError::code(
        g::BODY_TOO_LARGE,
        format!("the body is over the {limit}-byte limit"),
    )
}

/// Reads the body, refusing it past `limit` bytes (413) or past `timeout` (408, 40800).
pub async fn read_body(body: Body, limit: usize, timeout: Duration) -> Result<Bytes, ApiError> {
    let read = axum::body::to_bytes(body, limit);
    match tokio::time::timeout(timeout, read).await {
        Err(_) => Err(timed_out(timeout)),
        Ok(Ok(bytes)) => Ok(bytes),
        Ok(Err(e)) => {
            let mut source: Option<&(dyn std::error::Error + 'static)> = Some(&e);
            while let Some(err) = source {
                if err.is::<http_body_util::LengthLimitError>() {
                    return Err(too_large(limit));
                }
                source = err.source();
            }
            Err(ApiError::code(
                g::MALFORMED_JSON,
                format!("body unreadable: {e}"),
            ))
        }
    }
}

/// How fast a body must arrive: within `timeout` in all, and, when `min_rate` (bytes per
/// second) is not 0, its n-th byte by [`BODY_RATE_GRACE`] + n / `min_rate` after its headers.
#[derive(Debug, Clone, Copy)]
pub struct Pace {
    /// `--body-read-timeout-ms` (or less: what is left of the request's deadline).
    pub timeout: Duration,
    /// `--min-body-rate-bytes-per-sec`; 0: none.
    pub min_rate: u64,
}

/// How long a body's first bytes may take after its headers before the minimum rate applies:
/// a retransmitted first segment on a lossy mobile link (1 s initial RTO) still makes it.
pub const BODY_RATE_GRACE: Duration = Duration::from_secs(2);

/// Reads the body frame by frame under `pace`, calling `grow(total)` before each frame is kept
/// (so the caller reserves memory for bytes that *arrived*, not for a declared length), and
/// refusing past `limit` (413), past the timeout (408, 40800) or as soon as the body falls
/// behind the minimum rate (408, 40800): the caller drops what it holds at once.
pub async fn read_body_paced(
    mut body: Body,
    limit: usize,
    pace: Pace,
    mut grow: impl FnMut(usize) -> Result<(), ApiError>,
) -> Result<Bytes, ApiError> {
    use http_body_util::BodyExt;
    let start = tokio::time::Instant::now();
    let end = start + pace.timeout;
    let mut chunks: Vec<Bytes> = Vec::new();
    let mut total = 0usize;
    loop {
        let due = match pace.min_rate {
            0 => end,
            rate => (start + BODY_RATE_GRACE + Duration::from_secs_f64(total as f64 / rate as f64))
                .min(end),
        };
        let frame = match tokio::time::timeout_at(due, body.frame()).await {
            Err(_) if due < end => {
                crate::observe::budget_refused("request bodies", "slow body");
                return Err(ApiError::code(
                    g::REQUEST_TIMEOUT,
                    format!(
                        "the body arrived slower than {} bytes/s ({total} bytes in {:?}); \
                         nothing was applied",
                        pace.min_rate,
                        start.elapsed()
                    ),
                ));
            }
            Err(_) => return Err(timed_out(pace.timeout)),
            Ok(None) => break,
            Ok(Some(Err(e))) => {
                return Err(ApiError::code(
                    g::MALFORMED_JSON,
                    format!("body unreadable: {e}"),
                ));
            }
            Ok(Some(Ok(frame))) => frame,
        };
        let Ok(data) = frame.into_data() else {
            continue;
        };
        let next = total.saturating_add(data.len());
        if next > limit {
            return Err(too_large(limit));
        }
        grow(next)?;
        total = next;
        chunks.push(data);
    }
    Ok(match chunks.len() {
        0 => Bytes::new(),
        1 => chunks.pop().unwrap_or_default(),
        _ => {
            let mut all = Vec::with_capacity(total);
            chunks.iter().for_each(|c| all.extend_from_slice(c));
            Bytes::from(all)
        }
    })
}

fn timed_out(timeout: Duration) -> ApiError {
    ApiError::code(
        g::REQUEST_TIMEOUT,
        format!("the body did not arrive within {timeout:?}; nothing was applied"),
    )
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

#[cfg(test)]
mod tests {
    use futures_util::StreamExt;
    use futures_util::stream;

    use super::*;

    fn chunks(parts: &[&'static [u8]]) -> Body {
        let items: Vec<Result<Bytes, std::io::Error>> =
            parts.iter().map(|p| Ok(Bytes::from_static(p))).collect();
        Body::from_stream(stream::iter(items))
    }

    /// Then nothing more, ever (a connection that declared more than it sends).
    fn then_stall(parts: &[&'static [u8]]) -> Body {
        let items: Vec<Result<Bytes, std::io::Error>> =
            parts.iter().map(|p| Ok(Bytes::from_static(p))).collect();
        Body::from_stream(stream::iter(items).chain(stream::pending()))
    }

    const PACE: Pace = Pace {
        timeout: Duration::from_secs(20),
        min_rate: 1000,
    };

    #[tokio::test]
    async fn the_reservation_grows_with_what_arrived_and_a_refusal_ends_the_read() {
        let mut seen = Vec::new();
        let bytes = read_body_paced(chunks(&[b"ab", b"cd", b"ef"]), 100, PACE, |n| {
            seen.push(n);
            Ok(())
        })
        .await
        .unwrap();
        assert_eq!((&bytes[..], seen), (&b"abcdef"[..], vec![2, 4, 6]));

        let refused = read_body_paced(chunks(&[b"ab", b"cd"]), 100, PACE, |n| {
            if n > 3 {
                Err(ApiError::code(g::GATEWAY_BUSY, "full"))
            } else {
                Ok(())
            }
        })
        .await;
        assert_eq!(refused.err().unwrap().0.code(), Some(g::GATEWAY_BUSY));

        let over = read_body_paced(chunks(&[b"abc", b"def"]), 4, PACE, |_| Ok(())).await;
        assert_eq!(over.err().unwrap().0.code(), Some(g::BODY_TOO_LARGE));
    }

    #[tokio::test(start_paused = true)]
    async fn a_body_behind_the_minimum_rate_is_cut_after_the_grace_not_the_timeout() {
        // 100 bytes buy 100 ms at 1000 B/s after the 2 s grace.
        let started = tokio::time::Instant::now();
        let cut = read_body_paced(then_stall(&[&[b' '; 100]]), 1 << 20, PACE, |_| Ok(())).await;
        assert_eq!(cut.err().unwrap().0.code(), Some(g::REQUEST_TIMEOUT));
        assert_eq!(started.elapsed(), Duration::from_millis(2_100));

        // Without a minimum, only the timeout.
        let started = tokio::time::Instant::now();
        let off = Pace {
            min_rate: 0,
            ..PACE
        };
        let cut = read_body_paced(then_stall(&[b"{"]), 1 << 20, off, |_| Ok(())).await;
        assert_eq!(cut.err().unwrap().0.code(), Some(g::REQUEST_TIMEOUT));
        assert_eq!(started.elapsed(), Duration::from_secs(20));
    }
}
