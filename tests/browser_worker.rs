//! The client in a dedicated Worker: no `window` anywhere (IndexedDB, fetch, timers, the
//! `online` event, Web Locks and BroadcastChannel are all reached through the global scope).
#![cfg(target_arch = "wasm32")]

mod browser;
mod worker_scenario;

use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_dedicated_worker);

#[wasm_bindgen_test]
async fn the_client_works_in_a_dedicated_worker() {
    worker_scenario::run("dedicated-worker").await;
}
