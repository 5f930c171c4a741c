//! The local log in IndexedDB: [`LocalLog`] for [`IdbOutbox`] — what the server confirmed, per
//! aggregate, with a cursor, and the snapshot a view is built from. The rules are the trait's
//! (`engine::read::log`); this is how they are kept in the outbox's database.
//!
//! A page of batches and the aggregate's cursor move in **one** transaction, so a reload or
//! another tab starts from the stored log, never from a half-stored page. The cursor also keeps
//! `mine`, the highest of this device's sequences the log holds: a view shows this device's
//! stored events above it as pending, and the drain does not prune an event of a logged
//! aggregate until `mine` has passed it — so an event leaves "pending" exactly when its
//! confirmed copy arrives (read in the same snapshot), never earlier and never twice.

use js_sys::{Array, Object};
use wasm_bindgen::{JsCast, JsValue};

use super::db::{Commit, Durability, Js};
use super::keys::Agg;
use super::outbox::{IdbOutbox, get, landed, park_of_record, store};
use super::request::result;
use super::schema::{COUNTERS, CURSORS, LANDED, LOG, OUTBOX, PARKED};
use crate::browser::js;
use crate::engine::model::AggregateRef;
use crate::engine::outbox::StoreError;
use crate::engine::read::log::{
    self, Cursor, LocalLog, Place, after_reset, bad_page, place, snapshot_from,
};
use crate::engine::read::view;

/// What a view of an aggregate is built from, read in one snapshot: batches and pending
/// `outbox` records as stored (`super::records`: the first record may also hold events at or
/// below `cursor.mine`, which are not pending).
pub(crate) type Snapshot = log::Snapshot<JsValue, JsValue>;

fn cursor_of(v: &JsValue) -> Cursor {
    Cursor {
        version: js::get_u64(v, "version").unwrap_or(0),
        mine: js::get_u64(v, "mine").unwrap_or(0),
        epoch: js::get_u64(v, "epoch").unwrap_or(0),
    }
}

/// The tag the last page store wrote into a cursor record (`super::kept`); 0 when none did.
fn tag_of(v: &JsValue) -> f64 {
    js::get(v, "r").as_f64().unwrap_or(0.0)
}

fn cursor_record(c: Cursor) -> JsValue {
    let o = Object::new();
    js::set(&o, "version", c.version as f64);
    js::set(&o, "mine", c.mine as f64);
    js::set(&o, "epoch", c.epoch as f64);
    o.into()
}

#[wasm_bindgen::prelude::wasm_bindgen(module = "/src/browser/glue.js")]
extern "C" {
    /// Whether every event of a batch has the fields a view needs, of the right kinds (the
    /// checks `engine::read::memory_log` makes, `data` as [`log::is_base64`], and the batch's
    /// `serverTimestamp` an integer, `eventId` absent, null or a string): the highest
    /// `clientSeq` if so, -1 if not. In JS, once per batch: a page's thousands of events are
    /// not read field by field across the boundary (issue 28). `catch`: were it ever to throw,
    /// the page is refused as bad — never an exception through the module, which would leave
    /// the transaction to commit what was put so far and the reader's task abandoned.
    #[wasm_bindgen(catch, js_name = checkEvents)]
    fn check_events(events: &Array, server_timestamp: &JsValue) -> Result<f64, JsValue>;
}

impl LocalLog for IdbOutbox {
    type Page = Array;
    type Batch = JsValue;
    type Pending = JsValue;

