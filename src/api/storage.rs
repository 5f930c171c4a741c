//! Storage that goes away under a running client: `client.storage` and the `storage` event
//! (`{ state: "ok" | "reopening" | "lost", lost }`), the `STORAGE_LOST` report of what was
//! pending when the database was deleted or evicted, and the browser's storage facts
//! (`navigator.storage.persisted()`, `estimate()`) that `inspect()` shows. The decisions are
//! the IndexedDB layer's (`crate::browser::idb::db`): reopen a connection closed under the
//! client, never recreate a database that is gone.

use js_sys::{Array, Function, Object, Promise, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

use super::client::SyncClient;
use crate::browser::convert::aggregate_to_js;
use crate::browser::idb::db::Storage;
use crate::browser::js;
use crate::browser::runtime::storage::Lost;
use crate::engine::errors::ErrorCode;

#[wasm_bindgen(typescript_custom_section)]
const TS: &'static str = r#"
/** One aggregate's events appended by this client and not seen landed when the storage was lost. */
export interface LostRange {
    aggregate: AggregateRef;
    firstSeq: number;
    lastSeq: number;
    count: number;
}

/** What was pending when the database was deleted or evicted under the client. */
export interface StorageLost {
    code: "STORAGE_LOST";
    /** Events waiting to sync (every context's, as the status counted them). */
    pending: number;
    parked: number;
    /** The ranges this client appended and had not seen land (from memory). */
    aggregates: LostRange[];
}

/** `client.storage` and the `storage` event's `detail`. */
export interface StorageState {
    /** `reopening`: the browser closed the connection, the next operation reopens it;
     *  `lost`: the database is gone, the client is closed and never recreates it. */
    state: "ok" | "reopening" | "lost";
    lost: StorageLost | null;
}

/** `navigator.storage.estimate()`'s figures, in bytes. */
export interface StorageEstimate {
    usage: number | null;
    quota: number | null;
}
"#;

fn lost_to_js(lost: &Lost) -> JsValue {
    let o = Object::new();
    js::set(&o, "code", ErrorCode::StorageLost.as_str());
    js::set(&o, "pending", lost.pending as f64);
    js::set(&o, "parked", lost.parked as f64);
    let ranges: Array = lost
        .aggregates
        .iter()
        .map(|r| {
            let x = Object::new();
            js::set(&x, "aggregate", aggregate_to_js(&r.aggregate));
            js::set(&x, "firstSeq", r.first as f64);
            js::set(&x, "lastSeq", r.last as f64);
            js::set(&x, "count", (r.last - r.first + 1) as f64);
            JsValue::from(x)
        })
        .collect();
    js::set(&o, "aggregates", ranges);
    o.into()
}

/// `{ state, lost }` for the `storage` event and getter.
pub(super) fn state_to_js(state: Storage, lost: Option<&Lost>) -> JsValue {
    let o = Object::new();
    js::set(&o, "state", state.as_str());
    js::set(&o, "lost", lost.map_or(JsValue::NULL, lost_to_js));
    o.into()
}

/// Calls `navigator.storage[method]()`, or `None` where the engine lacks it.
async fn call(method: &str) -> Option<JsValue> {
    let storage = crate::browser::global::property("navigator")
        .and_then(|n| Reflect::get(&n, &"storage".into()).ok())
        .filter(|s| s.is_object())?;
    let f: Function = Reflect::get(&storage, &method.into())
        .ok()?
        .dyn_into()
        .ok()?;
    let promise: Promise = f.call0(&storage).ok()?.dyn_into().ok()?;
    JsFuture::from(promise).await.ok()
}

/// `navigator.storage.persisted()` (`null` where the engine lacks it).
pub(super) async fn persisted() -> JsValue {
    call("persisted")
        .await
        .and_then(|v| v.as_bool())
        .map_or(JsValue::NULL, JsValue::from)
}

/// `navigator.storage.estimate()` as `{ usage, quota }` (`null` where the engine lacks it).
pub(super) async fn estimate() -> JsValue {
    let Some(e) = call("estimate").await.filter(|e| e.is_object()) else {
        return JsValue::NULL;
    };
    let o = Object::new();
    for key in ["usage", "quota"] {
        let v = js::get(&e, key);
        js::set(&o, key, v.as_f64().map_or(JsValue::NULL, JsValue::from));
    }
    o.into()
}

#[wasm_bindgen]
impl SyncClient {
    /// The storage's state: `ok`, `reopening` (the browser closed the connection; the next
    /// operation reopens it) or `lost` (the database was deleted or evicted: the client is
    /// closed, `lost` says what was pending, every later call rejects with `STORAGE_LOST`).
    #[wasm_bindgen(getter, unchecked_return_type = "StorageState")]
    pub fn storage(&self) -> JsValue {
        let runtime = self.runtime();
        state_to_js(runtime.outbox.storage(), runtime.storage.lost().as_ref())
    }
}
