//! How the local log's conformance suite ([`crate::engine::read::log_conformance`]) drives the
//! IndexedDB log: its pages as the gateway's parsed JSON, its records read back, and the device
//! side played through the outbox itself (append, pin, settle, park). Used by
//! `tests/browser_read_log.rs` only; nothing of it is exported to JavaScript.
//!
//! The suite runs twice there: on [`IdbOutbox`] itself, whose trait `store_page` keeps nothing
//! in memory (every snapshot reads IndexedDB), and on [`Keeping`], whose pages are stored as the
//! reader stores its own, kept (`super::kept`), so its snapshots take what the log still holds
//! of them from memory.

use js_sys::{Array, Object};
use wasm_bindgen::JsValue;

use super::log::Snapshot;
use super::outbox::IdbOutbox;
use super::records::span;
use crate::browser::js;
use crate::engine::conformance::event;
use crate::engine::model::{AggregateRef, Batch, ParkRecord};
use crate::engine::outbox::{Outbox, StoreError};
use crate::engine::read::log::{Cursor, LocalLog};
use crate::engine::read::log_conformance::LogFixture;
use crate::engine::read::memory_log::{LogBatch, LogEvent};

impl LogFixture for IdbOutbox {
    fn page(&self, batches: &[LogBatch]) -> Array {
        batches
            .iter()
            .map(|b| {
                let o = Object::new();
                js::set(&o, "version", b.version as f64);
                js::set(&o, "clientId", b.client_id.as_str());
                // Not in the suite's batches (the in-memory log has none): a number the
                // gateway could have written.
                js::set(
                    &o,
                    "serverTimestamp",
                    (1_790_000_000_000 + b.version) as f64,
                );
                let events: Array = b
                    .events
                    .iter()
                    .map(|e| {
                        let v = Object::new();
                        js::set(&v, "clientSeq", e.client_seq as f64);
                        js::set(&v, "type", e.event_type as f64);
                        js::set(&v, "minor", e.minor as f64);
                        js::set(&v, "timestamp", e.timestamp as f64);
                        let data = e.data.as_deref().map_or(JsValue::NULL, JsValue::from);
                        js::set(&v, "data", data);
                        JsValue::from(v)
                    })
                    .collect();
                js::set(&o, "events", events);
                JsValue::from(o)
            })
            .collect()
    }

    fn read_batch(&self, batch: &JsValue) -> LogBatch {
        let int = |v: &JsValue, k: &str| js::get_u64(v, k).unwrap_or(u64::MAX);
        LogBatch {
            version: int(batch, "version"),
            client_id: js::get_string(batch, "clientId").unwrap_or_default(),
            events: js::array(&js::get(batch, "events"))
                .iter()
                .map(|e| LogEvent {
                    client_seq: int(e, "clientSeq"),
                    event_type: int(e, "type"),
                    minor: int(e, "minor"),
                    timestamp: int(e, "timestamp"),
                    data: js::get(e, "data").as_string(),
                })
                .collect(),
        }
    }

    fn pending_seqs(&self, pending: &[JsValue], above: u64) -> Vec<u64> {
        pending
            .iter()
            .flat_map(|r| {
                let (first, last) = span(r).expect("an outbox record");
                first..=last
            })
            .filter(|s| *s > above)
            .collect()
    }

    async fn assign(&self, aggregate: AggregateRef, n: u64) -> u64 {
        let events = (0..n).map(|i| event(i as u8, 8)).collect();
        let receipts = self.append(aggregate, events).await.expect("append");
        receipts.last().map_or(0, |r| r.client_seq)
    }

    async fn land(&self, aggregate: AggregateRef, through: u64) {
        let batch = Batch::plain(aggregate, 1, through, through as u32);
        assert!(self.pin(&batch, None).await.expect("pin"), "pinned");
        assert!(
            self.settle(&batch, through, None).await.expect("settle"),
            "settled"
        );
    }

    async fn park(&self, record: &ParkRecord) {
        let batch = Batch::plain(
            record.aggregate,
            record.first_seq,
            record.last_seq,
            record.count,
        );
        Outbox::park(self, std::slice::from_ref(record), &batch)
            .await
            .expect("park");
    }
}

/// The IndexedDB log with every page stored the way the reader stores its own: kept in memory
/// for the views that follow ([`IdbOutbox::store_fetched_page`]). Its runs are never ended, so
/// every snapshot may use them (as a listener's refreshes do during a catch-up).
pub struct Keeping(pub IdbOutbox);

impl LocalLog for Keeping {
    type Page = Array;
    type Batch = JsValue;
    type Pending = JsValue;

    async fn cursor(&self, aggregate: AggregateRef) -> Result<Cursor, StoreError> {
        self.0.cursor(aggregate).await
    }
    async fn ensure_cursor(&self, aggregate: AggregateRef) -> Result<Cursor, StoreError> {
        self.0.ensure_cursor(aggregate).await
    }
    async fn logged(&self) -> Result<Vec<AggregateRef>, StoreError> {
        self.0.logged().await
    }
    async fn store_page(
        &self,
        aggregate: AggregateRef,
        batches: &Array,
        me: &str,
        expected: Cursor,
    ) -> Result<Option<Cursor>, StoreError> {
        // The page's text length, as the reader measures it.
        let size = js_sys::JSON::stringify(batches).map_or(u64::MAX, |t| u64::from(t.length()));
        self.0
            .store_fetched_page(aggregate, batches, me, expected, size)
            .await
    }
    async fn reset_log(
        &self,
        aggregate: AggregateRef,
        min_version: u64,
        gone: bool,
    ) -> Result<(), StoreError> {
        self.0.reset_log(aggregate, min_version, gone).await
    }
    async fn snapshot(
        &self,
        aggregate: AggregateRef,
        kept: Option<(u64, u64)>,
    ) -> Result<Snapshot, StoreError> {
        self.0.snapshot(aggregate, kept).await
    }
}

impl LogFixture for Keeping {
    fn page(&self, batches: &[LogBatch]) -> Array {
        self.0.page(batches)
    }
    fn read_batch(&self, batch: &JsValue) -> LogBatch {
        self.0.read_batch(batch)
    }
    fn pending_seqs(&self, pending: &[JsValue], above: u64) -> Vec<u64> {
        self.0.pending_seqs(pending, above)
    }
    async fn assign(&self, aggregate: AggregateRef, n: u64) -> u64 {
        self.0.assign(aggregate, n).await
    }
    async fn land(&self, aggregate: AggregateRef, through: u64) {
        self.0.land(aggregate, through).await
    }
    async fn park(&self, record: &ParkRecord) {
        LogFixture::park(&self.0, record).await
    }
}