    /// The aggregate's cursor.
    async fn cursor(&self, aggregate: AggregateRef) -> Result<Cursor, StoreError> {
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
    async fn ensure_cursor(&self, aggregate: AggregateRef) -> Result<Cursor, StoreError> {
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
    async fn logged(&self) -> Result<Vec<AggregateRef>, StoreError> {
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
    /// Nothing is kept in memory: only the reader's pages are
    /// ([`IdbOutbox::store_fetched_page`]), so a view after this reads the log back.
    async fn store_page(
        &self,
        aggregate: AggregateRef,
        batches: &Array,
        me: &str,
        expected: Cursor,
    ) -> Result<Option<Cursor>, StoreError> {
        let stored = self
            .put_page(aggregate, batches, me, expected, None)
            .await?;
        Ok(stored.map(|(after, _)| after))
    }

    /// The server no longer has the aggregate's versions below `min_version` (trimmed), or, with
    /// `gone`, none of them (deleted): those are dropped from the local log, the cursor moves up
    /// to just below `min_version` if it was lower (or to 0 when gone), `epoch` + 1. `mine` is
    /// raised to the landed watermark: an event of this device that landed but will never be
    /// read back stops being pending (and can be pruned). Versions kept stay: a trim never makes
    /// a confirmed event vanish and reappear.
    async fn reset_log(
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
                    let (cursor, through) = after_reset(old, min_version, gone, landed);
                    let through = through.map_or(f64::INFINITY, |v| v as f64);
                    log.delete(&a.seqs(0.0, true, through)?.into()).js()?;
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
    async fn snapshot(
        &self,
        aggregate: AggregateRef,
        kept: Option<(u64, u64)>,
    ) -> Result<Snapshot, StoreError> {
        let cover = self.kept().cover(aggregate);
        let snapshot = self
            .db()
            .read(
                &super::db::stores(&[LOG, CURSORS, OUTBOX, PARKED]),
                async |tx| {
                    let a = Agg::new(&aggregate);
                    let record = get(&store(tx, CURSORS)?, &a.key()).await?;
                    let cursor = cursor_of(&record);
                    let after = snapshot_from(kept, cursor);
                    // The pages this context just stored, if the log is still what they made it
                    // (`super::kept`): only the versions below them are read back.
                    let cover = cover.as_ref().filter(|c| c.holds(cursor, tag_of(&record)));
                    let top = cover.map_or(cursor.version, |c| c.start);
                    let mut batches = if top > after {
                        let range = a.seqs(after as f64, false, top as f64)?;
                        js::array(
                            &result(store(tx, LOG)?.get_all_with_key(&range))
                                .await
                                .js()?,
                        )
                    } else {
                        Vec::new()
                    };
                    if let Some(cover) = cover {
                        batches.extend(cover.above(after));
                    }
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
                    Ok(log::Snapshot {
                        from: after,
                        batches,
                        cursor,
                        pending,
                        parked,
                    })
                },
            )
            .await?;
        if let Some(cover) = cover {
            self.kept().used(aggregate, &cover);
        }
        Ok(snapshot)
    }
}

impl IdbOutbox {
    /// [`LocalLog::store_page`] of a page the reader fetched, whose text was `size` UTF-16 units
    /// long: the batches it puts are also kept in memory ([`super::kept`]), and the cursor
    /// record carries a fresh tag that says so.
    pub(crate) async fn store_fetched_page(
        &self,
        aggregate: AggregateRef,
        batches: &Array,
        me: &str,
        expected: Cursor,
        size: u64,
    ) -> Result<Option<Cursor>, StoreError> {
        let ticket = self.kept().ticket();
        let put = Array::new();
        let stored = self
            .put_page(aggregate, batches, me, expected, Some((ticket.tag, &put)))
            .await?;
        if let Some((after, previous)) = stored {
            self.kept()
                .stored(ticket, aggregate, (expected, previous), after, put, size);
        }
        Ok(stored.map(|(after, _)| after))
    }

    /// The page store itself: with `keep`, the cursor record gets its tag and `put` the
    /// batches put; without, the record carries no tag. Returns the cursor after and the tag
    /// the record replaced carried.
    async fn put_page(
        &self,
        aggregate: AggregateRef,
        batches: &Array,
        me: &str,
        expected: Cursor,
        keep: Option<(f64, &Array)>,
    ) -> Result<Option<(Cursor, f64)>, StoreError> {
        self.db()
            .write(
                &super::db::stores(&[LOG, CURSORS, COUNTERS]),
                // A cache of the server: losing the last page in a power cut only re-reads it.
                Durability::Relaxed,
                Commit::Early,
                async |tx| {
                    let (log, cursors) = (store(tx, LOG)?, store(tx, CURSORS)?);
                    let a = Agg::new(&aggregate);
                    let record = get(&cursors, &a.key()).await?;
                    let mut cursor = cursor_of(&record);
                    if cursor != expected {
                        return Ok(None);
                    }
                    let assigned =
                        js::get_u64(&get(&store(tx, COUNTERS)?, &a.key()).await?, "last")
                            .unwrap_or(0);
                    let bad = bad_page;
                    for batch in batches.iter() {
                        let version = js::get_u64(&batch, "version")
                            .ok_or_else(|| bad("a batch without a version"))?;
                        if place(cursor.version, version)? == Place::Skip {
                            continue;
                        }
                        let writer = js::get_string(&batch, "clientId")
                            .ok_or_else(|| bad("a batch without a clientId"))?;
                        let events = js::get(&batch, "events");
                        let Some(events) = events.dyn_ref::<Array>().filter(|e| e.length() > 0)
                        else {
                            return Err(bad("a batch without events"));
                        };
                        let server_timestamp = js::get(&batch, "serverTimestamp");
                        let highest = check_events(events, &server_timestamp).unwrap_or(-1.0);
                        if highest < 0.0 {
                            return Err(bad("an event without its fields"));
                        }
                        if writer == me {
                            // `mine_after` of each event's sequence is that of the highest.
                            cursor.mine = view::mine_after(cursor.mine, highest as u64, assigned);
                        }
                        log.put_with_key(&batch, &a.event(version as f64)).js()?;
                        if let Some((_, put)) = keep {
                            put.push(&batch);
                        }
                        cursor.version = version;
                    }
                    let written = cursor_record(cursor);
                    if let Some((tag, _)) = keep {
                        js::set(written.unchecked_ref(), "r", tag);
                    }
                    cursors.put_with_key(&written, &a.key()).js()?;
                    Ok(Some((cursor, tag_of(&record))))
                },
            )
            .await
    }

    /// The aggregate's catch-up ended: what it kept serves the next view, then goes.
    pub(crate) fn caught_up(&self, aggregate: AggregateRef) {
        self.kept().caught_up(aggregate);
    }

    /// Lets go of every page kept (the reader that stored them stopped).
    pub(crate) fn forget_kept(&self) {
        self.kept().clear();
    }
}
