//! The local log in every engine's IndexedDB: the log's conformance suite
//! (`engine::read::log_conformance`), the same checks the in-memory log passes under
//! `cargo test`, with the device side played through the real outbox of the same database.
#![cfg(target_arch = "wasm32")]

mod browser;

use browser::*;
use celeriant_sync::browser::idb::db::Durability;
use celeriant_sync::browser::idb::log_fixture::Keeping;
use celeriant_sync::browser::idb::outbox::IdbOutbox;
use celeriant_sync::engine::read::log_conformance;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

/// Pages stored through the trait keep nothing in memory: every snapshot reads IndexedDB.
#[wasm_bindgen_test]
async fn indexeddb_log_passes_the_conformance_suite() {
    log_conformance::run_all(|| async {
        IdbOutbox::open(&db_name("log-conformance"), Durability::Strict)
            .await
            .unwrap()
    })
    .await;
}

/// Pages stored as the reader stores them, kept in memory (`src/browser/idb/kept.rs`): the
/// snapshots take what the log still holds of them from memory, and must follow the same rules.
#[wasm_bindgen_test]
async fn indexeddb_log_keeping_its_pages_passes_the_conformance_suite() {
    log_conformance::run_all(|| async {
        Keeping(
            IdbOutbox::open(&db_name("log-conformance-kept"), Durability::Strict)
                .await
                .unwrap(),
        )
    })
    .await;
}

/// Which path each run above takes: a page stored through the trait is read back from
/// IndexedDB (copies), one stored as the reader stores it comes back as the very objects put,
/// until something else writes the cursor (then read back again).
#[wasm_bindgen_test]
async fn only_the_readers_pages_are_kept_for_the_snapshot() {
    use celeriant_sync::engine::read::log::LocalLog;
    use celeriant_sync::engine::read::log_conformance::LogFixture;
    use celeriant_sync::engine::read::log_conformance::{ME, aggregate, batch};

    let log = Keeping(
        IdbOutbox::open(&db_name("log-kept-path"), Durability::Strict)
            .await
            .unwrap(),
    );
    let same = |snapshot: &[wasm_bindgen::JsValue], page: &js_sys::Array| -> Vec<bool> {
        snapshot
            .iter()
            .zip(page.iter())
            .map(|(a, b)| js_sys::Object::is(a, &b))
            .collect()
    };
    let a = aggregate(2000);
    let page = log.page(&[batch(1, "other", &[1]), batch(2, "other", &[2])]);
    let at0 = log.0.cursor(a).await.unwrap();
    let at2 = log.0.store_page(a, &page, ME, at0).await.unwrap().unwrap();
    let s = log.snapshot(a, None).await.unwrap();
    assert_eq!(
        same(&s.batches, &page),
        [false, false],
        "the trait's page: read back"
    );

    let kept = log.page(&[batch(3, "other", &[3]), batch(4, "other", &[4])]);
    let at4 = log.store_page(a, &kept, ME, at2).await.unwrap().unwrap();
    let s = log.snapshot(a, None).await.unwrap();
    assert_eq!(s.batches.len(), 4);
    assert_eq!(
        same(&s.batches[2..], &kept),
        [true, true],
        "the reader's page: kept"
    );
    assert_eq!(
        same(&s.batches[..2], &page),
        [false, false],
        "below it: read back"
    );

    // Another store through the trait drops the tag: everything is read back.
    let next = log.page(&[batch(5, "other", &[5])]);
    log.0.store_page(a, &next, ME, at4).await.unwrap().unwrap();
    let s = log.snapshot(a, None).await.unwrap();
    assert_eq!(s.batches.len(), 5);
    assert_eq!(
        same(&s.batches[2..4], &kept),
        [false, false],
        "no longer kept"
    );
}

