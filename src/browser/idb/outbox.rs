//! [`IdbOutbox`]: the outbox in IndexedDB, one transaction per operation.
//!
//! Every method is one [`Db::read`] or [`Db::write`]: it issues only IndexedDB requests inside
//! its transaction (awaiting anything else would let the browser commit it half-way), and the
//! helper commits and maps errors. Appends and discards use the configured durability
//! (`strict` by default: committed means on disk); the drain's own bookkeeping (pin, settle,
//! park, prune) is `relaxed` (see [`BOOKKEEPING`]).

use std::cell::Cell;

use js_sys::{Array, Object};
use uuid::Uuid;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::{IdbKeyRange, IdbObjectStore, IdbTransaction};

use super::counters::Counters;
use super::db::{Commit, Db, Durability, Js, stores};
use super::keys::{Agg, after_aggregate, aggregate_of, parse_uuid, seq_of, span_of, uuid_js};
use super::records::{add_runs, all_events_of, events_of, key_of, put_run, span};
use super::request::{events_above, result};
use super::schema::{
    CLIENT_ID_KEY, COUNTERS, CURSORS, DISCARDED, IDS, LANDED, META, OUTBOX, PARKED, PIN_KEY,
};
use super::watermarks::{Marks, Watermarks, mark_of};
use crate::browser::js;
use crate::engine::batch::take_within;
use crate::engine::model::{
    AggregateRef, Batch, IDENTITY_CHANGED, NewEvent, ParkRecord, Receipt, StoredEvent,
};
use crate::engine::outbox::{
    Appended, Cause, Counted, CutQuery, Discarded, EventState, Outbox, Pruned, StoreError,
};
use crate::engine::sorted::SortedMap;

/// Durability of the drain's own writes (pin, settle, park, prune). `relaxed` is safe for
/// them: they survive a tab or browser crash, and if an OS crash loses one, the only effect is
/// a resend that Celeriant answers with 2002 (a lost pin: a resend with other boundaries, whose
/// landed prefix `lastClientSeq` names; a lost settle: a resend of landed events; a lost park:
/// a second rejection; a lost prune: landed events deleted later). Appends and discards keep
/// the configured durability: losing those would lose the app's data or decision.
const BOOKKEEPING: Durability = Durability::Relaxed;

/// The device's key pair, as stored in `meta` (`"device"`).
pub struct Device {
    /// The `CryptoKeyPair` (structured-cloned into IndexedDB; its private key stays
    /// non-extractable).
    pub key_pair: JsValue,
    /// The public key's SPKI DER.
    pub spki: Vec<u8>,
    /// The client id derived from it.
    pub client_id: Uuid,
}

/// `meta` key of the device's key pair.
const DEVICE_KEY: &str = "device";
/// `meta` key of the random client id a database had before it had a device key.
const PREVIOUS_CLIENT_ID_KEY: &str = "previousClientId";

fn device_record(d: &Device) -> JsValue {
    let o = Object::new();
    js::set(&o, "keyPair", d.key_pair.clone());
    js::set(&o, "spki", js_sys::Uint8Array::from(d.spki.as_slice()));
    js::set(&o, "clientId", uuid_js(&d.client_id));
    o.into()
}

fn device_of_record(v: &JsValue) -> Result<Option<Device>, StoreError> {
    if v.is_undefined() {
        return Ok(None);
    }
    let spki = js::get(v, "spki")
        .dyn_into::<js_sys::Uint8Array>()
        .map_err(|_| StoreError::Corrupt("the device record has no public key".into()))?;
    Ok(Some(Device {
        key_pair: js::get(v, "keyPair"),
        spki: spki.to_vec(),
        client_id: parse_uuid(&js::get(v, "clientId"))?,
    }))
}

/// The outbox over one IndexedDB database.
pub struct IdbOutbox {
    db: Db,
    durability: Durability,
    /// Events pruned since the `ids` store was last compacted (this context's drain prunes).
    orphaned: Cell<u64>,
    /// The `landed` watermarks as this context's drain last read or wrote them.
    watermarks: Watermarks,
    /// The counters this context's appends last wrote: guesses (`super::counters`).
    counters: Counters,
}

/// How many pruned events leave their id records behind before the `ids` store is compacted.
const ORPHANS_BEFORE_COMPACTING: u64 = 1_000;

/// Drops the id records of events that are gone: all of them when the outbox is empty, or a
/// rebuild from the outbox when it holds more than twice as many ids as events (the outbox
/// never emptied: a steady stream of appends). Never a record-by-record delete (see
/// [`super::schema`]). The rebuild walks the outbox [`COMPACT_CHUNK`] records at a time in the
/// same transaction, so its memory does not grow with the backlog (reading the whole outbox at
/// once held half of a 100,000-event backlog in the JS heap, 40 MB, in `npm run bench`).
async fn compact_ids(events: &IdbObjectStore, ids: &IdbObjectStore) -> Result<(), StoreError> {
    if first_key(events, None).await?.is_none() {
        ids.clear().js()?;
        return Ok(());
    }
    let known = result(ids.count()).await.js()?.as_f64().unwrap_or(0.0);
    let stored = count_events(events, None).await? as f64;
    if known <= 2.0 * stored + ORPHANS_BEFORE_COMPACTING as f64 {
        return Ok(());
    }
    ids.clear().js()?;
    let mut range = IdbKeyRange::lower_bound(&Array::new()).js()?;
    let mut chunk = 64u32;
    loop {
        let keys = result(events.get_all_keys_with_key_and_limit(&range, chunk))
            .await
            .js()?;
        let values = result(events.get_all_with_key_and_limit(&range, chunk))
            .await
            .js()?;
        let (keys, values) = (js::array(&keys), js::array(&values));
        let mut put = 0u32;
        for (key, value) in keys.iter().zip(&values) {
            // The key's `t` and `a` as stored: no UUID parsing for a rebuild.
            let parts = Array::from(key);
            let (first, last) = span_of(key)?;
            let stored_ids = js::get(value, "e");
            let list = stored_ids.dyn_ref::<Array>();
            for seq in first..=last {
                let id = match list {
                    Some(list) => list.get((seq - first) as u32),
                    None => stored_ids.clone(),
                };
                let place =
                    Array::of3(&parts.get(0), &parts.get(1), &JsValue::from_f64(seq as f64));
                ids.put_with_key(&place, &id).js()?;
                put += 1;
            }
        }
        match keys.last() {
            Some(last) if keys.len() == chunk as usize => {
                range = IdbKeyRange::lower_bound_with_open(last, true).js()?;
                // About COMPACT_CHUNK events a step, however many each record holds.
                let per_record = (put / chunk).max(1);
                chunk = (COMPACT_CHUNK / per_record).clamp(8, COMPACT_CHUNK);
            }
            _ => return Ok(()),
        }
    }
}

