//! The client's DOM events: `status`, `synced` and `parked`, each a `CustomEvent` on the
//! client's `EventTarget` whose `detail` is a plain object (shapes in [`crate::browser::convert`],
//! types in the `.d.ts`).

use wasm_bindgen::JsValue;
use web_sys::{CustomEvent, CustomEventInit, EventTarget};

use crate::browser::convert::{parked_to_js, status_to_js, synced_to_js};
use crate::engine::model::ParkRecord;
use crate::engine::status::{Observer, Status, SyncedNotice};

/// Dispatches the client's events.
pub(crate) struct DomEvents {
    /// Where listeners are registered.
    pub target: EventTarget,
}

impl DomEvents {
    /// Dispatches a `CustomEvent` of `kind` with `detail`.
    pub(crate) fn dispatch(&self, kind: &str, detail: JsValue) {
        let init = CustomEventInit::new();
        init.set_detail(&detail);
        if let Ok(event) = CustomEvent::new_with_event_init_dict(kind, &init) {
            // A listener's exception is reported by the platform, never thrown into the drain;
            // and the platform's `dispatchEvent` is called, not the target's (listeners reach
            // the target and could replace it, with a result whose `valueOf` throws).
            crate::browser::js::dispatch_on(&self.target, &event);
        }
    }
}

impl Observer for DomEvents {
    fn status(&self, status: &Status) {
        self.dispatch("status", status_to_js(status));
    }

    fn synced(&self, notice: &SyncedNotice) {
        self.dispatch("synced", synced_to_js(notice));
    }

    fn parked(&self, record: &ParkRecord) {
        self.dispatch("parked", parked_to_js(record));
    }
}
