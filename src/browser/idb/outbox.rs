//! [`IdbOutbox`]: the outbox in IndexedDB, one transaction per operation.
//!
//! Every method opens its own transaction, issues only IndexedDB requests inside it and commits
//! it explicitly (indexed_db_futures rolls back on drop): awaiting anything else would let the
//! browser auto-commit the transaction half-way (TransactionInactiveError). Writes use the
//! configured durability (`strict` by default: committed means on disk).

use indexed_db_futures::KeyRange;
use std::cell::{Cell, RefCell};
use std::rc::Rc;

use indexed_db_futures::database::Database;
use indexed_db_futures::prelude::*;
use indexed_db_futures::transaction::{
    Transaction, TransactionDurability, TransactionMode, TransactionOptions,
};
use uuid::Uuid;
use wasm_bindgen::JsValue;

use super::records::{
    CounterRecord, EventRead, EventRecord, ParkedRecord, PinRecord, aggregate_key,
    aggregate_of_key, event_key, from_js, seq_of_key, to_js,
};
use super::schema::{
    self, BY_EVENT_ID, CLIENT_ID_KEY, COUNTERS, DISCARDED, EVENTS, META, PARKED, PIN_KEY,
};
use crate::engine::batch::take_within;
use crate::engine::model::{AggregateRef, Batch, NewEvent, ParkRecord, Receipt, StoredEvent};
use crate::engine::outbox::{EventState, Outbox, StoreError};

/// Maps an IndexedDB failure to the engine's [`StoreError`], by the DOMException's name.
pub fn store_error(e: indexed_db_futures::error::Error) -> StoreError {
    use indexed_db_futures::error::Error as E;
    match e {
        E::DomException(ex) => {
            let sys: web_sys::DomException = ex.into();
            let (name, message) = (sys.name(), sys.message());
            match name.as_str() {
                "QuotaExceededError" => StoreError::QuotaExceeded(message),
                "InvalidStateError" => StoreError::Closed,
                _ => StoreError::Failed { name, message },
            }
        }
        other => StoreError::Failed {
            name: "IndexedDB".into(),
            message: other.to_string(),
        },
    }
}

trait Ctx<T> {
    fn ctx(self) -> Result<T, StoreError>;
}

impl<T> Ctx<T> for indexed_db_futures::Result<T> {
    fn ctx(self) -> Result<T, StoreError> {
        self.map_err(store_error)
    }
}

/// The outbox over one IndexedDB database.
///
/// The connection is replaced when another context upgrades the database: on `versionchange`
/// the connection is closed at once (so the upgrade is never blocked by this client) and the
/// next operation reopens the database at whatever version it now has. Schema upgrades are
/// additive ([`schema`]), so this client keeps working on a newer schema.
pub struct IdbOutbox {
    name: String,
    durability: TransactionDurability,
    db: RefCell<Database>,
    /// The connection was closed by a version change and must be reopened.
    stale: Rc<Cell<bool>>,
    /// `close` was called: no reopening.
    closed: Cell<bool>,
}

/// `[type, id, 0] ..= [type, id, +Infinity]`: every event of an aggregate.
fn all_of(a: &AggregateRef) -> KeyRange<JsValue> {
    KeyRange::Bound(event_key(a, 0.0), false, event_key(a, f64::INFINITY), false)
}

/// `[type, id, from] ..= [type, id, to]`.
fn seqs_of(a: &AggregateRef, from: u64, to: u64) -> KeyRange<JsValue> {
    KeyRange::Bound(
        event_key(a, from as f64),
        false,
        event_key(a, to as f64),
        false,
    )
}

/// The pinned batch, read inside the caller's transaction.
async fn current_pin(
    meta: &indexed_db_futures::object_store::ObjectStore<'_>,
) -> Result<Option<Batch>, StoreError> {
    let pin: Option<JsValue> = meta.get(PIN_KEY).primitive().ctx()?.await.ctx()?;
    pin.map(|v| from_js::<PinRecord>(v)?.into_batch())
        .transpose()
}

