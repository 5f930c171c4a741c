//! Which `Host` names the gateway answers to: a DNS-rebinding defence.
//!
//! A page on `http://evil.example` can make its own name resolve to 127.0.0.1 and then talk to a
//! gateway on the user's machine as if it were same-origin: CORS never comes into play, but the
//! requests carry `Host: evil.example`. So every request (API and static files alike) whose
//! `Host` names something else than this gateway is refused with 421 (code 42100) before any
//! handler runs. Answered: any IP address (a rebinding attack needs a DNS name), `localhost`,
//! the hosts of `--allow-origin`, and the names given with `--public-host`; the port is not
//! compared (a reverse proxy may change it). A request without `Host` (not possible from a
//! browser) is answered; one with two or more `Host` headers is refused with 400 (code 40030),
//! whatever they say. Refusals are charged to the address's `--refusal-rate-per-ip`
//! (`crate::limits::cheap`) and logged at most once per interval.

use std::net::{Ipv4Addr, Ipv6Addr};
use std::sync::Arc;

use axum::extract::{Request, State};
use axum::http::header;
use axum::middleware::Next;
use axum::response::{IntoResponse, Response};
use celeriant_sync_protocol::SESSION_PATH;
use celeriant_sync_protocol::codes::gateway as g;

use crate::auth::now_ms;
use crate::config::Config;
use crate::error::ApiError;
use crate::limits::cheap::CheapRate;
use crate::limits::ip::peer;
use crate::limits::notice::Throttle;

/// The names answered besides IP addresses and `localhost`, lowercase.
#[derive(Debug, Clone)]
pub struct HostPolicy {
    names: Vec<String>,
}

impl HostPolicy {
    /// The policy of `config`: `--public-host` names and the hosts of `--allow-origin`.
    pub fn from_config(config: &Config) -> Self {
        let mut names: Vec<String> = config
            .public_hosts
            .iter()
            .map(|h| normalise(h))
            .chain(config.allow_origins.iter().filter_map(|o| origin_host(o)))
            .collect();
        names.push("localhost".into());
        names.sort();
        names.dedup();
        HostPolicy { names }
    }

    /// Whether a request with this `Host` header value is answered.
    pub fn allows(&self, host: &str) -> bool {
        let host = host.trim();
        if let Some(rest) = host.strip_prefix('[') {
            return rest.split_once(']').is_some_and(|(ip, port)| {
                ip.parse::<Ipv6Addr>().is_ok() && (port.is_empty() || is_port(port))
            });
        }
        let name = match host.rsplit_once(':') {
            Some((name, port)) if is_port(&format!(":{port}")) => name,
            Some(_) => return false,
            None => host,
        };
        let name = normalise(name);
        name.parse::<Ipv4Addr>().is_ok() || self.names.contains(&name)
    }
}

fn normalise(name: &str) -> String {
    name.trim().trim_end_matches('.').to_ascii_lowercase()
}

fn is_port(s: &str) -> bool {
    s.strip_prefix(':')
        .is_some_and(|p| !p.is_empty() && p.len() <= 5 && p.bytes().all(|b| b.is_ascii_digit()))
}

/// The host of an origin (`https://app.example:8443` → `app.example`).
fn origin_host(origin: &str) -> Option<String> {
    let rest = origin.split_once("://")?.1.trim_end_matches('/');
    let host = match rest.strip_prefix('[') {
        Some(v6) => return Some(format!("[{}]", v6.split_once(']')?.0)),
        None => rest.rsplit_once(':').map_or(rest, |(h, _)| h),
    };
    Some(normalise(host))
}

/// Adds `serverTime` to an error of `POST /v1/session` (every answer there carries it).
fn session_time(request: &Request) -> impl FnOnce(ApiError) -> ApiError + use<> {
    let session = request.uri().path() == SESSION_PATH;
    move |error| {
        if session {
            error.with_server_time(now_ms())
        } else {
            error
        }
    }
}

/// The middleware. Every refusal is charged to the address's refusal budget
/// (`crate::limits::cheap`): past it, 429 (42911) instead, the connection closed.
pub async fn check(
    State((policy, refusals)): State<(Arc<HostPolicy>, Arc<CheapRate>)>,
    request: Request,
    next: Next,
) -> Response {
    static REFUSED_LOG: Throttle = Throttle::new();
    // Two `Host` headers: which one names the gateway depends on who reads them (a proxy may
    // route by one, this check would read the other), so neither is trusted.
    if request
        .headers()
        .get_all(header::HOST)
        .iter()
        .nth(1)
        .is_some()
    {
        if let Some(over) =
            refusals.refused_with(peer(request.extensions()), session_time(&request))
        {
            return over;
        }
        if let Some(suppressed) = REFUSED_LOG.allow() {
            tracing::warn!(
                path = ?request.uri().path(),
                suppressed,
                "a request with more than one Host header refused"
            );
        }
        let error = ApiError::code(
            g::DUPLICATE_HOST,
            "the request has more than one Host header",
        );
        return if request.uri().path() == SESSION_PATH {
            error.with_server_time(now_ms()).into_response()
        } else {
            error.into_response()
        };
    }
    let host = request
        .headers()
        .get(header::HOST)
        .map(|h| h.to_str().unwrap_or("\u{fffd}"));
    match host {
        Some(host) if !policy.allows(host) => {
            if let Some(over) =
                refusals.refused_with(peer(request.extensions()), session_time(&request))
            {
                return over;
            }
            let shown: String = host.chars().take(255).collect();
            // One line per interval: a flood of wrong names must not flood the log.
            if let Some(suppressed) = REFUSED_LOG.allow() {
                tracing::warn!(host = %shown, path = request.uri().path(), suppressed, "request for a host this gateway does not serve refused");
            }
            let error = ApiError::code(
                g::HOST_NOT_ALLOWED,
                format!(
                    "this gateway does not answer to the host {shown:?}; an operator can add it with --public-host"
                ),
            );
            if request.uri().path() == SESSION_PATH {
                error.with_server_time(now_ms()).into_response()
            } else {
                error.into_response()
            }
        }
        _ => next.run(request).await,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ip_addresses_localhost_and_configured_names_are_answered() {
        let mut config = Config::defaults();
        config.public_hosts = vec!["Sync.Example.com".into()];
        config.allow_origins = vec!["https://app.example:8443/".into()];
        let policy = HostPolicy::from_config(&config);
        for ok in [
            "127.0.0.1:8080",
            "127.0.0.1",
            "192.168.1.5:80",
            "[::1]:8080",
            "[::1]",
            "localhost:8080",
            "LOCALHOST",
            "sync.example.com",
            "sync.example.com.:443",
            "app.example:8443",
            "app.example",
        ] {
            assert!(policy.allows(ok), "{ok}");
        }
        for bad in [
            "evil.example:8080",
            "evil.example",
            "localhost.evil.example",
            "127.0.0.1.evil.example",
            "sync.example.com.evil",
            "[::1]evil",
            "::1",
            "localhost:80a",
            "",
            "example.com:",
        ] {
            assert!(!policy.allows(bad), "{bad}");
        }
    }
}