/// Events read per step of the `ids` rebuild.
const COMPACT_CHUNK: u32 = 2_000;

pub(super) fn store(tx: &IdbTransaction, name: &str) -> Result<IdbObjectStore, StoreError> {
    tx.object_store(name).js()
}

pub(super) async fn get(store: &IdbObjectStore, key: &JsValue) -> Result<JsValue, StoreError> {
    result(store.get(key)).await.js()
}

/// The landed watermark of an aggregate (0: nothing landed that is still stored).
pub(super) async fn landed(landed: &IdbObjectStore, a: &Agg) -> Result<u64, StoreError> {
    Ok(get(landed, &a.key()).await?.as_f64().unwrap_or(0.0) as u64)
}

/// The first key in `range` (every array key when `None`).
async fn first_key(
    events: &IdbObjectStore,
    range: Option<IdbKeyRange>,
) -> Result<Option<JsValue>, StoreError> {
    let range: JsValue = match range {
        Some(r) => r.into(),
        None => IdbKeyRange::lower_bound(&Array::new()).js()?.into(),
    };
    let key = result(events.get_key(&range)).await.js()?;
    Ok((!key.is_undefined()).then_some(key))
}

/// Keys read per step when counting.
const KEY_CHUNK: u32 = 10_000;

/// How many events the outbox's records hold, from their keys alone, a chunk of keys at a time.
async fn count_all(events: &IdbObjectStore) -> Result<u64, StoreError> {
    let mut range = IdbKeyRange::lower_bound(&Array::new()).js()?;
    let mut n = 0;
    loop {
        let keys = result(events.get_all_keys_with_key_and_limit(&range, KEY_CHUNK))
            .await
            .js()?;
        n += events_above(&keys, 0.0) as u64;
        let keys: &Array = keys.unchecked_ref();
        if keys.length() < KEY_CHUNK {
            return Ok(n);
        }
        range = IdbKeyRange::lower_bound_with_open(&keys.get(KEY_CHUNK - 1), true).js()?;
    }
}

/// How many events the outbox holds above the watermarks `marks` (every stored event when
/// `None`): every key counted, less what the records of aggregates with a watermark hold at or
/// below it (few aggregates: the requests go out together).
async fn count_events(events: &IdbObjectStore, marks: Option<&Marks>) -> Result<u64, StoreError> {
    let total = count_all(events).await?;
    // Issued together, awaited in the order issued: a request's `success` handler is attached
    // when it is awaited, which must come before its event (`super::request`).
    let marks = marks.map(Vec::as_slice).unwrap_or_default();
    let mut landed = Vec::with_capacity(marks.len());
    for (aggregate, through) in marks {
        let a = Agg::new(aggregate);
        let whole = events.get_all_keys_with_key(&a.seqs(0.0, true, *through as f64)?.into());
        let tail = events.get_key(&a.above(*through)?.into());
        landed.push((whole, tail, *through));
    }
    let mut stored_landed = 0;
    for (whole, tail, through) in landed {
        stored_landed += events_above(&result(whole).await.js()?, 0.0) as u64;
        let tail = result(tail).await.js()?;
        if !tail.is_undefined() {
            let (first, _) = span_of(&tail)?;
            stored_landed += (through + 1).saturating_sub(first);
        }
    }
    Ok(total.saturating_sub(stored_landed))
}

/// The records of `a` holding any event in `above < seq <= through` (`above < through`): those
/// ending in that range, and the first one ending after it if it starts inside it — two
/// requests, in flight together.
async fn records_holding(
    events: &IdbObjectStore,
    a: &Agg,
    above: u64,
    through: u64,
) -> Result<Vec<JsValue>, StoreError> {
    let inner = events.get_all_with_key(&a.seqs(above as f64, false, through as f64)?.into());
    let tail = events.get(&a.above(through)?.into());
    let (inner, tail) = (result(inner).await.js()?, result(tail).await.js()?);
    let mut records = js::array(&inner);
    if !tail.is_undefined() && span(&tail)?.0 <= through {
        records.push(tail);
    }
    Ok(records)
}

/// The events of `a` in `above < seq <= through` (`above < through`).
async fn events_between(
    events: &IdbObjectStore,
    a: &Agg,
    above: u64,
    through: u64,
) -> Result<Vec<StoredEvent>, StoreError> {
    let mut out = Vec::new();
    for value in records_holding(events, a, above, through).await? {
        events_of(a.aggregate, &value, above, through, usize::MAX, &mut out)?;
    }
    Ok(out)
}