/// Durability of the drain loop's own writes (pin, settle, park). `relaxed` is safe for them:
/// they survive a tab or browser crash, and if an OS crash loses one, the only effect is a
/// resend that Celeriant answers with 2002 (a lost pin: a resend with other boundaries, whose
/// landed prefix `lastClientSeq` names; a lost settle: a resend of landed events; a lost park: a
/// second rejection). Appends and discards keep the configured durability: losing those would
/// lose the app's data or decision.
const BOOKKEEPING: TransactionDurability = TransactionDurability::Relaxed;

fn read_tx<'a>(db: &'a Database, stores: &[&str]) -> Result<Transaction<'a>, StoreError> {
    db.transaction(stores.to_vec())
        .with_mode(TransactionMode::Readonly)
        .build()
        .ctx()
}

fn write_tx<'a>(
    db: &'a Database,
    durability: TransactionDurability,
    stores: &[&str],
) -> Result<Transaction<'a>, StoreError> {
    db.transaction(stores.to_vec())
        .with_mode(TransactionMode::Readwrite)
        .with_options(TransactionOptions::new().with_durability(durability))
        .build()
        .ctx()
}

/// Waits for `tx` to commit on its own (it auto-commits once its requests are done) and, if
/// it aborted, says why from `transaction.error` — a full disk shows up only there
/// (`QuotaExceededError`), which `Transaction::commit` would report as a bare abort.
async fn committed(tx: Transaction<'_>) -> Result<(), StoreError> {
    use indexed_db_futures::transaction::TransactionFinishKind;
    let finished = tx.on_done().ctx()?.await;
    match finished {
        TransactionFinishKind::Ok => Ok(()),
        _ => Err(tx
            .error()
            .map(store_error)
            .unwrap_or_else(|| StoreError::Failed {
                name: "AbortError".into(),
                message: "the transaction was aborted".into(),
            })),
    }
}

/// Opens `name` at [`schema::VERSION`] (creating or upgrading it), or at its current version
/// when a newer client already upgraded it.
async fn open_database(name: &str) -> Result<Database, StoreError> {
    let opened = Database::open(name)
        .with_version(schema::VERSION)
        .with_on_upgrade_needed(|event, db| schema::upgrade(&event, &db))
        .await;
    match opened {
        Ok(db) => Ok(db),
        Err(indexed_db_futures::error::OpenDbError::Base(e)) => match store_error(e) {
            StoreError::Failed { name: kind, .. } if kind == "VersionError" => {
                Database::open(name).await.map_err(open_error)
            }
            other => Err(other),
        },
        Err(other) => Err(open_error(other)),
    }
}

fn open_error(e: indexed_db_futures::error::OpenDbError) -> StoreError {
    match e {
        indexed_db_futures::error::OpenDbError::Base(e) => store_error(e),
        other => StoreError::Failed {
            name: "OpenDbError".into(),
            message: other.to_string(),
        },
    }
}

/// Closes `db` as soon as another context asks to upgrade it, and marks it stale.
fn watch_version_changes(db: &Database, stale: Rc<Cell<bool>>) {
    let Ok(mut changes) = db.version_changes() else {
        return;
    };
    let db = db.clone();
    wasm_bindgen_futures::spawn_local(async move {
        if changes.recv().await.is_some() {
            stale.set(true);
            db.close();
        }
    });
}

impl IdbOutbox {
    /// Stores several appends in **one** transaction (group commit): each aggregate's counter
    /// is read once, every append gets its next sequences in order, every counter is bumped.
    /// All of the group lands or none of it; receipts come back per append.
    pub async fn append_group(
        &self,
        group: &[(AggregateRef, &[NewEvent])],
    ) -> Result<Vec<Vec<Receipt>>, StoreError> {
        match self.append_group_once(group).await {
            // Another context upgraded the database mid-append: nothing was written (the
            // transaction aborted); reopen and try once more.
            Err(_) if self.stale.get() && !self.closed.get() => self.append_group_once(group).await,
            result => result,
        }
    }

