//! The local log: what the server confirmed, per aggregate, with a cursor — and the snapshot a
//! view is built from.
//!
//! A page of batches and the aggregate's cursor move in **one** transaction, so a reload or
//! another tab starts from the stored log, never from a half-stored page. The cursor also keeps
//! `mine`, the highest of this device's sequences the log holds: a view shows this device's
//! stored events above it as pending, and the drain does not prune an event of a logged
//! aggregate until `mine` has passed it — so an event leaves "pending" exactly when its
//! confirmed copy arrives (read in the same snapshot), never earlier and never twice.

use js_sys::{Array, Object};
use wasm_bindgen::JsValue;

use super::db::{Commit, Durability, Js};
use super::keys::Agg;
use super::outbox::{IdbOutbox, get, landed, park_of_record, store};
use super::request::result;
use super::schema::{COUNTERS, CURSORS, LANDED, LOG, OUTBOX, PARKED};
use crate::browser::js;
use crate::engine::model::{AggregateRef, ParkRecord};
use crate::engine::outbox::StoreError;
use crate::engine::read::view;

/// How far an aggregate's local log reaches.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Cursor {
    /// The highest version stored (0: none).
    pub version: u64,
    /// The highest of this device's sequences among the stored batches.
    pub mine: u64,
    /// How many times the log was reset (a view cached at another epoch is stale).
    pub epoch: u64,
}

fn cursor_of(v: &JsValue) -> Cursor {
    Cursor {
        version: js::get_u64(v, "version").unwrap_or(0),
        mine: js::get_u64(v, "mine").unwrap_or(0),
        epoch: js::get_u64(v, "epoch").unwrap_or(0),
    }
}

fn cursor_record(c: Cursor) -> JsValue {
    let o = Object::new();
    js::set(&o, "version", c.version as f64);
    js::set(&o, "mine", c.mine as f64);
    js::set(&o, "epoch", c.epoch as f64);
    o.into()
}

/// Whether a confirmed event has the fields a view needs, of the right kinds.
fn well_formed(e: &JsValue) -> bool {
    let int = |k: &str| js::get_u64(e, k).is_some();
    let data = js::get(e, "data");
    let base64 = |v: &JsValue| {
        v.as_string().is_some_and(|s| {
            s.len() % 4 == 0
                && s.bytes()
                    .all(|b| b.is_ascii_alphanumeric() || b == b'+' || b == b'/' || b == b'=')
        })
    };
    int("clientSeq")
        && int("type")
        && int("minor")
        && int("timestamp")
        && (data.is_null() || base64(&data))
}

/// What a view of an aggregate is built from, read in one snapshot.
pub struct Snapshot {
    /// The version the batches start after: the one asked for if the log's epoch is the one
    /// given, else 0 (the log was reset: everything).
    pub from: u64,
    /// Confirmed batches above `from`, in order (as the server sent them).
    pub batches: Vec<JsValue>,
    /// The log's cursor.
    pub cursor: Cursor,
    /// The `outbox` records holding this device's stored events not yet confirmed in the log,
    /// in sequence order (`super::records`: the first may also hold events at or below
    /// `cursor.mine`, which are not pending).
    pub pending: Vec<JsValue>,
    /// The aggregate's park record, if it is parked.
    pub parked: Option<ParkRecord>,
}

impl IdbOutbox {
    /// The aggregate's cursor.
    pub async fn cursor(&self, aggregate: AggregateRef) -> Result<Cursor, StoreError> {
        self.db()
            .read(&super::db::stores(&[CURSORS]), async |tx| {
                let v = get(&store(tx, CURSORS)?, &Agg::new(&aggregate).key()).await?;
                Ok(cursor_of(&v))
            })
            .await
    }

    /// Gives the aggregate a cursor if it has none, so from now on the drain keeps its landed
    /// events until the log holds them (a view that showed one as pending never loses it before
    /// its confirmed copy arrives). Returns the cursor.
    pub async fn ensure_cursor(&self, aggregate: AggregateRef) -> Result<Cursor, StoreError> {
        self.db()
            .write(
                &super::db::stores(&[CURSORS]),
                Durability::Relaxed,
                Commit::Early,
                async |tx| {
                    let cursors = store(tx, CURSORS)?;
                    let a = Agg::new(&aggregate);
                    let v = get(&cursors, &a.key()).await?;
                    if v.is_undefined() {
                        cursors
                            .put_with_key(&cursor_record(Cursor::default()), &a.key())
                            .js()?;
                    }
                    Ok(cursor_of(&v))
                },
            )
            .await
    }

    /// Every aggregate with a local log.
    pub async fn logged(&self) -> Result<Vec<AggregateRef>, StoreError> {
        self.db()
            .read(&super::db::stores(&[CURSORS]), async |tx| {
                let keys = result(store(tx, CURSORS)?.get_all_keys()).await.js()?;
                js::array(&keys)
                    .iter()
                    .map(super::keys::aggregate_of)
                    .collect()
            })
            .await
    }

