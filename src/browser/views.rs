//! The views of one context: what `subscribe` listeners and `read` get — the confirmed log of an
//! aggregate in server order, then this device's pending events in sequence order
//! ([`crate::engine::read::view`]'s rule), built from one snapshot of the database.
//!
//! Every context keeps its own views and refreshes them when told something changed (a page
//! stored, a reset, an append, a park or discard — in this context or, over the channel, in
//! another). Refreshes of one aggregate run one at a time (a refresh asked for meanwhile runs
//! once after), so a listener never gets an older view after a newer one. Confirmed events are
//! turned into JS objects once and kept; a refresh reads only the batches above what this
//! context has (unless the log was reset). A listener is called only when the view changed.
//!
//! A listener is the app's function (`subscribe`) or the client's own (a projection,
//! [`super::projection`]), which also gets the view's [`Shape`]: which read of the confirmed
//! log it extends and how many of its events are confirmed, so it folds only what is new.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use js_sys::{Array, Function, Object};
use wasm_bindgen::prelude::*;

use super::convert::aggregate_to_js;
use super::idb::log::Snapshot;
use super::idb::outbox::IdbOutbox;
use super::js;
use crate::engine::model::AggregateRef;
use crate::engine::outbox::StoreError;
use crate::engine::read::log::LocalLog;
use crate::engine::sorted::SortedMap;

#[wasm_bindgen(module = "/src/browser/glue.js")]
extern "C" {
    #[wasm_bindgen(js_name = pushConfirmed, catch)]
    fn push_confirmed(out: &Array, batches: &Array) -> Result<(), JsValue>;
    #[wasm_bindgen(js_name = pushPending, catch)]
    fn push_pending(
        out: &Array,
        records: &Array,
        above: f64,
        client_id: &str,
        parked_from: f64,
        parked_code: u32,
        parked_message: &str,
    ) -> Result<(), JsValue>;
}

/// What a listener was last given, to tell whether a view changed.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Signature {
    epoch: u64,
    version: u64,
    pending: usize,
    first_pending: u64,
    last_pending: u64,
    parked: Option<(u64, u32)>,
    from_cache: bool,
}

/// What a native listener learns with each view besides the view itself.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Shape {
    /// Which read of the confirmed log the view extends: a new base at every read from scratch
    /// (the first one, a reset).
    pub base: u64,
    /// How many of the view's events are confirmed (they come first).
    pub confirmed: usize,
    /// The view's version.
    pub version: u64,
    /// How many events the view was built with (confirmed, then pending): what a projection
    /// copies of `events` at most, whatever a listener did to the list.
    pub total: usize,
}

/// Decrypts, in place, the view events of an aggregate that are encrypted (`open`'s
/// `encryption`, in the API layer); never fails: an event it cannot decrypt is flagged on it.
pub(crate) type Decryptor =
    Rc<dyn Fn(AggregateRef, Array) -> std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>>;

/// A native listener: the view and its shape.
pub(crate) type NativeListener = Rc<dyn Fn(&JsValue, Shape)>;

/// Who a view is delivered to.
#[derive(Clone)]
pub(crate) enum Callback {
    /// The app's listener (`subscribe`).
    Js(Function),
    /// The client's own (a projection).
    Native(NativeListener),
}

struct Listener {
    id: u32,
    function: Callback,
    /// The view generation this listener was last called with.
    given: u64,
}

#[derive(Default)]
struct View {
    listeners: Vec<Listener>,
    /// `(epoch, version)` of the confirmed events kept.
    kept: Option<(u64, u64)>,
    /// The confirmed events kept, as one JS array: a view is `concat`ed from it in JS, not
    /// pushed event by event across the boundary (issue 28).
    confirmed: Array,
    /// The base of `confirmed` (see [`Shape::base`]).
    base: u64,
    signature: Option<Signature>,
    /// The latest view, its generation and shape.
    latest: Option<(JsValue, u64, Shape)>,
    refreshing: bool,
    again: bool,
}

/// The views of one context.
pub(crate) struct Views {
    outbox: Rc<IdbOutbox>,
    me: String,
    views: RefCell<SortedMap<AggregateRef, View>>,
    next_id: Cell<u32>,
    /// The last base given out (bases are unique within the context).
    bases: Cell<u64>,
    /// Whether views are served from a cache that may be behind the server.
    from_cache: Box<dyn Fn() -> bool>,
    /// Decrypts events as they are turned into JS objects (set once, at open).
    decrypt: RefCell<Option<Decryptor>>,
}

