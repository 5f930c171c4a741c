//! CORS on the HTTP surface over the embedded store, driven without a socket: preflights from
//! the dev origins are allowed and others are not, a response exposes `Retry-After`, and an
//! explicit allow-list replaces the dev defaults (kept apart from `http_api.rs`, which holds the
//! protocol's outcomes, validation and reads).

mod support;

use axum::body::Body;
use axum::http::{Method, Request};
use celeriant_gateway::backend::embedded::EmbeddedOptions;
use support::app::*;

fn preflight(origin: &str) -> Request<Body> {
    Request::builder()
        .method(Method::OPTIONS)
        .uri("/v1/write")
        .header("origin", origin)
        .header("access-control-request-method", "POST")
        .header("access-control-request-headers", "content-type")
        .body(Body::empty())
        .unwrap()
}

#[tokio::test]
async fn cors_allows_dev_origins_and_exposes_retry_after() {
    let h = Harness::new();
    let ok = h.send(preflight("http://localhost:5173")).await;
    assert!(ok.status.is_success());
    assert_eq!(
        ok.headers["access-control-allow-origin"],
        "http://localhost:5173"
    );
    let methods = ok.headers["access-control-allow-methods"].to_str().unwrap();
    for m in ["GET", "POST", "OPTIONS"] {
        assert!(methods.contains(m), "{methods}");
    }
    assert!(
        ok.headers["access-control-allow-headers"]
            .to_str()
            .unwrap()
            .contains("content-type")
    );
    let denied = h.send(preflight("http://evil.example")).await;
    assert!(denied.headers.get("access-control-allow-origin").is_none());
    // An actual cross-origin response exposes Retry-After.
    let request = Request::post("/v1/write")
        .header("origin", "http://127.0.0.1:9999")
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(&write_of(&[1])).unwrap()))
        .unwrap();
    let r = h.send(request).await;
    assert_eq!(
        r.headers["access-control-allow-origin"],
        "http://127.0.0.1:9999"
    );
    assert_eq!(
        r.headers["access-control-expose-headers"]
            .to_str()
            .unwrap()
            .to_lowercase(),
        "retry-after"
    );
}

#[tokio::test]
async fn an_explicit_allow_list_replaces_the_dev_defaults() {
    let h = Harness::with(
        |c| c.allow_origins = vec!["https://app.example".into()],
        EmbeddedOptions::default(),
    );
    let ok = h.send(preflight("https://app.example")).await;
    assert_eq!(
        ok.headers["access-control-allow-origin"],
        "https://app.example"
    );
    let denied = h.send(preflight("http://localhost:5173")).await;
    assert!(denied.headers.get("access-control-allow-origin").is_none());
}
