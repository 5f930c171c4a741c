//! Small helpers for plain JavaScript objects: building them and reading fields back, with
//! typed failures instead of panics (stored records and channel messages may come from other
//! versions of this library, or be damaged).

use js_sys::{Object, Reflect};
use wasm_bindgen::{JsCast, JsValue};

/// `o[key] = value` (cannot fail on a plain object).
pub(crate) fn set(o: &Object, key: &str, value: impl Into<JsValue>) {
    let _ = Reflect::set(o, &JsValue::from_str(key), &value.into());
}

/// `o[key]`, `undefined` when absent.
pub(crate) fn get(o: &JsValue, key: &str) -> JsValue {
    Reflect::get(o, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED)
}

/// `o[key]` as a non-negative integer below 2^53.
pub(crate) fn get_u64(o: &JsValue, key: &str) -> Option<u64> {
    let n = get(o, key).as_f64()?;
    (n.fract() == 0.0 && (0.0..=9_007_199_254_740_991.0).contains(&n)).then_some(n as u64)
}

/// `o[key]` as a string.
pub(crate) fn get_string(o: &JsValue, key: &str) -> Option<String> {
    get(o, key).as_string()
}

/// `o[key]` as a boolean.
pub(crate) fn get_bool(o: &JsValue, key: &str) -> Option<bool> {
    get(o, key).as_bool()
}

/// The elements of a JS array (an empty list for anything else).
pub(crate) fn array(value: &JsValue) -> Vec<JsValue> {
    value
        .dyn_ref::<js_sys::Array>()
        .map(|a| a.iter().collect())
        .unwrap_or_default()
}
