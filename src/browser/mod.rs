//! The browser layer: thin shims that give the engine its storage, transport and environment,
//! and the runtime that performs what the engine's machines decide.
//!
//! * [`idb`]: the IndexedDB [`Outbox`](crate::engine::outbox::Outbox) (schema as code, one
//!   transaction helper, nothing but IndexedDB requests awaited inside a transaction);
//! * [`fetch`]: the [`Transport`](crate::engine::env::Transport) over `fetch` with an
//!   `AbortController` timeout that also aborts when dropped;
//! * [`env`]: clock, timers, `navigator.onLine`, randomness and the `online` event;
//! * [`network`]: the client's network switch (`setOffline`), checked before every request;
//! * [`identity`], [`session`], [`proof`]: the device key (WebCrypto), the sessions it opens
//!   and the proof it signs for every request under them;
//! * [`locks`], [`channel`]: Web Locks and the `BroadcastChannel` between contexts;
//! * [`runtime`]: one open client's runtime — coordination and drain, executed;
//! * [`reader`], [`stream`], [`views`]: the read side — catch-up and the change stream in the
//!   draining context, the converged views in every context;
//! * [`convert`], [`js`]: the engine's values as plain JS objects;
//! * [`global`]: the global scope, reached through `js_sys::global()` so everything works in a
//!   window, a dedicated Worker or a Service Worker.
//! * [`inspect`]: what `inspect()` reads through the runtime and the lock manager.
//! * [`members`]: `share`, `unshare` and `members` over `fetch`, with a session of their own.
//!
//! Nothing here decides anything; the rules live in [`crate::engine`].

pub(crate) mod channel;
pub(crate) mod convert;
pub(crate) mod env;
pub(crate) mod fetch;
pub(crate) mod global;
pub mod idb;
pub(crate) mod identity;
pub(crate) mod inspect;
pub(crate) mod js;
pub(crate) mod locks;
pub(crate) mod members;
pub(crate) mod network;
pub(crate) mod proof;
pub(crate) mod reader;
pub(crate) mod runtime;
pub(crate) mod session;
pub(crate) mod stream;
pub(crate) mod views;
