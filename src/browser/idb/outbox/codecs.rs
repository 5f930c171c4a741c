//! How the drain's bookkeeping records are laid out in IndexedDB: the pin (in `meta`) and the
//! park records (`parked`), written and read back, refusing a record that does not parse.
//! Both keep an atomic write's legs (`legs`, [`super::super::legs`]), so a reload resends the
//! identical write and a discard finds every leg; a record without them is a plain one (as
//! every record before atomic writes is).

use js_sys::Object;
use wasm_bindgen::JsValue;

use super::super::keys::{Agg, parse_uuid};
use super::super::legs::{legs_js, legs_of};
use crate::browser::js;
use crate::engine::model::{AggregateRef, Batch, ParkRecord};
use crate::engine::outbox::StoreError;

pub(super) fn pin_record(b: &Batch) -> JsValue {
    let o = Object::new();
    let a = Agg::new(&b.aggregate);
    js::set(&o, "t", a.t);
    js::set(&o, "a", a.a);
    js::set(&o, "first", b.first_seq as f64);
    js::set(&o, "last", b.last_seq as f64);
    js::set(&o, "count", b.count);
    if let Some(legs) = &b.atomic {
        js::set(&o, "legs", legs_js(legs));
    }
    o.into()
}

fn aggregate_of_record(v: &JsValue) -> Result<AggregateRef, StoreError> {
    Ok(AggregateRef {
        type_id: parse_uuid(&js::get(v, "t"))?,
        id: parse_uuid(&js::get(v, "a"))?,
    })
}

pub(super) fn batch_of_record(v: &JsValue) -> Result<Option<Batch>, StoreError> {
    if v.is_undefined() {
        return Ok(None);
    }
    let bad = || StoreError::Corrupt("a bad pin record".into());
    Ok(Some(Batch {
        aggregate: aggregate_of_record(v)?,
        first_seq: js::get_u64(v, "first").ok_or_else(bad)?,
        last_seq: js::get_u64(v, "last").ok_or_else(bad)?,
        count: js::get_u64(v, "count").ok_or_else(bad)? as u32,
        atomic: legs_of(&js::get(v, "legs"), "the pin record")?,
    }))
}

pub(super) fn parked_record(r: &ParkRecord) -> JsValue {
    let o = Object::new();
    let a = Agg::new(&r.aggregate);
    js::set(&o, "t", a.t);
    js::set(&o, "a", a.a);
    js::set(&o, "first", r.first_seq as f64);
    js::set(&o, "last", r.last_seq as f64);
    js::set(&o, "count", r.count);
    js::set(&o, "code", r.code);
    js::set(&o, "message", r.message.as_str());
    js::set(&o, "at", r.parked_at as f64);
    js::set(&o, "may_have_landed", r.may_have_landed);
    if let Some(version) = r.current_version {
        js::set(&o, "current_version", version as f64);
    }
    if let Some(legs) = &r.atomic {
        js::set(&o, "legs", legs_js(legs));
    }
    o.into()
}

/// The park records in a `parked` store's `getAll` answer.
pub(super) fn parked_of(values: JsValue) -> Result<Vec<ParkRecord>, StoreError> {
    js::array(&values).iter().map(park_of_record).collect()
}

pub(in crate::browser::idb) fn park_of_record(v: &JsValue) -> Result<ParkRecord, StoreError> {
    let bad = || StoreError::Corrupt("a bad parked record".into());
    Ok(ParkRecord {
        aggregate: aggregate_of_record(v)?,
        first_seq: js::get_u64(v, "first").ok_or_else(bad)?,
        last_seq: js::get_u64(v, "last").ok_or_else(bad)?,
        count: js::get_u64(v, "count").ok_or_else(bad)? as u32,
        code: js::get_u64(v, "code").ok_or_else(bad)? as u32,
        message: js::get_string(v, "message").unwrap_or_default(),
        parked_at: js::get_u64(v, "at").unwrap_or(0),
        may_have_landed: js::get_bool(v, "may_have_landed").unwrap_or(false),
        current_version: js::get_u64(v, "current_version"),
        atomic: legs_of(&js::get(v, "legs"), "a parked record")?,
    })
}
