//! The HTTP application: routes, layers and static files, built without a socket.
//!
//! [`app`] returns the whole `Router`, so tests drive it with `tower::ServiceExt::oneshot` and
//! `main` serves it. Unknown API routes (anything under `/v1`, including `/v1` and `/v1/`
//! themselves) and wrong methods get the protocol's JSON body too. Layers, outermost first:
//! tracing, the `Host` check (`crate::host`), CORS.

use axum::Router;
use axum::extract::Request;
use axum::response::{IntoResponse, Response};
use axum::routing::{get, post};
use celeriant_sync_protocol::codes::gateway as g;
use celeriant_sync_protocol::{FAULTS_PATH, HEALTH_PATH, SESSION_PATH, WRITE_PATH};
use tower_http::services::ServeDir;
use tower_http::trace::TraceLayer;

use crate::cors;
use crate::error::ApiError;
use crate::host::{self, HostPolicy};
use crate::routes;
use crate::state::AppState;

async fn not_found(request: Request) -> Response {
    ApiError::code(
        g::NOT_FOUND,
        format!("no route for {} {}", request.method(), request.uri().path()),
    )
    .into_response()
}

async fn method_not_allowed(request: Request) -> Response {
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

/// The gateway's router over `state`.
pub fn app(state: AppState) -> Router {
    let mut api = Router::new()
        .route(WRITE_PATH, post(routes::write::write))
        .route(SESSION_PATH, axum::routing::any(routes::session::session))
        .route(
            "/v1/aggregates/{type_id}/{id}/events",
            get(routes::read::events),
        )
        .route(HEALTH_PATH, get(routes::health::health));
    if state.faults.is_some() {
        api = api.route(
            FAULTS_PATH,
            get(routes::faults::report).put(routes::faults::set),
        );
    }
    // `/v1/{*rest}` does not match `/v1` or `/v1/` (the catch-all needs at least one
    // character), so those are routed explicitly; otherwise they would reach the static files.
    let api = api
        .route("/v1", axum::routing::any(not_found))
        .route("/v1/", axum::routing::any(not_found))
        .route("/v1/{*rest}", axum::routing::any(not_found));
    let www = ServeDir::new(&state.config.www).append_index_html_on_directories(true);
    let pkg = ServeDir::new(&state.config.pkg);
    api.nest_service("/pkg", pkg)
        .fallback_service(www)
        .method_not_allowed_fallback(method_not_allowed)
        .layer(cors::layer(&state.config))
        .layer(axum::middleware::from_fn_with_state(
            std::sync::Arc::new(HostPolicy::from_config(&state.config)),
            host::check,
        ))
        .layer(TraceLayer::new_for_http())
        .with_state(state)
}
