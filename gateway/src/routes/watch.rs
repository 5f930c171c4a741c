//! `POST /v1/watch` (aggregates in a JSON body) and `GET /v1/watch?aggregate=<typeId>/<id>…`
//! (for curl): a change stream as Server-Sent Events.
//!
//! Auth is that of reads: a session (401 without one) whose access list includes every type
//! named (403, 40301). Opening a stream draws on the address's and client id's read rate like
//! a read (429, 42910), then the hub's limits apply (`crate::watch::hub`). The stream is
//! registered before the answer's head is sent, so `ready` — its first event — means every
//! change committed from then on will be notified.
//!
//! The access policy applies to each entry (`crate::access`): an aggregate the session may not
//! read is left out of the stream and listed in `ready`'s data, `{"refused":[{"typeId":…,
//! "id":…,"code":40302}]}`, and every notification is checked again when it is delivered. An
//! aggregate that does not exist yet may be watched (a client watches what it is about to
//! create), so a refusal says that the aggregate exists and is someone else's — as a write with
//! `allowCreate` does; that much is unavoidable once ids are unique.
//!
//! Each address (bucket, `crate::limits::ip`) may hold `--watch-max-streams-per-ip` streams
//! (429, 42922), a small share of the pool, so a few addresses cannot take every stream. The
//! router's deadline bounds the time to the answer's head only (it wraps the handler's
//! future, not the body), so a stream is not cut off by it; it is counted in the connection
//! cap like any connection, kept alive past the idle timeout by heartbeats its client takes,
//! closed once its client stops taking them (`--watch-write-timeout-ms`), and ended after
//! `--watch-max-lifetime-secs` at most (the client reconnects). Its connection is closed after
//! it (`Connection: close`): the socket's send buffer was shrunk for the stream.

use std::collections::HashSet;
use std::time::Duration;

use axum::extract::{FromRequestParts, Query, Request, State};
use axum::http::{HeaderValue, Method, header};
use axum::response::sse::Sse;
use axum::response::{IntoResponse, Response};
use celeriant_sync_protocol::AggregateRef;
use celeriant_sync_protocol::codes::gateway as g;
use celeriant_sync_protocol::watch::{Ready, Refused, WatchRequest};
use uuid::Uuid;

use crate::access::{Actor, Preset};
use crate::auth::{Session, now_ms};
use crate::backend::{AggregateKey, Asker, TipsAsk};
use crate::error::ApiError;
use crate::extract::read_json_proven;
use crate::limits::fair::Kind;
use crate::limits::ip;
use crate::limits::notice::Throttle;
use crate::routes::members::{readable, watch_access};
use crate::serve::activity::Activity;
use crate::state::AppState;
use crate::watch::hub::Registration;
use crate::watch::stream;

/// The access check made again before each notification is sent. Under `owner` a positive
/// answer is final (owners never change) and remembered; under the other presets members can
/// be revoked, so it is asked every time (on the Celeriant backend answered from the replica's
/// cached access record while it is younger than `--members-cache-ms` and not seen changed).
fn delivery_check(state: &AppState, session: Session) -> stream::Check {
    if matches!(session.actor, Actor::Operator | Actor::Unchecked) {
        return std::sync::Arc::new(|_| Box::pin(async { true }));
    }
    let state = state.clone();
    let session = std::sync::Arc::new(session);
    let owned = std::sync::Arc::new(std::sync::Mutex::new(HashSet::<AggregateRef>::new()));
    std::sync::Arc::new(move |aggregate: AggregateRef| {
        let (state, session, owned) = (state.clone(), session.clone(), owned.clone());
        Box::pin(async move {
            // A token revoked after the stream opened gets no more notifications.
            if session.revoked(&state.auth.revocations) {
                return false;
            }
            let lock = || owned.lock().unwrap_or_else(|p| p.into_inner());
            if lock().contains(&aggregate) {
                return true;
            }
            let key = AggregateKey {
                org: state.config.org_id,
                aggregate,
            };
            let yes = readable(&state, &session, key).await.unwrap_or(false);
            if yes && state.policy.preset(aggregate.type_id) == Preset::Owner {
                lock().insert(aggregate);
            }
            yes
        })
    })
}

/// Bytes of `POST` body allowed per aggregate the limit lets a stream name (a compact entry
/// takes 86; the rest is room for spaces), so that a list somewhat over the limit is answered
/// 40020 and a flood 413 before it is read.
const BODY_BYTES_PER_AGGREGATE: usize = 200;

