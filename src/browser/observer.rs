//! Turns the engine's notifications into DOM events on the client's `EventTarget`:
//! `status`, `synced` and `parked`, each a `CustomEvent` whose `detail` is a plain object.

use wasm_bindgen::JsValue;
use web_sys::{CustomEvent, CustomEventInit, EventTarget};

use crate::api::output;
use crate::engine::model::ParkRecord;
use crate::engine::status::{Observer, Status, SyncedNotice};

/// Dispatches the client's events.
pub struct DomObserver {
    /// Where listeners are registered.
    pub target: EventTarget,
}

impl DomObserver {
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
        self.dispatch("status", output::status(status));
    }

    fn synced(&self, notice: &SyncedNotice) {
        self.dispatch("synced", output::synced(notice));
    }

    fn parked(&self, record: &ParkRecord) {
        self.dispatch("parked", output::parked(record));
    }
}
