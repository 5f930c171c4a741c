//! The browser layer: thin shims that give the engine its storage, transport and environment,
//! and the runtime that performs what the engine's machines decide.
//!
//! * [`idb`]: the IndexedDB [`Outbox`](crate::engine::outbox::Outbox) (schema as code, one
//!   transaction helper, nothing but IndexedDB requests awaited inside a transaction);
//! * [`fetch`]: the [`Transport`](crate::engine::env::Transport) over `fetch` with an
//!   `AbortController` timeout that also aborts when dropped;
//! * [`env`]: clock, timers, `navigator.onLine`, randomness and the `online` event;
//! * [`identity`], [`session`]: the device key (WebCrypto) and the sessions it opens;
//! * [`locks`], [`channel`]: Web Locks and the `BroadcastChannel` between contexts;
//! * [`runtime`]: one open client's runtime — coordination and drain, executed;
//! * [`convert`], [`js`]: the engine's values as plain JS objects;
//! * [`global`]: the global scope, reached through `js_sys::global()` so everything works in a
//!   window, a dedicated Worker or a Service Worker.
//!
//! Nothing here decides anything; the rules live in [`crate::engine`].

pub mod channel;
pub mod convert;
pub mod env;
pub mod fetch;
pub mod global;
pub mod idb;
pub mod identity;
pub mod js;
pub mod locks;
pub mod runtime;
pub mod session;
