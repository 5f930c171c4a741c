//! `/metrics`: what the gateway does, in Prometheus text format, for operators only.
//!
//! The counters are the `metrics` crate's macros, recorded by `metrics-exporter-prometheus`
//! (the pair Celeriant itself uses; the exporter's own HTTP listener is not compiled in).
//! Nothing is recorded unless metrics are switched on ([`install`]): the recorder is
//! process-wide, and a gateway without `--metrics-listen` or `--metrics-token-file` keeps none.
//!
//! **Access.** `/metrics` is never open on the public listener by default:
//! * `--metrics-listen ADDR` serves it on a listener of its own (bind it to loopback or a
//!   private network: without a token anyone who reaches that address may scrape);
//! * `--metrics-token-file PATH` requires `Authorization: Bearer <token>` wherever it is
//!   served, and with it (only with it) `/metrics` is also served on the main listener. The
//!   token is compared in constant time (`subtle`).
//!
//! **Labels are bounded.** A label value is never taken from a request as sent (path,
//! aggregate, client id, address): the route is one of [`ROUTES`], the code one of the
//! gateway's own codes (any other is `upstream`), the outcome one of the protocol's five tags,
//! the status one of HTTP's. Cardinality is an attack surface: a scraper's memory, and the
//! gateway's, must not grow with what clients send.
//!
//! Gauges that mirror state kept elsewhere (open change streams, the embedded store's free
//! space, size and checksum failures) are read at scrape time, so the code that owns that
//! state does not have to report it.

use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use axum::extract::{MatchedPath, Request, State};
use axum::http::{HeaderMap, StatusCode, header};
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use celeriant_client_tokio::ClientError;
use celeriant_sync_protocol::codes::gateway as g;
use celeriant_sync_protocol::{
    FAULTS_PATH, FAULTS_TRIM_PATH, HEALTH_PATH, SESSION_PATH, WATCH_PATH, WRITE_PATH,
};
use metrics::{counter, gauge, histogram};
use metrics_exporter_prometheus::{PrometheusBuilder, PrometheusHandle};
use subtle::ConstantTimeEq as _;

use crate::config::Config;
use crate::error::ApiError;
use crate::state::AppState;

/// Where `/metrics` is served.
pub const METRICS_PATH: &str = "/metrics";
/// The shortest metrics token accepted, in bytes.
pub const MIN_TOKEN_BYTES: usize = 32;
/// The largest metrics token file read, in bytes.
const MAX_FILE_BYTES: u64 = 4_096;

/// The route labels: every request counts under one of these.
pub const ROUTES: [&str; 10] = [
    "write",
    "session",
    "events",
    "members",
    "watch",
    "healthz",
    "faults",
    "metrics",
    "api_other",
    "static",
];

/// Latency buckets, in seconds (a write's deadline is seconds; a read is milliseconds).
const BUCKETS: [f64; 14] = [
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0,
];

/// The outcome and code of a protocol answer, left on the response by
/// `crate::error::outcome_response` for [`track`] to count.
#[derive(Debug, Clone, Copy)]
pub struct Answered {
    /// The outcome's tag (`landed`, `retry`, ...).
    pub outcome: &'static str,
    /// The code carried, if any.
    pub code: Option<u32>,
}

/// The installed exporter and the token, when metrics are on.
pub struct Metrics {
    handle: PrometheusHandle,
    token: Option<Vec<u8>>,
}

static METRICS: OnceLock<Arc<Metrics>> = OnceLock::new();

/// The installed metrics, if [`install`] switched them on.
pub fn installed() -> Option<Arc<Metrics>> {
    METRICS.get().cloned()
}

/// Whether `/metrics` is also served on the main listener (only with a token).
pub fn on_main_listener() -> bool {
    installed().is_some_and(|m| m.token.is_some())
}

/// Switches metrics on when `config` asks for them (`--metrics-listen` or
/// `--metrics-token-file`); otherwise records nothing. Once per process.
pub fn install(config: &Config) -> Result<(), String> {
    if config.ops.metrics_listen.is_none() && config.ops.metrics_token_file.is_none() {
        return Ok(());
    }
    let token = match &config.ops.metrics_token_file {
        Some(path) => Some(load_token(path)?),
        None => None,
    };
    let handle = PrometheusBuilder::new()
        .set_buckets(&BUCKETS)
        .map_err(|e| format!("metrics: {e}"))?
        .install_recorder()
        .map_err(|e| format!("metrics: {e}"))?;
    // Without the exporter's own runtime, histograms are drained by upkeep: run it now and then.
    if let Ok(runtime) = tokio::runtime::Handle::try_current() {
        let upkeep = handle.clone();
        runtime.spawn(async move {
            let mut every = tokio::time::interval(Duration::from_secs(5));
            loop {
                every.tick().await;
                upkeep.run_upkeep();
            }
        });
    }
    let _ = METRICS.set(Arc::new(Metrics { handle, token }));
    Ok(())
}

