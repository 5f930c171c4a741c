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

/// A serde view as a plain JavaScript value (serde-wasm-bindgen): structs as plain objects,
/// `None` as `null` (absent fields are `skip_serializing_if`), numbers as numbers. The views
/// hold `f64` where a `u64` crosses, as the hand-built objects did (`as f64`): serde-wasm-bindgen
/// refuses a `u64` above 2^53 instead.
pub(crate) fn to_js<T: serde::Serialize + ?Sized>(value: &T) -> JsValue {
    const PLAIN: serde_wasm_bindgen::Serializer = serde_wasm_bindgen::Serializer::new()
        .serialize_maps_as_objects(true)
        .serialize_missing_as_null(true);
    // Cannot fail: the views hold strings, numbers, booleans, options, lists and JS values.
    value.serialize(&PLAIN).unwrap_or(JsValue::NULL)
}
