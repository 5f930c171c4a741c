//! `POST /v1/session`: a device proves its client id and gets a session token.
//!
//! The order of the checks is the order of their cost: the per-address rate limit, the strict
//! bounded body, the app token (when required), the shape of the proof, the signature (RSA),
//! then the replay cache — which only remembers proofs that verified. Every answer, errors
//! included, carries `serverTime` so a client with a skewed clock can correct its next nonce.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use axum::Json;
use axum::extract::{ConnectInfo, Request, State};
use axum::http::{HeaderValue, Method, header};
use axum::response::{IntoResponse, Response};
use celeriant_sync_protocol::codes::gateway as g;
use celeriant_sync_protocol::outcome::Failure;
use celeriant_sync_protocol::session::MAX_SESSION_BODY_BYTES;
use celeriant_sync_protocol::{SessionRequest, SessionResponse, WriteOutcome};

use crate::access::Principal;
use crate::auth::replay::Admit;
use crate::auth::subjects::Refusal;
use crate::auth::token::{SESSION_AUDIENCE, SessionClaims};
use crate::auth::{device, now_ms};
use crate::error::ApiError;
use crate::extract::read_json_paced;
use crate::limits::notice::Throttle;
use crate::state::AppState;

/// The handler (routed for every method, so that a wrong method gets `serverTime` too).
pub async fn session(State(state): State<AppState>, request: Request) -> Response {
    let ip = request
        .extensions()
        .get::<ConnectInfo<SocketAddr>>()
        .map_or(IpAddr::V4(Ipv4Addr::UNSPECIFIED), |c| c.0.ip());
    let wrong_method = request.method() != Method::POST;
    // Charged to the refusal budget (an `OPTIONS` was charged already, outside CORS).
    if wrong_method
        && request.method() != Method::OPTIONS
        && let Some(refused) = state
            .refusals
            .refused_with(ip, |e| e.with_server_time(now_ms()))
    {
        return refused;
    }
    let answer = if wrong_method {
        Err(ApiError::code(
            g::METHOD_NOT_ALLOWED,
            format!("{} is not allowed on /v1/session", request.method()),
        ))
    } else {
        open(&state, ip, request).await
    };
    match answer {
        Ok(session) => Json(session).into_response(),
        Err(error) => {
            // One line per interval, with how many were not logged: refusals cost a flooding
            // address nothing, and the log's disk is a resource too (hostile review, issue 26).
            static REFUSED_LOG: Throttle = Throttle::new();
            if let Some(suppressed) = REFUSED_LOG.allow() {
                let message = error.0.failure().map_or("", |f| f.message.as_str());
                tracing::info!(%ip, code = error.0.code(), message, suppressed, "session refused");
            }
            let mut response = error.with_server_time(now_ms()).into_response();
            if wrong_method {
                response
                    .headers_mut()
                    .insert(header::ALLOW, HeaderValue::from_static("POST"));
            }
            response
        }
    }
}

/// A fresh random token id (a version-4 UUID from the operating system's randomness).
fn token_id() -> Result<uuid::Uuid, ApiError> {
    use rand::TryRngCore as _;
    let mut bytes = [0u8; 16];
    rand::rngs::OsRng
        .try_fill_bytes(&mut bytes)
        .map_err(|e| ApiError::code(g::INTERNAL, format!("no randomness: {e}")))?;
    Ok(uuid::Builder::from_random_bytes(bytes).into_uuid())
}

async fn open(state: &AppState, ip: IpAddr, request: Request) -> Result<SessionResponse, ApiError> {
    let auth = &state.auth;
    auth.limiter.check(ip).map_err(|wait| {
        let ms = (wait.as_millis() as u64).max(1);
        ApiError(WriteOutcome::Retry(Failure {
            retry_after_ms: Some(ms),
            ..Failure::new(
                g::SESSION_RATE_LIMITED,
                format!("too many sessions opened from this address; retry in {ms} ms"),
            )
        }))
    })?;
    let (parts, body) = request.into_parts();
    // At the minimum body rate too: a session request that sends its headers and then nothing
    // held a connection for the whole body timeout at no cost (hostile review, issue 26).
    let body: SessionRequest = read_json_paced(
        &parts.headers,
        body,
        MAX_SESSION_BODY_BYTES,
        state.body_pace(),
    )
    .await?;
    let grant = match &auth.app {
        Some(app) => Some(app.verify(&parts.headers)?),
        None => None,
    };
    let now = now_ms();
    let proven = device::verify(&body, now)?;
    let established = auth.established.contains(&proven.client_id);
    match auth
        .replay
        .admit(proven.client_id, proven.nonce_ms, ip, now, established)
    {
        Admit::Fresh => {}
        Admit::Replayed => {
            return Err(ApiError::code(
                g::NONCE_REPLAYED,
                "this nonce was already used with this key; sign a fresh one",
            ));
        }
        Admit::Full { retry_after_ms } => {
            static FULL_LOG: Throttle = Throttle::new();
            if let Some(suppressed) = FULL_LOG.allow() {
                tracing::warn!(%ip, suppressed, "replay cache full for this address: refusing its new sessions for now");
            }
            return Err(ApiError(WriteOutcome::Retry(Failure {
                retry_after_ms: Some(retry_after_ms),
                ..Failure::new(
                    g::SESSION_RATE_LIMITED,
                    "the gateway is opening too many sessions; retry shortly",
                )
            })));
        }
    }
    let principal = match &grant {
        Some(grant) => Principal::user(&grant.subject).ok_or_else(|| {
            ApiError::code(
                g::APP_TOKEN_INVALID,
                format!(
                    "the app token's subject is empty, over {} bytes, or has control characters",
                    crate::access::MAX_PRINCIPAL_BYTES - 5
                ),
            )
        })?,
        None => Principal::device(proven.client_id),
    };
    auth.revocations
        .wait_loaded(crate::auth::revoke::FIRST_LOAD_WAIT)
        .await;
    auth.revocations
        .check_new_session(proven.client_id, &principal)?;
    let now_s = now / 1000;
    let mut exp = now_s + auth.ttl_secs;
    if let Some(grant) = &grant {
        exp = exp.min(grant.expires_at);
        if let Err(refusal) = auth
            .subjects
            .admit(&grant.subject, proven.client_id, now_s, exp)
        {
            let (ms, what) = match refusal {
                Refusal::Devices(ms) => (ms, "this user has the most devices with live sessions"),
                Refusal::Sessions(ms) => (ms, "this user has the most live sessions"),
            };
            return Err(ApiError(WriteOutcome::Retry(Failure {
                retry_after_ms: Some(ms),
                ..Failure::new(g::SUBJECT_LIMIT, format!("{what}; retry in {ms} ms"))
            })));
        }
    }
    let claims = SessionClaims {
        sub: proven.client_id,
        aud: SESSION_AUDIENCE.into(),
        iat: now_s,
        exp,
        types: grant.as_ref().and_then(|g| g.types.clone()),
        principal: Some(principal.as_str().to_owned()),
        jti: Some(token_id()?),
    };
    let token = auth
        .keys
        .issue(&claims)
        .map_err(|e| ApiError::code(g::INTERNAL, e))?;
    tracing::info!(
        client = %proven.client_id,
        jti = ?claims.jti,
        subject = grant.as_ref().map(|g| g.subject.as_str()),
        types = ?claims.types,
        %ip,
        "session opened"
    );
    Ok(SessionResponse {
        client_id: proven.client_id,
        principal: principal.as_str().to_owned(),
        token,
        expires_at: exp * 1000,
        server_time: now_ms(),
    })
}