/// The aggregate's lowest events above `above`: at most `max_events`, within `max_bytes` of
/// request body, at least one. Read in chunks of records — a few first, then as many as the
/// budgets and the sizes seen call for — so memory stays bounded with large payloads while a
/// long run of small events takes two requests.
async fn head(
    events: &IdbObjectStore,
    a: &Agg,
    above: u64,
    max_events: usize,
    max_bytes: usize,
) -> Result<Vec<StoredEvent>, StoreError> {
    let max_events = max_events.max(1);
    let mut out: Vec<StoredEvent> = Vec::new();
    let mut range = a.above(above)?;
    let mut chunk = 4u32;
    let mut records = 0usize;
    loop {
        let values = result(events.get_all_with_key_and_limit(&range, chunk))
            .await
            .js()?;
        let values = js::array(&values);
        let exhausted = values.len() < chunk as usize;
        records += values.len();
        for value in &values {
            // Events past `max_events` would be cut below: not even decoded.
            events_of(a.aggregate, value, above, u64::MAX, max_events, &mut out)?;
        }
        let fit = take_within(
            out.iter().map(StoredEvent::encoded_len),
            max_events,
            max_bytes,
        );
        if fit < out.len() {
            out.truncate(fit);
            return Ok(out);
        }
        let Some(last) = out.last() else {
            return Ok(out);
        };
        if exhausted || out.len() >= max_events {
            return Ok(out);
        }
        range = a.above(last.client_seq)?;
        let seen: usize = out.iter().map(StoredEvent::encoded_len).sum();
        let by_bytes = max_bytes.saturating_sub(seen) * records / seen.max(1);
        let by_count = (max_events - out.len()) * records / out.len();
        chunk = (by_bytes.min(by_count) + 1).clamp(1, 4096) as u32;
    }
}

/// Every landed watermark (the store holds one row per aggregate with landed events still
/// stored: few).
async fn all_landed(landed: &IdbObjectStore) -> Result<Marks, StoreError> {
    let keys = js::array(&result(landed.get_all_keys()).await.js()?);
    let values = js::array(&result(landed.get_all()).await.js()?);
    keys.iter()
        .zip(values)
        .map(|(key, through)| Ok((aggregate_of(key)?, through.as_f64().unwrap_or(0.0) as u64)))
        .collect()
}

/// The next batch `query` asks for, above the watermarks `marks`: the lowest pending events
/// of the first aggregate, round robin from `query.after`, that has some and is not skipped.
async fn cut(
    events: &IdbObjectStore,
    marks: &Marks,
    query: &CutQuery<'_>,
) -> Result<Option<Vec<StoredEvent>>, StoreError> {
    let start = query.after.as_ref().map(Agg::new);
    // Round robin: aggregates after `after`, then from the start through `after`.
    for pass in 0..2 {
        let mut lower = if pass == 0 {
            after_aggregate(start.as_ref())?
        } else {
            None
        };
        while let Some(key) = first_key(events, lower).await? {
            let aggregate = aggregate_of(&key)?;
            if pass == 1 && query.after.is_some_and(|after| aggregate > after) {
                break; // visited in the first pass
            }
            let a = Agg::new(&aggregate);
            if query.skip.binary_search(&aggregate).is_err() {
                let mut above = mark_of(marks, &aggregate);
                if let Some((x, through)) = query.assume_landed
                    && x == aggregate
                {
                    above = above.max(through);
                }
                let found = head(events, &a, above, query.max_events, query.max_bytes).await?;
                if !found.is_empty() {
                    return Ok(Some(found));
                }
            }
            lower = after_aggregate(Some(&a))?;
        }
        if query.after.is_none() {
            break; // the first pass started at the beginning
        }
    }
    Ok(None)
}

fn pin_record(b: &Batch) -> JsValue {
    let o = Object::new();
    let a = Agg::new(&b.aggregate);
    js::set(&o, "t", a.t);
    js::set(&o, "a", a.a);
    js::set(&o, "first", b.first_seq as f64);
    js::set(&o, "last", b.last_seq as f64);
    js::set(&o, "count", b.count);
    o.into()
}

fn aggregate_of_record(v: &JsValue) -> Result<AggregateRef, StoreError> {
    Ok(AggregateRef {
        type_id: parse_uuid(&js::get(v, "t"))?,
        id: parse_uuid(&js::get(v, "a"))?,
    })
}

fn batch_of_record(v: &JsValue) -> Result<Option<Batch>, StoreError> {
    if v.is_undefined() {
        return Ok(None);
    }
    let bad = || StoreError::Corrupt("a bad pin record".into());
    Ok(Some(Batch {
        aggregate: aggregate_of_record(v)?,
        first_seq: js::get_u64(v, "first").ok_or_else(bad)?,
        last_seq: js::get_u64(v, "last").ok_or_else(bad)?,
        count: js::get_u64(v, "count").ok_or_else(bad)? as u32,
    }))
}

fn parked_record(r: &ParkRecord) -> JsValue {
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
    o.into()
}

/// The park records in a `parked` store's `getAll` answer.
fn parked_of(values: JsValue) -> Result<Vec<ParkRecord>, StoreError> {
    js::array(&values).iter().map(park_of_record).collect()
}

pub(super) fn park_of_record(v: &JsValue) -> Result<ParkRecord, StoreError> {
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
    })
}