impl Views {
    /// Decrypts every view built from now on (set at open, before any view is built).
    pub(crate) fn set_decryptor(&self, decrypt: Decryptor) {
        *self.decrypt.borrow_mut() = Some(decrypt);
    }

    /// The views of a context whose device writes as `me`.
    pub(crate) fn new(
        outbox: Rc<IdbOutbox>,
        me: String,
        from_cache: Box<dyn Fn() -> bool>,
    ) -> Rc<Views> {
        Rc::new(Views {
            outbox,
            me,
            views: RefCell::default(),
            next_id: Cell::new(1),
            bases: Cell::new(0),
            from_cache,
            decrypt: RefCell::default(),
        })
    }

    /// What this context subscribes to, with how many listeners each.
    pub(crate) fn watched(&self) -> Vec<(AggregateRef, u32)> {
        self.views
            .borrow()
            .iter()
            .filter(|(_, v)| !v.listeners.is_empty())
            .map(|(a, v)| (*a, v.listeners.len() as u32))
            .collect()
    }

    /// Adds a listener; it gets the current view soon (from the local log), then every change.
    /// Returns its id.
    pub(crate) fn subscribe(self: &Rc<Self>, aggregate: AggregateRef, function: Callback) -> u32 {
        let id = self.next_id.get();
        self.next_id.set(id + 1);
        let first = {
            let mut views = self.views.borrow_mut();
            let view = views.get_or_default(aggregate);
            view.listeners.push(Listener {
                id,
                function,
                given: 0,
            });
            view.listeners.len() == 1
        };
        let this = self.clone();
        super::env::spawn(async move {
            if first {
                // From now on the drain keeps this aggregate's landed events until the log
                // holds them, so nothing shown as pending can vanish before it is confirmed.
                let _ = this.outbox.ensure_cursor(aggregate).await;
            }
            if this.has_latest(&aggregate) {
                this.deliver(aggregate);
            } else {
                this.refresh(aggregate).await;
            }
        });
        id
    }

    fn has_latest(&self, aggregate: &AggregateRef) -> bool {
        self.views
            .borrow()
            .get(aggregate)
            .is_some_and(|v| v.latest.is_some() && !v.refreshing)
    }

    /// Removes a listener.
    pub(crate) fn unsubscribe(&self, aggregate: AggregateRef, id: u32) {
        let mut views = self.views.borrow_mut();
        let Some(view) = views.get_mut(&aggregate) else {
            return;
        };
        view.listeners.retain(|l| l.id != id);
        if view.listeners.is_empty() && !view.refreshing {
            views.remove(&aggregate);
        }
    }

    /// Something about the aggregate changed: rebuild its view if anyone here watches it.
    pub(crate) fn changed(self: &Rc<Self>, aggregate: AggregateRef) {
        if !self.views.borrow().contains_key(&aggregate) {
            return;
        }
        let this = self.clone();
        super::env::spawn(async move { this.refresh(aggregate).await });
    }

    /// Rebuilds the aggregate's view (one refresh at a time; one more if asked meanwhile).
    async fn refresh(self: &Rc<Self>, aggregate: AggregateRef) {
        {
            let mut views = self.views.borrow_mut();
            let view = views.get_or_default(aggregate);
            if view.refreshing {
                view.again = true;
                return;
            }
            view.refreshing = true;
        }
        loop {
            let kept = self.views.borrow().get(&aggregate).and_then(|v| v.kept);
            let built = self.build(aggregate, kept).await;
            let again = {
                let mut views = self.views.borrow_mut();
                let Some(view) = views.get_mut(&aggregate) else {
                    return;
                };
                if let Ok(built) = built {
                    if built.from == 0 {
                        self.bases.set(self.bases.get() + 1);
                        view.base = self.bases.get();
                    }
                    view.apply(built, (self.from_cache)());
                }
                let again = std::mem::take(&mut view.again);
                if !again {
                    view.refreshing = false;
                    if view.listeners.is_empty() {
                        views.remove(&aggregate);
                        return;
                    }
                }
                again
            };
            if !again {
                break;
            }
        }
        self.deliver(aggregate);
    }

