//! `GET /v1/revocations`, `POST /v1/revocations` and `POST /v1/revocations/lift`: the operator
//! revokes a device, a principal or one token, lists the revocations, and lifts one
//! (`crate::auth::revoke` says what each does).
//!
//! Only the operator credential (`Authorization: Operator <secret>`) is accepted: a session of
//! any device or user is 403 (40305), a wrong operator secret 401 (40101), like everywhere.
//! Every use, accepted or refused, is logged at WARN with what it named (through `Debug`, so no
//! byte of a body can start a new log line). Bodies are strict and small:
//! `{"kind":"device"|"principal"|"session","id":"…"}`. A change is stored first (one transaction
//! of the store; with the Celeriant backend a guarded append, decided again on a conflict), then
//! applied to this replica's list at once; other replicas pick it up within
//! `--revocation-refresh-secs` (sooner when the backend notifies the change).

use axum::Json;
use axum::extract::{Request, State};
use axum::http::request::Parts;
use axum::response::{IntoResponse, Response};
use celeriant_sync_protocol::codes::gateway as g;
use serde::Deserialize;
use serde_json::{Value, json};
use uuid::Uuid;

use crate::access::Principal;
use crate::auth::bearer::{Bearer, bearer};
use crate::auth::revoke::{Revocation, Target};
use crate::error::ApiError;
use crate::extract::read_json;
use crate::limits::fair::Kind;
use crate::limits::ip;
use crate::limits::notice::Throttle;
use crate::state::AppState;

/// The largest body read, in bytes.
const MAX_BODY_BYTES: usize = 1_024;

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct Body {
    kind: TargetKind,
    id: String,
}

#[derive(Deserialize, Clone, Copy)]
#[serde(rename_all = "camelCase")]
enum TargetKind {
    Device,
    Principal,
    Session,
}

fn target_of(body: &Body) -> Result<Target, ApiError> {
    let uuid = |text: &str| {
        Uuid::parse_str(text)
            .ok()
            .filter(|u| u.to_string() == text)
            .ok_or_else(|| {
                ApiError::code(
                    g::INVALID_FIELD,
                    "id: a lower-case hyphenated UUID is required",
                )
            })
    };
    Ok(match body.kind {
        TargetKind::Device => Target::Device(uuid(&body.id)?),
        TargetKind::Session => Target::Session(uuid(&body.id)?),
        TargetKind::Principal => {
            let principal = Principal::parse(&body.id)
                .map_err(|e| ApiError::code(g::INVALID_FIELD, format!("id: {e}")))?;
            // `device:<clientId>` is that device, whatever principal its tokens act for: under
            // app tokens they act for `user:<sub>`, so a principal target would revoke nothing
            // while answering 200 (hostile review). Stored as the device target.
            match body.id.strip_prefix("device:") {
                Some(id) => Target::Device(uuid(id)?),
                None => Target::Principal(principal),
            }
        }
    })
}

/// Refuses anything but the operator credential; logs every attempt (also `POST /v1/backup`).
pub(crate) fn operator_only(state: &AppState, parts: &Parts) -> Result<(), ApiError> {
    let path = parts.uri.path();
    let method = &parts.method;
    match bearer(&parts.headers) {
        Bearer::Operator(secret)
            if state
                .auth
                .operator
                .as_ref()
                .is_some_and(|t| t.matches(secret)) =>
        {
            Ok(())
        }
        Bearer::Operator(_) => {
            // One line per interval (with how many were not logged): the per-address rate is
            // the only other brake, and guesses must not be able to fill the disk.
            static REFUSED: Throttle = Throttle::new();
            if let Some(suppressed) = REFUSED.allow() {
                let peer = ip::peer(&parts.extensions);
                tracing::warn!(%method, path = ?path, ?peer, suppressed, "operator credential refused");
            }
            Err(ApiError::code(
                g::SESSION_INVALID,
                "the operator credential is not valid here",
            ))
        }
        _ => {
            static WITHOUT: Throttle = Throttle::new();
            if let Some(suppressed) = WITHOUT.allow() {
                let peer = ip::peer(&parts.extensions);
                tracing::warn!(%method, path = ?path, ?peer, suppressed, "refused without the operator credential");
            }
            Err(ApiError::code(
                g::OPERATOR_REQUIRED,
                "this route takes the operator credential (Authorization: Operator <secret>)",
            ))
        }
    }
}

fn now_s() -> u64 {
    crate::auth::now_ms() / 1000
}

/// `GET /v1/revocations`: every stored revocation, read from the store.
pub async fn list(State(state): State<AppState>, request: Request) -> Response {
    answer(list_inner(&state, request).await)
}