impl IdbOutbox {
    /// Opens (creating or upgrading) the database `name`; appends and discards commit with
    /// `durability`.
    pub async fn open(name: &str, durability: Durability) -> Result<Self, StoreError> {
        Ok(IdbOutbox {
            db: Db::open(name).await?,
            durability,
            orphaned: Cell::new(ORPHANS_BEFORE_COMPACTING),
            watermarks: Watermarks::default(),
            counters: Counters::default(),
        })
    }

    /// Closes the connection for good.
    pub fn close(&self) {
        self.db.close();
    }

    /// Calls `hook` when another context deletes the database.
    pub fn on_deleted(&self, hook: impl Fn() + 'static) {
        self.db.on_deleted(hook);
    }

    /// Whether this context's drain is the only writer of `landed` (it holds the device's Web
    /// Lock): only then does the outbox keep a copy of the watermarks to cut with
    /// (`super::watermarks`).
    pub fn sole_drainer(&self, sole: bool) {
        self.watermarks.keep(sole);
    }

    /// Another context's drain settled `aggregate` through `through` (its notice is posted
    /// once the settle committed): this context's copy of the watermarks, if it keeps one,
    /// follows, so that `flush` here does not wait on a copy that is behind
    /// (`super::watermarks`: a former drainer's late settle).
    pub fn landed_elsewhere(&self, aggregate: AggregateRef, through: u64) {
        self.watermarks.raised_to(aggregate, through);
    }

    /// The database (for the local log's operations, `super::log`).
    pub(super) fn db(&self) -> &Db {
        &self.db
    }

    /// The device's stored key pair, if it has one.
    pub async fn device(&self) -> Result<Option<Device>, StoreError> {
        self.db
            .read(&stores(&[META]), async |tx| {
                device_of_record(&get(&store(tx, META)?, &DEVICE_KEY.into()).await?)
            })
            .await
    }

    /// Stores `candidate` as the device's key pair and its client id as the database's — in
    /// one transaction, unless a key pair is stored already (another context was first), which
    /// is then returned instead.
    ///
    /// A database that had a random client id (made before device keys) starts its new
    /// identity here: events never sent are simply sent under the new id, but a pinned batch
    /// may have landed under the old one, so it is parked ([`IDENTITY_CHANGED`],
    /// `mayHaveLanded`) for the app to check and discard or append again — never resent under
    /// the new id, where it could land a second time.
    pub async fn adopt_device(&self, candidate: Device) -> Result<Device, StoreError> {
        self.db
            .write(
                &stores(&[META, PARKED, OUTBOX]),
                self.durability,
                Commit::Early,
                async |tx| {
                    let meta = store(tx, META)?;
                    if let Some(stored) = device_of_record(&get(&meta, &DEVICE_KEY.into()).await?)?
                    {
                        return Ok(stored);
                    }
                    let previous = get(&meta, &CLIENT_ID_KEY.into()).await?;
                    let new_id = uuid_js(&candidate.client_id);
                    meta.put_with_key(&device_record(&candidate), &DEVICE_KEY.into())
                        .js()?;
                    meta.put_with_key(&new_id, &CLIENT_ID_KEY.into()).js()?;
                    if previous.is_undefined() || previous == new_id {
                        return Ok(candidate);
                    }
                    meta.put_with_key(&previous, &PREVIOUS_CLIENT_ID_KEY.into())
                        .js()?;
                    if let Some(pin) = batch_of_record(&get(&meta, &PIN_KEY.into()).await?)? {
                        let a = Agg::new(&pin.aggregate);
                        let above = pin.first_seq.saturating_sub(1);
                        let stored = events_between(&store(tx, OUTBOX)?, &a, above, pin.last_seq)
                            .await?
                            .len() as u32;
                        let record = ParkRecord {
                            aggregate: pin.aggregate,
                            first_seq: pin.first_seq,
                            last_seq: pin.last_seq,
                            count: stored,
                            code: IDENTITY_CHANGED,
                            message: format!(
                                "this batch was pinned when the database moved from client id \
                                 {} to its device key; it may have landed under the old id: \
                                 check the aggregate, then discard it or append it again",
                                previous.as_string().unwrap_or_default()
                            ),
                            parked_at: js_sys::Date::now() as u64,
                            may_have_landed: true,
                        };
                        store(tx, PARKED)?.put(&parked_record(&record)).js()?;
                        meta.delete(&PIN_KEY.into()).js()?;
                    }
                    Ok(candidate)
                },
            )
            .await
    }

