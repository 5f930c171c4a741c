//! Parsing `append`'s arguments from JS values, refusing bad input with typed errors.
//!
//! Only the JavaScript shapes are checked here (an object, an integer, a UUID string, bytes);
//! the rules on the values themselves (type ≥ 1, a 12-byte `iv`, the size limit) are the
//! protocol's, applied once by [`crate::engine::append::check`]. Nothing is written unless every
//! event passes: the whole append is refused at the first bad field, with the event's index.
//! `data` is a `Uint8Array` or `ArrayBuffer` (stored as is) or any value `JSON.stringify` can
//! encode (stored as its UTF-8 text).

use js_sys::{JSON, Reflect};
use uuid::Uuid;
use wasm_bindgen::JsValue;

use super::budget::{Budget, CALL_COST, EVENT_COST, busy};
use super::errors::ClientError;
use crate::browser::global::random_uuid;
use crate::browser::js;
use crate::engine::append::{AppendError, Charge};
use crate::engine::errors::ErrorCode;
use crate::engine::model::{AggregateRef, NewEvent};
use celeriant_sync_protocol::validate::{Limits, ValidationError};

const EVENT_KEYS: [&str; 5] = ["type", "minor", "data", "eventId", "iv"];

/// The longest UUID text `uuid` reads: `urn:uuid:` and 36 characters.
pub(crate) const UUID_TEXT_MAX: u32 = 45;

/// `object[key]`; a getter or a Proxy trap that throws is refused with `code`, never read as
/// absent: that would open a client without the `encryption` asked for, bind no `user`, or
/// append without the `expectedVersion` guard (found by review).
pub(crate) fn read(object: &JsValue, key: &str, code: ErrorCode) -> Result<JsValue, ClientError> {
    Reflect::get(object, &JsValue::from_str(key))
        .map_err(|_| ClientError::new(code, format!("reading {key} threw")))
}

/// A string argument of an exported method of at most `max` characters, refused with `code`
/// otherwise. Exported methods take strings as `JsValue`s: for a `&str` or `String`
/// parameter, wasm-bindgen's JS allocates `value.length` bytes in the module before it finds
/// the value is no string, and never frees them (`{ length: 2 ** 28 }` sixteen times
/// exhausted the module's memory); and a string is measured before it is copied in (the
/// module's memory never shrinks).
pub(crate) fn string(
    value: &JsValue,
    code: ErrorCode,
    what: &str,
    max: u32,
) -> Result<String, ClientError> {
    js::short_string(value, max).ok_or_else(|| {
        ClientError::new(
            code,
            format!("{what} must be a string of at most {max} characters"),
        )
    })
}

/// Parses a UUID string (any form the `uuid` crate reads); stored lowercase and hyphenated.
fn uuid(value: &JsValue, code: ErrorCode, what: &str) -> Result<Uuid, ClientError> {
    // At most 45 characters (`urn:uuid:` and 36): a longer string is not copied in.
    let text = js::short_string(value, UUID_TEXT_MAX)
        .ok_or_else(|| ClientError::new(code, format!("{what} must be a UUID string")))?;
    uuid_text(&text, code, what)
}

/// Parses a UUID string (hyphenated, simple, braced or `urn:uuid:`). `Uuid::try_parse` rather
/// than `parse_str`: the same forms, without the error's detail, whose formatting (with a
/// `str` index's panic path) cost the module ≈ 5 KB gzipped; the message says what was
/// expected instead.
pub(crate) fn uuid_text(text: &str, code: ErrorCode, what: &str) -> Result<Uuid, ClientError> {
    Uuid::try_parse(text).map_err(|_| {
        ClientError::new(
            code,
            format!("{what} \"{text}\" is not a UUID (32 hex digits, as 8-4-4-4-12)"),
        )
    })
}

/// `{ typeId, id }`.
pub(crate) fn aggregate(value: &JsValue) -> Result<AggregateRef, ClientError> {
    if !value.is_object() {
        return Err(ClientError::new(
            ErrorCode::InvalidAggregate,
            "the aggregate must be an object { typeId, id }",
        ));
    }
    Ok(AggregateRef {
        type_id: uuid(
            &read(value, "typeId", ErrorCode::InvalidAggregate)?,
            ErrorCode::InvalidAggregate,
            "aggregate.typeId",
        )?,
        id: uuid(
            &read(value, "id", ErrorCode::InvalidAggregate)?,
            ErrorCode::InvalidAggregate,
            "aggregate.id",
        )?,
    })
}

