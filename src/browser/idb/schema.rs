//! The IndexedDB schema, as code.
//!
//! | store       | key                       | value                                                  | since |
//! |-------------|---------------------------|--------------------------------------------------------|-------|
//! | `outbox`    | out of line: `[t, a, s]` or `[t, a, last, n]` | pending (or landed, not yet pruned) events: `{ s, e, w }` one event (sequence `s`, event id `e`, wire encoding `w`); `{ s, e: [ids], w: [wires] }` a run of `n` from `s` to `last`; a conditional append's records add its guard `g` and keep the wires under `gw` instead of `w`; an atomic write's records add its legs `a` and keep the wires under `aw` ([`super::records`]) | 2 (runs: 4, `g`/`gw`: 5, `a`/`aw`: 6) |
//! | `ids`       | out of line: event id     | `[t, a, s]`: where an event was stored; written with the event, deleted in bulk (below) | 2 |
//! | `counters`  | key path `["t", "a"]`     | `{ t, a, last }`: the highest sequence ever assigned in the aggregate (never deleted) | 1 |
//! | `parked`    | key path `["t", "a"]`     | a parked aggregate: rejected range, code, message; a parked atomic write's legs (`legs`) | 1 (`legs`: 6) |
//! | `meta`      | out of line               | `"device"` (the key pair, its private key non-extractable), `"clientId"` (the device's id), `"previousClientId"` (the id before a device key), `"principal"` (the user it belongs to), `"pin"` (the pinned batch; an atomic write's adds its `legs`) | 1 (`legs`: 6) |
//! | `discarded` | out of line: event id     | when a parked event was discarded (`whenSynced` rejects for it) | 1 |
//! | `landed`    | out of line: `[t, a]`     | the landed watermark: every sequence at or below it landed; kept only while landed events of the aggregate are still stored | 2 |
//! | `log`       | out of line: `[t, a, version]` | a batch the server confirmed, as it reads it (`{ version, clientId, serverTimestamp, events }`) | 3 |
//! | `cursors`   | out of line: `[t, a]`     | `{ version, mine, epoch }`: the highest version in `log`, the highest of this device's sequences it holds, how many times the log was reset | 3 |
//!
//! UUIDs are stored as lowercase hyphenated strings, so the key order of `outbox` is the order
//! of (type, id, sequence) — the same order the in-memory outbox uses.
//!
//! **No secondary index on a store the drain deletes from.** In WebKit's in-memory IndexedDB
//! (Safari's private browsing, and every WebDriver session) deleting one record of an indexed
//! store scans the whole index: a 50,000-event backlog drained at 5 events/s (docs/browsers.md).
//! The event-id lookup `whenSynced` needs is therefore its own store, `ids`, which the drain
//! never deletes from record by record (500 point deletes per batch cost ~300 ms in Chromium):
//! an id whose event is gone means "landed" (unless discarded), and the store is cleared when
//! the outbox is empty, or rebuilt from the outbox when it holds far more ids than events.
//!
//! Version 4 adds no store: it stores several events per `outbox` record. Its readers still
//! read version 3's one-event records (the same format as a run of one), so nothing is
//! migrated; the version number only makes tabs still running version 3, which cannot read a
//! run, close their connection (`versionchange`) instead of misreading it.
//!
//! Version 5 adds no store either: a conditional append's records keep their wire encodings
//! under `gw` instead of `w` (with the guard in `g`). A release before conditional appends
//! ignores `g`, so it would send such events without their version guard, or cut them
//! together with other events; finding no `w`, it takes the record as corrupt and, like
//! version 3's code on a run, retries and sends nothing. Its readers read both fields; the
//! version number makes tabs still running version 4 close their connection
//! (`versionchange`).
//!
//! Version 6 adds no store either: an atomic write's records (`appendAtomic`) carry its legs in
//! `a` and keep their wire encodings under `aw` (instead of `w`, or `gw` on a guarded leg);
//! its pin and park records carry the legs in `legs`. It must change the version for the same
//! reason as 5: a release before atomic writes ignores `a` and would cut one leg as a batch of
//! its own and send it alone — half of an atomic write landing. Finding neither `w` nor `gw`,
//! it takes the record as corrupt and sends nothing; the version number makes tabs still
//! running version 5 close their connection (`versionchange`). Records without `a` (every
//! record version 5 wrote) read as plain or conditional appends, as before: nothing is
//! migrated.
//!
//! Version 1 kept events in `events` (key path `["t","a","s"]`, index `eventId`); the upgrade to
//! 2 copies them into `outbox` and `ids` and deletes `events`, so a tab still running version 1
//! fails loudly (its transactions name a store that is gone) instead of writing where nobody
//! reads. Every other upgrade is additive.

use wasm_bindgen::prelude::*;
use web_sys::{IdbDatabase, IdbObjectStoreParameters, IdbTransaction};

/// The current schema version.
pub const VERSION: u32 = 6;

/// Pending (and landed, not yet pruned) events, keyed by aggregate and sequence.
pub const OUTBOX: &str = "outbox";
/// Where each event id is (or was) stored.
pub const IDS: &str = "ids";
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
/// The local log: confirmed batches, per aggregate and version.
pub const LOG: &str = "log";
/// How far the local log of each aggregate reaches.
pub const CURSORS: &str = "cursors";

/// `meta` key of the device's client id.
pub const CLIENT_ID_KEY: &str = "clientId";
/// `meta` key of the pinned batch.
pub const PIN_KEY: &str = "pin";

fn key_path(fields: &[&str]) -> JsValue {
    fields
        .iter()
        .map(|f| JsValue::from_str(f))
        .collect::<js_sys::Array>()
        .into()
}

#[wasm_bindgen(module = "/src/browser/glue.js")]
extern "C" {
    /// Copies version 1's `events` into `outbox` and `ids`, then deletes `events` — all inside
    /// the `versionchange` transaction, so a failure leaves version 1 untouched.
    #[wasm_bindgen(js_name = migrateV1)]
    fn migrate_v1(db: &IdbDatabase, tx: &IdbTransaction);
}

/// Applies every upgrade step from `old` to [`VERSION`] inside the `versionchange`
/// transaction.
pub fn upgrade(db: &IdbDatabase, tx: &IdbTransaction, old: u32) -> Result<(), JsValue> {
    if old < 1 {
        let keyed = |fields: &[&str]| {
            let p = IdbObjectStoreParameters::new();
            p.set_key_path(&key_path(fields));
            p
        };
        db.create_object_store_with_optional_parameters(COUNTERS, &keyed(&["t", "a"]))?;
        db.create_object_store_with_optional_parameters(PARKED, &keyed(&["t", "a"]))?;
        db.create_object_store(META)?;
        db.create_object_store(DISCARDED)?;
    }
    if old < 2 {
        db.create_object_store(OUTBOX)?;
        db.create_object_store(IDS)?;
        db.create_object_store(LANDED)?;
        if old == 1 {
            migrate_v1(db, tx);
        }
    }
    if old < 3 {
        db.create_object_store(LOG)?;
        db.create_object_store(CURSORS)?;
    }
    Ok(())
}