fn load_token(path: &std::path::Path) -> Result<Vec<u8>, String> {
    let shown = path.display();
    let size = std::fs::metadata(path)
        .map_err(|e| format!("--metrics-token-file {shown}: {e}"))?
        .len();
    if size > MAX_FILE_BYTES {
        return Err(format!(
            "--metrics-token-file {shown}: {size} bytes; at most {MAX_FILE_BYTES} are read"
        ));
    }
    let mut bytes =
        std::fs::read(path).map_err(|e| format!("--metrics-token-file {shown}: {e}"))?;
    while bytes.last().is_some_and(u8::is_ascii_whitespace) {
        bytes.pop();
    }
    if bytes.len() < MIN_TOKEN_BYTES || !bytes.iter().all(u8::is_ascii_graphic) {
        return Err(format!(
            "--metrics-token-file {shown}: the token must be at least {MIN_TOKEN_BYTES} \
             visible ASCII characters (no spaces)"
        ));
    }
    Ok(bytes)
}

/// The route label of a request: a fixed name, never the path as sent.
fn route_label(matched: Option<&str>, path: &str) -> &'static str {
    match matched {
        Some(WRITE_PATH) => "write",
        Some(SESSION_PATH) => "session",
        Some("/v1/aggregates/{type_id}/{id}/events") => "events",
        Some(
            "/v1/aggregates/{type_id}/{id}/members"
            | "/v1/aggregates/{type_id}/{id}/members/accept",
        ) => "members",
        Some(WATCH_PATH) => "watch",
        Some(HEALTH_PATH) => "healthz",
        Some(FAULTS_PATH | FAULTS_TRIM_PATH) => "faults",
        Some(METRICS_PATH) => "metrics",
        _ if path == "/v1" || path.starts_with("/v1/") => "api_other",
        _ => "static",
    }
}

fn code_label(code: Option<u32>) -> String {
    match code {
        None => "none".into(),
        Some(code) if g::ALL.contains(&code) => code.to_string(),
        Some(_) => "upstream".into(),
    }
}

/// Middleware counting every request by route, outcome, code and status, with its latency
/// (to the response's head: a change stream's lifetime is not its latency).
pub async fn track(request: Request, next: Next) -> Response {
    let started = Instant::now();
    let route = route_label(
        request
            .extensions()
            .get::<MatchedPath>()
            .map(|m| m.as_str()),
        request.uri().path(),
    );
    let is_post = request.method() == axum::http::Method::POST;
    let response = next.run(request).await;
    let status = response.status();
    let (outcome, code) = match response.extensions().get::<Answered>() {
        Some(a) => (a.outcome, code_label(a.code)),
        None if status.is_success() => ("ok", "none".into()),
        None => ("other", "none".into()),
    };
    counter!(
        "celeriant_gateway_requests_total",
        "route" => route,
        "outcome" => outcome,
        "code" => code,
        "status" => status.as_str().to_owned()
    )
    .increment(1);
    histogram!("celeriant_gateway_request_duration_seconds", "route" => route)
        .record(started.elapsed().as_secs_f64());
    if route == "session" && is_post {
        let result = if status.is_success() {
            "opened"
        } else {
            "refused"
        };
        counter!("celeriant_gateway_sessions_total", "result" => result).increment(1);
    }
    response
}

/// Counts a refusal by a budget, a fair share or a stream limit: `kind` is what was limited
/// (`"write bodies"`, `"reads"`, `"connections"`, ...), `reason` which bound refused
/// (`budget`, `share`, `rate`, `concurrency`, `streams`, `total`, `address`); both fixed names.
pub fn budget_refused(kind: &'static str, reason: &'static str) {
    counter!("celeriant_gateway_budget_refusals_total", "kind" => kind, "reason" => reason)
        .increment(1);
}