    async fn append_group_once(
        &self,
        group: &[(AggregateRef, &[NewEvent])],
    ) -> Result<Vec<Vec<Receipt>>, StoreError> {
        let db = self.connection().await?;
        let tx = write_tx(&db, self.durability, &[EVENTS, COUNTERS])?;
        let counters = tx.object_store(COUNTERS).ctx()?;
        let store = tx.object_store(EVENTS).ctx()?;
        // Read every counter first (the requests run together), then assign.
        let mut aggregates: Vec<AggregateRef> = group.iter().map(|(a, _)| *a).collect();
        aggregates.sort();
        aggregates.dedup();
        let mut reads = Vec::with_capacity(aggregates.len());
        for aggregate in &aggregates {
            reads.push(
                counters
                    .get::<JsValue, _, _>(aggregate_key(aggregate))
                    .primitive()
                    .ctx()?,
            );
        }
        let mut last = std::collections::BTreeMap::new();
        for (aggregate, read) in aggregates.iter().zip(reads) {
            let seq = match read.await.ctx()? {
                Some(v) => from_js::<CounterRecord>(v)?.last,
                None => 0,
            };
            last.insert(
                *aggregate,
                (aggregate.type_id.to_string(), aggregate.id.to_string(), seq),
            );
        }
        let mut all = Vec::with_capacity(group.len());
        for (aggregate, events) in group {
            let (t, a, seq) = last
                .get_mut(aggregate)
                .expect("every aggregate's counter was read");
            let mut receipts = Vec::with_capacity(events.len());
            for event in events.iter() {
                *seq += 1;
                receipts.push(Receipt {
                    event_id: event.event_id,
                    client_seq: *seq,
                });
                // Requests go out when built; the commit below waits for all of them.
                let stored = StoredEvent::new(*aggregate, *seq, event);
                store
                    .add(to_js(&EventRecord::new(t, a, &stored))?)
                    .primitive()
                    .ctx()?;
            }
            all.push(receipts);
        }
        for (t, a, seq) in last.into_values() {
            counters
                .put(to_js(&CounterRecord { t, a, last: seq })?)
                .primitive()
                .ctx()?;
        }
        committed(tx).await?;
        Ok(all)
    }

    /// Opens (creating or upgrading) the database `name`.
    pub async fn open(name: &str, durability: TransactionDurability) -> Result<Self, StoreError> {
        let db = open_database(name).await?;
        let stale = Rc::new(Cell::new(false));
        watch_version_changes(&db, stale.clone());
        Ok(IdbOutbox {
            name: name.to_owned(),
            durability,
            db: RefCell::new(db),
            stale,
            closed: Cell::new(false),
        })
    }

    /// The current connection, reopened first if a version change closed it.
    async fn connection(&self) -> Result<Database, StoreError> {
        if self.closed.get() {
            return Err(StoreError::Closed);
        }
        if self.stale.get() {
            let db = open_database(&self.name).await?;
            if self.stale.get() {
                self.stale.set(false);
                watch_version_changes(&db, self.stale.clone());
                *self.db.borrow_mut() = db;
            } else {
                db.close(); // another operation reopened it meanwhile
            }
        }
        Ok(self.db.borrow().clone())
    }

    /// Closes the connection for good.
    pub fn close(&self) {
        self.closed.set(true);
        self.db.borrow().clone().close();
    }

    async fn get_all(
        &self,
        aggregate: AggregateRef,
        range: KeyRange<JsValue>,
        limit: u32,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let db = self.connection().await?;
        let tx = read_tx(&db, &[EVENTS])?;
        let store = tx.object_store(EVENTS).ctx()?;
        get_all_in(&store, aggregate, range, limit).await
    }
}

/// Up to `limit` events in `range`, read inside the caller's transaction.
async fn get_all_in(
    store: &indexed_db_futures::object_store::ObjectStore<'_>,
    aggregate: AggregateRef,
    range: KeyRange<JsValue>,
    limit: u32,
) -> Result<Vec<StoredEvent>, StoreError> {
    let values = store
        .get_all::<JsValue>()
        .with_query::<JsValue, _>(range)
        .with_limit(limit)
        .primitive()
        .ctx()?
        .await
        .ctx()?;
    let mut events = Vec::new();
    for value in values {
        events.push(from_js::<EventRead>(value.ctx()?)?.into_event(aggregate)?);
    }
    Ok(events)
}