async fn list_inner(state: &AppState, request: Request) -> Result<Value, ApiError> {
    let (parts, _) = request.into_parts();
    let _address = state
        .fair
        .address(Kind::Read, ip::peer(&parts.extensions))?;
    operator_only(state, &parts)?;
    let records = state
        .backend
        .revocations()
        .await
        .map_err(|e| ApiError(e.into_outcome()))?;
    tracing::warn!(
        count = records.len(),
        "operator credential used: revocations listed"
    );
    Ok(json!({
        "revocations": records,
        "max": state.config.max_revocations,
        "refreshSecs": state.config.revocation_refresh_secs,
    }))
}

/// `POST /v1/revocations`: revoke.
pub async fn revoke(State(state): State<AppState>, request: Request) -> Response {
    answer(change(&state, request, false).await)
}

/// `POST /v1/revocations/lift`: lift.
pub async fn lift(State(state): State<AppState>, request: Request) -> Response {
    answer(change(&state, request, true).await)
}

fn answer(result: Result<Value, ApiError>) -> Response {
    match result {
        Ok(value) => Json(value).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn change(state: &AppState, request: Request, lift: bool) -> Result<Value, ApiError> {
    let (parts, body) = request.into_parts();
    let conn = parts
        .extensions
        .get::<std::sync::Arc<crate::limits::connections::Slot>>()
        .cloned();
    let _address = state
        .fair
        .address(Kind::Read, ip::peer(&parts.extensions))?;
    operator_only(state, &parts)?;
    let body: Body = read_json(
        &parts.headers,
        body,
        MAX_BODY_BYTES,
        state.body_read_timeout(),
    )
    .await?;
    let target = target_of(&body)?;
    let now = now_s();
    let ttl = state.config.session_ttl_secs;
    let max = usize::try_from(state.config.max_revocations).unwrap_or(usize::MAX);
    let named = target.clone();
    let decide = Box::new(move |mut list: Vec<Revocation>| {
        let found = list.iter().position(|r| r.target == named);
        match (found, lift) {
            (None, true) => {
                return Err(ApiError::code(g::NOT_FOUND, "no such revocation"));
            }
            (Some(i), true) => {
                let r = &mut list[i];
                if matches!(r.target, Target::Session(_)) {
                    // Lifting a token's revocation lets that token back in.
                    list.remove(i);
                } else if r.lifted_at.is_none() {
                    r.lifted_at = Some(now);
                    // Tokens issued up to the lift are refused; after this, none of them is
                    // alive any more.
                    r.forget_at = Some(now.max(r.revoked_at) + ttl + 1);
                }
            }
            (Some(i), false) => {
                let r = &mut list[i];
                // Revoking again what stands changes nothing (a standing device or principal
                // refuses every token whatever its iat; a token's record outlives the token), so
                // a retrying script appends nothing (on the Celeriant backend every change
                // stores the whole list). Only a lifted one is revoked anew.
                if r.lifted_at.is_some() && !matches!(r.target, Target::Session(_)) {
                    r.revoked_at = r.revoked_at.max(now);
                    (r.lifted_at, r.forget_at) = (None, None);
                }
            }
            (None, false) => {
                if list.len() >= max {
                    return Err(ApiError::code(
                        g::TOO_MANY_REVOCATIONS,
                        format!(
                            "{max} revocations are kept, the most allowed; lift one or wait \
                             until lifted ones are forgotten"
                        ),
                    ));
                }
                let session = matches!(named, Target::Session(_));
                list.push(Revocation {
                    target: named.clone(),
                    revoked_at: now,
                    lifted_at: None,
                    forget_at: session.then_some(now + ttl + 1),
                });
            }
        }
        Ok(list)
    });
    let revocations = &state.auth.revocations;
    let _serial = revocations.serial().await;
    // From here the change may be stored: the connection is not evicted until answered.
    let _busy = crate::limits::connections::committing(conn.as_ref())?;
    let list = match state.backend.update_revocations(decide).await {
        Ok(answer) => answer,
        Err(e) => {
            // The change may have landed (an unknown outcome): reload now rather than at the
            // next refresh, so this replica enforces it as soon as it is there.
            if let Some(changed) = state.backend.revocations_changed() {
                changed.notify_one();
            }
            Err(ApiError(e.into_outcome()))
        }
    };
    let action = if lift { "lift" } else { "revoke" };
    let list = match list {
        Ok(list) => list,
        Err(refused) => {
            tracing::warn!(action, target = ?target.key(), code = refused.0.code(), "operator credential used: revocation refused");
            return Err(refused);
        }
    };
    let record = list.iter().find(|r| r.target == target).cloned();
    revocations.replace(list);
    tracing::warn!(action, target = ?target.key(), "operator credential used: revocation changed");
    Ok(match record {
        Some(record) => json!(record),
        None => json!({ "kind": body_kind(&target), "id": target_id(&target), "removed": true }),
    })
}

fn body_kind(target: &Target) -> &'static str {
    match target {
        Target::Device(_) => "device",
        Target::Principal(_) => "principal",
        Target::Session(_) => "session",
    }
}

fn target_id(target: &Target) -> String {
    match target {
        Target::Device(id) | Target::Session(id) => id.to_string(),
        Target::Principal(p) => p.to_string(),
    }
}
