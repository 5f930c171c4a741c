//! The IndexedDB schema, as code.
//!
//! | store       | key                       | value                                                  | since |
//! |-------------|---------------------------|--------------------------------------------------------|-------|
//! | `events`    | key path `["t", "a", "s"]` | a pending (or landed, not yet pruned) event: aggregate type `t`, id `a`, sequence `s`, event id `e`, and the event's wire encoding `w`; index `eventId` on `e` | 1 |
//! | `counters`  | key path `["t", "a"]`     | `{ t, a, last }`: the highest sequence ever assigned in the aggregate (never deleted) | 1 |
//! | `parked`    | key path `["t", "a"]`     | a parked aggregate: rejected range, code, message      | 1 |
//! | `meta`      | out of line               | `"clientId"` (the device's id), `"pin"` (the pinned batch) | 1 |
//! | `discarded` | out of line: event id     | when a parked event was discarded (`whenSynced` rejects for it) | 1 |
//! | `landed`    | out of line: `[t, a]`     | the landed watermark: every sequence at or below it landed; kept only while landed events of the aggregate are still stored | 2 |
//!
//! UUIDs are stored as lowercase hyphenated strings, so the key order of `events` is the order
//! of (type, id, sequence) — the same order the in-memory outbox uses.
//!
//! Upgrades are **additive**: each version adds stores or indexes and never changes what an
//! existing one means, so a client of an older version keeps working on a database a newer tab
//! upgraded (it reopens it at the newer version). A version 1 client that drains ignores the
//! `landed` watermarks: it resends landed-but-unpruned events, which Celeriant answers with
//! 2002, and settles them — nothing lost, nothing doubled.

use web_sys::{IdbDatabase, IdbIndexParameters, IdbObjectStoreParameters, IdbTransaction};

use wasm_bindgen::JsValue;

/// The current schema version.
pub const VERSION: u32 = 2;

/// Pending events, keyed by aggregate and sequence.
pub const EVENTS: &str = "events";
/// Sequence counters per aggregate.
pub const COUNTERS: &str = "counters";
/// Parked aggregates.
pub const PARKED: &str = "parked";
/// Client id and pinned batch.
pub const META: &str = "meta";
/// Ids of discarded events.
pub const DISCARDED: &str = "discarded";
/// Landed watermarks of aggregates whose landed events are not all pruned yet.
pub const LANDED: &str = "landed";

/// `meta` key of the device's client id.
pub const CLIENT_ID_KEY: &str = "clientId";
/// `meta` key of the pinned batch.
pub const PIN_KEY: &str = "pin";
/// Index of `events` by event id.
pub const BY_EVENT_ID: &str = "eventId";

fn key_path(fields: &[&str]) -> JsValue {
    fields
        .iter()
        .map(|f| JsValue::from_str(f))
        .collect::<js_sys::Array>()
        .into()
}

/// Applies every upgrade step from `old` to [`VERSION`] inside the `versionchange`
/// transaction.
pub fn upgrade(db: &IdbDatabase, _tx: &IdbTransaction, old: u32) -> Result<(), JsValue> {
    if old < 1 {
        let keyed = |fields: &[&str]| {
            let p = IdbObjectStoreParameters::new();
            p.set_key_path(&key_path(fields));
            p
        };
        let events =
            db.create_object_store_with_optional_parameters(EVENTS, &keyed(&["t", "a", "s"]))?;
        events.create_index_with_str_and_optional_parameters(
            BY_EVENT_ID,
            "e",
            &IdbIndexParameters::new(),
        )?;
        db.create_object_store_with_optional_parameters(COUNTERS, &keyed(&["t", "a"]))?;
        db.create_object_store_with_optional_parameters(PARKED, &keyed(&["t", "a"]))?;
        db.create_object_store(META)?;
        db.create_object_store(DISCARDED)?;
    }
    if old < 2 {
        db.create_object_store(LANDED)?;
    }
    Ok(())
}
