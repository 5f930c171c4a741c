//! `GET` and `PUT /v1/aggregates/{typeId}/{id}/members` and `POST …/members/accept`: an
//! aggregate's owner, members and invitations, the owner inviting, changing or revoking, and
//! the invited principal accepting — plus [`readable`], the read check every read and watch
//! makes.
//!
//! A grant takes effect only once its grantee accepts it. Were it immediate, an attacker could
//! pre-create an aggregate id a victim's app will use later (ids can be predictable), grant the
//! victim `readWrite`, and the victim's "creating" write would land in the attacker's aggregate,
//! which the attacker reads. So the owner's `PUT` for a principal that is not a member records an
//! **invitation** (`invited`), which gives nothing: the invited principal is a stranger to reads,
//! writes and watches (its creating write is refused, 40302, nothing stored) until it accepts.
//!
//! `GET` answers `{"owner":"…","members":{…},"invited":{…}}` to anyone who may read the
//! aggregate or is invited to it (each sees the owner and its own entry; the owner all); to
//! anyone else, and for an aggregate that does not exist, the same 404 (40400), so that the
//! endpoint is no existence oracle. `PUT` takes `{"principal":"…","access":"read"|"readWrite"|
//! "none"}` (strict: unknown fields refused): a non-member is invited, a member's grant changes
//! at once (it accepted sharing this aggregate already), `none` removes a member and an
//! invitation. Only the owner may change it (403, 40303, to a caller who may read it or is
//! invited; 404 to anyone else); only under a preset that has members (`members`: read or
//! readWrite, `members-read`: read; otherwise 403, 40304); at most 256 members and invitations
//! together (400, 40021). `POST …/accept` takes `{}` and moves the caller's invitation into the
//! members (idempotent for a member; 404 for a caller neither invited nor a reader). Each
//! change is one transaction of the store (`Backend::update_access`).

use std::net::IpAddr;
use std::sync::Arc;

use axum::Json;
use axum::body::Body;
use axum::extract::{FromRequestParts, Request, State};
use axum::http::Method;
use axum::response::{IntoResponse, Response};
use celeriant_sync_protocol::codes::gateway as g;
use serde::Deserialize;

use crate::access::{AccessRecord, Actor, Grant, MAX_MEMBERS, Preset, Principal};
use crate::auth::Session;
use crate::backend::AggregateKey;
use crate::error::ApiError;
use crate::extract::read_json_proven;
use crate::limits::connections::{Slot as ConnSlot, committing};
use crate::limits::fair::Kind;
use crate::limits::ip;
use crate::routes::read::aggregate_of;
use crate::state::AppState;

/// The largest `PUT` body read, in bytes.
const MAX_BODY_BYTES: usize = 1_024;

/// Whether `session` may read (and watch) `key`. The operator and `--auth none` read
/// everything; a preset that lets every principal read needs no lookup; otherwise the store's
/// record decides (`Backend::access_check`: on the Celeriant backend a per-replica cache, whose
/// members may be up to `--members-cache-ms` old). Owners never change and records are never
/// removed, so a check made before a read holds for the read.
pub async fn readable(
    state: &AppState,
    session: &Session,
    key: AggregateKey,
) -> Result<bool, ApiError> {
    judge_read(state, session, key, false).await
}

/// Whether `session` may name `key` in a change stream: an aggregate nobody owns yet may be
/// watched (a client watches what it is about to create; its notifications are judged by
/// [`readable`] when delivered), one that exists only when the session may read it.
pub async fn watchable(
    state: &AppState,
    session: &Session,
    key: AggregateKey,
) -> Result<bool, ApiError> {
    judge_read(state, session, key, true).await
}

/// What a change stream may name and say of `key`, from one access check: whether it may be
/// watched ([`watchable`]) and whether it may be read ([`readable`]; a stream's `ready` gives
/// the version of only those, so an aggregate nobody owns tells a watcher nothing a read
/// would not).
pub async fn watch_access(
    state: &AppState,
    session: &Session,
    key: AggregateKey,
) -> Result<(bool, bool), ApiError> {
    let checked = check(state, session, key).await?;
    Ok((
        judged(state, key, &checked, true),
        judged(state, key, &checked, false),
    ))
}

