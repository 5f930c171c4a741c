//! The engine's [`Env`] in a browser: `Date.now()`, `setTimeout` (via gloo-timers, cleared when
//! dropped), `navigator.onLine`, `Math.random()`; plus the `online` listener that wakes the loop,
//! and [`spawn`], the one way this layer starts a background task.

use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use gloo_timers::future::TimeoutFuture;
use wasm_bindgen::prelude::*;

use super::global;
use super::locks::LockState;
use super::network::NetworkSwitch;
use crate::engine::env::Env;
use crate::engine::status::Hub;

/// Runs `task` in the background (`spawn_local`). Boxed first, so that every task shares one
/// instantiation of wasm-bindgen's task glue instead of one per future type (≈ 300 bytes each,
/// docs/benchmarks.md, "Size").
pub(crate) fn spawn(task: impl Future<Output = ()> + 'static) {
    spawn_boxed(Box::pin(task));
}

/// [`spawn`] for a task already boxed (the engine's `Spawn`).
pub(crate) fn spawn_boxed(task: Pin<Box<dyn Future<Output = ()>>>) {
    wasm_bindgen_futures::spawn_local(task);
}

/// The browser environment.
pub(crate) struct BrowserEnv {
    /// The drain lock this context holds, if the platform has Web Locks.
    pub lock: Option<Rc<LockState>>,
    /// The client's network switch (off: offline, whatever `navigator.onLine` says).
    pub network: NetworkSwitch,
}

impl Env for BrowserEnv {
    fn now_ms(&self) -> u64 {
        js_sys::Date::now() as u64
    }

    fn sleep(&self, ms: u64) -> impl std::future::Future<Output = ()> {
        // setTimeout takes a signed 32-bit delay; longer waits are capped (the loop re-checks).
        TimeoutFuture::new(ms.min(i32::MAX as u64) as u32)
    }

    fn is_online(&self) -> bool {
        self.network.online()
    }

    fn random(&self) -> f64 {
        js_sys::Math::random()
    }

    async fn may_send(&self) -> bool {
        match &self.lock {
            Some(lock) => lock.still_held().await,
            None => true,
        }
    }
}

/// Listens for the global `online` event and wakes the loop's network signal; removes itself
/// when dropped.
pub(crate) struct OnlineListener {
    target: web_sys::EventTarget,
    callback: Closure<dyn FnMut()>,
}

impl OnlineListener {
    /// Starts listening.
    pub(crate) fn new(hub: &Rc<Hub>) -> Result<Self, JsValue> {
        let weak = Rc::downgrade(hub);
        let callback = Closure::<dyn FnMut()>::new(move || {
            if let Some(hub) = weak.upgrade() {
                hub.network.notify();
            }
        });
        let target = global::event_target();
        target.add_event_listener_with_callback("online", callback.as_ref().unchecked_ref())?;
        Ok(OnlineListener { target, callback })
    }
}

impl Drop for OnlineListener {
    fn drop(&mut self) {
        let _ = self
            .target
            .remove_event_listener_with_callback("online", self.callback.as_ref().unchecked_ref());
    }
}
