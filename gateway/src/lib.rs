//! celeriant-gateway: the HTTP+JSON gateway between browsers and Celeriant.
//!
//! Browsers cannot speak Celeriant's binary TCP protocol; this server speaks protocol v1
//! (`docs/protocol.md`, types in `celeriant-sync-protocol`) and forwards each write, always with
//! client idempotency enforced and no expected version, to a [`backend::Backend`]: the embedded
//! durable store (default) or a real Celeriant cluster.
//!
//! Every write and read runs under a session proving the device's client id ([`auth`],
//! `POST /v1/session`), unless the gateway runs with `--auth none` on loopback.
//!
//! [`app::app`] builds the router (testable without a socket); [`serve`] accepts connections
//! under the connection cap and timeouts; `main.rs` parses the configuration, opens the
//! backend and serves with graceful shutdown, or checks a store offline (`verify`). What a
//! client may make the gateway hold is bounded in [`limits`].
#![warn(missing_docs)]

pub mod access;
pub mod app;
pub mod auth;
pub mod backend;
pub mod config;
pub mod cors;
pub mod error;
pub mod extract;
pub mod faults;
pub mod host;
pub mod limits;
pub mod log;
pub mod observe;
pub mod private;
pub mod proxy;
pub mod routes;
pub mod serve;
pub mod state;
pub mod watch;

pub use app::app;
pub use state::AppState;
