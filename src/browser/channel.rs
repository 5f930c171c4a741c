//! Status in every tab: a `BroadcastChannel` per database carries what the drainer sees to the
//! other contexts (tabs, workers) of the same origin, and their appends back to it.
//!
//! Messages are JSON strings ([`Message`]). The drainer posts its status, `synced` and `parked`
//! notices and a heartbeat; followers post `appended` and `discarded` so the drainer wakes and
//! counts right, and `hello` to ask for the current status.

use serde::{Deserialize, Serialize};
use wasm_bindgen::prelude::*;
use web_sys::{BroadcastChannel, MessageEvent};

use crate::engine::model::{AggregateRef, ParkRecord};
use crate::engine::status::{Status, SyncedNotice};

/// One message between the contexts of a database.
// Externally tagged (serde's default): internally tagged enums buffer their input through
// serde's `Content`, which costs kilobytes of wasm for nothing here.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub enum Message {
    /// The drainer's status changed.
    Status(Status),
    /// Events landed.
    Synced(SyncedNotice),
    /// An aggregate was parked.
    Parked(ParkRecord),
    /// A follower appended `n` events.
    Appended {
        /// How many.
        n: u64,
    },
    /// A context discarded an aggregate's parked events.
    Discarded {
        /// The aggregate.
        aggregate: AggregateRef,
        /// How many events were dropped.
        removed: u32,
    },
    /// The drainer is alive.
    Heartbeat,
    /// A new context asks the drainer for its status.
    Hello,
}

/// The channel of one database; closed when dropped.
pub struct Channel {
    channel: BroadcastChannel,
    _on_message: Closure<dyn FnMut(MessageEvent)>,
}

impl Channel {
    /// Opens the channel of `database`, calling `handle` for every message from another context.
    /// `None` where `BroadcastChannel` does not exist.
    pub fn open(database: &str, mut handle: impl FnMut(Message) + 'static) -> Option<Channel> {
        let channel = BroadcastChannel::new(&format!("celeriant-sync:{database}")).ok()?;
        let on_message = Closure::<dyn FnMut(MessageEvent)>::new(move |event: MessageEvent| {
            if let Some(text) = event.data().as_string()
                && let Ok(message) = serde_json::from_str::<Message>(&text)
            {
                handle(message);
            }
        });
        channel.set_onmessage(Some(on_message.as_ref().unchecked_ref()));
        Some(Channel {
            channel,
            _on_message: on_message,
        })
    }

    /// Posts a message to every other context of the database.
    pub fn post(&self, message: &Message) {
        if let Ok(text) = serde_json::to_string(message) {
            let _ = self.channel.post_message(&JsValue::from_str(&text));
        }
    }
}

impl Drop for Channel {
    fn drop(&mut self) {
        self.channel.set_onmessage(None);
        self.channel.close();
    }
}