    /// One try at [`Outbox::append_group`]: the counters are read and the events written in
    /// one transaction. With every counter of the group guessed (`super::counters`), the writes
    /// are issued with the reads instead of after them; a guess the read contradicts sets
    /// `wrong` and aborts the transaction before anything is committed.
    async fn append_group_once(
        &self,
        group: &[(AggregateRef, &[NewEvent])],
        wrong: &Cell<bool>,
    ) -> Result<Appended, StoreError> {
        // An `add` over an existing key fails its request: committing early is only right
        // where that still aborts the whole transaction.
        let commit = if self.db.early_commit_is_atomic().await {
            Commit::Early
        } else {
            Commit::Auto
        };
        let written = self
            .db
            .write(
                &stores(&[OUTBOX, COUNTERS, IDS]),
                self.durability,
                commit,
                async |tx| {
                    let begun = self.db.begun();
                    let counters = store(tx, COUNTERS)?;
                    // Per aggregate: its key parts, its last sequence, and its new events in
                    // sequence order, stored as runs (`super::records`).
                    let mut last: SortedMap<AggregateRef, (Agg, u64, Vec<StoredEvent>)> =
                        SortedMap::new();
                    for (aggregate, _) in group {
                        last.get_or_insert_with(*aggregate, || {
                            (Agg::new(aggregate), 0, Vec::new())
                        });
                    }
                    // Every counter is read first (the requests run together, and before any
                    // write: a transaction runs its requests in order).
                    let reads: Vec<_> = last
                        .values()
                        .map(|(a, _, _)| counters.get(&a.key()))
                        .collect();
                    // With every counter guessed, the writes go out before the answers.
                    let (bases, unchecked) = match self.counters.guess(last.keys()) {
                        Some(guessed) => (guessed, Some(reads)),
                        None => (counter_answers(reads).await?, None),
                    };
                    for ((_, seq, _), base) in last.values_mut().zip(&bases) {
                        *seq = *base;
                    }
                    let receipts = write_group(tx, group, &mut last)?;
                    // Checked once the last answer arrived, in its own success event, before
                    // any write's: a wrong guess aborts.
                    let checked = match unchecked {
                        Some(reads) => counter_answers(reads).await? == bases,
                        None => true,
                    };
                    if !checked {
                        wrong.set(true);
                        return Err(StoreError::Failed {
                            name: "AbortError".into(),
                            message: "a counter moved".into(),
                            cause: Cause::NONE,
                        });
                    }
                    let seqs: Vec<(AggregateRef, u64)> =
                        last.iter().map(|(k, (_, seq, _))| (*k, *seq)).collect();
                    Ok((receipts, seqs, begun))
                },
            )
            .await;
        match written {
            Ok((receipts, seqs, begun)) => {
                self.counters.committed(seqs.into_iter());
                Ok(Appended { receipts, begun })
            }
            Err(e) => {
                self.counters.forget();
                Err(e)
            }
        }
    }
}

/// The `last` of each counter read, in the order issued (and awaited in that order: a request's
/// handler is attached when it is awaited, `super::request`). Consumes the reads: awaiting a
/// request a second time would wait for an event that has passed.
async fn counter_answers(
    reads: Vec<Result<web_sys::IdbRequest, JsValue>>,
) -> Result<Vec<u64>, StoreError> {
    let mut out = Vec::with_capacity(reads.len());
    for read in reads {
        let counter = result(read).await.js()?;
        out.push(js::get_u64(&counter, "last").unwrap_or(0));
    }
    Ok(out)
}

/// Assigns the group's events their sequences after each aggregate's `last`, and issues their
/// writes (the `ids` records, the runs, the counters); returns each append's receipts.
fn write_group(
    tx: &IdbTransaction,
    group: &[(AggregateRef, &[NewEvent])],
    last: &mut SortedMap<AggregateRef, (Agg, u64, Vec<StoredEvent>)>,
) -> Result<Vec<Vec<Receipt>>, StoreError> {
    let (events, ids, counters) = (store(tx, OUTBOX)?, store(tx, IDS)?, store(tx, COUNTERS)?);
    let mut all = Vec::with_capacity(group.len());
    for (aggregate, batch) in group {
        let (a, seq, runs) = last.get_mut(aggregate).expect("one entry per aggregate");
        let mut receipts = Vec::with_capacity(batch.len());
        for event in batch.iter() {
            *seq += 1;
            receipts.push(Receipt {
                event_id: event.event_id,
                client_seq: *seq,
            });
            ids.put_with_key(&a.event(*seq as f64), &uuid_js(&event.event_id))
                .js()?;
            runs.push(StoredEvent::new(*aggregate, *seq, event));
        }
        all.push(receipts);
    }
    // Requests go out when made; the commit waits for all of them.
    for (a, _, run) in last.values() {
        add_runs(&events, a, run)?;
    }
    for (a, seq, _) in last.values() {
        let o = Object::new();
        js::set(&o, "t", a.t.clone());
        js::set(&o, "a", a.a.clone());
        js::set(&o, "last", *seq as f64);
        counters.put(&o).js()?;
    }
    Ok(all)
}

impl Outbox for IdbOutbox {
    async fn client_id(&self, fresh: Uuid) -> Result<Uuid, StoreError> {
        self.db
            .write(
                &stores(&[META]),
                self.durability,
                Commit::Early,
                async |tx| {
                    let meta = store(tx, META)?;
                    let existing = get(&meta, &CLIENT_ID_KEY.into()).await?;
                    if existing.is_undefined() {
                        meta.put_with_key(&uuid_js(&fresh), &CLIENT_ID_KEY.into())
                            .js()?;
                        Ok(fresh)
                    } else {
                        parse_uuid(&existing)
                    }
                },
            )
            .await
    }

    async fn append_group(
        &self,
        group: &[(AggregateRef, &[NewEvent])],
    ) -> Result<Appended, StoreError> {
        let wrong = Cell::new(false);
        match self.append_group_once(group, &wrong).await {
            // A guessed counter was wrong (another context appended), or another context
            // upgraded the database mid-append: nothing was written (the transaction aborted);
            // try once more, reading the counters first (every guess is forgotten).
            Err(_) if wrong.get() || self.db.lost_to_upgrade() => {
                self.append_group_once(group, &wrong).await
            }
            result => result,
        }
    }

    async fn last_assigned(&self, aggregate: AggregateRef) -> Result<u64, StoreError> {
        self.db
            .read(&stores(&[COUNTERS]), async |tx| {
                let counter = get(&store(tx, COUNTERS)?, &Agg::new(&aggregate).key()).await?;
                Ok(js::get_u64(&counter, "last").unwrap_or(0))
            })
            .await
    }

