//! IndexedDB requests and transactions as futures.
//!
//! A request or a transaction is wrapped in a JavaScript promise by a two-line helper (in
//! `src/browser/glue.js`, with the rest of the client's JavaScript),
//! then awaited as a `JsFuture`. The promise settles inside the request's `success` event, and
//! its continuation runs in the same microtask checkpoint, while the transaction is still
//! active — so a request can be issued after awaiting another, as long as nothing but
//! IndexedDB requests is awaited in between (anything else lets the transaction commit).

use js_sys::Promise;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;
use web_sys::{IdbDatabase, IdbRequest, IdbTransaction};

#[wasm_bindgen(module = "/src/browser/glue.js")]
extern "C" {
    fn requested(request: &IdbRequest) -> Promise;
    fn finished(tx: &IdbTransaction) -> Promise;
    /// An `outbox` record `{ s, e, w }`, built in one call (`super::records`).
    pub fn record(s: f64, e: &JsValue, w: &JsValue) -> JsValue;
    /// How many events above `above` the `outbox` records with these keys hold.
    #[wasm_bindgen(js_name = eventsAbove)]
    pub fn events_above(keys: &JsValue, above: f64) -> f64;

    /// `db.transaction(stores, mode, { durability })` (the options are not in web-sys' stable
    /// bindings).
    #[wasm_bindgen(catch)]
    pub fn begin(
        db: &IdbDatabase,
        stores: &JsValue,
        mode: &str,
        options: &JsValue,
    ) -> Result<IdbTransaction, JsValue>;
    /// Commits at once instead of when the last request is done (where the browser can).
    pub fn commit(tx: &IdbTransaction);
    /// Resolves whether a failed request still aborts an explicitly committed transaction
    /// (`true`, `false`, or `null`: could not tell), probing with a scratch key of `store`.
    #[wasm_bindgen(js_name = earlyCommitIsAtomic)]
    pub fn early_commit_is_atomic(db: &IdbDatabase, store: &str) -> Promise;
}

/// Resolves with the request's result, or fails with its error.
pub(crate) async fn result(request: Result<IdbRequest, JsValue>) -> Result<JsValue, JsValue> {
    JsFuture::from(requested(&request?)).await
}

/// A promise that settles with the transaction (set up before any request can finish).
pub(crate) fn watch(tx: &IdbTransaction) -> JsFuture {
    JsFuture::from(finished(tx))
}