/// Counts a connection the gateway closed with a reset because its client left bytes unread
/// (queued in the kernel, or a page below the minimum rate), by the cut that closed it
/// ([`crate::serve::linger::Cut::label`]: `idle`, `evicted`, `stalled stream`, `slow reader`,
/// `flush timeout`, `shutdown`). Counted once per reset, where the socket is closed; a cut
/// that found nothing unread closes normally and is not counted here.
pub fn unread_reset(reason: &'static str) {
    counter!("celeriant_gateway_unread_resets_total", "reason" => reason).increment(1);
}

/// Counts a connection let in (behind a proxy with keep-alive, far fewer than requests).
pub fn connection_accepted() {
    counter!("celeriant_gateway_connections_accepted_total").increment(1);
}

/// Counts an error of the Celeriant backend, by a fixed kind.
pub fn upstream_error(error: &ClientError) {
    let kind = match error {
        ClientError::Server(_) => "server",
        ClientError::NotLeader { .. } => "not_leader",
        ClientError::ServerBusy => "busy",
        ClientError::ConnectionFailed(_)
        | ClientError::ConnectionTimeout
        | ClientError::PoolTimeout { .. } => "connection",
        ClientError::RequestTimeout | ClientError::ConnectionLostAfterSend(_) => "timeout",
        _ => "other",
    };
    counter!("celeriant_gateway_upstream_errors_total", "kind" => kind).increment(1);
}

/// Sets the gauges read at scrape time.
fn sample(state: &AppState) {
    let (streams, _) = state.watch.counts();
    gauge!("celeriant_gateway_watch_streams_open").set(streams as f64);
    if let Some(store) = state.backend.store_health() {
        if let Some(free) = store.free_bytes {
            gauge!("celeriant_gateway_store_free_bytes").set(free as f64);
        }
        gauge!("celeriant_gateway_store_min_free_bytes").set(store.min_free_bytes as f64);
        gauge!("celeriant_gateway_store_ok").set(f64::from(u8::from(store.state == "ok")));
        counter!("celeriant_gateway_store_checksum_failures_total")
            .absolute(store.checksum_failures);
        counter!("celeriant_gateway_store_recoveries_total").absolute(store.recoveries);
        let file = state
            .config
            .data_dir
            .join(crate::backend::embedded::FILE_NAME);
        if let Ok(meta) = std::fs::metadata(file) {
            gauge!("celeriant_gateway_store_bytes").set(meta.len() as f64);
        }
    }
}

fn authorized(metrics: &Metrics, headers: &HeaderMap) -> bool {
    let Some(token) = &metrics.token else {
        return true;
    };
    let offered = headers
        .get(header::AUTHORIZATION)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .unwrap_or("");
    token.ct_eq(offered.as_bytes()).into()
}

/// `GET /metrics`: the text exposition, after the token when one is configured.
pub async fn scrape(State(state): State<AppState>, headers: HeaderMap) -> Response {
    let Some(metrics) = installed() else {
        return ApiError::not_found().into_response();
    };
    if !authorized(&metrics, &headers) {
        return (
            StatusCode::UNAUTHORIZED,
            [(header::WWW_AUTHENTICATE, "Bearer realm=\"metrics\"")],
            "a metrics token is required\n",
        )
            .into_response();
    }
    sample(&state);
    (
        [(
            header::CONTENT_TYPE,
            "text/plain; version=0.0.4; charset=utf-8",
        )],
        metrics.handle.render(),
    )
        .into_response()
}

/// The router of the separate metrics listener (`--metrics-listen`): `/metrics` only.
pub fn listener_app(state: AppState) -> axum::Router {
    axum::Router::new()
        .route(METRICS_PATH, axum::routing::get(scrape))
        .with_state(state)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn labels_are_fixed_names_whatever_the_path() {
        assert_eq!(route_label(None, "/v1/aggregates/x/y/zzz"), "api_other");
        assert_eq!(route_label(None, "/some/file.js"), "static");
        assert_eq!(route_label(Some(WRITE_PATH), WRITE_PATH), "write");
        for path in ["/a", "/v1/x", "/v1"] {
            assert!(ROUTES.contains(&route_label(None, path)));
        }
        assert_eq!(code_label(Some(g::NOT_FOUND)), g::NOT_FOUND.to_string());
        assert_eq!(code_label(Some(987_654)), "upstream");
        assert_eq!(code_label(None), "none");
    }
}
