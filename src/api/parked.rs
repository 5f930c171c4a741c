//! Parked events: listing them with why they were parked, and discarding an aggregate's (the
//! app decided they cannot be sent), as methods of [`SyncClient`] (a file of their own so that
//! `client.rs` stays readable).

use js_sys::{Array, Promise};
use wasm_bindgen::prelude::*;

use super::client::{SyncClient, promise};
use super::{input, output};
use crate::engine::model::Batch;
use crate::engine::outbox::Outbox;

#[wasm_bindgen]
impl SyncClient {
    /// Every parked event with why it was parked, in aggregate and sequence order.
    #[wasm_bindgen(js_name = parkedEvents, unchecked_return_type = "Promise<ParkedEvent[]>")]
    pub fn parked_events(&self) -> Promise {
        let inner = self.inner();
        promise(async move {
            inner.check_open()?;
            let out = Array::new();
            for record in inner.outbox().parked().await? {
                let events = Array::new();
                let batch = Batch::plain(
                    record.aggregate,
                    record.first_seq,
                    record.last_seq,
                    record.count,
                );
                for event in inner.outbox().read(&batch).await? {
                    events.push(&output::parked_event(&event, &record));
                }
                if let Some(encryption) = &inner.encryption {
                    encryption
                        .decrypt_all(record.aggregate, events.clone())
                        .await;
                }
                for event in events.iter() {
                    out.push(&event);
                }
            }
            Ok(out.into())
        })
    }

    /// Drops an aggregate's parked events (the app decided they cannot be sent) and lets its
    /// later events sync. Resolves with how many events were dropped (0 if it was not parked).
    #[wasm_bindgen(js_name = discardParked, unchecked_return_type = "Promise<number>")]
    pub fn discard_parked(
        &self,
        #[wasm_bindgen(unchecked_param_type = "AggregateRef")] aggregate: JsValue,
    ) -> Promise {
        let inner = self.inner();
        let aggregate = input::aggregate(&aggregate);
        promise(async move {
            inner.check_open()?;
            let aggregate = aggregate?;
            let discarded = inner.outbox().discard_parked(aggregate).await?;
            let removed = discarded.removed;
            inner.runtime.discarded(aggregate, discarded);
            Ok(JsValue::from(removed))
        })
    }
}