    async fn next_batch(
        &self,
        query: CutQuery<'_>,
    ) -> Result<Option<Vec<StoredEvent>>, StoreError> {
        // With the watermarks known, `landed` stays out of the transaction (`super::watermarks`).
        let (known, generation) = self.watermarks.get();
        let names: &[&str] = if known.is_some() {
            &[OUTBOX]
        } else {
            &[OUTBOX, LANDED]
        };
        let (found, read) = self
            .db
            .read(&stores(names), async |tx| {
                let events = store(tx, OUTBOX)?;
                let (marks, read) = match known {
                    Some(marks) => (marks, false),
                    None => (all_landed(&store(tx, LANDED)?).await?, true),
                };
                let found = cut(&events, &marks, &query).await?;
                Ok((found, read.then_some(marks)))
            })
            .await?;
        if let Some(marks) = read {
            self.watermarks.loaded(generation, marks);
        }
        Ok(found)
    }

    async fn read(&self, batch: &Batch) -> Result<Vec<StoredEvent>, StoreError> {
        self.db
            .read(&stores(&[OUTBOX, LANDED]), async |tx| {
                let a = Agg::new(&batch.aggregate);
                let above = landed(&store(tx, LANDED)?, &a)
                    .await?
                    .max(batch.first_seq.saturating_sub(1));
                if above >= batch.last_seq {
                    return Ok(Vec::new());
                }
                events_between(&store(tx, OUTBOX)?, &a, above, batch.last_seq).await
            })
            .await
    }

    async fn pinned(&self) -> Result<Option<Batch>, StoreError> {
        self.db
            .read(&stores(&[META]), async |tx| {
                batch_of_record(&get(&store(tx, META)?, &PIN_KEY.into()).await?)
            })
            .await
    }

    async fn pin(&self, batch: &Batch, replacing: Option<&Batch>) -> Result<bool, StoreError> {
        self.db
            .write(&stores(&[META]), BOOKKEEPING, Commit::Early, async |tx| {
                let meta = store(tx, META)?;
                let current = batch_of_record(&get(&meta, &PIN_KEY.into()).await?)?;
                if current.as_ref() != replacing {
                    return Ok(false); // nothing written
                }
                meta.put_with_key(&pin_record(batch), &PIN_KEY.into())
                    .js()?;
                Ok(true)
            })
            .await
    }

    async fn settle(
        &self,
        batch: &Batch,
        through: u64,
        then: Option<&Batch>,
    ) -> Result<bool, StoreError> {
        self.db
            .write(
                &stores(&[META, LANDED]),
                BOOKKEEPING,
                Commit::Early,
                async |tx| {
                    let meta = store(tx, META)?;
                    let watermarks = store(tx, LANDED)?;
                    let a = Agg::new(&batch.aggregate);
                    // The pin and the watermark are read together (one round trip, not two:
                    // this transaction stands between a batch's answer and the next request),
                    // awaited in the order issued (`super::request`).
                    let pin = meta.get(&PIN_KEY.into());
                    let mark = watermarks.get(&a.key());
                    let current = batch_of_record(&result(pin).await.js()?)?;
                    let stored = result(mark).await.js()?.as_f64().unwrap_or(0.0) as u64;
                    if current.as_ref() != Some(batch) {
                        return Ok(None); // another drainer moved the pin: nothing written
                    }
                    let landed = stored.max(through);
                    watermarks
                        .put_with_key(&JsValue::from_f64(landed as f64), &a.key())
                        .js()?;
                    match then {
                        Some(next) => meta.put_with_key(&pin_record(next), &PIN_KEY.into()),
                        None => meta.delete(&PIN_KEY.into()),
                    }
                    .js()?;
                    Ok(Some(landed))
                },
            )
            .await
            .map(|written| {
                if let Some(landed) = written {
                    self.watermarks.raised(batch.aggregate, landed);
                }
                written.is_some()
            })
    }

