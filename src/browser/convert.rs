//! The engine's status and notices as plain JavaScript objects, and back.
//!
//! One shape each, used twice: the app receives them (`status()`, the `status`, `synced` and
//! `parked` events — typed in the `.d.ts`), and the contexts of a database send them to each
//! other over their channel. Reading back is defensive: a message from another version of the
//! library, or a damaged one, gives `None`, never a panic.

use js_sys::{Array, Object};
use serde::Serialize;
use uuid::Uuid;
use wasm_bindgen::JsValue;

use super::idb::keys::uuid_js;
use super::js;
use crate::engine::model::{AggregateRef, Legs, ParkRecord};
use crate::engine::read::machine::ReadState;
use crate::engine::status::{LastError, Refused, Role, Status, SyncState, SyncedNotice};

/// `{ typeId, id }`.
pub(crate) fn aggregate_to_js(a: &AggregateRef) -> JsValue {
    let o = Object::new();
    js::set(&o, "typeId", uuid_js(&a.type_id));
    js::set(&o, "id", uuid_js(&a.id));
    o.into()
}

fn uuid_from(v: &JsValue) -> Option<Uuid> {
    Uuid::try_parse(&v.as_string()?).ok()
}

/// Reads `{ typeId, id }` back.
pub(crate) fn aggregate_from_js(v: &JsValue) -> Option<AggregateRef> {
    Some(AggregateRef {
        type_id: uuid_from(&js::get(v, "typeId"))?,
        id: uuid_from(&js::get(v, "id"))?,
    })
}

const READ_STATES: [ReadState; 5] = [
    ReadState::Idle,
    ReadState::Connecting,
    ReadState::Connected,
    ReadState::CatchingUp,
    ReadState::Offline,
];

const STATES: [SyncState; 8] = [
    SyncState::Idle,
    SyncState::Syncing,
    SyncState::Backoff,
    SyncState::Offline,
    SyncState::Parked,
    SyncState::Unauthorized,
    SyncState::WrongUser,
    SyncState::Closed,
];

/// `{ state, role, pending, parked, lastError, read: { state, refused } }`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StatusView<'a> {
    state: &'static str,
    role: &'static str,
    pending: f64,
    parked: f64,
    last_error: Option<LastErrorView<'a>>,
    read: ReadView<'a>,
}

#[derive(Serialize)]
struct LastErrorView<'a> {
    code: Option<u32>,
    message: &'a str,
    at: f64,
}

#[derive(Serialize)]
struct ReadView<'a> {
    state: &'static str,
    refused: Vec<RefusedView<'a>>,
}

#[derive(Serialize)]
struct RefusedView<'a> {
    aggregate: &'a AggregateRef,
    code: u32,
}

pub(crate) fn status_to_js(s: &Status) -> JsValue {
    js::to_js(&status_view(s))
}

/// `s` as a serde view (`inspect()` holds one).
pub(crate) fn status_view(s: &Status) -> impl Serialize + '_ {
    StatusView {
        state: s.state.as_str(),
        role: s.role.as_str(),
        pending: s.pending as f64,
        parked: s.parked as f64,
        last_error: s.last_error.as_ref().map(|e| LastErrorView {
            code: e.code,
            message: &e.message,
            at: e.at as f64,
        }),
        read: ReadView {
            state: s.read.as_str(),
            refused: (s.read_refused.iter())
                .map(|r| RefusedView {
                    aggregate: &r.aggregate,
                    code: r.code,
                })
                .collect(),
        },
    }
}

/// Reads a status back.
pub(crate) fn status_from_js(v: &JsValue) -> Option<Status> {
    let state = js::get_string(v, "state")?;
    let state = *STATES.iter().find(|s| s.as_str() == state)?;
    let role = match js::get_string(v, "role")?.as_str() {
        "drainer" => Role::Drainer,
        "follower" => Role::Follower,
        _ => return None,
    };
    let error = js::get(v, "lastError");
    let last_error = if error.is_null() || error.is_undefined() {
        None
    } else {
        Some(LastError {
            code: js::get_u64(&error, "code").map(|c| c as u32),
            message: js::get_string(&error, "message")?,
            at: js::get_u64(&error, "at")?,
        })
    };
    Some(Status {
        state,
        pending: js::get_u64(v, "pending")?,
        parked: js::get_u64(v, "parked")?,
        last_error,
        role,
        read: {
            let read = js::get(v, "read");
            let state = js::get_string(&read, "state").unwrap_or_default();
            *READ_STATES
                .iter()
                .find(|s| s.as_str() == state)
                .unwrap_or(&ReadState::Idle)
        },
        read_refused: refused_from_js(&js::get(&js::get(v, "read"), "refused")),
    })
}

/// The most refusals kept from one change stream's `ready` (the gateway's own bound on a
/// stream's aggregates is lower; this one holds whatever answers).
pub(crate) const MAX_REFUSED: usize = 10_000;

/// `[{ aggregate, code }]` (a status's `read.refused`), or `[{ typeId, id, code }]` (a change
/// stream's `ready.refused`); entries that do not read are skipped.
pub(crate) fn refused_from_js(list: &JsValue) -> Vec<Refused> {
    if !Array::is_array(list) {
        return Vec::new();
    }
    js::array(list)
        .iter()
        .take(MAX_REFUSED)
        .filter_map(|entry| {
            let named = js::get(entry, "aggregate");
            let aggregate = if named.is_object() {
                aggregate_from_js(&named)?
            } else {
                aggregate_from_js(entry)?
            };
            let code = js::get_u64(entry, "code")?;
            Some(Refused {
                aggregate,
                code: u32::try_from(code).ok()?,
            })
        })
        .collect()
}