impl Outbox for IdbOutbox {
    async fn client_id(&self, fresh: Uuid) -> Result<Uuid, StoreError> {
        let db = self.connection().await?;
        let tx = write_tx(&db, self.durability, &[META])?;
        let meta = tx.object_store(META).ctx()?;
        let existing: Option<JsValue> = meta.get(CLIENT_ID_KEY).primitive().ctx()?.await.ctx()?;
        let id = match existing.and_then(|v| v.as_string()) {
            Some(text) => Uuid::parse_str(&text)
                .map_err(|e| StoreError::Corrupt(format!("client id: {e}")))?,
            None => {
                meta.put(JsValue::from_str(&fresh.to_string()))
                    .with_key(CLIENT_ID_KEY)
                    .primitive()
                    .ctx()?;
                fresh
            }
        };
        tx.commit().await.ctx()?;
        Ok(id)
    }

    async fn append(
        &self,
        aggregate: AggregateRef,
        events: Vec<NewEvent>,
    ) -> Result<Vec<Receipt>, StoreError> {
        let mut receipts = self.append_group(&[(aggregate, &events)]).await?;
        Ok(receipts.pop().unwrap_or_default())
    }

    async fn last_assigned(&self, aggregate: AggregateRef) -> Result<u64, StoreError> {
        let db = self.connection().await?;
        let tx = read_tx(&db, &[COUNTERS])?;
        let counters = tx.object_store(COUNTERS).ctx()?;
        let counter: Option<JsValue> = counters
            .get(aggregate_key(&aggregate))
            .primitive()
            .ctx()?
            .await
            .ctx()?;
        Ok(match counter {
            Some(v) => from_js::<CounterRecord>(v)?.last,
            None => 0,
        })
    }

    async fn next_aggregate(
        &self,
        after: Option<AggregateRef>,
    ) -> Result<Option<AggregateRef>, StoreError> {
        let db = self.connection().await?;
        let tx = read_tx(&db, &[EVENTS])?;
        let store = tx.object_store(EVENTS).ctx()?;
        // Every key of `after` is below [type, id, +Infinity]; any other aggregate's are above.
        let from = match after {
            Some(a) => KeyRange::LowerBound(event_key(&a, f64::INFINITY), true),
            None => KeyRange::LowerBound(js_sys::Array::new().into(), false),
        };
        let key: Option<JsValue> = store.get_key(from).primitive().ctx()?.await.ctx()?;
        key.map(|k| aggregate_of_key(&k)).transpose()
    }

    async fn lowest_pending_of(
        &self,
        aggregates: &[AggregateRef],
    ) -> Result<Vec<Option<u64>>, StoreError> {
        let db = self.connection().await?;
        let tx = read_tx(&db, &[EVENTS])?;
        let store = tx.object_store(EVENTS).ctx()?;
        let mut requests = Vec::with_capacity(aggregates.len());
        for aggregate in aggregates {
            requests.push(store.get_key(all_of(aggregate)).primitive().ctx()?);
        }
        let mut lowest = Vec::with_capacity(aggregates.len());
        for request in requests {
            let key: Option<JsValue> = request.await.ctx()?;
            lowest.push(key.map(|k| seq_of_key(&k)).transpose()?);
        }
        Ok(lowest)
    }

    async fn lowest_pending(&self, aggregate: AggregateRef) -> Result<Option<u64>, StoreError> {
        let db = self.connection().await?;
        let tx = read_tx(&db, &[EVENTS])?;
        let store = tx.object_store(EVENTS).ctx()?;
        let key: Option<JsValue> = store
            .get_key(all_of(&aggregate))
            .primitive()
            .ctx()?
            .await
            .ctx()?;
        key.map(|k| seq_of_key(&k)).transpose()
    }

