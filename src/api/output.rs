//! The plain objects handed back to JS: receipts, status, event details, parked events.
//!
//! Built with `serde-wasm-bindgen` (missing values become `null`, never `undefined`), in the
//! shapes the TypeScript declarations in [`super::typescript`] describe.

use serde::Serialize;
use wasm_bindgen::JsValue;

use crate::engine::model::{AggregateRef, ParkRecord, Receipt, StoredEvent};
use crate::engine::status::{Status, SyncedNotice};

fn js<T: Serialize>(value: &T) -> JsValue {
    let serializer = serde_wasm_bindgen::Serializer::new().serialize_missing_as_null(true);
    value.serialize(&serializer).unwrap_or(JsValue::NULL)
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct Aggregate {
    type_id: String,
    id: String,
}

fn agg(a: &AggregateRef) -> Aggregate {
    Aggregate {
        type_id: a.type_id.to_string(),
        id: a.id.to_string(),
    }
}

/// `{ typeId, id }`.
pub fn aggregate(a: &AggregateRef) -> JsValue {
    js(&agg(a))
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReceiptOut {
    event_id: String,
    client_seq: u64,
}

/// `[{ eventId, clientSeq }]`.
pub fn receipts(receipts: &[Receipt]) -> JsValue {
    let out: Vec<ReceiptOut> = receipts
        .iter()
        .map(|r| ReceiptOut {
            event_id: r.event_id.to_string(),
            client_seq: r.client_seq,
        })
        .collect();
    js(&out)
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct LastErrorOut<'a> {
    code: Option<u32>,
    message: &'a str,
    at: u64,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct StatusOut<'a> {
    state: &'static str,
    role: &'static str,
    pending: u64,
    parked: u64,
    last_error: Option<LastErrorOut<'a>>,
}

/// `{ state, pending, parked, lastError }`.
pub fn status(s: &Status) -> JsValue {
    js(&StatusOut {
        state: s.state.as_str(),
        role: s.role.as_str(),
        pending: s.pending,
        parked: s.parked,
        last_error: s.last_error.as_ref().map(|e| LastErrorOut {
            code: e.code,
            message: &e.message,
            at: e.at,
        }),
    })
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SyncedOut {
    aggregate: Aggregate,
    first_seq: u64,
    last_seq: u64,
    event_ids: Vec<String>,
    duplicate: bool,
}

/// The `synced` event's detail.
pub fn synced(n: &SyncedNotice) -> JsValue {
    js(&SyncedOut {
        aggregate: agg(&n.aggregate),
        first_seq: n.first_seq,
        last_seq: n.last_seq,
        event_ids: n.event_ids.iter().map(ToString::to_string).collect(),
        duplicate: n.duplicate,
    })
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ParkedOut<'a> {
    aggregate: Aggregate,
    first_seq: u64,
    last_seq: u64,
    count: u32,
    code: u32,
    message: &'a str,
    parked_at: u64,
    may_have_landed: bool,
}

/// The `parked` event's detail.
pub fn parked(r: &ParkRecord) -> JsValue {
    js(&ParkedOut {
        aggregate: agg(&r.aggregate),
        first_seq: r.first_seq,
        last_seq: r.last_seq,
        count: r.count,
        code: r.code,
        message: &r.message,
        parked_at: r.parked_at,
        may_have_landed: r.may_have_landed,
    })
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ParkedEventOut<'a> {
    aggregate: Aggregate,
    client_seq: u64,
    event_id: String,
    #[serde(rename = "type")]
    event_type: u64,
    minor: u64,
    #[serde(with = "serde_bytes")]
    data: &'a [u8],
    #[serde(with = "serde_bytes")]
    iv: Option<&'a [u8]>,
    timestamp: u64,
    code: u32,
    message: &'a str,
    parked_at: u64,
    may_have_landed: bool,
}

/// One element of `parkedEvents()` (the event decoded from its stored wire form).
pub fn parked_event(e: &StoredEvent, r: &ParkRecord) -> JsValue {
    let Ok(wire) = e.decode() else {
        return JsValue::NULL;
    };
    js(&ParkedEventOut {
        aggregate: agg(&e.aggregate),
        client_seq: e.client_seq,
        event_id: e.event_id.to_string(),
        event_type: wire.event_type,
        minor: wire.minor,
        data: &wire.data,
        iv: wire.iv.as_deref(),
        timestamp: wire.timestamp,
        code: r.code,
        message: &r.message,
        parked_at: r.parked_at,
        may_have_landed: r.may_have_landed,
    })
}
