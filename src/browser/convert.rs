//! The engine's status and notices as plain JavaScript objects, and back.
//!
//! One shape each, used twice: the app receives them (`status()`, the `status`, `synced` and
//! `parked` events — typed in the `.d.ts`), and the contexts of a database send them to each
//! other over their channel. Reading back is defensive: a message from another version of the
//! library, or a damaged one, gives `None`, never a panic.

use js_sys::{Array, Object};
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
pub(crate) fn status_to_js(s: &Status) -> JsValue {
    let o = Object::new();
    js::set(&o, "state", s.state.as_str());
    js::set(&o, "role", s.role.as_str());
    js::set(&o, "pending", s.pending as f64);
    js::set(&o, "parked", s.parked as f64);
    let error = match &s.last_error {
        None => JsValue::NULL,
        Some(e) => {
            let err = Object::new();
            js::set(&err, "code", e.code.map_or(JsValue::NULL, JsValue::from));
            js::set(&err, "message", e.message.as_str());
            js::set(&err, "at", e.at as f64);
            err.into()
        }
    };
    js::set(&o, "lastError", error);
    let read = Object::new();
    js::set(&read, "state", s.read.as_str());
    let refused: Array = s
        .read_refused
        .iter()
        .map(|r| {
            let entry = Object::new();
            js::set(&entry, "aggregate", aggregate_to_js(&r.aggregate));
            js::set(&entry, "code", r.code);
            JsValue::from(entry)
        })
        .collect();
    js::set(&read, "refused", refused);
    js::set(&o, "read", read);
    o.into()
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

/// The `synced` event's detail.
pub(crate) fn synced_to_js(n: &SyncedNotice) -> JsValue {
    let o = Object::new();
    js::set(&o, "aggregate", aggregate_to_js(&n.aggregate));
    js::set(&o, "firstSeq", n.first_seq as f64);
    js::set(&o, "lastSeq", n.last_seq as f64);
    let ids: Array = n.event_ids.iter().map(uuid_js).collect();
    js::set(&o, "eventIds", ids);
    js::set(&o, "duplicate", n.duplicate);
    o.into()
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

/// The `parked` event's detail.
pub(crate) fn parked_to_js(r: &ParkRecord) -> JsValue {
    let o = Object::new();
    js::set(&o, "aggregate", aggregate_to_js(&r.aggregate));
    js::set(&o, "firstSeq", r.first_seq as f64);
    js::set(&o, "lastSeq", r.last_seq as f64);
    js::set(&o, "count", r.count);
    js::set(&o, "code", r.code);
    js::set(&o, "message", r.message.as_str());
    js::set(&o, "parkedAt", r.parked_at as f64);
    js::set(&o, "mayHaveLanded", r.may_have_landed);
    if let Some(version) = r.current_version {
        js::set(&o, "currentVersion", version as f64);
    }
    if let Some(legs) = &r.atomic {
        set_atomic_with(&o, legs, &r.aggregate);
    }
    o.into()
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
