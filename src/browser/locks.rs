//! One drainer per device: the Web Locks API elects the context that drains a database.
//!
//! Every `SyncClient` on a database requests the same exclusive lock
//! (`celeriant-sync:drain:<database>`); the browser grants it to one context at a time and
//! releases it when that context closes, crashes, reloads or is discarded, at which point the
//! next queued request is granted (takeover within milliseconds).
//!
//! A frozen holder keeps its lock. A follower that hears nothing from the drainer for a while
//! and has work pending takes the lock over (`steal`); the old holder learns it lost the lock
//! from its own request's rejection and, before every send, confirms with
//! `navigator.locks.query()` that the lock's holder is still itself. The window that remains: a
//! request the frozen tab had already handed to `fetch` before it froze. That request is the
//! pinned batch, byte for byte what the successor resends, so Celeriant's idempotency makes it
//! harmless (2013/2002); and the pin itself is only ever changed by compare-and-set.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use js_sys::{Array, Function, Object, Promise, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

use super::global;

/// What a lock request knows about its lock.
#[derive(Default)]
pub(crate) struct LockState {
    name: String,
    held: Cell<bool>,
    lost: Cell<bool>,
    /// The lock manager's id of this context, learnt when the lock was granted.
    holder: RefCell<Option<String>>,
}

impl LockState {
    /// Whether this context holds the lock now: granted, not stolen, and `query()` agrees.
    pub(crate) async fn still_held(&self) -> bool {
        if !self.held.get() || self.lost.get() {
            return false;
        }
        let Some(mine) = self.holder.borrow().clone() else {
            return true;
        };
        match holders(&self.name).await {
            Some(holders) => {
                let ok = holders.contains(&mine);
                if !ok {
                    self.lost.set(true);
                }
                ok
            }
            None => true,
        }
    }
}

fn locks() -> Option<JsValue> {
    global::property("navigator")
        .and_then(|n| Reflect::get(&n, &"locks".into()).ok())
        .filter(|l| !l.is_undefined() && !l.is_null())
}

/// Whether the Web Locks API is available here.
pub(crate) fn supported() -> bool {
    locks().is_some()
}

/// The entries of the lock manager's `query()` snapshot's list `which` (`"held"` or
/// `"pending"`) for the lock `name`; `None` where Web Locks (or `query`) do not exist.
async fn snapshot(which: &str, name: &str) -> Option<Vec<JsValue>> {
    let locks = locks()?;
    let query: Function = Reflect::get(&locks, &"query".into())
        .ok()?
        .dyn_into()
        .ok()?;
    let snapshot = JsFuture::from(query.call0(&locks).ok()?.dyn_into::<Promise>().ok()?)
        .await
        .ok()?;
    let list: Array = Reflect::get(&snapshot, &which.into())
        .ok()?
        .dyn_into()
        .ok()?;
    Some(
        list.iter()
            .filter(|l| {
                Reflect::get(l, &"name".into())
                    .ok()
                    .and_then(|n| n.as_string())
                    .as_deref()
                    == Some(name)
            })
            .collect(),
    )
}

/// The `clientId`s holding the lock `name` now.
async fn holders(name: &str) -> Option<Vec<String>> {
    Some(
        snapshot("held", name)
            .await?
            .iter()
            .filter_map(|l| {
                Reflect::get(l, &"clientId".into())
                    .ok()
                    .and_then(|c| c.as_string())
            })
            .collect(),
    )
}

/// A request for the drain lock: pending until granted, then held until released.
pub(crate) struct DrainLock {
    state: Rc<LockState>,
    release: Rc<RefCell<Option<Function>>>,
    abort: Option<web_sys::AbortController>,
}

impl DrainLock {
    /// The lock's name for a database.
    pub(crate) fn name(database: &str) -> String {
        format!("celeriant-sync:drain:{database}")
    }

    /// Requests the lock. `on_granted` runs when this context gets it, `on_lost` if it is
    /// taken away (stolen) after that, `on_failed` if the request fails or is withdrawn before
    /// it is granted. `steal` takes it from its current holder at once.
    pub(crate) fn request(
        name: &str,
        steal: bool,
        on_granted: impl FnOnce() + 'static,
        on_lost: impl FnOnce() + 'static,
        on_failed: impl FnOnce() + 'static,
    ) -> Result<DrainLock, JsValue> {
        let locks = locks().ok_or_else(|| JsValue::from_str("navigator.locks is not available"))?;
        let state = Rc::new(LockState {
            name: name.to_owned(),
            ..LockState::default()
        });
        let release: Rc<RefCell<Option<Function>>> = Rc::default();

        // One-shot callbacks owned by the JS side: the browser may call them after this
        // `DrainLock` is gone (an aborted request rejects asynchronously).
        let granted: JsValue = {
            let (state, release) = (state.clone(), release.clone());
            Closure::once_into_js(move |_lock: JsValue| -> Promise {
                // Held until `release` resolves this promise.
                let held = Promise::new(&mut |resolve, _reject| {
                    *release.borrow_mut() = Some(resolve);
                });
                state.held.set(true);
                let learn = state.clone();
                super::env::spawn(async move {
                    if let Some(ids) = holders(&learn.name).await
                        && ids.len() == 1
                    {
                        *learn.holder.borrow_mut() = ids.into_iter().next();
                    }
                });
                on_granted();
                held
            })
        };
        let failed: JsValue = {
            let state = state.clone();
            Closure::once_into_js(move |_error: JsValue| {
                // Rejected: stolen (AbortError) while held, or aborted while pending.
                let was_held = state.held.replace(false);
                state.lost.set(true);
                if was_held {
                    on_lost();
                } else {
                    on_failed();
                }
            })
        };

        let options = Object::new();
        Reflect::set(&options, &"mode".into(), &"exclusive".into())?;
        let abort = if steal {
            Reflect::set(&options, &"steal".into(), &JsValue::TRUE)?;
            None
        } else {
            let controller = web_sys::AbortController::new()?;
            Reflect::set(&options, &"signal".into(), &controller.signal())?;
            Some(controller)
        };
        let request: Function = Reflect::get(&locks, &"request".into())?.dyn_into()?;
        let pending: Promise = request
            .call3(&locks, &name.into(), &options, &granted)?
            .dyn_into()?;
        let catch: Function = Reflect::get(&pending, &"catch".into())?.dyn_into()?;
        catch.call1(&pending, &failed)?;
        Ok(DrainLock {
            state,
            release,
            abort,
        })
    }

    /// What this request knows about its lock (shared with the drain loop's `may_send`).
    pub(crate) fn state(&self) -> Rc<LockState> {
        self.state.clone()
    }

    /// Releases the lock, or withdraws the request if it is still pending.
    pub(crate) fn release(&self) {
        self.state.held.set(false);
        if let Some(resolve) = self.release.borrow_mut().take() {
            let _ = resolve.call0(&JsValue::UNDEFINED);
        }
        if let Some(abort) = &self.abort {
            abort.abort();
        }
    }
}

impl Drop for DrainLock {
    fn drop(&mut self) {
        self.release();
    }
}

impl LockState {
    /// The lock manager's id of this context, once learnt (after the grant).
    pub(crate) fn holder_id(&self) -> Option<String> {
        self.holder.borrow().clone()
    }
}

/// The lock manager's view of lock `name`, for the inspector: the `clientId`s holding it and
/// how many requests wait for it. `None` where Web Locks (or `query`) do not exist.
pub(crate) async fn query(name: &str) -> Option<(Vec<String>, u32)> {
    let held = holders(name).await?;
    let waiting = snapshot("pending", name).await?.len();
    Some((held, waiting as u32))
}