    async fn head(
        &self,
        aggregate: AggregateRef,
        max_events: usize,
        max_bytes: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        // One transaction; a small first chunk, then chunks sized by the byte budget and the
        // sizes seen, so memory stays bounded with large payloads while a long run of small
        // events takes two requests.
        let db = self.connection().await?;
        let tx = read_tx(&db, &[EVENTS])?;
        let store = tx.object_store(EVENTS).ctx()?;
        let max_events = max_events.max(1);
        let mut events: Vec<StoredEvent> = Vec::new();
        let mut from = 0.0;
        let mut open = false;
        let mut chunk_size = 32;
        loop {
            let want = (max_events - events.len()).min(chunk_size) as u32;
            let range = KeyRange::Bound(
                event_key(&aggregate, from),
                open,
                event_key(&aggregate, f64::INFINITY),
                false,
            );
            let chunk = get_all_in(&store, aggregate, range, want).await?;
            let exhausted = chunk.len() < want as usize;
            events.extend(chunk);
            let fit = take_within(
                events.iter().map(StoredEvent::encoded_len),
                max_events,
                max_bytes,
            );
            if fit < events.len() {
                events.truncate(fit);
                return Ok(events);
            }
            if exhausted || events.len() >= max_events {
                return Ok(events);
            }
            from = events.last().map_or(0.0, |e| e.client_seq as f64);
            open = true;
            // Next, what the byte budget probably still holds, judged by the sizes seen so far:
            // usually the rest of the batch in one request.
            let seen: usize = events.iter().map(StoredEvent::encoded_len).sum();
            let average = (seen / events.len()).max(1);
            chunk_size = (max_bytes.saturating_sub(seen) / average + 1).clamp(32, 4096);
        }
    }

    async fn read(&self, batch: &Batch) -> Result<Vec<StoredEvent>, StoreError> {
        self.get_all(
            batch.aggregate,
            seqs_of(&batch.aggregate, batch.first_seq, batch.last_seq),
            batch.count.max(1),
        )
        .await
    }

    async fn pinned(&self) -> Result<Option<Batch>, StoreError> {
        let db = self.connection().await?;
        let tx = read_tx(&db, &[META])?;
        let meta = tx.object_store(META).ctx()?;
        let pin: Option<JsValue> = meta.get(PIN_KEY).primitive().ctx()?.await.ctx()?;
        pin.map(|v| from_js::<PinRecord>(v)?.into_batch())
            .transpose()
    }

    async fn pin(&self, batch: &Batch, replacing: Option<&Batch>) -> Result<bool, StoreError> {
        let db = self.connection().await?;
        let tx = write_tx(&db, BOOKKEEPING, &[META])?;
        let meta = tx.object_store(META).ctx()?;
        if current_pin(&meta).await?.as_ref() != replacing {
            return Ok(false); // dropping the transaction rolls it back (nothing was written)
        }
        meta.put(to_js(&PinRecord::from_batch(batch))?)
            .with_key(PIN_KEY)
            .primitive()
            .ctx()?;
        tx.commit().await.ctx()?;
        Ok(true)
    }

    async fn settle(&self, batch: &Batch, through: u64) -> Result<u32, StoreError> {
        let db = self.connection().await?;
        let tx = write_tx(&db, BOOKKEEPING, &[EVENTS, META])?;
        let store = tx.object_store(EVENTS).ctx()?;
        let meta = tx.object_store(META).ctx()?;
        let still_pinned = current_pin(&meta).await?.as_ref() == Some(batch);
        let upto = through.min(batch.last_seq);
        let removed = if upto >= batch.first_seq {
            let settled = seqs_of(&batch.aggregate, batch.first_seq, upto);
            let n: u32 = store
                .count()
                .with_query::<JsValue, _>(settled.clone())
                .primitive()
                .ctx()?
                .await
                .ctx()?;
            store.delete::<JsValue, _>(settled).primitive().ctx()?;
            n
        } else {
            0
        };
        let rest = if still_pinned && through < batch.last_seq {
            let range = KeyRange::Bound(
                event_key(&batch.aggregate, through as f64),
                true,
                event_key(&batch.aggregate, batch.last_seq as f64),
                false,
            );
            let keys = store
                .get_all_keys::<JsValue>()
                .with_query::<JsValue, _>(range)
                .primitive()
                .ctx()?
                .await
                .ctx()?;
            let mut seqs = Vec::new();
            for key in keys {
                seqs.push(seq_of_key(&key.ctx()?)?);
            }
            seqs
        } else {
            Vec::new()
        };
        match (rest.first(), rest.last()) {
            (Some(&first_seq), Some(&last_seq)) => {
                let next = Batch {
                    first_seq,
                    last_seq,
                    count: rest.len() as u32,
                    ..*batch
                };
                meta.put(to_js(&PinRecord::from_batch(&next))?)
                    .with_key(PIN_KEY)
                    .primitive()
                    .ctx()?;
            }
            _ if still_pinned => {
                meta.delete(PIN_KEY).primitive().ctx()?;
            }
            // Another drainer's pin: leave it.
            _ => {}
        }
        tx.commit().await.ctx()?;
        Ok(removed)
    }

