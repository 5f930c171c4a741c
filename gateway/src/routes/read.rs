//! `GET /v1/aggregates/{typeId}/{id}/events?from=N&limit=M`: one size-bounded page of an
//! aggregate's batches, in version order. An unknown aggregate reads as an empty page. Needs a
//! session (401 without one) whose access list includes the aggregate's type (403 otherwise).
//!
//! Reads are bounded like writes: the address's and the client id's fair share (429, 42910),
//! then the page's bytes reserved from `--read-buffer-bytes` before the store is touched (429,
//! 42900), held until the response has been handed to the connection; once the page's size is
//! known, it must also fit the address's and the client id's share of that budget (429, 42910:
//! a client that asks for pages and never reads them holds at most an eighth). The last quarter
//! of the budget is a reserve for light addresses (`crate::limits::reserve`): a reservation
//! that would leave less than a quarter free is allowed only while the address then holds at
//! most one page (`--read-page-bytes`; 429, 42900), checked as each reservation is made and
//! once more when the page is counted in the address's share (pages asked for at once are
//! counted there only when rendered). A page holds at most `--read-page-bytes` of response,
//! unless its first batch alone is larger: that batch is then served alone, once its size could
//! be reserved too. The router's deadline bounds the whole.
//!
//! The access policy applies (`crate::access`): an aggregate the session may not read is
//! answered exactly as one that does not exist (an empty page, `tip` 0), so a read is no
//! existence oracle.
//!
//! Every page carries `tip`, the aggregate's version when it was read. A read from below a
//! trimmed aggregate's lowest available version is answered **410** with
//! `{"outcome":"rejected","code":1000,"message":…,"minVersion":N}` (Celeriant's
//! BatchIndexUnavailable): the client drops what it holds of the aggregate and reads from N.

use std::collections::HashMap;

use axum::body::{Body, Bytes};
use axum::extract::{FromRequestParts, Path, Query, Request, State};
use axum::http::{HeaderValue, header};
use axum::response::{IntoResponse, Response};
use celeriant_sync_protocol::AggregateRef;
use celeriant_sync_protocol::codes::gateway as g;
use celeriant_sync_protocol::encoding::{MAX_SAFE_INTEGER, parse_decimal};
use uuid::Uuid;

use crate::auth::Session;
use crate::backend::{AggregateKey, BackendError, JsonPage, ReadQuery};
use crate::error::ApiError;
use crate::limits::budget::Reserved;
use crate::limits::fair::Kind;
use crate::limits::ip;
use crate::limits::share_bytes::SharedBytes;
use crate::routes::members::readable;
use crate::serve::activity::Activity;
use crate::state::AppState;

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

/// The aggregate a `/v1/aggregates/{typeId}/{id}/…` path names (reads and members).
pub(crate) async fn aggregate_of(
    parts: &mut axum::http::request::Parts,
    state: &AppState,
) -> Result<AggregateRef, ApiError> {
    let Path((type_id, id)) = Path::<(String, String)>::from_request_parts(parts, state)
        .await
        .map_err(|e| ApiError::code(g::INVALID_QUERY, e.body_text()))?;
    Ok(AggregateRef {
        type_id: uuid_param("typeId", &type_id)?,
        id: uuid_param("id", &id)?,
    })
}

fn u64_param(params: &HashMap<String, String>, name: &str, default: u64) -> Result<u64, ApiError> {
    match params.get(name) {
        None => Ok(default),
        Some(v) => parse_decimal(v)
            .filter(|n| *n <= MAX_SAFE_INTEGER)
            .ok_or_else(|| {
                ApiError::code(
                    g::INVALID_QUERY,
                    format!("{name}={v:?} is not an integer in 0..2^53 (ASCII digits only)"),
                )
            }),
    }
}

/// The handler.
pub async fn events(State(state): State<AppState>, request: Request) -> Response {
    match page(&state, request).await {
        Ok(response) => response,
        Err(e) => e.into_response(),
    }
}

