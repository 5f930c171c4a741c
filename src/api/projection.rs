//! A live projection (`client.project`): the app's `apply` folded over an aggregate's view,
//! kept up to date as the view changes, by the rule of [`crate::engine::read::fold`] — the
//! confirmed part folded once and kept, a new page folding only its new events, the pending
//! events re-applied on top at each change, a reset folding again from scratch.
//!
//! It is a native listener of the context's views, so it shares their one refresh per change
//! and the device's one change stream. `apply` is the app's code: what it throws is caught and
//! given as a `PROJECTION_FAILED` error (the thrown value its `cause`, the event its `event`)
//! in the snapshot, with the last good state; the kept confirmed state is dropped when the
//! throw was in the confirmed part, so the next change folds again from scratch. Nothing of it
//! reaches the views or the read side. No borrow is held while the app's code runs (`apply`,
//! listeners), so it may call anything of the client or the projection.

use std::cell::RefCell;
use std::rc::Rc;

use js_sys::{Array, Function, Object};
use wasm_bindgen::prelude::*;

use super::errors::ClientError;
use crate::browser::js;
use crate::browser::views::Shape;
use crate::engine::errors::ErrorCode;
use crate::engine::read::fold::{Folded, Plan, plan};

/// The app's fold.
pub(crate) struct Spec {
    /// The state before any event.
    pub initial: JsValue,
    /// `(state, event) => state`.
    pub apply: Function,
}

#[derive(Default)]
struct State {
    /// The confirmed part's state and what it covers.
    kept: Option<(Folded, JsValue)>,
    /// The last snapshot given.
    snapshot: Option<JsValue>,
    /// The last state folded without a failure.
    good: Option<JsValue>,
    /// The last failure (in the latest snapshot), for `value()`.
    failure: Option<JsValue>,
    listeners: Vec<(u32, Function)>,
    next_id: u32,
    /// `value()` calls waiting for the first snapshot: (resolve, reject).
    waiting: Vec<(Function, Function)>,
    closed: bool,
}

/// One live projection.
pub(crate) struct Projection {
    spec: Spec,
    state: RefCell<State>,
}

/// Where a fold stopped: the error to report.
struct Failed(JsValue);

impl Projection {
    /// A projection not yet fed a view.
    pub(crate) fn new(spec: Spec) -> Rc<Projection> {
        Rc::new(Projection {
            spec,
            state: RefCell::default(),
        })
    }

    /// `state = apply(state, event)`, the app's exception made a typed error.
    fn apply(&self, state: &JsValue, event: &JsValue) -> Result<JsValue, Failed> {
        self.spec
            .apply
            .call2(&JsValue::NULL, state, event)
            .map_err(|cause| {
                let mut error = ClientError::new(
                    ErrorCode::ProjectionFailed,
                    format!(
                        "the projection's apply threw on the {} event of type {} (clientSeq {}): {}",
                        js::get_string(event, "status").unwrap_or_default(),
                        js::get(event, "type").as_f64().unwrap_or(0.0),
                        js::get(event, "clientSeq").as_f64().unwrap_or(0.0),
                        crate::browser::fetch::error_text(&cause),
                    ),
                )
                .with("event", event.clone());
                error.cause = Some(cause);
                Failed(error.into())
            })
    }

