//! The global scope, whatever it is (window, dedicated worker, service worker).
//!
//! Nothing here assumes `window`: properties are read from `js_sys::global()` and the few
//! functions needed are imported as globals, which exist in every one of those scopes.

use js_sys::{Reflect, Uint8Array};
use uuid::Uuid;
use wasm_bindgen::prelude::*;

#[wasm_bindgen]
extern "C" {
    /// The global `fetch`.
    #[wasm_bindgen(js_name = fetch)]
    pub fn fetch_with_request(request: &web_sys::Request) -> js_sys::Promise;

    #[wasm_bindgen(js_namespace = crypto, js_name = getRandomValues)]
    fn get_random_values(buf: &Uint8Array);
}

/// A property of the global object.
pub(crate) fn property(name: &str) -> Option<JsValue> {
    Reflect::get(&js_sys::global(), &JsValue::from_str(name))
        .ok()
        .filter(|v| !v.is_undefined())
}

/// `navigator.onLine`; `true` where the platform does not say.
pub(crate) fn is_online() -> bool {
    property("navigator")
        .and_then(|n| Reflect::get(&n, &JsValue::from_str("onLine")).ok())
        .and_then(|v| v.as_bool())
        .unwrap_or(true)
}

/// The global scope as an event target (for `online`/`offline`).
pub(crate) fn event_target() -> web_sys::EventTarget {
    js_sys::global().unchecked_into()
}

thread_local! {
    /// Random bytes from the platform's cryptographic generator, fetched 4 KiB at a time (one
    /// `getRandomValues` call per 256 ids instead of one each) and used once.
    static POOL: std::cell::RefCell<(Vec<u8>, usize)> = const { std::cell::RefCell::new((Vec::new(), 0)) };
}

/// A random (version 4) UUID from the platform's cryptographic generator.
pub(crate) fn random_uuid() -> Uuid {
    POOL.with_borrow_mut(|(pool, used)| {
        if *used + 16 > pool.len() {
            let fresh = Uint8Array::new_with_length(4096);
            get_random_values(&fresh);
            *pool = fresh.to_vec();
            *used = 0;
        }
        let mut raw = [0u8; 16];
        raw.copy_from_slice(&pool[*used..*used + 16]);
        // Each byte is used once: zero it, so no copy of a handed-out id stays in the pool.
        pool[*used..*used + 16].fill(0);
        *used += 16;
        uuid::Builder::from_random_bytes(raw).into_uuid()
    })
}

/// Asks for persistent storage (`navigator.storage.persist()`), where the platform offers it.
/// Firefox answers through a permission prompt, which may never be answered (headless, or a
/// user who ignores it): after `wait_ms` the answer is "unknown" (`None`) and `open` goes on.
pub(crate) async fn persist_storage(wait_ms: u32) -> Option<bool> {
    let storage = property("navigator").and_then(|n| Reflect::get(&n, &"storage".into()).ok())?;
    let persist: js_sys::Function = Reflect::get(&storage, &"persist".into())
        .ok()?
        .dyn_into()
        .ok()?;
    let promise: js_sys::Promise = persist.call0(&storage).ok()?.dyn_into().ok()?;
    let mut answer = None;
    crate::engine::signal::first(
        async {
            answer = wasm_bindgen_futures::JsFuture::from(promise)
                .await
                .ok()
                .and_then(|v| v.as_bool())
        },
        gloo_timers::future::TimeoutFuture::new(wait_ms),
    )
    .await;
    answer
}