/// `ready`'s `tips`, paired with the aggregates the stream named (in that order): `None` unless
/// it is a list of exactly one entry per aggregate; a `null` or non-integer entry is left out
/// (that aggregate is read as without tips).
pub(crate) fn tips_from_js(
    list: &JsValue,
    named: &[AggregateRef],
) -> Option<Vec<(AggregateRef, u64)>> {
    if !Array::is_array(list) {
        return None;
    }
    let list = Array::from(list);
    if list.length() as usize != named.len() {
        return None;
    }
    Some(
        named
            .iter()
            .zip(list.iter())
            .filter_map(|(a, v)| {
                let v = v.as_f64()?;
                (v.fract() == 0.0 && (0.0..=9_007_199_254_740_991.0).contains(&v))
                    .then_some((*a, v as u64))
            })
            .collect(),
    )
}

/// The `synced` event's detail.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SyncedView<'a> {
    aggregate: &'a AggregateRef,
    first_seq: f64,
    last_seq: f64,
    event_ids: &'a [Uuid],
    duplicate: bool,
}

pub(crate) fn synced_to_js(n: &SyncedNotice) -> JsValue {
    js::to_js(&SyncedView {
        aggregate: &n.aggregate,
        first_seq: n.first_seq as f64,
        last_seq: n.last_seq as f64,
        event_ids: &n.event_ids,
        duplicate: n.duplicate,
    })
}

/// Reads a `synced` detail back.
pub(crate) fn synced_from_js(v: &JsValue) -> Option<SyncedNotice> {
    Some(SyncedNotice {
        aggregate: aggregate_from_js(&js::get(v, "aggregate"))?,
        first_seq: js::get_u64(v, "firstSeq")?,
        last_seq: js::get_u64(v, "lastSeq")?,
        event_ids: js::array(&js::get(v, "eventIds"))
            .iter()
            .map(uuid_from)
            .collect::<Option<_>>()?,
        duplicate: js::get_bool(v, "duplicate")?,
    })
}

/// The `parked` event's detail, and with `events` an aggregate of `inspect().parked`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
pub(crate) struct ParkedView<'a, E> {
    aggregate: &'a AggregateRef,
    first_seq: f64,
    last_seq: f64,
    count: u32,
    code: u32,
    message: &'a str,
    parked_at: f64,
    may_have_landed: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    current_version: Option<f64>,
    /// Part of an atomic write: the write's other aggregates, parked with it (discarded with
    /// it).
    #[serde(skip_serializing_if = "Option::is_none")]
    atomic_with: Option<Vec<&'a AggregateRef>>,
    #[serde(skip_serializing_if = "Option::is_none")]
    events: Option<E>,
}

/// `r` as a [`ParkedView`], with `events` when given.
pub(crate) fn parked_view<E>(r: &ParkRecord, events: Option<E>) -> ParkedView<'_, E> {
    ParkedView {
        aggregate: &r.aggregate,
        first_seq: r.first_seq as f64,
        last_seq: r.last_seq as f64,
        count: r.count,
        code: r.code,
        message: &r.message,
        parked_at: r.parked_at as f64,
        may_have_landed: r.may_have_landed,
        current_version: r.current_version.map(|v| v as f64),
        atomic_with: (r.atomic.as_ref()).map(|legs| {
            (legs.iter())
                .map(|l| &l.aggregate)
                .filter(|a| **a != r.aggregate)
                .collect()
        }),
        events,
    }
}

pub(crate) fn parked_to_js(r: &ParkRecord) -> JsValue {
    js::to_js(&parked_view::<()>(r, None))
}

/// Sets `atomicWith` on `o`, a parked record (or one of its events) of `aggregate` that is part
/// of the atomic write `legs`: the write's other aggregates, parked with it (discarded with it).
/// (A loop, not a `collect`: one `Array` instantiation less for each caller.)
pub(crate) fn set_atomic_with(o: &Object, legs: &Legs, aggregate: &AggregateRef) {
    let others = Array::new();
    for leg in legs.iter() {
        if leg.aggregate != *aggregate {
            others.push(&aggregate_to_js(&leg.aggregate));
        }
    }
    js::set(o, "atomicWith", others);
}

/// Reads a `parked` detail back.
pub(crate) fn parked_from_js(v: &JsValue) -> Option<ParkRecord> {
    Some(ParkRecord {
        aggregate: aggregate_from_js(&js::get(v, "aggregate"))?,
        first_seq: js::get_u64(v, "firstSeq")?,
        last_seq: js::get_u64(v, "lastSeq")?,
        count: js::get_u64(v, "count")? as u32,
        code: js::get_u64(v, "code")? as u32,
        message: js::get_string(v, "message")?,
        parked_at: js::get_u64(v, "parkedAt")?,
        may_have_landed: js::get_bool(v, "mayHaveLanded")?,
        current_version: js::get_u64(v, "currentVersion"),
        // Not in the detail (the app's `parked` event, and other tabs' copy of it): the legs
        // stay in the stored record, which every discard reads.
        atomic: None,
    })
}