    async fn prune(
        &self,
        aggregate: AggregateRef,
        max: u32,
        idle: bool,
    ) -> Result<Pruned, StoreError> {
        self.db
            .write(
                &stores(&[OUTBOX, LANDED, IDS, CURSORS]),
                BOOKKEEPING,
                Commit::Early,
                async |tx| {
                    let events = store(tx, OUTBOX)?;
                    let watermarks = store(tx, LANDED)?;
                    let ids = store(tx, IDS)?;
                    let a = Agg::new(&aggregate);
                    let mut dropped = false;
                    let landed_through = landed(&watermarks, &a).await?;
                    // An aggregate with a local log keeps its landed events until the log holds
                    // them: a view shows them as pending until then (no flicker).
                    let logged = get(&store(tx, CURSORS)?, &a.key()).await?;
                    let through = if logged.is_undefined() {
                        landed_through
                    } else {
                        landed_through.min(js::get_u64(&logged, "mine").unwrap_or(0))
                    };
                    if through == 0 {
                        let none = Pruned {
                            removed: 0,
                            more: false,
                        };
                        return Ok((none, false));
                    }
                    // The records holding landed events: those ending at or below `through`
                    // (at most `max + 1` of them: each holds at least one event), and the first
                    // ending above it, if it starts at or below it.
                    let whole = events.get_all_keys_with_key_and_limit(
                        &a.seqs(0.0, true, through as f64)?.into(),
                        max + 1,
                    );
                    let tail = events.get_key(&a.above(through)?.into());
                    let (whole, tail) = (
                        js::array(&result(whole).await.js()?),
                        result(tail).await.js()?,
                    );
                    let mut spans = Vec::with_capacity(whole.len() + 1);
                    for key in whole.iter() {
                        spans.push((key.clone(), span_of(key)?));
                    }
                    if whole.len() <= max as usize && !tail.is_undefined() {
                        let (first, last) = span_of(&tail)?;
                        if first <= through {
                            spans.push((tail, (first, last)));
                        }
                    }
                    // Whole records go in one ranged delete; at most one record (where the
                    // budget ends, or the one ending above `through`) loses a prefix and is
                    // rewritten with what is left.
                    let (mut removed, mut more) = (0u64, false);
                    let (mut whole_through, mut cut) = (None, None);
                    for (key, (first, last)) in spans {
                        let budget = u64::from(max) - removed;
                        if budget == 0 {
                            more = true;
                            break;
                        }
                        let landed_here = last.min(through) + 1 - first;
                        if landed_here <= budget && last <= through {
                            whole_through = Some(last);
                            removed += landed_here;
                            continue;
                        }
                        let take = landed_here.min(budget);
                        cut = Some((key, first + take - 1));
                        removed += take;
                        more = take < landed_here;
                        break;
                    }
                    if let Some(last) = whole_through {
                        events
                            .delete(&a.seqs(0.0, true, last as f64)?.into())
                            .js()?;
                    }
                    if let Some((key, through)) = cut {
                        let value = get(&events, &key).await?;
                        let all = all_events_of(aggregate, &value)?;
                        let landed = all.iter().take_while(|e| e.client_seq <= through).count();
                        events.delete(&key).js()?;
                        put_run(&events, &a, &all[landed..], true)?;
                    }
                    if !more && through == landed_through {
                        // Nothing landed is stored any more: the watermark has done its job.
                        watermarks.delete(&a.key()).js()?;
                        dropped = true;
                    }
                    self.orphaned.set(self.orphaned.get() + removed);
                    // Only when idle: the check counts both stores and a rebuild rewrites what
                    // remains, which mid-drain held `outbox` for most of a 100,000-event drain.
                    if idle && !more && self.orphaned.get() >= ORPHANS_BEFORE_COMPACTING {
                        self.orphaned.set(0);
                        compact_ids(&events, &ids).await?;
                    }
                    let pruned = Pruned {
                        removed: removed as u32,
                        more,
                    };
                    Ok((pruned, dropped))
                },
            )
            .await
            .map(|(pruned, dropped)| {
                if dropped {
                    self.watermarks.dropped(&aggregate);
                }
                pruned
            })
    }

    async fn unpruned(&self) -> Result<Vec<AggregateRef>, StoreError> {
        // A drain starts (this is one of its first reads): whatever an earlier drain of this
        // context knew of `landed` is read afresh with the next cut.
        self.watermarks.forget();
        self.db
            .read(&stores(&[LANDED]), async |tx| {
                let keys = result(store(tx, LANDED)?.get_all_keys()).await.js()?;
                js::array(&keys).iter().map(aggregate_of).collect()
            })
            .await
    }

    async fn park(&self, record: &ParkRecord, batch: &Batch) -> Result<(), StoreError> {
        self.db
            .write(
                &stores(&[PARKED, META]),
                BOOKKEEPING,
                Commit::Early,
                async |tx| {
                    let meta = store(tx, META)?;
                    store(tx, PARKED)?.put(&parked_record(record)).js()?;
                    let current = batch_of_record(&get(&meta, &PIN_KEY.into()).await?)?;
                    if current.as_ref() == Some(batch) {
                        meta.delete(&PIN_KEY.into()).js()?;
                    }
                    Ok(())
                },
            )
            .await
    }

    async fn parked(&self) -> Result<Vec<ParkRecord>, StoreError> {
        self.db
            .read(&stores(&[PARKED]), async |tx| {
                parked_of(result(store(tx, PARKED)?.get_all()).await.js()?)
            })
            .await
    }

    async fn discard_parked(&self, aggregate: AggregateRef) -> Result<Discarded, StoreError> {
        self.db
            .write(
                &stores(&[PARKED, OUTBOX, DISCARDED]),
                self.durability,
                Commit::Early,
                async |tx| {
                    let begun = self.db.begun();
                    let parked = store(tx, PARKED)?;
                    let events = store(tx, OUTBOX)?;
                    let discarded = store(tx, DISCARDED)?;
                    let a = Agg::new(&aggregate);
                    let found = get(&parked, &a.key()).await?;
                    if found.is_undefined() {
                        return Ok(Discarded { removed: 0, begun });
                    }
                    let record = park_of_record(&found)?;
                    let (f, l) = (record.first_seq, record.last_seq);
                    // Each record holding any of `f..=l` loses exactly those events (rewritten
                    // as what is left on either side), and their ids are remembered, so
                    // `whenSynced` can tell "discarded" from "landed".
                    let now = JsValue::from_f64(js_sys::Date::now());
                    let mut dropped = 0u32;
                    for value in records_holding(&events, &a, f.saturating_sub(1), l).await? {
                        let all = all_events_of(aggregate, &value)?;
                        events.delete(&key_of(&a, &value)?).js()?;
                        // `all` is in sequence order: what is below `f`, in it, above `l`.
                        let from = all.iter().take_while(|e| e.client_seq < f).count();
                        let to =
                            from + all[from..].iter().take_while(|e| e.client_seq <= l).count();
                        for e in &all[from..to] {
                            discarded.put_with_key(&now, &uuid_js(&e.event_id)).js()?;
                        }
                        dropped += (to - from) as u32;
                        put_run(&events, &a, &all[..from], true)?;
                        put_run(&events, &a, &all[to..], true)?;
                    }
                    parked.delete(&a.key()).js()?;
                    Ok(Discarded {
                        removed: dropped,
                        begun,
                    })
                },
            )
            .await
    }

