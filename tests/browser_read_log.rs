//! The local log in every engine's IndexedDB: the log's conformance suite
//! (`engine::read::log_conformance`), the same checks the in-memory log passes under
//! `cargo test`, with the device side played through the real outbox of the same database.
#![cfg(target_arch = "wasm32")]

mod browser;

use browser::*;
use celeriant_sync::browser::idb::db::Durability;
use celeriant_sync::browser::idb::outbox::IdbOutbox;
use celeriant_sync::engine::read::log_conformance;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen_test]
async fn indexeddb_log_passes_the_conformance_suite() {
    log_conformance::run_all(|| async {
        IdbOutbox::open(&db_name("log-conformance"), Durability::Strict)
            .await
            .unwrap()
    })
    .await;
}