/// Pages as the gateway's literal JSON text (not built from typed fields, as the suite's are):
/// a valid version 2 then a version 3 with one bad event. Each must be refused whole — `Err`,
/// the cursor and the log as they were — and a valid page must still store after it (the
/// check did not throw through the module and leave the transaction or the runtime stuck).
#[wasm_bindgen_test]
async fn indexeddb_log_refuses_hostile_json_pages_whole() {
    use celeriant_sync::engine::read::log::LocalLog;
    use celeriant_sync::engine::read::log_conformance::{ME, aggregate};
    use js_sys::Array;
    use wasm_bindgen::JsCast;

    const GOOD: &str =
        r#"{"clientSeq":1,"type":1,"minor":0,"timestamp":1700000000000,"data":"AAE="}"#;
    // A page of one batch; an event starting with `@` is a good one in a batch whose
    // `serverTimestamp` is the rest of it.
    let page = |version: u64, event: &str| -> Array {
        let (ts, event) = match event.strip_prefix('@') {
            Some(ts) => (ts, GOOD),
            None => ("1", event),
        };
        json(&format!(
            r#"[{{"version":{version},"clientId":"other","serverTimestamp":{ts},"events":[{event}]}}]"#
        ))
        .unchecked_into()
    };
    let bad_events = [
        ("null event", "null".to_owned()),
        ("number event", "1".to_owned()),
        ("array event", "[]".to_owned()),
        ("string type", GOOD.replace(r#""type":1"#, r#""type":"1""#)),
        (
            "fractional clientSeq",
            GOOD.replace(r#""clientSeq":1"#, r#""clientSeq":1.5"#),
        ),
        (
            "negative minor",
            GOOD.replace(r#""minor":0"#, r#""minor":-1"#),
        ),
        (
            "2^53 timestamp",
            GOOD.replace("1700000000000", "9007199254740992"),
        ),
        ("missing type", GOOD.replace(r#""type":1,"#, "")),
        ("numeric data", GOOD.replace(r#""AAE=""#, "5")),
        ("missing data", GOOD.replace(r#","data":"AAE=""#, "")),
        ("data = inside", GOOD.replace(r#""AAE=""#, r#""AA=A""#)),
        ("data all =", GOOD.replace(r#""AAE=""#, r#""====""#)),
        ("numeric iv", GOOD.replace('}', r#","iv":1234}"#)),
        ("numeric eventId", GOOD.replace('}', r#","eventId":5}"#)),
        ("object eventId", GOOD.replace('}', r#","eventId":{}}"#)),
        ("string serverTimestamp", r#"@"1""#.to_owned()),
        ("null serverTimestamp", "@null".to_owned()),
        ("fractional serverTimestamp", "@1.5".to_owned()),
        ("negative serverTimestamp", "@-1".to_owned()),
        (
            "iv = inside",
            GOOD.replace('}', r#","iv":"AA=AAAAAAAAAAAAA"}"#),
        ),
        (
            "iv not base64",
            GOOD.replace('}', r#","iv":"!!!!AAAAAAAAAAAA"}"#),
        ),
    ];
    let log = IdbOutbox::open(&db_name("log-hostile-json"), Durability::Strict)
        .await
        .unwrap();
    for (n, (why, bad)) in bad_events.iter().enumerate() {
        let a = aggregate(1000 + n as u128);
        let start = log.cursor(a).await.unwrap();
        let at1 = log.store_page(a, &page(1, GOOD), ME, start).await;
        let at1 = at1
            .unwrap()
            .unwrap_or_else(|| panic!("{why}: version 1 stored"));
        // The valid version 2 comes first: it must not be kept when version 3 is refused.
        let hostile = page(2, GOOD);
        hostile.push(&page(3, bad).get(0));
        let r = log.store_page(a, &hostile, ME, at1).await;
        assert!(r.is_err(), "{why}: the page {bad} was stored: {r:?}");
        assert_eq!(log.cursor(a).await.unwrap(), at1, "{why}: the cursor moved");
        let s = log.snapshot(a, None).await.unwrap();
        assert_eq!(s.batches.len(), 1, "{why}: the log changed");
        let next = log.store_page(a, &page(2, GOOD), ME, at1).await;
        let next = next
            .unwrap()
            .unwrap_or_else(|| panic!("{why}: version 2 not stored"));
        assert_eq!(next.version, 2, "{why}: the valid page after it");
        assert_eq!(
            log.snapshot(a, None).await.unwrap().batches.len(),
            2,
            "{why}"
        );
    }
}