    /// Stores a page of batches (parsed JSON, in version order) and moves the cursor, in one
    /// transaction — if the cursor is still `expected` (compare-and-set: a page read by a reader
    /// that has since stopped, or across a reset, is not stored; `Ok(None)`). Batches at or below
    /// the cursor are skipped (pages may overlap); the others must follow it without a gap and
    /// be well formed, or nothing is stored (a broken or hostile page never enters the log).
    /// `me` is this device's client id, as the server writes it; `mine` never passes the
    /// highest sequence this device assigned for the aggregate.
    pub async fn store_page(
        &self,
        aggregate: AggregateRef,
        batches: &Array,
        me: &str,
        expected: Cursor,
    ) -> Result<Option<Cursor>, StoreError> {
        self.db()
            .write(
                &super::db::stores(&[LOG, CURSORS, COUNTERS]),
                // A cache of the server: losing the last page in a power cut only re-reads it.
                Durability::Relaxed,
                Commit::Early,
                async |tx| {
                    let (log, cursors) = (store(tx, LOG)?, store(tx, CURSORS)?);
                    let a = Agg::new(&aggregate);
                    let mut cursor = cursor_of(&get(&cursors, &a.key()).await?);
                    if cursor != expected {
                        return Ok(None);
                    }
                    let assigned =
                        js::get_u64(&get(&store(tx, COUNTERS)?, &a.key()).await?, "last")
                            .unwrap_or(0);
                    let bad = |why: &str| {
                        StoreError::Corrupt(format!("the gateway sent a bad page: {why}"))
                    };
                    for batch in batches.iter() {
                        let version = js::get_u64(&batch, "version")
                            .ok_or_else(|| bad("a batch without a version"))?;
                        if version <= cursor.version {
                            continue;
                        }
                        if version != cursor.version + 1 {
                            return Err(bad("versions with a gap"));
                        }
                        let writer = js::get_string(&batch, "clientId")
                            .ok_or_else(|| bad("a batch without a clientId"))?;
                        let events = js::get(&batch, "events");
                        if !Array::is_array(&events) || Array::from(&events).length() == 0 {
                            return Err(bad("a batch without events"));
                        }
                        for e in js::array(&events) {
                            if !well_formed(&e) {
                                return Err(bad("an event without its fields"));
                            }
                            if writer == me {
                                let seq = js::get_u64(&e, "clientSeq").unwrap_or(0);
                                cursor.mine = view::mine_after(cursor.mine, seq, assigned);
                            }
                        }
                        log.put_with_key(&batch, &a.event(version as f64)).js()?;
                        cursor.version = version;
                    }
                    cursors
                        .put_with_key(&cursor_record(cursor), &a.key())
                        .js()?;
                    Ok(Some(cursor))
                },
            )
            .await
    }

    /// The server no longer has the aggregate's versions below `min_version` (trimmed), or, with
    /// `gone`, none of them (deleted): those are dropped from the local log, the cursor moves up
    /// to just below `min_version` if it was lower (or to 0 when gone), `epoch` + 1. `mine` is
    /// raised to the landed watermark: an event of this device that landed but will never be
    /// read back stops being pending (and can be pruned). Versions kept stay: a trim never makes
    /// a confirmed event vanish and reappear.
    pub async fn reset_log(
        &self,
        aggregate: AggregateRef,
        min_version: u64,
        gone: bool,
    ) -> Result<(), StoreError> {
        self.db()
            .write(
                &super::db::stores(&[LOG, CURSORS, LANDED]),
                Durability::Relaxed,
                Commit::Early,
                async |tx| {
                    let (log, cursors) = (store(tx, LOG)?, store(tx, CURSORS)?);
                    let a = Agg::new(&aggregate);
                    let old = cursor_of(&get(&cursors, &a.key()).await?);
                    let landed = landed(&store(tx, LANDED)?, &a).await?;
                    // Versions up to `through`, included, go.
                    let (through, version) = if gone {
                        (f64::INFINITY, 0)
                    } else {
                        let below = min_version.saturating_sub(1);
                        (below as f64, old.version.max(below))
                    };
                    log.delete(&a.seqs(0.0, true, through)?.into()).js()?;
                    let cursor = Cursor {
                        version,
                        mine: old.mine.max(landed),
                        epoch: old.epoch + 1,
                    };
                    cursors
                        .put_with_key(&cursor_record(cursor), &a.key())
                        .js()?;
                    Ok(())
                },
            )
            .await
    }

    /// The snapshot of an aggregate's view: log batches above `kept`'s version (all of them when
    /// `kept` is `None` or of another epoch), its cursor, the pending events and the park record
    /// — one read-only transaction.
    pub async fn snapshot(
        &self,
        aggregate: AggregateRef,
        kept: Option<(u64, u64)>,
    ) -> Result<Snapshot, StoreError> {
        self.db()
            .read(
                &super::db::stores(&[LOG, CURSORS, OUTBOX, PARKED]),
                async |tx| {
                    let a = Agg::new(&aggregate);
                    let cursor = cursor_of(&get(&store(tx, CURSORS)?, &a.key()).await?);
                    let after = match kept {
                        Some((epoch, version))
                            if epoch == cursor.epoch && version <= cursor.version =>
                        {
                            version
                        }
                        _ => 0,
                    };
                    let batches = if cursor.version > after {
                        let range = a.seqs(after as f64, false, cursor.version as f64)?;
                        js::array(
                            &result(store(tx, LOG)?.get_all_with_key(&range))
                                .await
                                .js()?,
                        )
                    } else {
                        Vec::new()
                    };
                    let pending = js::array(
                        &result(store(tx, OUTBOX)?.get_all_with_key(&a.above(cursor.mine)?.into()))
                            .await
                            .js()?,
                    );
                    let parked = get(&store(tx, PARKED)?, &a.key()).await?;
                    let parked = if parked.is_undefined() {
                        None
                    } else {
                        Some(park_of_record(&parked)?)
                    };
                    Ok(Snapshot {
                        from: after,
                        batches,
                        cursor,
                        pending,
                        parked,
                    })
                },
            )
            .await
    }
}