    /// Reads the snapshot and turns what is new into JS objects.
    async fn build(
        &self,
        aggregate: AggregateRef,
        kept: Option<(u64, u64)>,
    ) -> Result<Built, StoreError> {
        let snapshot: Snapshot = self.outbox.snapshot(aggregate, kept).await?;
        let confirmed = Array::new();
        let unreadable = |e: JsValue| {
            StoreError::Corrupt(format!(
                "a stored event cannot be shown: {}",
                super::fetch::error_text(&e)
            ))
        };
        push_confirmed(&confirmed, &snapshot.batches.iter().collect()).map_err(unreadable)?;
        let pending = Array::new();
        let records: Array = snapshot.pending.iter().collect();
        let (parked_from, code, message) = match &snapshot.parked {
            Some(p) => (p.first_seq as f64, p.code, p.message.as_str()),
            None => (0.0, 0, ""),
        };
        let above = snapshot.cursor.mine as f64;
        push_pending(
            &pending,
            &records,
            above,
            &self.me,
            parked_from,
            code,
            message,
        )
        .map_err(unreadable)?;
        // Decrypted once as they are made: confirmed events are kept (and so decrypted once).
        let decrypt = self.decrypt.borrow().clone();
        if let Some(decrypt) = decrypt {
            decrypt(aggregate, confirmed.clone()).await;
            decrypt(aggregate, pending.clone()).await;
        }
        let seqs: Vec<u64> = pending
            .iter()
            .filter_map(|v| js::get_u64(&v, "clientSeq"))
            .collect();
        Ok(Built {
            aggregate,
            from: snapshot.from,
            signature: Signature {
                epoch: snapshot.cursor.epoch,
                version: snapshot.cursor.version,
                pending: seqs.len(),
                first_pending: seqs.first().copied().unwrap_or(0),
                last_pending: seqs.last().copied().unwrap_or(0),
                parked: snapshot.parked.as_ref().map(|p| (p.first_seq, p.code)),
                from_cache: false,
            },
            confirmed,
            pending,
        })
    }

    /// Calls every listener that has not been given the latest view.
    fn deliver(&self, aggregate: AggregateRef) {
        let calls: Vec<(Callback, JsValue, Shape)> = {
            let mut views = self.views.borrow_mut();
            let Some(view) = views.get_mut(&aggregate) else {
                return;
            };
            let Some((latest, generation, shape)) = view.latest.clone() else {
                return;
            };
            view.listeners
                .iter_mut()
                .filter(|l| l.given < generation)
                .map(|l| {
                    l.given = generation;
                    (l.function.clone(), latest.clone(), shape)
                })
                .collect()
        };
        // No borrow held: a listener may subscribe, unsubscribe or read.
        for (callback, view, shape) in calls {
            match callback {
                Callback::Js(function) => {
                    if let Err(e) = function.call1(&JsValue::NULL, &view) {
                        web_sys::console::error_2(
                            &"celeriant-sync: a subscribe listener threw".into(),
                            &e,
                        );
                    }
                }
                Callback::Native(native) => native(&view, shape),
            }
        }
    }

    /// The current view of an aggregate, built now (for `read`).
    pub(crate) async fn read(
        &self,
        aggregate: AggregateRef,
        from_cache: bool,
    ) -> Result<JsValue, StoreError> {
        let built = self.build(aggregate, None).await?;
        let mut view = View::default();
        view.apply(built, from_cache);
        Ok(view.latest.map(|(v, _, _)| v).unwrap_or(JsValue::NULL))
    }
}

/// A view just read, not yet applied.
struct Built {
    aggregate: AggregateRef,
    /// The version the confirmed batches start after (0: from scratch).
    from: u64,
    signature: Signature,
    confirmed: Array,
    pending: Array,
}

impl View {
    /// Takes in a view just read; a new generation when it differs from the last.
    fn apply(&mut self, built: Built, from_cache: bool) {
        let Built {
            aggregate,
            from,
            mut signature,
            confirmed,
            pending,
        } = built;
        signature.from_cache = from_cache;
        if from == 0 {
            self.confirmed = confirmed;
        } else {
            self.confirmed = self.confirmed.concat(&confirmed);
        }
        self.kept = Some((signature.epoch, signature.version));
        if self.signature.as_ref() == Some(&signature) && self.latest.is_some() {
            return;
        }
        let generation = self.latest.as_ref().map_or(1, |(_, g, _)| g + 1);
        let shape = Shape {
            base: self.base,
            confirmed: self.confirmed.length() as usize,
            version: signature.version,
            total: self.confirmed.length() as usize + pending.length() as usize,
        };
        let pending_count = pending.length();
        let events = self.confirmed.concat(&pending);
        let o = Object::new();
        js::set(&o, "aggregate", aggregate_to_js(&aggregate));
        js::set(&o, "version", signature.version as f64);
        js::set(&o, "events", events);
        js::set(&o, "pending", pending_count);
        js::set(&o, "fromCache", from_cache);
        self.signature = Some(signature);
        self.latest = Some((o.into(), generation, shape));
    }
}
