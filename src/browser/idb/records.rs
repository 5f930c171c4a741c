//! The shapes stored in IndexedDB and their conversions.
//!
//! Records are plain JS objects written through `serde-wasm-bindgen`: numbers for sequences and
//! times (always below 2^53), strings for UUIDs, `Uint8Array` for payloads. Keys are JS arrays
//! built here, so every key range in the outbox comes from one place.

use js_sys::Array;
use serde::{Deserialize, Serialize};
use uuid::Uuid;
use wasm_bindgen::JsValue;

use crate::engine::model::{AggregateRef, Batch, ParkRecord, StoredEvent};
use crate::engine::outbox::StoreError;

/// An event in the `events` store, as written: aggregate and sequence (the key), the event id
/// (indexed, for `whenSynced`) and the event's wire encoding ([`StoredEvent::wire`]).
#[derive(Serialize)]
pub struct EventRecord<'a> {
    /// Aggregate type id.
    pub t: &'a str,
    /// Aggregate id.
    pub a: &'a str,
    /// Sequence.
    pub s: u64,
    /// Event id.
    pub e: String,
    /// The event as it travels (JSON).
    pub w: &'a str,
}

/// An event as read back: the other fields come from the key range the read asked for.
#[derive(Deserialize)]
pub struct EventRead {
    /// Sequence.
    pub s: u64,
    /// Event id.
    pub e: String,
    /// The event as it travels (JSON).
    pub w: String,
}

impl EventRead {
    /// The stored event of a record read from `aggregate`'s range.
    pub fn into_event(self, aggregate: AggregateRef) -> Result<StoredEvent, StoreError> {
        Ok(StoredEvent {
            aggregate,
            client_seq: self.s,
            event_id: uuid(&self.e)?,
            wire: self.w,
        })
    }
}

/// A sequence counter in the `counters` store.
#[derive(Serialize, Deserialize)]
pub struct CounterRecord {
    /// Aggregate type id.
    pub t: String,
    /// Aggregate id.
    pub a: String,
    /// Highest sequence assigned.
    pub last: u64,
}

/// The pinned batch in `meta`.
#[derive(Serialize, Deserialize)]
pub struct PinRecord {
    /// Aggregate type id.
    pub t: String,
    /// Aggregate id.
    pub a: String,
    /// First sequence.
    pub first: u64,
    /// Last sequence.
    pub last: u64,
    /// Number of events.
    pub count: u32,
}

/// A parked aggregate in the `parked` store.
#[derive(Serialize, Deserialize)]
pub struct ParkedRecord {
    /// Aggregate type id.
    pub t: String,
    /// Aggregate id.
    pub a: String,
    /// First parked sequence.
    pub first: u64,
    /// Last parked sequence.
    pub last: u64,
    /// Number of parked events.
    pub count: u32,
    /// Rejection code.
    pub code: u32,
    /// Rejection message.
    pub message: String,
    /// When (Unix ms).
    pub at: u64,
    /// Whether an earlier attempt may have landed.
    #[serde(default)]
    pub may_have_landed: bool,
}

fn uuid(s: &str) -> Result<Uuid, StoreError> {
    Uuid::parse_str(s).map_err(|e| StoreError::Corrupt(format!("bad UUID \"{s}\": {e}")))
}

fn aggregate(t: &str, a: &str) -> Result<AggregateRef, StoreError> {
    Ok(AggregateRef {
        type_id: uuid(t)?,
        id: uuid(a)?,
    })
}

impl<'a> EventRecord<'a> {
    /// The record of `e`, whose aggregate is `(t, a)`.
    pub fn new(t: &'a str, a: &'a str, e: &'a StoredEvent) -> Self {
        EventRecord {
            t,
            a,
            s: e.client_seq,
            e: e.event_id.to_string(),
            w: &e.wire,
        }
    }
}

impl PinRecord {
    /// The record of a batch.
    pub fn from_batch(b: &Batch) -> Self {
        PinRecord {
            t: b.aggregate.type_id.to_string(),
            a: b.aggregate.id.to_string(),
            first: b.first_seq,
            last: b.last_seq,
            count: b.count,
        }
    }

    /// The batch of a record.
    pub fn into_batch(self) -> Result<Batch, StoreError> {
        Ok(Batch {
            aggregate: aggregate(&self.t, &self.a)?,
            first_seq: self.first,
            last_seq: self.last,
            count: self.count,
        })
    }
}

impl ParkedRecord {
    /// The stored form of a park record.
    pub fn from_park(r: &ParkRecord) -> Self {
        ParkedRecord {
            t: r.aggregate.type_id.to_string(),
            a: r.aggregate.id.to_string(),
            first: r.first_seq,
            last: r.last_seq,
            count: r.count,
            code: r.code,
            message: r.message.clone(),
            at: r.parked_at,
            may_have_landed: r.may_have_landed,
        }
    }

    /// The park record.
    pub fn into_park(self) -> Result<ParkRecord, StoreError> {
        Ok(ParkRecord {
            aggregate: aggregate(&self.t, &self.a)?,
            first_seq: self.first,
            last_seq: self.last,
            count: self.count,
            code: self.code,
            message: self.message,
            parked_at: self.at,
            may_have_landed: self.may_have_landed,
        })
    }
}

/// Serialises a record for IndexedDB.
pub fn to_js<T: Serialize>(value: &T) -> Result<JsValue, StoreError> {
    serde_wasm_bindgen::to_value(value).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// Deserialises a record read from IndexedDB.
pub fn from_js<T: for<'de> Deserialize<'de>>(value: JsValue) -> Result<T, StoreError> {
    serde_wasm_bindgen::from_value(value).map_err(|e| StoreError::Corrupt(e.to_string()))
}

/// The `counters`/`parked` key of an aggregate: `[type, id]`.
pub fn aggregate_key(a: &AggregateRef) -> JsValue {
    Array::of2(&a.type_id.to_string().into(), &a.id.to_string().into()).into()
}

/// The `events` key of one event: `[type, id, seq]`.
pub fn event_key(a: &AggregateRef, seq: f64) -> JsValue {
    Array::of3(
        &a.type_id.to_string().into(),
        &a.id.to_string().into(),
        &seq.into(),
    )
    .into()
}

/// A sequence from an `events` key.
pub fn seq_of_key(key: &JsValue) -> Result<u64, StoreError> {
    Array::from(key)
        .get(2)
        .as_f64()
        .map(|s| s as u64)
        .ok_or_else(|| StoreError::Corrupt("bad event key".to_owned()))
}

/// The aggregate of an `events` key.
pub fn aggregate_of_key(key: &JsValue) -> Result<AggregateRef, StoreError> {
    let parts = Array::from(key);
    let part = |i| {
        parts
            .get(i)
            .as_string()
            .ok_or_else(|| StoreError::Corrupt("bad event key".to_owned()))
    };
    aggregate(&part(0)?, &part(1)?)
}
