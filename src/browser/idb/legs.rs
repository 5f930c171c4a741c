//! An atomic write's legs as IndexedDB stores them: `[[typeId, id, first, last], …]`, in the
//! write's order (the order of its request's writes), on every `outbox` record of the write
//! (`a`, [`super::records`]), on its pin (`legs`) and on each of its park records (`legs`);
//! also on a park record posted to the other contexts (`crate::browser::channel`).
//!
//! One encoding for the three, and one decoder that refuses anything else: a record whose legs
//! do not parse is corrupt, never read as a plain append (which could send a part of an atomic
//! write alone).

use js_sys::Array;
use wasm_bindgen::{JsCast, JsValue};

use super::keys::{Agg, parse_uuid};
use crate::engine::model::{AggregateRef, Leg, Legs};
use crate::engine::outbox::StoreError;

/// `legs` as stored.
pub(crate) fn legs_js(legs: &Legs) -> JsValue {
    let all = Array::new();
    for leg in legs.iter() {
        let a = Agg::new(&leg.aggregate);
        all.push(&Array::of4(
            &a.t,
            &a.a,
            &JsValue::from_f64(leg.first_seq as f64),
            &JsValue::from_f64(leg.last_seq as f64),
        ));
    }
    all.into()
}

/// The legs stored in `value` (`undefined`: none, a plain or conditional append's record).
/// Anything but a non-empty list of `[typeId, id, first, last]` with `1 <= first` and
/// `first - 1 <= last` is [`StoreError::Corrupt`] (`what` names the record).
pub(crate) fn legs_of(value: &JsValue, what: &str) -> Result<Option<Legs>, StoreError> {
    if value.is_undefined() {
        return Ok(None);
    }
    // One error site: every check below answers `None` for "not legs".
    match parse(value) {
        Some(legs) => Ok(Some(legs.into())),
        None => Err(StoreError::Corrupt(format!("{what} has bad atomic legs"))),
    }
}

/// [`legs_of`]'s list, `None` when `value` is not a valid one.
fn parse(value: &JsValue) -> Option<Vec<Leg>> {
    let list = value.dyn_ref::<Array>()?;
    if list.length() == 0 {
        return None;
    }
    let seq = |parts: &Array, i: u32| {
        parts
            .get(i)
            .as_f64()
            .filter(|v| v.fract() == 0.0 && *v >= 0.0 && *v <= 9_007_199_254_740_991.0)
            .map(|v| v as u64)
    };
    let mut legs = Vec::with_capacity(list.length() as usize);
    for part in list.iter() {
        let parts = part.dyn_ref::<Array>()?;
        if parts.length() != 4 {
            return None;
        }
        let aggregate = AggregateRef {
            type_id: parse_uuid(&parts.get(0)).ok()?,
            id: parse_uuid(&parts.get(1)).ok()?,
        };
        let (first_seq, last_seq) = (seq(parts, 2)?, seq(parts, 3)?);
        // An empty leg (`last = first - 1`) holds no event but is still one of the write's.
        if first_seq == 0 || last_seq + 1 < first_seq {
            return None;
        }
        legs.push(Leg {
            aggregate,
            first_seq,
            last_seq,
        });
    }
    Some(legs)
}

/// The leg of `legs` that is `aggregate`'s, if any.
pub(super) fn leg_of(legs: &Legs, aggregate: &AggregateRef) -> Option<Leg> {
    legs.iter().find(|l| l.aggregate == *aggregate).copied()
}
