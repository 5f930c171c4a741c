//! Small helpers for plain JavaScript objects: building them and reading fields back, with
//! typed failures instead of panics (stored records and channel messages may come from other
//! versions of this library, or be damaged).

use js_sys::{Array, Object, Reflect};
use wasm_bindgen::prelude::wasm_bindgen;
use wasm_bindgen::{JsCast, JsValue};

#[wasm_bindgen]
extern "C" {
    /// `Array.isArray(v)`, or what it threw (a revoked Proxy).
    #[wasm_bindgen(catch, js_namespace = Array, js_name = isArray)]
    fn array_is_array(v: &JsValue) -> Result<bool, JsValue>;
}

#[wasm_bindgen(module = "/src/browser/glue.js")]
extern "C" {
    #[wasm_bindgen(js_name = ownArray)]
    fn own_array_js(v: &JsValue, cap: u32) -> JsValue;
    #[wasm_bindgen(js_name = ownBytes)]
    fn own_bytes_js(v: &JsValue, max: f64) -> JsValue;
    /// A promise of `v` with the built-in `then` (`adopt` in glue.js).
    pub(crate) fn adopt(v: &JsValue) -> js_sys::Promise;
    /// Whether a `CryptoKey` is AES-GCM with the usages `encrypt` and `decrypt`, read by the
    /// platform's getters (`None`: reading threw). web-sys' `usages()` runs an own accessor an
    /// app put on the key, without catching.
    /// What a thrown value says, read catching (`errorText` in glue.js).
    #[wasm_bindgen(js_name = errorText)]
    pub(crate) fn error_text(e: &JsValue, named: bool) -> String;
    /// `isCeleriantSyncError`'s test, read catching (`isSyncError` in glue.js).
    #[wasm_bindgen(js_name = isSyncError)]
    pub(crate) fn is_sync_error(v: &JsValue, prototype: &JsValue, name: &str) -> bool;
    /// `EventTarget.prototype.dispatchEvent` on `target`, catching (`dispatchOn` in glue.js).
    #[wasm_bindgen(js_name = dispatchOn)]
    pub(crate) fn dispatch_on(target: &web_sys::EventTarget, event: &web_sys::Event);
    #[wasm_bindgen(js_name = shortString)]
    fn short_string_js(v: &JsValue, max: u32) -> Option<String>;
    #[wasm_bindgen(js_name = ownKeys)]
    fn own_keys_js(o: &JsValue, cap: u32, max_len: u32) -> JsValue;
    /// A JS string's UTF-8 length, counted in JS (nothing copied), or any number over `cap`
    /// once it is known to be longer (infinity if counting threw). Never throws.
    #[wasm_bindgen(js_name = utf8Length)]
    pub(crate) fn utf8_length(s: &js_sys::JsString, cap: f64) -> f64;
    /// An app's value as its JSON text, cut to `max` UTF-16 units (then "…") in JS; `None`
    /// when it has none or `JSON.stringify` threw. Never throws.
    #[wasm_bindgen(js_name = jsonCut)]
    pub(crate) fn json_cut(v: &JsValue, max: u32) -> Option<String>;
    #[wasm_bindgen(js_name = aesGcmKeyUsable)]
    pub(crate) fn aes_gcm_key_usable(key: &web_sys::CryptoKey) -> Option<bool>;
}

/// What reading an app's value gave.
pub(crate) enum Own<T> {
    /// Not of the kind asked for.
    Not,
    /// Reading it threw (a revoked Proxy, a getter): refused by every caller.
    Threw,
    /// A copy nothing of the app's can change or make throw (in a realm whose built-ins the
    /// page has not patched: one that patches them reaches the module's memory anyway).
    Got(T),
}

/// A copy of an app's array: at most `cap` of its elements, and its length (so that a count
/// over a bound is reported without copying it all: a caller taking `max` passes `max + 1`).
pub(crate) fn own_array(v: &JsValue, cap: usize) -> Own<(Array, usize)> {
    let got = own_array_js(v, u32::try_from(cap).unwrap_or(u32::MAX));
    if got.is_undefined() {
        return Own::Not;
    }
    let Some(pair) = got.dyn_ref::<Array>() else {
        return Own::Threw;
    };
    let len = pair.get(1).as_f64().unwrap_or(0.0);
    Own::Got((
        pair.get(0).unchecked_into(),
        len.min(usize::MAX as f64) as usize,
    ))
}

/// A copy of the bytes of an app's `Uint8Array` or `ArrayBuffer` of at most `max` bytes;
/// `Err(length)` for a longer one, of which nothing was copied.
pub(crate) fn own_bytes_within(v: &JsValue, max: f64) -> Result<Own<Vec<u8>>, f64> {
    let got = own_bytes_js(v, max);
    if let Some(length) = got.as_f64() {
        return Err(length);
    }
    if got.is_undefined() {
        return Ok(Own::Not);
    }
    Ok(match got.dyn_ref::<js_sys::Uint8Array>() {
        Some(copy) => Own::Got(copy.to_vec()),
        None => Own::Threw,
    })
}

/// A string an app passed in, if it is one of at most `max` UTF-16 units: a longer one is
/// refused before it is copied into the module (`as_string` copies any length).
pub(crate) fn short_string(v: &JsValue, max: u32) -> Option<String> {
    short_string_js(v, max)
}

/// Whether what an app passed in is an array; `None` when asking threw (a revoked Proxy),
/// which every caller refuses.
pub(crate) fn is_array(v: &JsValue) -> Option<bool> {
    array_is_array(v).ok()
}

/// The own enumerable keys of what an app passed in, or `None` when reading them threw.
/// Inbound values are read only through calls that catch: a JavaScript exception thrown
/// through the module's frames skips their clean-up (with `panic = "abort"` nothing rewinds
/// the module's stack pointer or releases its borrows).
///
/// At most [`OWN_KEYS_CAP`] keys of at most [`OWN_KEY_LEN`] characters each are copied (a
/// longer key is cut and ends in "…"): enough to find the first unknown key of any options
/// object, and never the megabytes an app's key names may hold.
pub(crate) fn own_keys(o: &JsValue) -> Option<Vec<String>> {
    let keys = own_keys_js(o, OWN_KEYS_CAP, OWN_KEY_LEN);
    let keys = keys.dyn_ref::<Array>()?;
    Some(
        keys.iter()
            .map(|k| k.as_string().unwrap_or_default())
            .collect(),
    )
}

/// How many of an object's keys [`own_keys`] copies: more than any set of known keys holds.
pub(crate) const OWN_KEYS_CAP: u32 = 64;
/// How long a key [`own_keys`] copies whole: longer than every known key.
pub(crate) const OWN_KEY_LEN: u32 = 64;

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

/// `value` as an array of at most `cap` entries, read lazily; `None` when it is not an array or
/// is longer (from another context: its length is checked before any entry is read).
pub(crate) fn array_within(value: &JsValue, cap: u32) -> Option<&js_sys::Array> {
    value
        .dyn_ref::<js_sys::Array>()
        .filter(|a| a.length() <= cap)
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