async fn page(state: &AppState, request: Request) -> Result<Response, ApiError> {
    let (mut parts, _) = request.into_parts();
    let peer = ip::peer(&parts.extensions);
    let connection = parts.extensions.get::<Activity>().cloned();
    // Pages this connection served before and that have left its socket since are given back
    // first (on a keep-alive connection the client has read them before it asks again).
    if let Some(connection) = &connection {
        connection.unsent().settle();
    }
    let address = state.fair.address(Kind::Read, peer)?;
    let session = Session::from_request_parts(&mut parts, state).await?;
    let aggregate = aggregate_of(&mut parts, state).await?;
    session.check_type(aggregate.type_id)?;
    let _share = state.fair.client(Kind::Read, address, session.client_id)?;
    let Query(params) = Query::<HashMap<String, String>>::from_request_parts(&mut parts, state)
        .await
        .map_err(|e| ApiError::code(g::INVALID_QUERY, e.body_text()))?;
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
    let mut query = ReadQuery {
        key: AggregateKey {
            org: state.config.org_id,
            aggregate,
        },
        from_version,
        max_bytes: state.config.limits.read_page_bytes,
        max_batches,
    };
    // An aggregate the session may not read answers exactly as one that does not exist.
    if !readable(state, &session, query.key).await? {
        return Ok(json_response(Bytes::from_static(EMPTY_PAGE)));
    }
    let mut reserved = reserve_more(state, peer, 0, query.max_bytes)?;
    let body = loop {
        let page = match state.backend.read_json(query).await {
            Err(BackendError::Trimmed { min_version }) => return Ok(trimmed(min_version)),
            Err(e) => return Err(ApiError(e.into_outcome())),
            Ok(page) => page,
        };
        match page {
            JsonPage::Body(body) => break body,
            JsonPage::Needs(bytes) if bytes > reserved.bytes() => {
                let more = bytes - reserved.bytes();
                reserved.merge(reserve_more(state, peer, reserved.bytes(), more)?);
                query.max_bytes = bytes;
            }
            // The store asked for no more than it had: serve what fits rather than loop.
            JsonPage::Needs(_) => {
                return Err(ApiError::code(
                    g::INTERNAL,
                    "the store could not fit one batch in its own estimate",
                ));
            }
        }
    };
    // A store that renders its page itself (the Celeriant backend) may go over the estimate:
    // reserve what it took, or refuse rather than hold more than the budget allows.
    if body.len() > reserved.bytes() {
        let more = body.len() - reserved.bytes();
        reserved.merge(reserve_more(state, peer, reserved.bytes(), more)?);
    }
    reserved.shrink_to(body.len());
    let share = state.read_share.take(peer, session.client_id, body.len())?;
    // Once more with this page in the address's share: pages asked for at once each passed
    // the checks above before any of them was counted there.
    light_reserve(state, state.read_share.held_by(peer), 0)?;
    let mut response = Response::new(held(Bytes::from(body), reserved, share, connection));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    Ok(response)
}

/// What a heavy address holds, in the reserve's refusal.
const HEAVY: &str = "pages it has not read";

/// The read budget's reserve for light addresses: `held` of the address bucket (`None`: no
/// per-address share, no reserve), `more` to take, one page (`--read-page-bytes`) light.
fn light_reserve(state: &AppState, held: Option<usize>, more: usize) -> Result<(), ApiError> {
    let light = state.config.limits.read_page_bytes;
    crate::limits::reserve::check(&state.read_bytes, held, more, light, HEAVY)
}

/// `more` bytes of the read budget for a page of `peer` that has reserved `have` already,
/// within the reserve for light addresses (what the address holds counts this page too).
fn reserve_more(
    state: &AppState,
    peer: std::net::IpAddr,
    have: usize,
    more: usize,
) -> Result<Reserved, ApiError> {
    let held = state
        .read_share
        .held_by(peer)
        .map(|h| h.saturating_add(have));
    light_reserve(state, held, more)?;
    state.read_bytes.reserve(more)
}