/// `None`: granted whatever the record (the operator, no policy, a preset every session may
/// read); else the access record (if any) and who asks, to judge.
async fn check<'s>(
    state: &AppState,
    session: &'s Session,
    key: AggregateKey,
) -> Result<Option<(Option<Arc<AccessRecord>>, &'s Principal)>, ApiError> {
    let who = match &session.actor {
        Actor::Operator | Actor::Unchecked => return Ok(None),
        Actor::Principal(p) => p,
    };
    let preset = state.policy.preset(key.aggregate.type_id);
    if matches!(
        preset,
        Preset::Authenticated | Preset::AuthenticatedRead | Preset::ReadOnly
    ) {
        return Ok(None);
    }
    let record = state
        .backend
        .access_check(key, preset.member_grants().is_some())
        .await
        .map_err(|e| ApiError(e.into_outcome()))?;
    Ok(Some((record, who)))
}

async fn judge_read(
    state: &AppState,
    session: &Session,
    key: AggregateKey,
    unowned: bool,
) -> Result<bool, ApiError> {
    let checked = check(state, session, key).await?;
    Ok(judged(state, key, &checked, unowned))
}

/// Whether what [`check`] found lets its session read `key`: granted whatever the record, the
/// preset's answer for the record, or `unowned` for an aggregate nobody owns yet. One judgement
/// for [`readable`], [`watchable`] and [`watch_access`].
fn judged(
    state: &AppState,
    key: AggregateKey,
    checked: &Option<(Option<Arc<AccessRecord>>, &Principal)>,
    unowned: bool,
) -> bool {
    match checked {
        None => true,
        Some((None, _)) => unowned,
        Some((Some(record), who)) => {
            (state.policy.preset(key.aggregate.type_id)).may_read(Some(record), who)
        }
    }
}

#[derive(Deserialize)]
#[serde(deny_unknown_fields)]
struct PutBody {
    principal: String,
    access: Access,
}

#[derive(Deserialize, Clone, Copy, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
enum Access {
    Read,
    ReadWrite,
    None,
}

fn no_such_aggregate() -> ApiError {
    ApiError::code(g::NOT_FOUND, "no such aggregate")
}

/// The handler of `…/members` (`GET`, `PUT`).
pub async fn members(State(state): State<AppState>, request: Request) -> Response {
    match handle(&state, request, false).await {
        Ok(record) => Json(record).into_response(),
        Err(e) => e.into_response(),
    }
}

/// The handler of `POST …/members/accept`.
pub async fn accept(State(state): State<AppState>, request: Request) -> Response {
    match handle(&state, request, true).await {
        Ok(record) => Json(record).into_response(),
        Err(e) => e.into_response(),
    }
}

async fn handle(
    state: &AppState,
    request: Request,
    accepting: bool,
) -> Result<AccessRecord, ApiError> {
    let (mut parts, body) = request.into_parts();
    let peer = ip::peer(&parts.extensions);
    let conn = parts.extensions.get::<Arc<ConnSlot>>().cloned();
    let address = state.fair.address(Kind::Read, peer)?;
    let session = Session::from_request_parts(&mut parts, state).await?;
    let _share = state.fair.client(Kind::Read, address, session.client_id)?;
    let aggregate = aggregate_of(&mut parts, state).await?;
    session.check_type(aggregate.type_id)?;
    let key = AggregateKey {
        org: state.config.org_id,
        aggregate,
    };
    // HEAD (which axum routes with GET) is a read like GET, never the PUT below (found by
    // review: it fell through into the write path).
    if accepting {
        return accept_invitation(state, (peer, conn), &session, key, &parts.headers, body).await;
    }
    if parts.method == Method::GET || parts.method == Method::HEAD {
        // Always read now (not the check cache), so an invitation just made is seen.
        let record = state
            .backend
            .access(key)
            .await
            .map_err(|e| ApiError(e.into_outcome()))?;
        // An invited principal may see who invites it (and to what) before it accepts.
        let invited = match (&session.actor, &record) {
            (Actor::Principal(p), Some(r)) => r.invited.contains_key(p),
            _ => false,
        };
        if !invited && !readable(state, &session, key).await? {
            return Err(no_such_aggregate());
        }
        return seen_by(&session.actor, record.ok_or_else(no_such_aggregate)?);
    }
    put(state, (peer, conn), &session, key, &parts.headers, body).await
}

