//! Which browser origins may call the API.
//!
//! With no `--allow-origin`, the gateway allows its own origin and development origins: `http`
//! or `https` on `localhost`, `127.0.0.1` or `[::1]`, any port. With `--allow-origin`, exactly
//! the listed origins (plus its own). `Retry-After` is exposed, or `fetch` could not read it.

use axum::http::header::{CONTENT_TYPE, RETRY_AFTER};
use axum::http::request::Parts;
use axum::http::{HeaderValue, Method};
use tower_http::cors::{AllowOrigin, CorsLayer};

/// Whether `origin` is an http(s) origin on a loopback host.
pub fn is_dev_origin(origin: &str) -> bool {
    let Some(rest) = origin
        .strip_prefix("http://")
        .or_else(|| origin.strip_prefix("https://"))
    else {
        return false;
    };
    let host = match rest.strip_prefix("[::1]") {
        Some(after) => return after.is_empty() || is_port(after),
        None => rest,
    };
    let (name, port) = match host.split_once(':') {
        Some((name, port)) => (name, Some(port)),
        None => (host, None),
    };
    matches!(name, "localhost" | "127.0.0.1") && port.is_none_or(|p| is_port(&format!(":{p}")))
}

fn is_port(s: &str) -> bool {
    s.strip_prefix(':')
        .is_some_and(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
}

fn is_own_origin(origin: &str, parts: &Parts) -> bool {
    let Some(host) = parts
        .headers
        .get(axum::http::header::HOST)
        .and_then(|h| h.to_str().ok())
    else {
        return false;
    };
    origin == format!("http://{host}") || origin == format!("https://{host}")
}

/// The CORS layer for `allowed` (empty: the development defaults).
pub fn layer(allowed: &[String]) -> CorsLayer {
    let allowed: Vec<String> = allowed
        .iter()
        .map(|o| o.trim_end_matches('/').to_owned())
        .collect();
    let predicate = move |origin: &HeaderValue, parts: &Parts| {
        let Ok(origin) = origin.to_str() else {
            return false;
        };
        is_own_origin(origin, parts)
            || if allowed.is_empty() {
                is_dev_origin(origin)
            } else {
                allowed.iter().any(|a| a == origin)
            }
    };
    CorsLayer::new()
        .allow_origin(AllowOrigin::predicate(predicate))
        .allow_methods([Method::GET, Method::POST, Method::PUT, Method::OPTIONS])
        .allow_headers([CONTENT_TYPE])
        .expose_headers([RETRY_AFTER])
        .max_age(std::time::Duration::from_secs(600))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dev_origins() {
        for ok in [
            "http://localhost",
            "http://localhost:5173",
            "https://127.0.0.1:8443",
            "http://[::1]:8080",
            "http://127.0.0.1",
        ] {
            assert!(is_dev_origin(ok), "{ok}");
        }
        for bad in [
            "http://localhost.evil.com",
            "http://127.0.0.1.evil.com",
            "http://example.com",
            "file://localhost",
            "http://localhost:",
            "http://localhost:80a",
            "null",
            "http://[::1]evil",
        ] {
            assert!(!is_dev_origin(bad), "{bad}");
        }
    }
}