    async fn counts(&self) -> Result<Counted, StoreError> {
        self.db
            .read(&stores(&[OUTBOX, LANDED, PARKED]), async |tx| {
                let before = self.db.begun();
                let parked = parked_of(result(store(tx, PARKED)?.get_all()).await.js()?)?;
                // From keys alone: each holds its first and last sequence.
                let marks = all_landed(&store(tx, LANDED)?).await?;
                Ok(Counted {
                    events: count_events(&store(tx, OUTBOX)?, Some(&marks)).await?,
                    parked,
                    before,
                })
            })
            .await
    }

    async fn pending_aggregates(&self) -> Result<Vec<(AggregateRef, u64)>, StoreError> {
        self.db
            .read(&stores(&[OUTBOX, LANDED, COUNTERS]), async |tx| {
                let events = store(tx, OUTBOX)?;
                let counters = store(tx, COUNTERS)?;
                let marks = all_landed(&store(tx, LANDED)?).await?;
                // Aggregate by aggregate, the question about one and the search for the next
                // in flight together (awaited in the order issued, `super::request`).
                let mut pending = Vec::new();
                let everything = IdbKeyRange::lower_bound(&Array::new()).js()?;
                let mut next = events.get_key(&everything.into());
                loop {
                    let key = result(next).await.js()?;
                    if key.is_undefined() {
                        break;
                    }
                    let a = Agg::new(&aggregate_of(&key)?);
                    let Some(after) = after_aggregate(Some(&a))? else {
                        break;
                    };
                    let above = events.get_key(&a.above(mark_of(&marks, &a.aggregate))?.into());
                    next = events.get_key(&after.into());
                    if !result(above).await.js()?.is_undefined() {
                        pending.push(a);
                    }
                }
                let reads: Vec<_> = pending.iter().map(|a| counters.get(&a.key())).collect();
                let mut out = Vec::with_capacity(pending.len());
                for (a, read) in pending.into_iter().zip(reads) {
                    let counter = result(read).await.js()?;
                    out.push((a.aggregate, js::get_u64(&counter, "last").unwrap_or(0)));
                }
                Ok(out)
            })
            .await
    }

    async fn lowest_pending_of(
        &self,
        aggregates: &[AggregateRef],
    ) -> Result<Vec<Option<u64>>, StoreError> {
        // `flush` asks after every settle. With the drain's copy of the watermarks, `landed`
        // stays out of the transaction, so the check never holds the next settle back
        // (`super::watermarks`); every request is in flight at once.
        let (known, _) = self.watermarks.get();
        let names: &[&str] = if known.is_some() {
            &[OUTBOX]
        } else {
            &[OUTBOX, LANDED]
        };
        self.db
            .read(&stores(names), async |tx| {
                let events = store(tx, OUTBOX)?;
                let aggs: Vec<Agg> = aggregates.iter().map(Agg::new).collect();
                let marks: Vec<u64> = match &known {
                    Some(marks) => aggs.iter().map(|a| mark_of(marks, &a.aggregate)).collect(),
                    None => {
                        let watermarks = store(tx, LANDED)?;
                        let reads: Vec<_> = aggs.iter().map(|a| watermarks.get(&a.key())).collect();
                        let mut marks = Vec::with_capacity(reads.len());
                        for read in reads {
                            marks.push(result(read).await.js()?.as_f64().unwrap_or(0.0) as u64);
                        }
                        marks
                    }
                };
                let mut firsts = Vec::with_capacity(aggs.len());
                for (a, through) in aggs.iter().zip(&marks) {
                    firsts.push(events.get_key(&a.above(*through)?.into()));
                }
                let mut out = Vec::with_capacity(aggs.len());
                for (first, through) in firsts.into_iter().zip(marks) {
                    let key = result(first).await.js()?;
                    // The first record above the watermark may start at or below it.
                    out.push(if key.is_undefined() {
                        None
                    } else {
                        Some(span_of(&key)?.0.max(through + 1))
                    });
                }
                Ok(out)
            })
            .await
    }

    async fn event_state(&self, event_id: Uuid) -> Result<EventState, StoreError> {
        self.db
            .read(&stores(&[OUTBOX, IDS, DISCARDED, LANDED]), async |tx| {
                let id = uuid_js(&event_id);
                let key = get(&store(tx, IDS)?, &id).await?;
                if !key.is_undefined() {
                    let aggregate = aggregate_of(&key)?;
                    let client_seq = seq_of(&key)?;
                    // The first record ending at or after the event holds it, if any does.
                    let a = Agg::new(&aggregate);
                    let holder = result(
                        store(tx, OUTBOX)?
                            .get_key(&a.seqs(client_seq as f64, true, f64::INFINITY)?.into()),
                    )
                    .await
                    .js()?;
                    let still = !holder.is_undefined() && span_of(&holder)?.0 <= client_seq;
                    let through = landed(&store(tx, LANDED)?, &a).await?;
                    if still && client_seq > through {
                        return Ok(EventState::Pending {
                            aggregate,
                            client_seq,
                        });
                    }
                }
                // Gone (or landed, not yet pruned): landed, unless the app discarded it.
                let mark = get(&store(tx, DISCARDED)?, &id).await?;
                Ok(if mark.is_undefined() {
                    EventState::Absent
                } else {
                    EventState::Discarded
                })
            })
            .await
    }
}

impl std::fmt::Debug for IdbOutbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IdbOutbox")
    }
}
