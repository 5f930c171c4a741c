//! Which browser origins may call the API.
//!
//! Nothing here looks at the request's `Host`: the gateway's own origins are derived from its
//! configuration (the address it listens on: `http://IP:PORT`, plus `http://localhost:PORT` on
//! loopback), so a DNS-rebinding page (`Host: evil.example`, `Origin: http://evil.example`) is
//! never "own" (and `crate::host` refuses its requests anyway). On loopback without
//! `--allow-origin`, development origins are allowed too: `http` or `https` on `localhost`,
//! `127.0.0.1` or `[::1]`, any port. With `--allow-origin` (required beyond loopback), exactly
//! the listed origins plus the own ones. `Authorization` may be sent (the session token), `DPoP` (its
//! proof, `crate::auth::proof`), and `celeriant-faults-secret` (only meaningful with `--faults`), and `Retry-After` is exposed, or
//! `fetch` could not use them. An origin not allowed gets no CORS headers at all, so a page there
//! cannot send either header (the browser's preflight fails).

use std::net::SocketAddr;

use axum::http::header::{AUTHORIZATION, CONTENT_TYPE, RETRY_AFTER};
use axum::http::request::Parts;
use axum::http::{HeaderName, HeaderValue, Method};
use tower_http::cors::{AllowOrigin, CorsLayer};

use crate::auth::{faults_secret, proof};
use crate::config::{Config, is_loopback};

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

/// The gateway's own origins, from the address it listens on (none for a wildcard address).
pub fn own_origins(listen: SocketAddr) -> Vec<String> {
    let ip = listen.ip();
    if ip.is_unspecified() {
        return Vec::new();
    }
    let port = listen.port();
    let mut own = vec![format!("http://{listen}")];
    if is_loopback(ip) {
        own.push(format!("http://localhost:{port}"));
    }
    own
}

/// The CORS layer of `config` (whose `listen` is the bound address).
pub fn layer(config: &Config) -> CorsLayer {
    let own = own_origins(config.listen);
    let dev = config.allow_origins.is_empty() && config.listens_on_loopback();
    let allowed: Vec<String> = config
        .allow_origins
        .iter()
        .map(|o| o.trim_end_matches('/').to_owned())
        .chain(own)
        .collect();
    let predicate = move |origin: &HeaderValue, _: &Parts| {
        let Ok(origin) = origin.to_str() else {
            return false;
        };
        allowed.iter().any(|a| a == origin) || (dev && is_dev_origin(origin))
    };
    CorsLayer::new()
        .allow_origin(AllowOrigin::predicate(predicate))
        .allow_methods([Method::GET, Method::POST, Method::PUT, Method::OPTIONS])
        .allow_headers([
            CONTENT_TYPE,
            AUTHORIZATION,
            HeaderName::from_static(faults_secret::HEADER),
            HeaderName::from_static(proof::HEADER),
        ])
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

    #[test]
    fn own_origins_come_from_the_listen_address() {
        let on = |a: &str| own_origins(a.parse().unwrap());
        assert_eq!(
            on("127.0.0.1:8080"),
            ["http://127.0.0.1:8080", "http://localhost:8080"]
        );
        assert_eq!(on("[::1]:9"), ["http://[::1]:9", "http://localhost:9"]);
        assert_eq!(on("192.168.1.5:80"), ["http://192.168.1.5:80"]);
        assert!(on("0.0.0.0:8080").is_empty());
    }
}
