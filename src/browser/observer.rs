//! Turns the engine's notifications into DOM events on the client's `EventTarget`:
//! `status`, `synced` and `parked`, each a `CustomEvent` whose `detail` is a plain object; in
//! the draining context, also relays them to the other contexts over the database's channel.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use wasm_bindgen::JsValue;
use web_sys::{CustomEvent, CustomEventInit, EventTarget};

use super::channel::{Channel, Message};
use crate::api::output;
use crate::engine::model::ParkRecord;
use crate::engine::status::{Observer, Status, SyncedNotice};

/// Dispatches the client's events.
pub struct DomObserver {
    /// Where listeners are registered.
    pub target: EventTarget,
    /// The channel to the other contexts (set once it is open).
    pub relay: Rc<RefCell<Option<Channel>>>,
    /// Whether this context drains (only the drainer relays).
    pub draining: Rc<Cell<bool>>,
}

impl DomObserver {
    fn relay(&self, message: Message) {
        if self.draining.get()
            && let Some(channel) = self.relay.borrow().as_ref()
        {
            channel.post(&message);
        }
    }

    fn dispatch(&self, kind: &str, detail: JsValue) {
        let init = CustomEventInit::new();
        init.set_detail(&detail);
        if let Ok(event) = CustomEvent::new_with_event_init_dict(kind, &init) {
            // A listener's exception is reported by the platform, never thrown into the loop.
            let _ = self.target.dispatch_event(&event);
        }
    }
}

impl Observer for DomObserver {
    fn status(&self, status: &Status) {
        self.relay(Message::Status(status.clone()));
        self.dispatch("status", output::status(status));
    }

    fn synced(&self, notice: &SyncedNotice) {
        self.relay(Message::Synced(notice.clone()));
        self.dispatch("synced", output::synced(notice));
    }

    fn parked(&self, record: &ParkRecord) {
        self.relay(Message::Parked(record.clone()));
        self.dispatch("parked", output::parked(record));
    }
}
