//! The values handed back to JS besides status and notices: receipts (a serde view) and parked
//! events (built by hand: like view events they have `json()`, a prototype serde cannot give).

use js_sys::{JSON, Object};
use serde::Serialize;
use uuid::Uuid;
use wasm_bindgen::JsValue;

use crate::browser::convert::{aggregate_to_js, set_atomic_with};
use crate::browser::idb::keys::uuid_js;
use crate::browser::js;
use crate::engine::model::{ParkRecord, Receipt, StoredEvent};

#[wasm_bindgen::prelude::wasm_bindgen(module = "/src/browser/glue.js")]
extern "C" {
    /// A base64 string's bytes, decoded by the platform (`null` for anything else).
    #[wasm_bindgen(js_name = bytesOf)]
    fn bytes(base64: &JsValue) -> JsValue;
    /// An empty object whose prototype gives it `json()` (as view events have).
    #[wasm_bindgen(js_name = withJson)]
    fn with_json() -> Object;
}

/// `[{ eventId, clientSeq }]`.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct ReceiptView<'a> {
    event_id: &'a Uuid,
    client_seq: f64,
}

pub(crate) fn receipts(receipts: &[Receipt]) -> JsValue {
    let views: Vec<ReceiptView> = (receipts.iter())
        .map(|r| ReceiptView {
            event_id: &r.event_id,
            client_seq: r.client_seq as f64,
        })
        .collect();
    js::to_js(&views)
}

/// One element of `parkedEvents()`: the event decoded from its stored wire form (with the
/// platform's own `JSON`), with its park record's reason.
pub(crate) fn parked_event(e: &StoredEvent, r: &ParkRecord) -> JsValue {
    let Ok(wire) = JSON::parse(&e.wire) else {
        return JsValue::NULL;
    };
    let o = with_json();
    js::set(&o, "aggregate", aggregate_to_js(&e.aggregate));
    js::set(&o, "clientSeq", e.client_seq as f64);
    js::set(&o, "eventId", uuid_js(&e.event_id));
    js::set(&o, "type", js::get(&wire, "type"));
    js::set(&o, "minor", js::get(&wire, "minor"));
    js::set(&o, "data", bytes(&js::get(&wire, "data")));
    js::set(&o, "iv", bytes(&js::get(&wire, "iv")));
    js::set(&o, "timestamp", js::get(&wire, "timestamp"));
    js::set(&o, "code", r.code);
    js::set(&o, "message", r.message.as_str());
    js::set(&o, "parkedAt", r.parked_at as f64);
    js::set(&o, "mayHaveLanded", r.may_have_landed);
    if let Some(version) = r.current_version {
        js::set(&o, "currentVersion", version as f64);
    }
    if let Some(legs) = &r.atomic {
        // Part of an atomic write: the other aggregates parked with it (discarded with it).
        set_atomic_with(&o, legs, &e.aggregate);
    }
    o.into()
}
