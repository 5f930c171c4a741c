//! Helpers shared by the gateway's integration tests.
//!
//! Each file under `tests/` is its own crate and pulls this in with `mod support;`; a crate that
//! uses only part of it must not fail `-D warnings` for the rest, hence the `dead_code` allowance.
//!
//! * [`app`]: the HTTP app over a fresh embedded store, driven without a socket;
//! * [`fake_celeriant`]: an in-process Celeriant node for the Celeriant backend's tests.

#[allow(dead_code)]
pub mod app;
#[allow(dead_code)]
pub mod fake_celeriant;
