//! Helpers of the tests that bound what an app passes into the module
//! (`browser_bounds.rs`, `browser_held.rs`, `browser_errors.rs`): the module's memory, and
//! events built without copying in JS.

use js_sys::{Array, Function};
use wasm_bindgen::{JsCast, JsValue};

use super::{get, object, string};

/// One MiB.
pub const MIB: u32 = 1 << 20;

/// The module's linear memory, in bytes (it never shrinks).
pub fn memory_bytes() -> f64 {
    let memory: js_sys::WebAssembly::Memory = wasm_bindgen::memory().unchecked_into();
    get(&memory.buffer(), "byteLength").as_f64().unwrap()
}

/// What a JS function body returns.
pub fn eval(source: &str) -> JsValue {
    Function::new_no_args(source).call0(&JsValue::NULL).unwrap()
}

/// `{ type: 1, data }`.
pub fn event(data: JsValue) -> JsValue {
    object(&[("type", 1.into()), ("data", data)])
}

/// `n` times the same event (one array of references: nothing is copied in JS).
pub fn repeated(event: &JsValue, n: u32) -> JsValue {
    let events = Array::new();
    for _ in 0..n {
        events.push(event);
    }
    events.into()
}

/// An error's `code` and `message`.
pub fn code_and_message(e: &JsValue) -> (String, String) {
    (string(e, "code"), string(e, "message"))
}
