//! Parsing `append`'s arguments from JS values, refusing bad input with typed errors.
//!
//! Nothing is written unless every event parses: the whole append is refused at the first bad
//! field, with the event's index. `data` is a `Uint8Array` (stored as is) or any value
//! `JSON.stringify` can encode (stored as its UTF-8 text).

use js_sys::{Array, JSON, Object, Reflect, Uint8Array};
use uuid::Uuid;
use wasm_bindgen::{JsCast, JsValue};

use super::errors::ClientError;
use crate::browser::global::random_uuid;
use crate::engine::model::{AggregateRef, NewEvent};

const EVENT_KEYS: [&str; 5] = ["type", "minor", "data", "eventId", "iv"];

fn get(object: &JsValue, key: &str) -> JsValue {
    Reflect::get(object, &JsValue::from_str(key)).unwrap_or(JsValue::UNDEFINED)
}

/// Parses a UUID string (any form the `uuid` crate reads); stored lowercase and hyphenated.
fn uuid(value: &JsValue, code: &'static str, what: &str) -> Result<Uuid, ClientError> {
    let text = value
        .as_string()
        .ok_or_else(|| ClientError::new(code, format!("{what} must be a UUID string")))?;
    Uuid::parse_str(&text)
        .map_err(|e| ClientError::new(code, format!("{what} \"{text}\" is not a UUID: {e}")))
}

/// `{ typeId, id }`.
pub fn aggregate(value: &JsValue) -> Result<AggregateRef, ClientError> {
    if !value.is_object() {
        return Err(ClientError::new(
            "INVALID_AGGREGATE",
            "the aggregate must be an object { typeId, id }",
        ));
    }
    Ok(AggregateRef {
        type_id: uuid(
            &get(value, "typeId"),
            "INVALID_AGGREGATE",
            "aggregate.typeId",
        )?,
        id: uuid(&get(value, "id"), "INVALID_AGGREGATE", "aggregate.id")?,
    })
}

fn safe_integer(value: &JsValue) -> Option<u64> {
    let n = value.as_f64()?;
    (n.fract() == 0.0 && (0.0..=9_007_199_254_740_991.0).contains(&n)).then_some(n as u64)
}

fn bytes(value: &JsValue) -> Option<Vec<u8>> {
    if let Some(array) = value.dyn_ref::<Uint8Array>() {
        return Some(array.to_vec());
    }
    value
        .dyn_ref::<js_sys::ArrayBuffer>()
        .map(|buffer| Uint8Array::new(buffer).to_vec())
}

fn event(value: &JsValue, index: usize, now: u64) -> Result<NewEvent, ClientError> {
    let at = |code: &'static str, message: String| {
        ClientError::new(code, format!("events[{index}]: {message}")).with("index", index as u32)
    };
    if !value.is_object() || Array::is_array(value) {
        return Err(at(
            "INVALID_EVENT",
            "must be an object { type, data, minor?, eventId?, iv? }".into(),
        ));
    }
    for key in Object::keys(value.unchecked_ref::<Object>()).iter() {
        let key = key.as_string().unwrap_or_default();
        if !EVENT_KEYS.contains(&key.as_str()) {
            return Err(at(
                "INVALID_EVENT",
                format!(
                    "unknown field \"{key}\" (fields: {})",
                    EVENT_KEYS.join(", ")
                ),
            ));
        }
    }
    let event_type = match safe_integer(&get(value, "type")) {
        Some(t) if t >= 1 => t,
        Some(_) => {
            return Err(at(
                "INVALID_EVENT_TYPE",
                "type 0 is reserved; event types start at 1".into(),
            ));
        }
        None => {
            return Err(at(
                "INVALID_EVENT_TYPE",
                "type must be an integer in 1..2^53".into(),
            ));
        }
    };
    let minor = match get(value, "minor") {
        v if v.is_undefined() => 0,
        v => safe_integer(&v).ok_or_else(|| {
            at(
                "INVALID_MINOR",
                "minor must be an integer in 0..2^53".into(),
            )
        })?,
    };
    let data_value = get(value, "data");
    let data = match bytes(&data_value) {
        Some(bytes) => bytes,
        None if data_value.is_undefined() => {
            return Err(at(
                "DATA_NOT_SERIALIZABLE",
                "data is required (a Uint8Array, or a JSON value)".into(),
            ));
        }
        None => {
            let text = JSON::stringify(&data_value).map_err(|e| {
                at(
                    "DATA_NOT_SERIALIZABLE",
                    format!("data cannot be encoded as JSON: {}", describe(&e)),
                )
            })?;
            text.as_string()
                .ok_or_else(|| {
                    at(
                        "DATA_NOT_SERIALIZABLE",
                        "data has no JSON encoding (a function or symbol?)".into(),
                    )
                })?
                .into_bytes()
        }
    };
    let event_id = match get(value, "eventId") {
        v if v.is_undefined() || v.is_null() => random_uuid(),
        v => uuid(&v, "INVALID_EVENT_ID", "eventId").map_err(|e| at(e.code, e.message))?,
    };
    let iv = match get(value, "iv") {
        v if v.is_undefined() || v.is_null() => None,
        v => Some(
            bytes(&v)
                .ok_or_else(|| at("INVALID_IV", "iv must be a Uint8Array of 12 bytes".into()))?,
        ),
    };
    Ok(NewEvent {
        event_id,
        timestamp: now,
        event_type,
        minor,
        data,
        iv,
    })
}

fn describe(error: &JsValue) -> String {
    error
        .dyn_ref::<js_sys::Error>()
        .map(|e| String::from(e.message()))
        .unwrap_or_else(|| format!("{error:?}"))
}

/// An array of events. `max` bounds the count before any event is parsed.
pub fn events(value: &JsValue, max: usize, now: u64) -> Result<Vec<NewEvent>, ClientError> {
    if !Array::is_array(value) {
        return Err(ClientError::new(
            "INVALID_EVENTS",
            "events must be an array",
        ));
    }
    let array: &Array = value.unchecked_ref();
    let len = array.length() as usize;
    if len == 0 {
        return Err(ClientError::new(
            "EMPTY_EVENTS",
            "append needs at least one event",
        ));
    }
    if len > max {
        return Err(ClientError::new(
            "TOO_MANY_EVENTS",
            format!("{len} events in one append; at most {max} are accepted"),
        ));
    }
    array
        .iter()
        .enumerate()
        .map(|(i, v)| event(&v, i, now))
        .collect()
}
