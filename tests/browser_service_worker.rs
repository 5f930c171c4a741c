//! The client in a Service Worker: no `window`, no DOM; the same scenario as in a dedicated
//! Worker.
#![cfg(target_arch = "wasm32")]

mod browser;
mod worker_scenario;

use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_service_worker);

#[wasm_bindgen_test]
async fn the_client_works_in_a_service_worker() {
    worker_scenario::run("service-worker").await;
}
