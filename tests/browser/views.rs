//! Read-side helpers shared by the browser tests of views and change streams
//! (`browser_read.rs`, `browser_watch_many.rs`): a listener that records every view, the
//! server's own log of an aggregate, a view's event keys, the gateway's fault report, and a
//! counter of the page's fetches.

use js_sys::{Array, Promise};
use wasm_bindgen::prelude::*;

use super::{gateway, ok};

#[wasm_bindgen(module = "/tests/browser/support.js")]
extern "C" {
    /// Subscribes a listener that keeps every view (`views`, `last`) and can `unsubscribe`.
    #[wasm_bindgen(js_name = recordViews)]
    pub fn record_views(client: &JsValue, aggregate: &JsValue) -> JsValue;
    #[wasm_bindgen(js_name = serverKeys)]
    fn server_keys_js(gateway: &str, type_id: &str, id: &str) -> Promise;
    #[wasm_bindgen(js_name = viewKeys)]
    fn view_keys_js(view: &JsValue) -> Array;
    /// `GET /v1/faults` of the test gateway (its counts).
    #[wasm_bindgen(js_name = faultReport)]
    pub fn fault_report_js(gateway: &str, secret: &str) -> Promise;
    /// Counts the page's `fetch`es by path until `restore()`.
    #[wasm_bindgen(js_name = countFetches)]
    pub fn count_fetches() -> JsValue;
}

/// A JS array of strings.
pub fn strings(v: &JsValue) -> Vec<String> {
    v.unchecked_ref::<Array>()
        .iter()
        .map(|s| s.as_string().unwrap())
        .collect()
}

/// The server's log of the aggregate, as event keys (read through a session of the test's own).
pub async fn server_keys(t: &str, id: &str) -> Vec<String> {
    strings(&ok(server_keys_js(gateway(), t, id)).await)
}

/// A view's events as keys comparable with [`server_keys`].
pub fn view_keys(view: &JsValue) -> Vec<String> {
    strings(&view_keys_js(view))
}
