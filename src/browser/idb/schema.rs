//! The IndexedDB schema, as code.
//!
//! Version 1 has four object stores:
//!
//! | store       | key path          | value                                                  |
//! |-------------|-------------------|--------------------------------------------------------|
//! | `events`    | `["t", "a", "s"]` | a pending event: aggregate type `t`, id `a`, sequence `s`, event id `e`, and the event's wire encoding `w` (see [`super::records::EventRecord`]); index `eventId` on `e` |
//! | `counters` | `["t", "a"]`      | the highest sequence ever assigned in the aggregate (never deleted) |
//! | `parked`   | `["t", "a"]`      | a parked aggregate: rejected range, code, message      |
//! | `meta`     | out-of-line keys  | `"clientId"` (the device's id), `"pin"` (the pinned batch) |
//! | `discarded` | out-of-line: event id | ids of parked events the app discarded (`whenSynced` rejects for them) |
//!
//! UUIDs are stored as lowercase hyphenated strings, so the key order of `events` is the order
//! of (type, id, sequence) — the same order the in-memory outbox uses.
//!
//! Upgrades are **additive**: a future version adds a step to [`upgrade`] that creates stores or
//! indexes and never changes what an existing one means, so a client of an older version can
//! keep using a database a newer tab upgraded (it reopens it at the newer version).

use indexed_db_futures::database::{Database, VersionChangeEvent};
use indexed_db_futures::prelude::*;

/// The current schema version.
pub const VERSION: u32 = 1;

/// Pending events, keyed by aggregate and sequence.
pub const EVENTS: &str = "events";
/// Sequence counters per aggregate.
pub const COUNTERS: &str = "counters";
/// Parked aggregates.
pub const PARKED: &str = "parked";
/// Client id and pinned batch.
pub const META: &str = "meta";

/// `meta` key of the device's client id.
pub const CLIENT_ID_KEY: &str = "clientId";
/// `meta` key of the pinned batch.
pub const PIN_KEY: &str = "pin";
/// Ids of discarded events.
pub const DISCARDED: &str = "discarded";
/// Index of `events` by event id.
pub const BY_EVENT_ID: &str = "eventId";

/// Applies every upgrade step from `old_version` to [`VERSION`].
pub fn upgrade(event: &VersionChangeEvent, db: &Database) -> indexed_db_futures::Result<()> {
    let old = event.old_version() as u32;
    if old < 1 {
        let events = db
            .create_object_store(EVENTS)
            .with_key_path(["t", "a", "s"].into())
            .build()?;
        events.create_index(BY_EVENT_ID, "e".into()).build()?;
        db.create_object_store(COUNTERS)
            .with_key_path(["t", "a"].into())
            .build()?;
        db.create_object_store(PARKED)
            .with_key_path(["t", "a"].into())
            .build()?;
        db.create_object_store(META).build()?;
        db.create_object_store(DISCARDED).build()?;
    }
    Ok(())
}