/// What `actor` may see of `record`: all of it for the owner (and the operator); a member its
/// own grant and the owner; an invited principal its own invitation and the owner; anyone else
/// who may read the aggregate (an `authenticated-read` type) nothing — the owner's and members'
/// principals (with app tokens, users' subjects) are not theirs to list (found by review).
fn seen_by(actor: &Actor, record: AccessRecord) -> Result<AccessRecord, ApiError> {
    let Actor::Principal(p) = actor else {
        return Ok(record);
    };
    if *p == record.owner {
        return Ok(record);
    }
    let mut seen = AccessRecord::owned_by(record.owner);
    let member = record.members.get(p);
    let invited = record.invited.get(p);
    if let Some(grant) = member {
        seen.members.insert(p.clone(), *grant);
    }
    // A member may hold an invitation too: a raise to readWrite waiting for its accept.
    if let Some(grant) = invited {
        seen.invited.insert(p.clone(), *grant);
    }
    if member.is_none() && invited.is_none() {
        return Err(ApiError::code(
            g::NOT_OWNER,
            "only the aggregate's owner, members and invited principals see its members",
        ));
    }
    Ok(seen)
}

/// The principal a members change acts for: the operator changes nothing (40303), and without
/// sessions nobody is proven (40304).
fn changer(session: &Session) -> Result<Principal, ApiError> {
    match &session.actor {
        Actor::Principal(p) => Ok(p.clone()),
        Actor::Operator => Err(ApiError::code(
            g::NOT_OWNER,
            "the operator credential reads; it changes no members",
        )),
        Actor::Unchecked => Err(ApiError::code(
            g::MEMBERS_NOT_ALLOWED,
            "members need sessions: with --auth none nobody is proven",
        )),
    }
}

/// A members change is a write upstream (a whole record appended on Celeriant): it takes a slot
/// of `--max-inflight` like any write, beyond the read rate its route is charged (never one
/// of the slots kept for established devices: those are for their event writes).
fn write_slot(state: &AppState, peer: IpAddr) -> Result<crate::limits::slots::Slot, ApiError> {
    state
        .admission
        .take(peer, None)
        .map_err(crate::limits::slots::refusal)
}

/// The most a member may be granted under `key`'s preset, or 40304 when it has no members.
fn grants_of(state: &AppState, key: AggregateKey) -> Result<(Preset, Grant), ApiError> {
    let preset = state.policy.preset(key.aggregate.type_id);
    match preset.member_grants() {
        Some(most) => Ok((preset, most)),
        None => Err(ApiError::code(
            g::MEMBERS_NOT_ALLOWED,
            format!(
                "aggregates of type {} are {}: the policy gives them no members",
                key.aggregate.type_id,
                preset.name()
            ),
        )),
    }
}

/// `POST …/members/accept`, body `{}`: the caller's invitation becomes membership.
async fn accept_invitation(
    state: &AppState,
    (peer, conn): (IpAddr, Option<Arc<ConnSlot>>),
    session: &Session,
    key: AggregateKey,
    headers: &axum::http::HeaderMap,
    body: Body,
) -> Result<AccessRecord, ApiError> {
    let who = changer(session)?;
    let _slot = write_slot(state, peer)?;
    let body: serde_json::Map<String, serde_json::Value> =
        read_json_proven(session, headers, body, MAX_BODY_BYTES, state.body_pace()).await?;
    if !body.is_empty() {
        return Err(ApiError::code(
            g::INVALID_FIELD,
            "the body of an acceptance is {}",
        ));
    }
    let (preset, _) = grants_of(state, key)?;
    let caller = who.clone();
    let change = Box::new(move |current: Option<AccessRecord>| {
        let Some(mut record) = current else {
            return Err(no_such_aggregate());
        };
        if let Some(grant) = record.invited.remove(&caller) {
            record.members.insert(caller.clone(), grant);
            return Ok(record);
        }
        if record.members.contains_key(&caller) {
            return Ok(record);
        }
        Err(if record.owner == caller {
            ApiError::code(g::INVALID_FIELD, "the owner has no invitation to accept")
        } else if preset.may_read(Some(&record), &caller) {
            ApiError::code(g::NOT_FOUND, "no invitation to accept")
        } else {
            no_such_aggregate()
        })
    });
    let _committing = committing(conn.as_ref())?;
    match state.backend.update_access(key, change).await {
        Ok(answer) => {
            let record = answer?;
            tracing::info!(aggregate = %format!("{}/{}", key.aggregate.type_id, key.aggregate.id), members = record.members.len(), "invitation accepted");
            seen_by(&Actor::Principal(who), record)
        }
        Err(e) => Err(ApiError(e.into_outcome())),
    }
}

