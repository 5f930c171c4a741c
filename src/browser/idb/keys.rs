//! Keys and key ranges of the outbox's stores, built in one place.
//!
//! An aggregate is `[typeId, id]` (lowercase hyphenated UUID strings); an `outbox` record is
//! `[typeId, id, seq]` (one event) or `[typeId, id, last, n]` (the `n` events ending at `last`),
//! so one aggregate's records are contiguous and in sequence order; `[typeId, id, seq, +Infinity]`
//! is above every key ending at `seq` and below every key ending after it, and
//! `[typeId, id, +Infinity]` is above every key of the aggregate and below the next one's.

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
        .and_then(|s| Uuid::try_parse(&s).ok())
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

    /// `[t, a, seq]`: the key of an `outbox` record holding the one event `seq`, of a `log`
    /// batch of version `seq`, and where an event is (the value of its `ids` record).
    pub(crate) fn event(&self, seq: f64) -> JsValue {
        Array::of3(&self.t, &self.a, &JsValue::from_f64(seq)).into()
    }

    /// `[t, a, last, n]`: the key of an `outbox` record holding the `n` (≥ 2) events
    /// `last − n + 1 ..= last` (`super::records`).
    pub(crate) fn run(&self, last: u64, n: usize) -> JsValue {
        Array::of4(
            &self.t,
            &self.a,
            &JsValue::from_f64(last as f64),
            &JsValue::from_f64(n as f64),
        )
        .into()
    }

    /// `[t, a, seq, +∞]`: above every key that ends at `seq` (`[t, a, seq]` and
    /// `[t, a, seq, n]`), below every key that ends after it.
    fn past(&self, seq: f64) -> JsValue {
        Array::of4(
            &self.t,
            &self.a,
            &JsValue::from_f64(seq),
            &JsValue::from_f64(f64::INFINITY),
        )
        .into()
    }

    /// Its keys whose (last) sequence is in `from < seq <= to` (`from` excluded), or
    /// `from <= seq` when `from_included`. For `outbox` records that means: the records whose
    /// *last* event is in the range (a record may start below `from`).
    pub(crate) fn seqs(
        &self,
        from: f64,
        from_included: bool,
        to: f64,
    ) -> Result<IdbKeyRange, StoreError> {
        let lower = if from_included {
            self.event(from)
        } else {
            self.past(from)
        };
        IdbKeyRange::bound_with_lower_open_and_upper_open(
            &lower,
            &self.past(to),
            !from_included,
            false,
        )
        .js()
    }

    /// Its records holding events above `above` (the first may also hold some at or below it).
    pub(crate) fn above(&self, above: u64) -> Result<IdbKeyRange, StoreError> {
        self.seqs(above as f64, false, f64::INFINITY)
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

/// A key part that must be a sequence or a count: an integer, at least 1.
fn count_at(parts: &Array, i: u32) -> Result<u64, StoreError> {
    parts
        .get(i)
        .as_f64()
        .filter(|s| s.fract() == 0.0 && *s >= 1.0 && *s <= 9_007_199_254_740_991.0)
        .map(|s| s as u64)
        .ok_or_else(|| StoreError::Corrupt("bad event key".to_owned()))
}

/// The sequence of `[t, a, seq]` (an event's place, the value of its `ids` record).
pub(crate) fn seq_of(key: &JsValue) -> Result<u64, StoreError> {
    count_at(&Array::from(key), 2)
}

/// The first and last sequence an `outbox` record holds, from its key: `[t, a, seq]` holds one
/// event, `[t, a, last, n]` the `n` ending at `last`.
pub(crate) fn span_of(key: &JsValue) -> Result<(u64, u64), StoreError> {
    let parts = Array::from(key);
    let last = count_at(&parts, 2)?;
    if parts.length() < 4 {
        return Ok((last, last));
    }
    let n = count_at(&parts, 3)?;
    if n > last {
        return Err(StoreError::Corrupt("bad event key".to_owned()));
    }
    Ok((last + 1 - n, last))
}
