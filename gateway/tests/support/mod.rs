//! Helpers shared by the gateway's integration tests.
//!
//! Each file under `tests/` is its own crate and pulls this in with `mod support;`; a crate that
//! uses only part of it must not fail `-D warnings` for the rest, hence the `dead_code` allowance.
//!
//! * [`app`]: the HTTP app over a fresh embedded store, driven without a socket;
//! * [`fake_celeriant`]: an in-process Celeriant node for the Celeriant backend's tests (the
//!   `fake-celeriant` crate under `testkit/`, re-exported under its old path);
//! * [`device`]: device keys, signed nonces and session bodies for the auth tests;
//! * [`process`]: the gateway as a real process on 127.0.0.1;
//! * [`sse`]: a change stream (`/v1/watch`) read event by event off a raw socket;
//! * [`hostile`]: raw sockets against it (another loopback source address, a deadline on
//!   every exchange), its memory, root for a tmpfs;
//! * [`legit`]: the legitimate device measured during each attack of issue 26 (writes, reads,
//!   watches and health checks, counted per kind);
//! * [`write`]: backend-level one-event writes for the Celeriant backend's tests.

#[allow(dead_code)]
pub mod app;
#[allow(dead_code)]
pub mod device;
#[allow(unused_imports)]
pub use fake_celeriant;
#[allow(dead_code)]
pub mod hostile;
#[allow(dead_code)]
pub mod legit;
#[allow(dead_code)]
pub mod policy;
#[allow(dead_code)]
pub mod process;
#[allow(dead_code)]
pub mod sse;
#[allow(dead_code)]
pub mod write;