    async fn park(&self, record: &ParkRecord, batch: &Batch) -> Result<(), StoreError> {
        let db = self.connection().await?;
        let tx = write_tx(&db, BOOKKEEPING, &[PARKED, META])?;
        let parked = tx.object_store(PARKED).ctx()?;
        let meta = tx.object_store(META).ctx()?;
        parked
            .put(to_js(&ParkedRecord::from_park(record))?)
            .primitive()
            .ctx()?;
        if current_pin(&meta).await?.as_ref() == Some(batch) {
            meta.delete(PIN_KEY).primitive().ctx()?;
        }
        tx.commit().await.ctx()
    }

    async fn parked(&self) -> Result<Vec<ParkRecord>, StoreError> {
        let db = self.connection().await?;
        let tx = read_tx(&db, &[PARKED])?;
        let store = tx.object_store(PARKED).ctx()?;
        let values = store.get_all::<JsValue>().primitive().ctx()?.await.ctx()?;
        let mut records = Vec::new();
        for value in values {
            records.push(from_js::<ParkedRecord>(value.ctx()?)?.into_park()?);
        }
        Ok(records)
    }

    async fn discard_parked(&self, aggregate: AggregateRef) -> Result<u32, StoreError> {
        let db = self.connection().await?;
        let tx = write_tx(&db, self.durability, &[PARKED, EVENTS, DISCARDED])?;
        let parked = tx.object_store(PARKED).ctx()?;
        let store = tx.object_store(EVENTS).ctx()?;
        let discarded = tx.object_store(DISCARDED).ctx()?;
        let record: Option<JsValue> = parked
            .get(aggregate_key(&aggregate))
            .primitive()
            .ctx()?
            .await
            .ctx()?;
        let Some(record) = record else { return Ok(0) };
        let record = from_js::<ParkedRecord>(record)?;
        let range = seqs_of(&aggregate, record.first, record.last);
        // Remember the dropped ids, so `whenSynced` can tell "discarded" from "landed".
        let dropped = store
            .get_all::<JsValue>()
            .with_query::<JsValue, _>(range.clone())
            .primitive()
            .ctx()?
            .await
            .ctx()?;
        for value in dropped {
            let event = from_js::<EventRead>(value.ctx()?)?;
            discarded
                .put(JsValue::from_f64(js_sys::Date::now()))
                .with_key(event.e)
                .primitive()
                .ctx()?;
        }
        let n: u32 = store
            .count()
            .with_query::<JsValue, _>(range.clone())
            .primitive()
            .ctx()?
            .await
            .ctx()?;
        store.delete::<JsValue, _>(range).primitive().ctx()?;
        parked.delete(aggregate_key(&aggregate)).primitive().ctx()?;
        tx.commit().await.ctx()?;
        Ok(n)
    }

    async fn count(&self) -> Result<u64, StoreError> {
        let db = self.connection().await?;
        let tx = read_tx(&db, &[EVENTS])?;
        let store = tx.object_store(EVENTS).ctx()?;
        let n: u32 = store.count().primitive().ctx()?.await.ctx()?;
        Ok(u64::from(n))
    }

    async fn event_state(&self, event_id: Uuid) -> Result<EventState, StoreError> {
        let db = self.connection().await?;
        let tx = read_tx(&db, &[EVENTS, DISCARDED])?;
        let store = tx.object_store(EVENTS).ctx()?;
        let index = store.index(BY_EVENT_ID).ctx()?;
        let id = event_id.to_string();
        let key: Option<JsValue> = index
            .get_key(id.as_str())
            .with_key_type::<JsValue>()
            .primitive()
            .ctx()?
            .await
            .ctx()?;
        if let Some(key) = key {
            return Ok(EventState::Pending {
                aggregate: aggregate_of_key(&key)?,
                client_seq: seq_of_key(&key)?,
            });
        }
        let discarded = tx.object_store(DISCARDED).ctx()?;
        let mark: Option<JsValue> = discarded.get(id.as_str()).primitive().ctx()?.await.ctx()?;
        Ok(if mark.is_some() {
            EventState::Discarded
        } else {
            EventState::Absent
        })
    }
}