/// The page of an aggregate that does not exist, byte for byte as the store renders it.
pub const EMPTY_PAGE: &[u8] = br#"{"batches":[],"next":null,"tip":0}"#;

fn json_response(body: Bytes) -> Response {
    let mut response = Response::new(Body::from(body));
    response.headers_mut().insert(
        header::CONTENT_TYPE,
        HeaderValue::from_static("application/json"),
    );
    response
}

/// The 410 answer to a read from below `min_version`.
fn trimmed(min_version: u64) -> Response {
    let body = serde_json::json!({
        "outcome": "rejected",
        "code": celeriant_sync_protocol::codes::celeriant::BATCH_INDEX_UNAVAILABLE,
        "message": format!(
            "versions below {min_version} of this aggregate were trimmed; read from {min_version}"
        ),
        "minVersion": min_version,
    });
    (axum::http::StatusCode::GONE, axum::Json(body)).into_response()
}

/// Size of the frames a page is handed to the connection in.
const FRAME_BYTES: usize = 64 << 10;

/// A body that keeps its reservation until its bytes have left the connection's socket (or
/// the connection is gone): memory the budget accounts for stays accounted for while it is
/// held, in the gateway or in the kernel. The page goes out in [`FRAME_BYTES`] slices of the
/// one buffer, so hyper cannot take it all in one frame, see the end of the stream and drop
/// the body while the page still sits in its write buffer for a reader that does not read.
/// When the last frame is taken, the reservation passes to the connection's
/// [`crate::serve::unsent::Unsent`], which gives it back once the client has acknowledged the
/// page's bytes. From the first frame on, the page must leave at the minimum page rate
/// ([`crate::serve::unsent::PagePace`]), or its connection is closed and the body dropped with
/// it, wherever the reservation is then.
struct Held {
    bytes: Bytes,
    reserved: Option<(Reserved, SharedBytes)>,
    /// The connection, and the count of its written bytes once the whole page is written
    /// (known at the first frame).
    connection: Option<(Activity, Option<u64>)>,
}

impl http_body::Body for Held {
    type Data = Bytes;
    type Error = std::convert::Infallible;

    fn poll_frame(
        mut self: std::pin::Pin<&mut Self>,
        _: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<http_body::Frame<Bytes>, Self::Error>>> {
        if self.bytes.is_empty() {
            self.let_go();
            return std::task::Poll::Ready(None);
        }
        let total = self.bytes.len() as u64;
        if let Some((connection, until @ None)) = &mut self.connection {
            // The page's clock for the minimum rate starts with its first frame.
            *until = Some(connection.unsent().begin(total));
        }
        let n = self.bytes.len().min(FRAME_BYTES);
        let frame = self.bytes.split_to(n);
        if self.bytes.is_empty() {
            // The last frame is taken: hyper holds no more than one frame of it now, the
            // kernel the rest of what the client has not acknowledged.
            self.let_go();
        }
        std::task::Poll::Ready(Some(Ok(http_body::Frame::data(frame))))
    }

    fn is_end_stream(&self) -> bool {
        self.bytes.is_empty()
    }

    fn size_hint(&self) -> http_body::SizeHint {
        http_body::SizeHint::with_exact(self.bytes.len() as u64)
    }
}

impl Held {
    /// The body is done with its bytes: the reservation passes to the connection until they
    /// have left its socket (or is given back, without a socket to ask).
    fn let_go(&mut self) {
        let Some(reserved) = self.reserved.take() else {
            return;
        };
        if let Some((connection, Some(until))) = &self.connection {
            connection.unsent().hold_until(*until, Box::new(reserved));
        }
    }
}

fn held(
    bytes: Bytes,
    reserved: Reserved,
    share: SharedBytes,
    connection: Option<Activity>,
) -> Body {
    Body::new(Held {
        bytes,
        reserved: Some((reserved, share)),
        connection: connection.map(|c| (c, None)),
    })
}
