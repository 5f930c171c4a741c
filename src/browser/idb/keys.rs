//! Keys and key ranges of the outbox's stores, built in one place.
//!
//! An aggregate is `[typeId, id]` (lowercase hyphenated UUID strings); an event is
//! `[typeId, id, seq]`, so one aggregate's events are contiguous and in sequence order, and
//! `[typeId, id, +Infinity]` is above every event of the aggregate and below the next one's.

use js_sys::Array;
use uuid::Uuid;
use wasm_bindgen::JsValue;
use web_sys::IdbKeyRange;

use super::db::Js;
use crate::engine::model::AggregateRef;
use crate::engine::outbox::StoreError;

/// A UUID as the lowercase hyphenated string the stores hold.
pub(crate) fn uuid_js(id: &Uuid) -> JsValue {
    JsValue::from_str(id.hyphenated().encode_lower(&mut Uuid::encode_buffer()))
}

/// Parses a stored UUID string.
pub(crate) fn parse_uuid(value: &JsValue) -> Result<Uuid, StoreError> {
    value
        .as_string()
        .and_then(|s| Uuid::parse_str(&s).ok())
        .ok_or_else(|| StoreError::Corrupt("a stored id is not a UUID".into()))
}

/// An aggregate's key parts, converted to JS once per operation.
#[derive(Clone)]
pub(crate) struct Agg {
    /// The aggregate.
    pub aggregate: AggregateRef,
    /// Its type id as a JS string.
    pub t: JsValue,
    /// Its id as a JS string.
    pub a: JsValue,
}

impl Agg {
    /// The key parts of `aggregate`.
    pub(crate) fn new(aggregate: &AggregateRef) -> Self {
        Agg {
            aggregate: *aggregate,
            t: uuid_js(&aggregate.type_id),
            a: uuid_js(&aggregate.id),
        }
    }

    /// `[t, a]`: the key of its counter, parked record and landed watermark.
    pub(crate) fn key(&self) -> JsValue {
        Array::of2(&self.t, &self.a).into()
    }

    /// `[t, a, seq]`: the key of one of its events.
    pub(crate) fn event(&self, seq: f64) -> JsValue {
        Array::of3(&self.t, &self.a, &JsValue::from_f64(seq)).into()
    }

    /// Its events with `from < seq <= to` (`from` excluded), or `from <= seq` when
    /// `from_included`.
    pub(crate) fn seqs(
        &self,
        from: f64,
        from_included: bool,
        to: f64,
    ) -> Result<IdbKeyRange, StoreError> {
        IdbKeyRange::bound_with_lower_open_and_upper_open(
            &self.event(from),
            &self.event(to),
            !from_included,
            false,
        )
        .js()
    }

    /// Its events above `above`.
    pub(crate) fn above(&self, above: u64) -> Result<IdbKeyRange, StoreError> {
        self.seqs(above as f64, false, f64::INFINITY)
    }

    /// Its events from `first` to `last`, both included.
    pub(crate) fn between(&self, first: u64, last: u64) -> Result<IdbKeyRange, StoreError> {
        self.seqs(first as f64, true, last as f64)
    }
}

/// Every event key strictly after all of `after`'s events (from the start when `None`).
pub(crate) fn after_aggregate(after: Option<&Agg>) -> Result<Option<IdbKeyRange>, StoreError> {
    match after {
        None => Ok(None),
        Some(a) => IdbKeyRange::lower_bound_with_open(&a.event(f64::INFINITY), true)
            .js()
            .map(Some),
    }
}

/// The aggregate of an `events` key.
pub(crate) fn aggregate_of(key: &JsValue) -> Result<AggregateRef, StoreError> {
    let parts = Array::from(key);
    Ok(AggregateRef {
        type_id: parse_uuid(&parts.get(0))?,
        id: parse_uuid(&parts.get(1))?,
    })
}

/// The sequence of an `events` key.
pub(crate) fn seq_of(key: &JsValue) -> Result<u64, StoreError> {
    Array::from(key)
        .get(2)
        .as_f64()
        .filter(|s| s.fract() == 0.0 && *s >= 0.0)
        .map(|s| s as u64)
        .ok_or_else(|| StoreError::Corrupt("bad event key".to_owned()))
}