async fn put(
    state: &AppState,
    (peer, conn): (IpAddr, Option<Arc<ConnSlot>>),
    session: &Session,
    key: AggregateKey,
    headers: &axum::http::HeaderMap,
    body: Body,
) -> Result<AccessRecord, ApiError> {
    let who = changer(session)?;
    let _slot = write_slot(state, peer)?;
    let body: PutBody =
        read_json_proven(session, headers, body, MAX_BODY_BYTES, state.body_pace()).await?;
    let member = Principal::parse(&body.principal)
        .map_err(|e| ApiError::code(g::INVALID_FIELD, format!("principal: {e}")))?;
    let (preset, most) = grants_of(state, key)?;
    let grant = match body.access {
        Access::None => None,
        Access::Read => Some(Grant::Read),
        Access::ReadWrite if most == Grant::ReadWrite => Some(Grant::ReadWrite),
        Access::ReadWrite => {
            return Err(ApiError::code(
                g::MEMBERS_NOT_ALLOWED,
                format!(
                    "aggregates of type {} are members-read: members may only read",
                    key.aggregate.type_id
                ),
            ));
        }
    };
    let change = Box::new(move |current: Option<AccessRecord>| {
        let Some(mut record) = current else {
            return Err(no_such_aggregate());
        };
        if record.owner != who {
            return Err(
                if record.names(&who) || preset.may_read(Some(&record), &who) {
                    ApiError::code(
                        g::NOT_OWNER,
                        "only the aggregate's owner changes its members",
                    )
                } else {
                    no_such_aggregate()
                },
            );
        }
        if member == record.owner {
            return Err(ApiError::code(
                g::INVALID_FIELD,
                "principal: the owner is not one of its own members",
            ));
        }
        match grant {
            None => {
                record.members.remove(&member);
                record.invited.remove(&member);
            }
            // A member's grant lowered (readWrite to read) changes at once; a raise (read to
            // readWrite) is an invitation like any other, the member keeping `read` until it
            // accepts: otherwise an owner could invite a victim to a harmless `read` of an id
            // the victim's app will create, then raise it, and the victim's "creating" write
            // would land in the owner's aggregate (hostile review).
            Some(grant) if record.members.contains_key(&member) => {
                if grant == Grant::ReadWrite && record.members.get(&member) != Some(&grant) {
                    record.invited.insert(member.clone(), grant);
                } else {
                    record.members.insert(member.clone(), grant);
                    record.invited.remove(&member);
                }
            }
            // Anyone else is invited: nothing changes for it until it accepts.
            Some(grant) => {
                if !record.invited.contains_key(&member) && record.listed() >= MAX_MEMBERS {
                    return Err(ApiError::code(
                        g::TOO_MANY_MEMBERS,
                        format!(
                            "the aggregate has {MAX_MEMBERS} members and invitations, the most \
                             allowed"
                        ),
                    ));
                }
                record.invited.insert(member.clone(), grant);
            }
        }
        Ok(record)
    });
    let _committing = committing(conn.as_ref())?;
    match state.backend.update_access(key, change).await {
        Ok(answer) => {
            let record = answer?;
            tracing::info!(aggregate = %format!("{}/{}", key.aggregate.type_id, key.aggregate.id), members = record.members.len(), invited = record.invited.len(), "members changed");
            Ok(record)
        }
        Err(e) => Err(ApiError(e.into_outcome())),
    }
}
