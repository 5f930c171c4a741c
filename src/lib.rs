//! celeriant-sync: the offline-first browser writer for the Celeriant event store.
//!
//! This crate is compiled to WebAssembly and shipped as the `celeriant-sync` npm package. It is
//! an outbox: `append` persists each event with its per-aggregate `ClientSeq` in IndexedDB in one
//! transaction before any network attempt, and one sync loop per device drains the outbox in
//! order through the HTTP gateway (`gateway/`). The wire protocol lives in
//! `celeriant-sync-protocol` (`protocol/`), shared with the gateway.
#![warn(missing_docs)]
#![warn(unreachable_pub)]

pub use celeriant_sync_protocol as protocol;

pub mod engine;

// The browser layer and the JS API exist only in WebAssembly; native builds (tests, tools)
// compile the engine alone. This is the one place the target is switched on.
#[cfg(target_arch = "wasm32")]
mod api;
#[cfg(target_arch = "wasm32")]
pub mod browser;

#[cfg(target_arch = "wasm32")]
pub use api::client::SyncClient;
#[cfg(target_arch = "wasm32")]
pub use api::codes::ServerCode;
#[cfg(target_arch = "wasm32")]
pub use api::errors::{CeleriantSyncError, is_celeriant_sync_error};

/// The module's allocator: talc rather than the standard library's dlmalloc, for size
/// (docs/benchmarks.md, "Size"). The module is single-threaded (no `atomics`).
#[cfg(target_arch = "wasm32")]
#[global_allocator]
static ALLOCATOR: talc::wasm::WasmDynamicTalc = talc::wasm::new_wasm_dynamic_allocator();
