//! How the local log's conformance suite ([`crate::engine::read::log_conformance`]) drives the
//! IndexedDB log: its pages as the gateway's parsed JSON, its records read back, and the device
//! side played through the outbox itself (append, pin, settle, park). Used by
//! `tests/browser_read_log.rs` only; nothing of it is exported to JavaScript.

use js_sys::{Array, Object};
use wasm_bindgen::JsValue;

use super::outbox::IdbOutbox;
use super::records::span;
use crate::browser::js;
use crate::engine::conformance::event;
use crate::engine::model::{AggregateRef, Batch, ParkRecord};
use crate::engine::outbox::Outbox;
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