    /// Takes in a new view (called by the views, no borrow of them held).
    pub(crate) fn view(&self, view: &JsValue, shape: Shape) {
        let (kept, closed) = {
            let s = self.state.borrow();
            (s.kept.clone(), s.closed)
        };
        if closed {
            return;
        }
        // A copy of the list (not of the events): the view object is shared with the app's
        // `subscribe` listeners, which run first and could replace `events` with a Proxy whose
        // `length` or elements throw (js-sys' `length()` and `get()` do not catch).
        let (events, len) = match js::own_array(&js::get(view, "events"), u32::MAX as usize) {
            js::Own::Got(got) => got,
            _ => (Array::new(), 0),
        };
        let confirmed = shape.confirmed.min(len);
        let (start, from) = match plan(
            kept.as_ref().map(|(f, _)| f),
            shape.base,
            confirmed,
            shape.version,
        ) {
            Plan::Extend { from } => (kept.map(|(_, s)| s).unwrap_or(JsValue::UNDEFINED), from),
            Plan::Refold => (self.spec.initial.clone(), 0),
        };
        // The confirmed part, from where the kept state stops.
        let mut state = start;
        let mut failure = None;
        for i in from..confirmed {
            match self.apply(&state, &events.get(i as u32)) {
                Ok(next) => state = next,
                Err(Failed(e)) => {
                    failure = Some(e);
                    break;
                }
            }
        }
        let confirmed_state = state.clone();
        let kept = match failure {
            None => Some((
                Folded {
                    base: shape.base,
                    confirmed,
                    version: shape.version,
                },
                confirmed_state.clone(),
            )),
            Some(_) => None,
        };
        // The pending events on top, at every change.
        if failure.is_none() {
            for i in confirmed..len {
                match self.apply(&state, &events.get(i as u32)) {
                    Ok(next) => state = next,
                    Err(Failed(e)) => {
                        failure = Some(e);
                        break;
                    }
                }
            }
        }
        let (listeners, waiting, snapshot) = {
            let mut s = self.state.borrow_mut();
            if s.closed {
                return;
            }
            s.kept = kept;
            let shown = match &failure {
                None => {
                    s.good = Some(state.clone());
                    state
                }
                Some(_) => s.good.clone().unwrap_or_else(|| self.spec.initial.clone()),
            };
            let o = Object::new();
            js::set(&o, "state", shown);
            js::set(&o, "version", js::get(view, "version"));
            js::set(&o, "pending", js::get(view, "pending"));
            js::set(&o, "fromCache", js::get(view, "fromCache"));
            js::set(&o, "error", failure.clone().unwrap_or(JsValue::NULL));
            let snapshot: JsValue = o.into();
            s.snapshot = Some(snapshot.clone());
            s.failure = failure;
            let listeners: Vec<Function> = s.listeners.iter().map(|(_, f)| f.clone()).collect();
            (listeners, std::mem::take(&mut s.waiting), snapshot)
        };
        for (resolve, reject) in waiting {
            self.settle(&resolve, &reject);
        }
        for listener in listeners {
            if let Err(e) = listener.call1(&JsValue::NULL, &snapshot) {
                web_sys::console::error_2(
                    &"celeriant-sync: a projection listener threw".into(),
                    &e,
                );
            }
        }
    }

    /// Resolves with the current state, or rejects with the current failure.
    fn settle(&self, resolve: &Function, reject: &Function) {
        let (snapshot, failure) = {
            let s = self.state.borrow();
            (s.snapshot.clone(), s.failure.clone())
        };
        let _ = match (failure, snapshot) {
            (Some(e), _) => reject.call1(&JsValue::NULL, &e),
            (None, Some(snapshot)) => resolve.call1(&JsValue::NULL, &js::get(&snapshot, "state")),
            (None, None) => Ok(JsValue::UNDEFINED),
        };
    }

    /// The latest snapshot (`null` before the first view).
    pub(crate) fn current(&self) -> JsValue {
        self.state
            .borrow()
            .snapshot
            .clone()
            .unwrap_or(JsValue::NULL)
    }

    /// The current state once there is one; rejects with the current failure, or `CLOSED`.
    pub(crate) fn value(self: &Rc<Self>) -> js_sys::Promise {
        let this = self.clone();
        js_sys::Promise::new(&mut |resolve, reject| {
            let (ready, closed) = {
                let s = this.state.borrow();
                (s.snapshot.is_some(), s.closed)
            };
            if ready {
                this.settle(&resolve, &reject);
            } else if closed {
                let _ = reject.call1(&JsValue::NULL, &ClientError::closed().into());
            } else {
                this.state.borrow_mut().waiting.push((resolve, reject));
            }
        })
    }

