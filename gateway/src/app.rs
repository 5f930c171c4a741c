//! The HTTP application: routes, layers and static files, built without a socket.
//!
//! [`app`] returns the whole `Router`, so tests drive it with `tower::ServiceExt::oneshot` and
//! `main` serves it. Unknown API routes (anything under `/v1`, including `/v1` and `/v1/`
//! themselves) and wrong methods get the protocol's JSON body too. Layers, outermost first:
//! tracing, metrics (`crate::observe`), the deadline, the `Host` check (`crate::host`), CORS.
//! `/healthz` and the static files are each behind a per-address rate (`crate::limits::cheap`);
//! 405s and `Host` refusals behind another, CORS preflights behind a third.
//!
//! **The deadline** covers every route, static files included: a request not answered within
//! `--request-timeout-ms` (plus [`DEADLINE_GRACE`]) of reaching the router gets 504 (50400,
//! `unknown`). The write route answers at the deadline itself, with its own message; the grace
//! lets it, so the layer only ever catches the other routes. (Reading a request's headers is
//! bounded before the router, by `crate::serve`.) The deadline bounds the time to a response's
//! head, not its body: a change stream (`/v1/watch`) answers its head at once and then streams
//! for as long as its session lasts, which is why it needs no exemption.

use std::time::Duration;

use axum::Router;
use axum::error_handling::HandleErrorLayer;
use axum::extract::{Request, State};
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use celeriant_sync_protocol::codes::gateway as g;
use celeriant_sync_protocol::{
    FAULTS_PATH, FAULTS_TRIM_PATH, HEALTH_PATH, SESSION_PATH, WATCH_PATH, WRITE_PATH,
};
use tower::{BoxError, ServiceBuilder};
use tower_http::services::ServeDir;
use tower_http::trace::{DefaultOnFailure, TraceLayer};

use crate::auth::faults_secret;
use crate::cors;
use crate::error::ApiError;
use crate::host::{self, HostPolicy};
use crate::limits::cheap::{self, CheapRate};
use crate::observe;
use crate::proxy::{self, TrustedProxies};
use crate::routes;
use crate::state::AppState;

async fn not_found(request: Request) -> Response {
    ApiError::code(
        g::NOT_FOUND,
        format!("no route for {} {}", request.method(), request.uri().path()),
    )
    .into_response()
}

/// A wrong method (405), charged to the address's refusal budget (`crate::limits::cheap`;
/// an `OPTIONS` was charged already, outside CORS).
async fn method_not_allowed(State(state): State<AppState>, request: Request) -> Response {
    if request.method() != axum::http::Method::OPTIONS
        && let Some(refused) = state
            .refusals
            .refused(crate::limits::ip::peer(request.extensions()))
    {
        return refused;
    }
    ApiError::code(
        g::METHOD_NOT_ALLOWED,
        format!(
            "{} is not allowed on {}",
            request.method(),
            request.uri().path()
        ),
    )
    .into_response()
}

/// How long after `--request-timeout-ms` the router's deadline answers, so that a route with a
/// deadline of its own (writes) answers first.
pub const DEADLINE_GRACE: Duration = Duration::from_millis(250);

async fn deadline_passed(error: BoxError) -> Response {
    if error.is::<tower::timeout::error::Elapsed>() {
        ApiError::code(
            g::GATEWAY_TIMEOUT,
            "no answer within the gateway's request deadline",
        )
        .into_response()
    } else {
        ApiError::code(g::INTERNAL, format!("request failed: {error}")).into_response()
    }
}