/// The handler (both methods). A stream refused for want of room (429) closes its
/// connection too: a client that opens streams it never reads would otherwise keep the
/// refused connections open as idle keep-alive ones.
pub async fn watch(State(state): State<AppState>, request: Request) -> Response {
    // Within a moment of the router's deadline starting (`crate::app`).
    let started = tokio::time::Instant::now();
    match open(&state, request, started).await {
        Ok(response) => response,
        Err(e) => {
            let mut response = e.into_response();
            if response.status() == axum::http::StatusCode::TOO_MANY_REQUESTS {
                response
                    .headers_mut()
                    .insert(header::CONNECTION, HeaderValue::from_static("close"));
            }
            response
        }
    }
}

/// Longest `ready` waits for its tips: past it, it goes without them (the client then reads
/// every aggregate). Short beside `--request-timeout-ms`, so tips never turn `ready` into a 504.
pub const TIPS_BUDGET: Duration = Duration::from_secs(1);

/// When the tips of a request that reached the router at `started` are due, at `now`:
/// [`TIPS_BUDGET`] from now, and never past the request's deadline (`request_timeout` from
/// `started`; the router answers 504 only [`crate::app::DEADLINE_GRACE`] later).
fn tips_deadline(
    started: tokio::time::Instant,
    request_timeout: Duration,
    now: tokio::time::Instant,
) -> tokio::time::Instant {
    (now + TIPS_BUDGET).min(started + request_timeout)
}

/// Log lines a client can cause, at most one per interval (`crate::limits::notice`).
static REFUSED_LOG: Throttle = Throttle::new();
static TIPS_LOG: Throttle = Throttle::new();

/// `ready`'s `tips`: each aggregate's version now, one per entry of the request's list in its
/// order (a duplicate gets the same; `null` for one refused, one the session may watch but not
/// read — nobody owns it yet —, or one whose version could not be read); `None` when the store
/// cannot tell (the Celeriant backend while its upstream watch is down) or could not be read at
/// all (the client then catches every aggregate up, as without tips). Only the aggregates the
/// session may read reach the backend (`unreadable` and the refused are left out here, on
/// either store).
///
/// It takes the stream's `registration`, so the versions cannot be read before the stream is
/// registered: every change is then either at or below its tip or notified on the stream. It
/// ends by `ask.deadline` whatever the backend does.
async fn tips(
    state: &AppState,
    named: &[AggregateRef],
    registration: &Registration,
    unreadable: &HashSet<AggregateRef>,
    ask: TipsAsk,
) -> Option<Vec<Option<u64>>> {
    let keys: Vec<AggregateRef> = (registration.slot.aggregates.iter())
        .filter(|a| !unreadable.contains(a))
        .copied()
        .collect();
    let org = state.config.org_id;
    let asked = state.backend.tips(
        keys.iter()
            .map(|&aggregate| AggregateKey { org, aggregate })
            .collect(),
        ask,
    );
    let versions = match tokio::time::timeout_at(ask.deadline, asked).await {
        Ok(Ok(versions)) => versions?,
        Ok(Err(e)) => {
            if let Some(suppressed) = TIPS_LOG.allow() {
                tracing::warn!(error = %e, suppressed, "watch: the tips could not be read; ready goes without");
            }
            return None;
        }
        Err(_) => return None,
    };
    let by: std::collections::HashMap<AggregateRef, Option<u64>> =
        keys.into_iter().zip(versions).collect();
    Some(named.iter().map(|a| by.get(a).copied().flatten()).collect())
}

fn parse_aggregate(value: &str) -> Result<AggregateRef, ApiError> {
    let bad = || {
        ApiError::code(
            g::INVALID_QUERY,
            format!("aggregate={value:?} is not <typeId>/<id> (two UUIDs)"),
        )
    };
    let (type_id, id) = value.split_once('/').ok_or_else(bad)?;
    Ok(AggregateRef {
        type_id: Uuid::parse_str(type_id).map_err(|_| bad())?,
        id: Uuid::parse_str(id).map_err(|_| bad())?,
    })
}

