//! [`IdbOutbox`]: the outbox in IndexedDB, one transaction per operation.
//!
//! Every method is one [`Db::read`] or [`Db::write`]: it issues only IndexedDB requests inside
//! its transaction (awaiting anything else would let the browser commit it half-way), and the
//! helper commits and maps errors. Appends and discards use the configured durability
//! (`strict` by default: committed means on disk); the drain's own bookkeeping (pin, settle,
//! park, prune) is `relaxed` (see [`BOOKKEEPING`]).
//!
//! This file holds the handle and the [`Outbox`] implementation, each method handing over to
//! the file of its concern:
//! * [`identity`]: the device's key pair and client id;
//! * [`append`]: sequence assignment and the append group's one transaction;
//! * [`cut`]: cutting the next batch and reading a pinned one back;
//! * [`settle`]: pin, settle, park and discard;
//! * [`compaction`]: pruning landed events and compacting the `ids` store;
//! * [`counting`]: the read-only questions (counts, pending aggregates, an event's state);
//! * [`codecs`]: the pin and park records as stored.

mod append;
mod codecs;
mod compaction;
mod counting;
mod cut;
mod identity;
mod settle;

use std::cell::Cell;

use uuid::Uuid;
use wasm_bindgen::JsValue;
use web_sys::{IdbObjectStore, IdbTransaction};

use super::counters::Counters;
use super::db::{Db, Durability, Js, Storage};
use super::kept::Kept;
use super::keys::Agg;
use super::request::result;
use super::watermarks::Watermarks;
use crate::engine::model::{AggregateRef, Batch, ParkRecord, StoredEvent};
use crate::engine::outbox::{
    Appended, Counted, CutQuery, Discarded, EventState, GroupItem, Outbox, Pruned, StoreError,
};
use compaction::ORPHANS_BEFORE_COMPACTING;

pub(super) use codecs::park_of_record;
pub use identity::Device;

/// Durability of the drain's own writes (pin, settle, park, prune). `relaxed` is safe for
/// them: they survive a tab or browser crash, and if an OS crash loses one, the only effect is
/// a resend that Celeriant answers with 2002 (a lost pin: a resend with other boundaries, whose
/// landed prefix `lastClientSeq` names; a lost settle: a resend of landed events; a lost park:
/// a second rejection; a lost prune: landed events deleted later). Appends and discards keep
/// the configured durability: losing those would lose the app's data or decision.
const BOOKKEEPING: Durability = Durability::Relaxed;

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
    /// The log pages this context's reader just stored (`super::kept`).
    kept: Kept,
}

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
            kept: Kept::default(),
        })
    }

    /// Closes the connection for good.
    pub fn close(&self) {
        self.db.close();
    }

    /// Calls `hook` on every change of the storage's state (reopening, lost).
    pub fn on_storage(&self, hook: impl Fn(Storage) + 'static) {
        self.db.on_storage(hook);
    }

    /// The storage's state now.
    pub fn storage(&self) -> Storage {
        self.db.storage()
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

    pub(super) fn kept(&self) -> &Kept {
        &self.kept
    }
}

impl Outbox for IdbOutbox {
    async fn client_id(&self, fresh: Uuid) -> Result<Uuid, StoreError> {
        identity::client_id(self, fresh).await
    }

    async fn append_group(&self, group: &[GroupItem<'_>]) -> Result<Appended, StoreError> {
        append::append_group(self, group).await
    }

    async fn append_atomic(&self, writes: &[GroupItem<'_>]) -> Result<Appended, StoreError> {
        append::append_atomic(self, writes).await
    }

    async fn last_assigned(&self, aggregate: AggregateRef) -> Result<u64, StoreError> {
        append::last_assigned(self, aggregate).await
    }

    async fn next_batch(
        &self,
        query: CutQuery<'_>,
    ) -> Result<Option<Vec<StoredEvent>>, StoreError> {
        cut::next_batch(self, query).await
    }

    async fn read(&self, batch: &Batch) -> Result<Vec<StoredEvent>, StoreError> {
        cut::read(self, batch).await
    }

    async fn pinned(&self) -> Result<Option<Batch>, StoreError> {
        settle::pinned(self).await
    }

    async fn pin(&self, batch: &Batch, replacing: Option<&Batch>) -> Result<bool, StoreError> {
        settle::pin(self, batch, replacing).await
    }

    async fn settle(
        &self,
        batch: &Batch,
        through: u64,
        then: Option<&Batch>,
    ) -> Result<bool, StoreError> {
        settle::settle(self, batch, through, then).await
    }

    async fn prune(
        &self,
        aggregate: AggregateRef,
        max: u32,
        idle: bool,
    ) -> Result<Pruned, StoreError> {
        compaction::prune(self, aggregate, max, idle).await
    }

    async fn unpruned(&self) -> Result<Vec<AggregateRef>, StoreError> {
        compaction::unpruned(self).await
    }

    async fn park(&self, records: &[ParkRecord], batch: &Batch) -> Result<(), StoreError> {
        settle::park(self, records, batch).await
    }

    async fn parked(&self) -> Result<Vec<ParkRecord>, StoreError> {
        settle::parked(self).await
    }

    async fn discard_parked(&self, aggregate: AggregateRef) -> Result<Discarded, StoreError> {
        settle::discard_parked(self, aggregate).await
    }

    async fn counts(&self) -> Result<Counted, StoreError> {
        counting::counts(self).await
    }

    async fn pending_aggregates(&self) -> Result<Vec<(AggregateRef, u64)>, StoreError> {
        counting::pending_aggregates(self).await
    }

    async fn lowest_pending_of(
        &self,
        aggregates: &[AggregateRef],
    ) -> Result<Vec<Option<u64>>, StoreError> {
        counting::lowest_pending_of(self, aggregates).await
    }

    async fn event_state(&self, event_id: Uuid) -> Result<EventState, StoreError> {
        counting::event_state(self, event_id).await
    }
}

impl std::fmt::Debug for IdbOutbox {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("IdbOutbox")
    }
}
