//! The browser layer: thin shims that give the engine its storage, transport and environment.
//!
//! * [`idb`]: the IndexedDB [`Outbox`](crate::engine::outbox::Outbox) (schema as code, one
//!   transaction per operation, nothing but IndexedDB requests awaited inside one);
//! * [`fetch`]: the [`Transport`](crate::engine::env::Transport) over `fetch` with an
//!   `AbortController` timeout that also aborts when dropped;
//! * [`env`]: clock, timers, `navigator.onLine`, randomness and the `online` event;
//! * [`global`]: the global scope, reached through `js_sys::global()` so everything works in a
//!   window, a dedicated Worker or a Service Worker.
//!
//! Nothing here decides anything; the rules live in [`crate::engine`].

pub mod channel;
pub mod env;
pub mod fetch;
pub mod global;
pub mod idb;
pub mod locks;
pub mod observer;