/// The gateway's router over `state`.
pub fn app(state: AppState) -> Router {
    let cheap = CheapRate::statics(&state.config.limits);
    let refusals = state.refusals.clone();
    let mut api = Router::new()
        .route(WRITE_PATH, post(routes::write::write))
        .route(SESSION_PATH, axum::routing::any(routes::session::session))
        .route(
            "/v1/aggregates/{type_id}/{id}/events",
            get(routes::read::events),
        )
        .route(
            "/v1/aggregates/{type_id}/{id}/members",
            get(routes::members::members).put(routes::members::members),
        )
        .route(
            "/v1/aggregates/{type_id}/{id}/members/accept",
            post(routes::members::accept),
        )
        .route(
            WATCH_PATH,
            get(routes::watch::watch).post(routes::watch::watch),
        )
        .route(
            "/v1/revocations",
            get(routes::revocations::list).post(routes::revocations::revoke),
        )
        .route("/v1/revocations/lift", post(routes::revocations::lift))
        .route(
            routes::backup::BACKUP_PATH,
            get(routes::backup::get).post(routes::backup::start),
        )
        .route(
            HEALTH_PATH,
            get(routes::health::health).route_layer(axum::middleware::from_fn_with_state(
                cheap.clone(),
                cheap::limit,
            )),
        );
    if observe::on_main_listener() {
        // Only with --metrics-token-file: the token is checked by the handler.
        api = api.route(observe::METRICS_PATH, get(observe::scrape));
    }
    if let Some(secret) = &state.faults_secret {
        // The secret is checked before anything else of the request is looked at.
        let faults = Router::new()
            .route(
                FAULTS_PATH,
                get(routes::faults::report).put(routes::faults::set),
            )
            .route(FAULTS_TRIM_PATH, post(routes::faults::trim))
            .route_layer(axum::middleware::from_fn_with_state(
                secret.clone(),
                faults_secret::require,
            ));
        api = api.merge(faults);
    }
    // `/v1/{*rest}` does not match `/v1` or `/v1/` (the catch-all needs at least one
    // character), so those are routed explicitly; otherwise they would reach the static files.
    let cheap_layer = || axum::middleware::from_fn_with_state(cheap.clone(), cheap::limit);
    // The 404 of an unknown API path is as cheap as `/healthz` and needs no session either:
    // charged to the same per-address rate, or a flood of them would slow every write as an
    // unlimited `/healthz` did (hostile review of the streams work).
    let unknown = || axum::routing::any(not_found).layer(cheap_layer());
    let api = api
        .route("/v1", unknown())
        .route("/v1/", unknown())
        .route("/v1/{*rest}", unknown());
    let www = ServiceBuilder::new()
        .layer(cheap_layer())
        .service(ServeDir::new(&state.config.www).append_index_html_on_directories(true));
    let pkg = ServiceBuilder::new()
        .layer(cheap_layer())
        .service(ServeDir::new(&state.config.pkg));
    api.nest_service("/pkg", pkg)
        .fallback_service(www)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(cors::layer(&state.config))
        // Outside CORS, which answers preflights without calling what it wraps.
        .layer(axum::middleware::from_fn_with_state(
            CheapRate::preflights(&state.config.limits),
            cheap::preflight,
        ))
        .layer(axum::middleware::from_fn_with_state(
            (
                std::sync::Arc::new(HostPolicy::from_config(&state.config)),
                refusals,
            ),
            host::check,
        ))
        .layer(
            ServiceBuilder::new()
                .layer(HandleErrorLayer::new(deadline_passed))
                .timeout(state.request_timeout() + DEADLINE_GRACE),
        )
        // Refusals are logged where they are decided (and throttled there); a 5xx per request
        // at ERROR would turn a flood, or a degraded store, into a flood of log lines.
        .layer(axum::middleware::from_fn_with_state(
            TrustedProxies::new(&state.config.ops.trusted_proxies)
                .reading(state.config.ops.forwarded_header),
            proxy::forwarded,
        ))
        // Counts every answer, the deadline's and the `Host` check's included.
        .layer(axum::middleware::from_fn(observe::track))
        .layer(
            TraceLayer::new_for_http()
                .on_failure(DefaultOnFailure::new().level(tracing::Level::DEBUG)),
        )
        .with_state(state)
}