async fn open(
    state: &AppState,
    request: Request,
    started: tokio::time::Instant,
) -> Result<Response, ApiError> {
    let (mut parts, body) = request.into_parts();
    let peer = ip::peer(&parts.extensions);
    let address = state.fair.address(Kind::Read, peer)?;
    let session = Session::from_request_parts(&mut parts, state).await?;
    let share = state.fair.client(Kind::Read, address, session.client_id)?;
    let aggregates: Vec<AggregateRef> = if parts.method == Method::POST {
        let limit =
            state.config.watch.watch_max_aggregates as usize * BODY_BYTES_PER_AGGREGATE + 1024;
        let body: WatchRequest =
            read_json_proven(&session, &parts.headers, body, limit, state.body_pace()).await?;
        body.aggregates
    } else {
        let Query(params) = Query::<Vec<(String, String)>>::from_request_parts(&mut parts, state)
            .await
            .map_err(|e| ApiError::code(g::INVALID_QUERY, e.body_text()))?;
        params
            .iter()
            .map(|(name, value)| match name.as_str() {
                "aggregate" => parse_aggregate(value),
                other => Err(ApiError::code(
                    g::INVALID_QUERY,
                    format!("unknown query parameter {other:?}"),
                )),
            })
            .collect::<Result<_, _>>()?
    };
    let named = aggregates;
    let mut aggregates: HashSet<AggregateRef> = named.iter().copied().collect();
    for aggregate in &aggregates {
        session.check_type(aggregate.type_id)?;
    }
    // Before the access checks, which would be wasted on a stream the hub refuses.
    state.watch.check_size(aggregates.len())?;
    state.watch.check_address(peer)?;
    let mut refused = Vec::new();
    // Watched but not readable (nobody owns it yet): no tip in `ready`.
    let mut unreadable = HashSet::new();
    for aggregate in aggregates.clone() {
        let key = AggregateKey {
            org: state.config.org_id,
            aggregate,
        };
        let (watch, read) = watch_access(state, &session, key).await?;
        if watch && !read {
            unreadable.insert(aggregate);
        }
        if !watch {
            aggregates.remove(&aggregate);
            refused.push(Refused {
                type_id: aggregate.type_id,
                id: aggregate.id,
                code: g::AGGREGATE_FORBIDDEN,
            });
        }
    }
    if !refused.is_empty()
        && let Some(suppressed) = REFUSED_LOG.allow()
    {
        tracing::info!(client = ?session.client_id, refused = refused.len(), suppressed, "watch: entries refused by the access policy");
    }
    let established = session
        .client_id
        .is_some_and(|c| state.auth.established.contains(&c));
    let registration = state
        .watch
        .register(session.client_id, established, peer, aggregates)?;
    let ask = TipsAsk {
        asker: session
            .client_id
            .map_or(Asker::Address(ip::bucket(peer)), Asker::Client),
        deadline: tips_deadline(
            started,
            state.request_timeout(),
            tokio::time::Instant::now(),
        ),
    };
    let ready = Ready {
        refused,
        tips: tips(state, &named, &registration, &unreadable, ask).await,
        // `Slot` forgets what a stream sent only on a deletion (`watch::slot`), which the
        // backend's `reset`s must tell from a trim: not once the Celeriant mapping is in doubt.
        deleted_resets: state.backend.deleted_resets(),
    };
    // The share bounds how fast streams are opened, not how long they last.
    drop(share);
    let mut lifetime = state.config.watch.max_lifetime(registration.slot.id);
    if let Some(exp) = session.expires_at {
        lifetime = lifetime.min(Duration::from_millis((exp * 1000).saturating_sub(now_ms())));
    }
    // Without a connection (tests driving the router alone) there is no socket to watch.
    let streaming = parts
        .extensions
        .get::<Activity>()
        .map(|activity| activity.stream(state.config.watch.write_timeout()));
    // A connection carrying a stream gives way to a newcomer only after its address's idle ones.
    let stream_mark = parts
        .extensions
        .get::<std::sync::Arc<crate::limits::connections::Slot>>()
        .map(|slot| slot.streaming());
    let check = delivery_check(state, session.clone());
    let alive: stream::Alive = {
        let (state, session) = (state.clone(), session.clone());
        std::sync::Arc::new(move || !session.revoked(&state.auth.revocations))
    };
    let events = stream::events(
        registration,
        ready,
        check,
        alive,
        state
            .config
            .watch
            .heartbeat(state.config.limits.idle_timeout_ms),
        lifetime,
        state.watch.closing(),
        (streaming, stream_mark),
    );
    let mut response = Sse::new(events).into_response();
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert("x-accel-buffering", HeaderValue::from_static("no"));
    headers.insert(header::CONNECTION, HeaderValue::from_static("close"));
    Ok(response)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_tips_get_a_second_at_most_and_never_past_the_request_deadline() {
        let started = tokio::time::Instant::now();
        let timeout = Duration::from_secs(30);
        assert_eq!(
            tips_deadline(started, timeout, started),
            started + TIPS_BUDGET
        );
        let late = started + Duration::from_millis(29_600);
        assert_eq!(tips_deadline(started, timeout, late), started + timeout);
        let past = started + Duration::from_secs(31);
        assert!(
            tips_deadline(started, timeout, past) < past,
            "none left: due at once"
        );
    }
}