    /// Adds a listener, called with the current snapshot at once (if there is one) and at
    /// every change; returns its id.
    pub(crate) fn listen(&self, listener: Function) -> u32 {
        let (id, now) = {
            let mut s = self.state.borrow_mut();
            s.next_id += 1;
            let id = s.next_id;
            if !s.closed {
                s.listeners.push((id, listener.clone()));
            }
            (id, s.snapshot.clone().filter(|_| !s.closed))
        };
        if let Some(snapshot) = now {
            if let Err(e) = listener.call1(&JsValue::NULL, &snapshot) {
                web_sys::console::error_2(
                    &"celeriant-sync: a projection listener threw".into(),
                    &e,
                );
            }
        }
        id
    }

    /// Removes a listener.
    pub(crate) fn unlisten(&self, id: u32) {
        self.state.borrow_mut().listeners.retain(|(i, _)| *i != id);
    }

    /// Stops for good: no more listener calls; `value()` waiting rejects with `CLOSED`.
    pub(crate) fn close(&self) {
        let waiting = {
            let mut s = self.state.borrow_mut();
            s.closed = true;
            s.listeners.clear();
            s.kept = None;
            std::mem::take(&mut s.waiting)
        };
        let closed: JsValue = ClientError::closed().into();
        for (_, reject) in waiting {
            let _ = reject.call1(&JsValue::NULL, &closed);
        }
    }
}

/// Reads `{ initial, apply }` (unknown keys refused, as `open`'s options are).
pub(crate) fn parse_spec(value: &JsValue) -> Result<Spec, ClientError> {
    let bad = |m: &str| ClientError::new(ErrorCode::InvalidOptions, format!("project: {m}"));
    if !value.is_object() {
        return Err(bad("the projection must be an object { initial, apply }"));
    }
    let object: &Object = value.unchecked_ref();
    let own = js::own_keys(value).ok_or_else(|| bad("its keys cannot be read"))?;
    for key in own {
        if key != "initial" && key != "apply" {
            return Err(bad(&format!(
                "unknown key \"{key}\" (only initial and apply)"
            )));
        }
    }
    if !js_sys::Reflect::has(object, &"initial".into()).unwrap_or(false) {
        return Err(bad("initial is required (the state before any event)"));
    }
    let read = |key: &str| {
        super::input::read(value, key, ErrorCode::InvalidOptions)
            .map_err(|_| bad(&format!("reading {key} threw")))
    };
    let apply = read("apply")?
        .dyn_into::<Function>()
        .map_err(|_| bad("apply must be a function (state, event) => state"))?;
    Ok(Spec {
        initial: read("initial")?,
        apply,
    })
}

/// The object `project` returns: `current` (a getter), `value()`, `subscribe(listener)` and
/// `close()` over `projection`; `stop` ends its subscription to the views (called once, by
/// `close`).
pub(crate) fn to_js(projection: Rc<Projection>, stop: Box<dyn FnOnce()>) -> JsValue {
    let o = Object::new();
    let p = projection.clone();
    let current = Closure::<dyn Fn() -> JsValue>::new(move || p.current());
    let descriptor = Object::new();
    js::set(&descriptor, "get", current.into_js_value());
    js::set(&descriptor, "enumerable", true);
    Object::define_property(&o, &"current".into(), &descriptor);
    let p = projection.clone();
    let value = Closure::<dyn Fn() -> js_sys::Promise>::new(move || p.value());
    js::set(&o, "value", value.into_js_value());
    let p = projection.clone();
    let subscribe = Closure::<dyn Fn(Function) -> JsValue>::new(move |listener: Function| {
        let id = p.listen(listener);
        let p = p.clone();
        Closure::<dyn Fn()>::new(move || p.unlisten(id)).into_js_value()
    });
    js::set(&o, "subscribe", subscribe.into_js_value());
    let stop = RefCell::new(Some(stop));
    let close = Closure::<dyn Fn()>::new(move || {
        if let Some(stop) = stop.borrow_mut().take() {
            stop();
        }
        projection.close();
    });
    js::set(&o, "close", close.into_js_value());
    o.into()
}