fn safe_integer(value: &JsValue) -> Option<u64> {
    let n = value.as_f64()?;
    (n.fract() == 0.0 && (0.0..=9_007_199_254_740_991.0).contains(&n)).then_some(n as u64)
}

/// `unknown field "k" (fields: …)` for the first key of `object` that is not one of `keys`.
pub(crate) fn unknown_field(object: &JsValue, keys: &[&str]) -> Option<String> {
    let Some(own) = js::own_keys(object) else {
        return Some("its keys cannot be read (Object.keys threw)".into());
    };
    for key in own {
        if !keys.contains(&key.as_str()) {
            return Some(format!(
                "unknown field \"{key}\" (fields: {})",
                keys.join(", ")
            ));
        }
    }
    None
}

/// One event of an array; `room` is what the bounds of the call and the module leave: data
/// longer is refused by `over` (given its length in bytes) before it is copied. (No append can
/// run while this one reads its arguments, `api::budget::Parsing`; what other calls hold can
/// only shrink meanwhile.)
fn event(
    value: &JsValue,
    index: usize,
    limits: &Limits,
    room: usize,
    over: &dyn Fn(usize) -> ClientError,
    now: u64,
) -> Result<NewEvent, ClientError> {
    let at = |code: ErrorCode, message: String| {
        ClientError::new(code, format!("events[{index}]: {message}")).with("index", index as u32)
    };
    if !value.is_object() || js::is_array(value) != Some(false) {
        return Err(at(
            ErrorCode::InvalidEvent,
            "must be an object { type, data, minor?, eventId?, iv? }".into(),
        ));
    }
    if let Some(message) = unknown_field(value, &EVENT_KEYS) {
        return Err(at(ErrorCode::InvalidEvent, message));
    }
    // A getter that throws is refused with the field's own code.
    let get =
        |key: &str, code: ErrorCode| read(value, key, code).map_err(|e| at(e.code, e.message));
    // Type 0 parses here and is refused with the protocol's own rule.
    let event_type = safe_integer(&get("type", ErrorCode::InvalidEventType)?).ok_or_else(|| {
        at(
            ErrorCode::InvalidEventType,
            "type must be an integer in 1..2^53".into(),
        )
    })?;
    let minor = match get("minor", ErrorCode::InvalidMinor)? {
        v if v.is_undefined() => 0,
        v => safe_integer(&v).ok_or_else(|| {
            at(
                ErrorCode::InvalidMinor,
                "minor must be an integer in 0..2^53".into(),
            )
        })?,
    };
    let data_value = get("data", ErrorCode::DataNotSerializable)?;
    // An event's data over the limit is refused before it is copied into the module (a few
    // events of 1 GiB each would not fit in its memory): bytes by their length, JSON by its
    // text's length in UTF-8, counted in JS when its UTF-16 length does not settle it.
    let max = limits.max_event_bytes;
    let bound = max.min(room);
    let too_large = |len: usize| {
        ClientError::from(AppendError::Invalid {
            index,
            error: ValidationError::EventTooLarge {
                at: format!("events[{index}]"),
                len,
                max,
            },
        })
    };
    // Within both bounds, or refused by the one it breaks without copying anything.
    let refuse = |len: usize| match len > max {
        true => too_large(len),
        false => over(len),
    };
    // JSON text over the event's bound was measured in UTF-16 units, or in UTF-8 only until
    // past the bound (a huge text is not counted through): `len` is then a lower bound.
    let json_too_large = |len: usize| {
        let mut error = too_large(len);
        error.message = format!(
            "events[{index}]: events[{index}].data is at least {len} bytes of JSON; at most {max} are accepted"
        );
        error
    };
    let data = match js::own_bytes_within(&data_value, bound as f64) {
        Err(len) => return Err(refuse(len as usize)),
        Ok(js::Own::Got(bytes)) => bytes,
        Ok(js::Own::Threw) => {
            return Err(at(
                ErrorCode::DataNotSerializable,
                "data's bytes cannot be read (a detached buffer?)".into(),
            ));
        }
        Ok(js::Own::Not) if data_value.is_undefined() => {
            return Err(at(
                ErrorCode::DataNotSerializable,
                "data is required (a Uint8Array, or a JSON value)".into(),
            ));
        }
        Ok(js::Own::Not) => {
            let text = JSON::stringify(&data_value).map_err(|e| {
                at(
                    ErrorCode::DataNotSerializable,
                    format!("data cannot be encoded as JSON: {}", describe(&e)),
                )
            })?;
            // `undefined` for a function, a symbol or a `toJSON` giving nothing: asked first, as
            // js-sys' `length()` of it would throw through the module.
            if !text.is_string() {
                return Err(at(
                    ErrorCode::DataNotSerializable,
                    "data has no JSON encoding (a function or symbol?)".into(),
                ));
            }
            // UTF-8 takes at least one byte per UTF-16 unit and at most three.
            // Over the event's bound by its units alone: too large (the message gives that
            // count, a lower bound of its bytes), and a huge text is not counted through.
            let units = text.length() as usize;
            if units > max {
                return Err(json_too_large(units));
            }
            if units.saturating_mul(3) > bound {
                // Counted up to just past the event's bound (so that too large is told apart
                // from no room left); `as` saturates (infinity: refused).
                let bytes = js::utf8_length(&text, max as f64) as usize;
                if bytes > max {
                    return Err(json_too_large(bytes));
                }
                if bytes > bound {
                    return Err(over(bytes));
                }
            }
            String::from(text).into_bytes()
        }
    };
    let event_id = match get("eventId", ErrorCode::InvalidEventId)? {
        v if v.is_undefined() || v.is_null() => random_uuid(),
        v => uuid(&v, ErrorCode::InvalidEventId, "eventId").map_err(|e| at(e.code, e.message))?,
    };
    let iv = match get("iv", ErrorCode::InvalidIv)? {
        v if v.is_undefined() || v.is_null() => None,
        // Anything over 12 bytes is refused before it is copied.
        v => match js::own_bytes_within(&v, 12.0) {
            Ok(js::Own::Got(bytes)) => Some(bytes),
            _ => {
                return Err(at(
                    ErrorCode::InvalidIv,
                    "iv must be a Uint8Array of 12 bytes".into(),
                ));
            }
        },
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
    // Read catching: the app's `toJSON` threw it, with whatever getters it has.
    js::error_text(error, false)
}

/// An array of events: at most `limits.max_events` (counted before any event is parsed), each
/// within `limits.max_event_bytes`, all within `budget` and what the module's other appends
/// leave (`charge`, which counts what is copied), each refused before its data is copied when
/// its length shows it breaks a bound (see [`super::budget`]).
pub(crate) fn events(
    value: &JsValue,
    limits: &Limits,
    budget: Budget,
    charge: &mut Charge,
    now: u64,
) -> Result<Vec<NewEvent>, ClientError> {
    let max = limits.max_events;
    // A copy of at most `max + 1`: a longer array is refused without copying it all.
    let (array, len) = match js::own_array(value, max.saturating_add(1)) {
        js::Own::Got(got) => got,
        js::Own::Not => {
            return Err(ClientError::new(
                ErrorCode::InvalidEvents,
                "events must be an array",
            ));
        }
        js::Own::Threw => {
            return Err(ClientError::new(
                ErrorCode::InvalidEvents,
                "events cannot be read (a revoked Proxy, a getter that threw?)",
            ));
        }
    };
    if len == 0 {
        return Err(ClientError::new(
            ErrorCode::EmptyEvents,
            "append needs at least one event",
        ));
    }
    if len > max {
        return Err(ClientError::new(
            ErrorCode::TooManyEvents,
            format!("{len} events in one append; at most {max} are accepted"),
        ));
    }
    // What the call itself costs (its future, its place in group commit), then each event its
    // data and a fixed part: appends of empty events are bounded too.
    if charge.room() < CALL_COST {
        return Err(busy(charge, 0, CALL_COST));
    }
    charge.add(CALL_COST);
    // Grown as events are charged (a capacity of `len` up front would be 64 bytes per event
    // before any is counted).
    let mut events = Vec::with_capacity(len.min(64));
    let mut used = budget.spent;
    for (i, v) in array.iter().enumerate() {
        let call_room = budget.max.saturating_sub(used);
        let room = call_room.min(charge.room().saturating_sub(EVENT_COST));
        let over = |len: usize| match len > call_room {
            true => budget.refuse(used.saturating_add(len), i),
            false => busy(charge, i, len.saturating_add(EVENT_COST)),
        };
        let event = event(&v, i, limits, room, &over, now)?;
        let len = event.data.len();
        let cost = len + event.iv.as_ref().map_or(0, Vec::len) + EVENT_COST;
        if len > call_room {
            return Err(budget.refuse(used.saturating_add(len), i));
        }
        if cost > charge.room() {
            return Err(busy(charge, i, cost));
        }
        used += len;
        charge.add(cost);
        events.push(event);
    }
    Ok(events)
}

/// The options of `append`: `undefined`/`null` (none), or `{ expectedVersion }` with a safe
/// integer ≥ 0 (`undefined` or `null` in it: no guard). Any other key, type or value is
/// `INVALID_OPTIONS`, before anything is stored.
pub(crate) fn append_options(value: &JsValue) -> Result<Option<u64>, ClientError> {
    let bad = |message: String| ClientError::new(ErrorCode::InvalidOptions, message);
    if value.is_undefined() || value.is_null() {
        return Ok(None);
    }
    if !value.is_object() || js::is_array(value) != Some(false) {
        return Err(bad(
            "append's options must be an object: { expectedVersion }".into(),
        ));
    }
    let own = js::own_keys(value).ok_or_else(|| bad("append's options cannot be read".into()))?;
    for key in own {
        if key != "expectedVersion" {
            return Err(bad(format!(
                "unknown append option \"{key}\" (options: expectedVersion)"
            )));
        }
    }
    expected_version(&read(value, "expectedVersion", ErrorCode::InvalidOptions)?)
}

/// An `expectedVersion` (of `append`'s options or of an `appendAtomic` write): `undefined` or
/// `null` (no guard), or a safe integer in `0..=2^53 − 2`; anything else is `INVALID_OPTIONS`.
pub(crate) fn expected_version(expected: &JsValue) -> Result<Option<u64>, ClientError> {
    let bad = |message: String| ClientError::new(ErrorCode::InvalidOptions, message);
    if expected.is_undefined() || expected.is_null() {
        return Ok(None);
    }
    // At most 2^53 − 2: the version the write would make, expected + 1, is read back after a
    // 2003 and must stay a safe integer on the wire.
    const MAX_EXPECTED: u64 = (1 << 53) - 2;
    safe_integer(expected)
        .filter(|v| *v <= MAX_EXPECTED)
        .map(Some)
        .ok_or_else(|| {
            bad(format!(
                "expectedVersion must be an integer in 0..={MAX_EXPECTED} (the aggregate's \
             version, 0: only if it does not exist yet), got {}",
                describe_value(expected)
            ))
        })
}

/// A value as the app would recognise it in a message: its JSON text, the first 100
/// characters of it (cut in JS: a string of 2^28 characters is not copied into the module).
fn describe_value(value: &JsValue) -> String {
    // Not `{value:?}`: its debug string walks the value, and can throw (a deep array).
    js::json_cut(value, 100).unwrap_or_else(|| value.js_typeof().as_string().unwrap_or_default())
}

/// A conditional append is one request, whole: its data must fit one. Checked at `append` and
/// again after encryption (the tag makes each event longer), so an append that cannot be sent
/// is refused, not stored.
pub(super) fn conditional_fits(
    events: &[NewEvent],
    expected_version: Option<u64>,
    limits: &Limits,
) -> Result<(), ClientError> {
    let data: usize = events.iter().map(|e| e.data.len()).sum();
    match expected_version {
        Some(_) => request_fits("a conditional append", data, limits),
        None => Ok(()),
    }
}

/// `what` (a write sent as one request, whole) with `data` bytes of event data fits one.
pub(super) fn request_fits(what: &str, data: usize, limits: &Limits) -> Result<(), ClientError> {
    if data <= limits.max_request_bytes {
        return Ok(());
    }
    Err(ClientError::new(
        ErrorCode::TooManyEvents,
        format!(
            "{what} is sent as one request: {data} bytes of data, at most {} are accepted",
            limits.max_request_bytes
        ),
    ))
}

/// An event listener's type: a string, else a `TypeError`. Exported methods take strings as
/// `JsValue`s: a `&str` parameter makes wasm-bindgen's JS allocate `value.length` bytes in the
/// module before it finds the value is no string, so `{ length: 2 ** 30 }` left 1 GiB behind.
pub(crate) fn listener_kind(kind: &JsValue) -> Result<String, JsValue> {
    js::short_string(kind, 256).ok_or_else(|| {
        js_sys::TypeError::new("the event type must be a string of at most 256 characters").into()
    })
}
