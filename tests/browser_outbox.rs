//! The outbox in headless Chromium's IndexedDB: the storage conformance suite, and rules 1
//! (atomic append, sequences) and 2 (bad input) of the client through its JS API.
#![cfg(target_arch = "wasm32")]

mod browser;

use browser::*;
use celeriant_sync::browser::idb::db::Durability;
use celeriant_sync::browser::idb::outbox::IdbOutbox;
use celeriant_sync::engine::conformance;
use js_sys::{Array, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen_test]
async fn indexeddb_outbox_passes_the_conformance_suite() {
    conformance::run_all(|| async {
        IdbOutbox::open(&db_name("conformance"), Durability::Strict)
            .await
            .unwrap()
    })
    .await;
}

/// The same suite with the outbox keeping its copy of the watermarks, as it does for a drain
/// that holds the Web Lock (`src/browser/idb/watermarks.rs`).
#[wasm_bindgen_test]
async fn indexeddb_outbox_passes_the_conformance_suite_as_the_sole_drainer() {
    conformance::run_all(|| async {
        let outbox = IdbOutbox::open(&db_name("conformance-sole"), Durability::Strict)
            .await
            .unwrap();
        outbox.sole_drainer(true);
        outbox
    })
    .await;
}

/// A prune made while the drain has work never compacts the `ids` store (counting and
/// rebuilding it grows with the store and held `outbox` for most of a 100,000-event drain); an
/// idle one does.
#[wasm_bindgen_test]
async fn ids_are_compacted_only_by_an_idle_prune() {
    use celeriant_sync::engine::model::{Batch, NewEvent};
    use celeriant_sync::engine::outbox::Outbox;
    let db = db_name("compact-idle");
    let o = IdbOutbox::open(&db, Durability::Strict).await.unwrap();
    let a = conformance::aggregate(1);
    let many = |base: u128, n: u128| -> Vec<NewEvent> {
        (0..n)
            .map(|i| NewEvent {
                event_id: uuid::Uuid::from_u128(base + i),
                ..conformance::event(1, 8)
            })
            .collect()
    };
    let settle = async |first: u64, last: u64| {
        let b = Batch::plain(a, first, last, (last - first + 1) as u32);
        assert!(o.pin(&b, None).await.unwrap());
        assert!(o.settle(&b, last, None).await.unwrap());
    };
    o.append(a, many(0x1_0000, 3_000)).await.unwrap();
    settle(1, 3_000).await;
    let p = o.prune(a, 10_000, false).await.unwrap();
    assert_eq!((p.removed, p.more), (3_000, false));
    assert_eq!(count_store(&db, "outbox").await, 0);
    assert_eq!(
        count_store(&db, "ids").await,
        3_000,
        "not compacted mid-drain"
    );
    o.append(a, many(0x2_0000, 1)).await.unwrap();
    settle(3_001, 3_001).await;
    let p = o.prune(a, 10_000, true).await.unwrap();
    assert_eq!((p.removed, p.more), (1, false));
    assert_eq!(count_store(&db, "ids").await, 0, "cleared when idle");
    o.close();
}

#[wasm_bindgen_test]
async fn rule1_append_persists_before_any_network_attempt() {
    let db = db_name("persist");
    let client = open_nowhere(&db, "{}").await;
    let (t, a) = (uuid(), uuid());
    let events = Array::of3(
        &bytes_event(3, b"one"),
        &bytes_event(3, b"two"),
        &bytes_event(4, b"three"),
    );
    let receipts = ok(client.append(aggregate(&t, &a), events.into())).await;
    assert_eq!(seqs(&receipts), [1, 2, 3]);
    assert_eq!(
        outbox_events(&db).await,
        3,
        "stored once the promise resolved"
    );
    assert_eq!(num(&client.status(), "pending"), 3.0);
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn rule1_sequences_are_per_aggregate_and_survive_a_reload() {
    let db = db_name("seqs");
    let (t, a, b) = (uuid(), uuid(), uuid());
    let client = open_nowhere(&db, "{}").await;
    let two = || Array::of2(&bytes_event(1, b"x"), &bytes_event(1, b"y")).into();
    assert_eq!(
        seqs(&ok(client.append(aggregate(&t, &a), two())).await),
        [1, 2]
    );
    assert_eq!(
        seqs(&ok(client.append(aggregate(&t, &b), two())).await),
        [1, 2],
        "independent per aggregate"
    );
    assert_eq!(
        seqs(&ok(client.append(aggregate(&t, &a), two())).await),
        [3, 4]
    );
    let id = client.client_id();
    ok(client.close()).await;

    let client = open_nowhere(&db, "{}").await;
    assert_eq!(client.client_id(), id, "the client id is persisted");
    assert_eq!(
        seqs(&ok(client.append(aggregate(&t, &a), two())).await),
        [5, 6],
        "after a reload"
    );
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn rule1_sequences_are_never_reused_after_synced_events_are_pruned() {
    no_faults().await;
    let db = db_name("prune");
    let client = open(&db, "{}").await;
    let (t, a) = (uuid(), uuid());
    let one = || Array::of1(&bytes_event(1, b"z")).into();
    assert_eq!(
        seqs(&ok(client.append(aggregate(&t, &a), one())).await),
        [1]
    );
    assert_eq!(
        seqs(&ok(client.append(aggregate(&t, &a), one())).await),
        [2]
    );
    ok(client.flush()).await;
    pruned_within(&db, 10_000).await; // synced events are pruned
    ok(client.close()).await;
    let client = open(&db, "{}").await;
    assert_eq!(
        seqs(&ok(client.append(aggregate(&t, &a), one())).await),
        [3],
        "never reused"
    );
    ok(client.flush()).await;
    ok(client.close()).await;
    let landed: Vec<f64> = read_all(&t, &a)
        .await
        .iter()
        .map(|e| num(e, "clientSeq"))
        .collect();
    assert_eq!(landed, [1.0, 2.0, 3.0]);
}

#[wasm_bindgen_test]
async fn rule1_concurrent_appends_get_distinct_contiguous_sequences_in_call_order() {
    let db = db_name("concurrent");
    let client = open_nowhere(&db, "{}").await;
    let (t, a) = (uuid(), uuid());
    let promises: Vec<_> = (0..50)
        .map(|i| {
            client.append(
                aggregate(&t, &a),
                Array::of1(&bytes_event(1, &[i as u8])).into(),
            )
        })
        .collect();
    let mut all = Vec::new();
    for p in promises {
        all.extend(seqs(&ok(p).await));
    }
    assert_eq!(all, (1..=50).collect::<Vec<u64>>());
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn rule1_a_multi_event_append_is_all_or_nothing() {
    let db = db_name("atomic");
    let client = open_nowhere(&db, "{}").await;
    let (t, a) = (uuid(), uuid());
    // Five 18,000-byte events are stored as three records, runs of 2, 2 and 1 (a record holds
    // at most 60 KiB, src/browser/idb/records.rs). A stray record where the second run will go
    // (`[t, a, last, n]`) makes the second `add` of the append fail.
    let stray = object(&[("s", 3.into())]);
    let key = Array::of4(&t.clone().into(), &a.clone().into(), &4.into(), &2.into());
    insert_raw(&db, "outbox", &stray, Some(&key.into())).await;
    let events: Array = (0..5).map(|i| bytes_event(1, &[i; 18_000])).collect();
    let e = err(client.append(aggregate(&t, &a), events.into())).await;
    assert_eq!(string(&e, "name"), "CeleriantSyncError");
    assert_eq!(string(&e, "code"), "STORAGE_FAILED", "{}", describe(&e));
    assert_eq!(
        count_store(&db, "outbox").await,
        1,
        "events 1, 2 and 5 were rolled back with 3 and 4"
    );
    assert_eq!(
        count_store(&db, "counters").await,
        0,
        "and so was the counter"
    );
    assert_eq!(count_store(&db, "ids").await, 0, "and their ids");
    // The same with the counter guessed (src/browser/idb/counters.rs): one append commits
    // (sequence 1), and the next, stored as runs [2, 3], [4, 5] and [6], meets a stray record
    // where its second run goes. A failure that is not a wrong guess is not retried.
    let one = Array::of1(&bytes_event(1, b"first"));
    assert_eq!(
        seqs(&ok(client.append(aggregate(&t, &a), one.into())).await),
        [1]
    );
    let key = Array::of4(&t.clone().into(), &a.clone().into(), &5.into(), &2.into());
    insert_raw(&db, "outbox", &stray, Some(&key.into())).await;
    let events: Array = (0..5).map(|i| bytes_event(1, &[i; 18_000])).collect();
    let e = err(client.append(aggregate(&t, &a), events.into())).await;
    assert_eq!(string(&e, "code"), "STORAGE_FAILED", "{}", describe(&e));
    assert_eq!(
        count_store(&db, "outbox").await,
        3,
        "two strays and event 1"
    );
    assert_eq!(count_store(&db, "ids").await, 1, "event 1's id only");
    let one = Array::of1(&bytes_event(1, b"after"));
    assert_eq!(
        seqs(&ok(client.append(aggregate(&t, &a), one.into())).await),
        [2],
        "the failed append consumed no sequence"
    );
    ok(client.close()).await;
}

/// Two contexts appending to one aggregate: each outbox guesses the counter it last wrote and
/// issues its writes with the counter read (src/browser/idb/counters.rs). The other context's
/// appends make that guess wrong, and the read made in the same transaction must win: first
/// where the guessed keys are taken (the other context's events are still stored), then where
/// they are free again (its events landed and were pruned), which a write trusting the guess
/// would have filled with a second event under a reused sequence.
#[wasm_bindgen_test]
async fn rule1_appends_from_two_contexts_never_share_a_sequence() {
    use celeriant_sync::engine::model::{Batch, NewEvent};
    use celeriant_sync::engine::outbox::{EventState, Outbox};
    let db = db_name("two-writers");
    let x = IdbOutbox::open(&db, Durability::Strict).await.unwrap();
    let y = IdbOutbox::open(&db, Durability::Strict).await.unwrap();
    let a = conformance::aggregate(1);
    let ev = |tag: u8| -> Vec<NewEvent> { vec![conformance::event(tag, 8)] };
    let seqs = |r: Vec<celeriant_sync::engine::model::Receipt>| -> Vec<u64> {
        r.iter().map(|r| r.client_seq).collect()
    };
    assert_eq!(seqs(x.append(a, ev(1)).await.unwrap()), [1]);
    assert_eq!(seqs(x.append(a, ev(2)).await.unwrap()), [2], "x guessed 1");
    let two = [ev(3), ev(4)].concat();
    assert_eq!(seqs(y.append(a, two).await.unwrap()), [3, 4]);
    assert_eq!(
        seqs(x.append(a, ev(5)).await.unwrap()),
        [5],
        "x guessed 2; the read said 4"
    );
    // Everything so far lands and is pruned: sequences 1..=5 are free keys again.
    let b = Batch::plain(a, 1, 5, 5);
    assert!(y.pin(&b, None).await.unwrap());
    assert!(y.settle(&b, 5, None).await.unwrap());
    assert_eq!(y.prune(a, 100, true).await.unwrap().removed, 5);
    assert_eq!(outbox_events(&db).await, 0);
    assert_eq!(
        seqs(y.append(a, ev(6)).await.unwrap()),
        [6],
        "y guessed 4; its keys were free"
    );
    assert_eq!(
        seqs(x.append(a, ev(7)).await.unwrap()),
        [7],
        "x guessed 5; its key was free"
    );
    assert_eq!(seqs(x.append(a, ev(8)).await.unwrap()), [8], "x guessed 7");
    assert_eq!(outbox_events(&db).await, 3);
    assert_eq!(x.last_assigned(a).await.unwrap(), 8);
    for tag in [6, 7, 8] {
        let id = conformance::event(tag, 8).event_id;
        let state = y.event_state(id).await.unwrap();
        let stored = EventState::Pending {
            aggregate: a,
            client_seq: u64::from(tag),
        };
        assert_eq!(state, stored, "event {tag}");
    }
    x.close();
    y.close();
}

/// The probe that decides whether appends may commit early (`Db::early_commit_is_atomic`)
/// answers the same twice and leaves nothing in `meta`, whatever the engine answers; whether
/// its answer is right is what `rule1_a_multi_event_append_is_all_or_nothing` checks.
#[wasm_bindgen_test]
async fn the_early_commit_probe_leaves_nothing_behind() {
    use celeriant_sync::browser::idb::db::Db;
    let name = db_name("probe");
    let db = Db::open(&name).await.unwrap();
    let atomic = db.early_commit_is_atomic().await;
    assert_eq!(db.early_commit_is_atomic().await, atomic);
    assert_eq!(count_store(&name, "meta").await, 0);
    db.close();
}

#[wasm_bindgen_test]
async fn rule1_event_ids_are_kept_or_generated_as_uuid_v4() {
    let db = db_name("ids");
    let client = open_nowhere(&db, "{}").await;
    let given = "0b5a3f9c-1d2e-4f60-8a7b-9c0d1e2f3a4b";
    let with_id = object(&[
        ("type", 1.into()),
        ("data", json("{\"a\":1}")),
        ("eventId", given.into()),
    ]);
    let events = Array::of2(&with_id, &bytes_event(1, b"no id"));
    let receipts: Array = ok(client.append(aggregate(&uuid(), &uuid()), events.into()))
        .await
        .unchecked_into();
    assert_eq!(string(&receipts.get(0), "eventId"), given);
    let generated = string(&receipts.get(1), "eventId");
    assert_eq!(generated.len(), 36);
    assert_eq!(&generated[14..15], "4", "version 4: {generated}");
    assert!(
        matches!(&generated[19..20], "8" | "9" | "a" | "b"),
        "RFC 4122 variant: {generated}"
    );
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn rule2_bad_input_throws_a_typed_error_and_persists_nothing() {
    let db = db_name("bad");
    let client = open_nowhere(&db, "{}").await;
    let (t, a) = (uuid(), uuid());
    let good = || bytes_event(1, b"fine");
    let with_data = |data: JsValue| object(&[("type", 1.into()), ("data", data)]);
    let eval = |code: &str| js_sys::eval(code).unwrap();
    let big = Uint8Array::new_with_length(1_048_577);
    let cases: Vec<(&str, JsValue, JsValue, &str)> = vec![
        (
            "type 0",
            aggregate(&t, &a),
            Array::of2(&good(), &bytes_event(0, b"x")).into(),
            "INVALID_EVENT_TYPE",
        ),
        (
            "type 1.5",
            aggregate(&t, &a),
            Array::of2(&good(), &json(r#"{"type":1.5,"data":1}"#)).into(),
            "INVALID_EVENT_TYPE",
        ),
        (
            "type as string",
            aggregate(&t, &a),
            Array::of1(&json(r#"{"type":"3","data":1}"#)).into(),
            "INVALID_EVENT_TYPE",
        ),
        (
            "empty list",
            aggregate(&t, &a),
            Array::new().into(),
            "EMPTY_EVENTS",
        ),
        ("not a list", aggregate(&t, &a), good(), "INVALID_EVENTS"),
        (
            "BigInt data",
            aggregate(&t, &a),
            Array::of2(&good(), &with_data(eval("10n"))).into(),
            "DATA_NOT_SERIALIZABLE",
        ),
        (
            "cyclic data",
            aggregate(&t, &a),
            Array::of2(
                &good(),
                &with_data(eval("(() => { const o = {}; o.o = o; return o })()")),
            )
            .into(),
            "DATA_NOT_SERIALIZABLE",
        ),
        (
            "function data",
            aggregate(&t, &a),
            Array::of1(&with_data(eval("(() => () => 1)()"))).into(),
            "DATA_NOT_SERIALIZABLE",
        ),
        (
            "missing data",
            aggregate(&t, &a),
            Array::of1(&json(r#"{"type":1}"#)).into(),
            "DATA_NOT_SERIALIZABLE",
        ),
        (
            "bad typeId",
            aggregate("nope", &a),
            Array::of1(&good()).into(),
            "INVALID_AGGREGATE",
        ),
        (
            "bad id",
            aggregate(&t, "1234"),
            Array::of1(&good()).into(),
            "INVALID_AGGREGATE",
        ),
        (
            "no aggregate",
            JsValue::NULL,
            Array::of1(&good()).into(),
            "INVALID_AGGREGATE",
        ),
        (
            "bad eventId",
            aggregate(&t, &a),
            Array::of2(&good(), &json(r#"{"type":1,"data":1,"eventId":"x"}"#)).into(),
            "INVALID_EVENT_ID",
        ),
        (
            "iv of 11 bytes",
            aggregate(&t, &a),
            Array::of1(&object(&[
                ("type", 1.into()),
                ("data", 1.into()),
                ("iv", Uint8Array::new_with_length(11).into()),
            ]))
            .into(),
            "INVALID_IV",
        ),
        (
            "event over 1 MiB",
            aggregate(&t, &a),
            Array::of2(&good(), &with_data(big.into())).into(),
            "EVENT_TOO_LARGE",
        ),
        (
            "10,001 events",
            aggregate(&t, &a),
            (0..10_001).map(|_| good()).collect::<Array>().into(),
            "TOO_MANY_EVENTS",
        ),
        (
            "unknown field",
            aggregate(&t, &a),
            Array::of1(&json(r#"{"type":1,"data":1,"tpye":2}"#)).into(),
            "INVALID_EVENT",
        ),
        (
            "negative minor",
            aggregate(&t, &a),
            Array::of1(&json(r#"{"type":1,"data":1,"minor":-1}"#)).into(),
            "INVALID_MINOR",
        ),
    ];
    for (what, aggregate, events, code) in cases {
        let e = err(client.append(aggregate, events)).await;
        assert!(e.is_instance_of::<js_sys::Error>(), "{what}: a real Error");
        assert_eq!(string(&e, "name"), "CeleriantSyncError", "{what}");
        assert_eq!(string(&e, "code"), code, "{what}: {}", describe(&e));
    }
    assert_eq!(count_store(&db, "outbox").await, 0, "nothing persisted");
    assert_eq!(
        count_store(&db, "counters").await,
        0,
        "no sequence consumed"
    );
    assert_eq!(num(&client.status(), "pending"), 0.0);
    // The event's index is reported.
    let e = err(client.append(
        aggregate(&t, &a),
        Array::of3(&good(), &good(), &bytes_event(0, b"")).into(),
    ))
    .await;
    assert_eq!(num(&e, "index"), 2.0);
    // JSON data is stored as its UTF-8 text.
    let receipts = ok(client.append(
        aggregate(&t, &a),
        Array::of1(&with_data(json(r#"{"amount":5}"#))).into(),
    ))
    .await;
    assert_eq!(
        seqs(&receipts),
        [1],
        "the failed appends consumed no sequence"
    );
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn options_are_checked_and_a_closed_client_refuses_work() {
    for (options, what) in [
        (JsValue::UNDEFINED, "no options"),
        (json("{}"), "no gatewayUrl"),
        (json(r#"{"gatewayUrl":"ftp://x"}"#), "bad scheme"),
        (
            json(r#"{"gatewayUrl":"http://127.0.0.1:9","maxBatchEvents":0}"#),
            "maxBatchEvents 0",
        ),
        (
            json(r#"{"gatewayUrl":"http://127.0.0.1:9","requestTimeoutMs":1.5}"#),
            "fractional timeout",
        ),
        (
            json(r#"{"gatewayUrl":"http://127.0.0.1:9","maxBackoffMs":999}"#),
            "maxBackoffMs below a second",
        ),
        (
            json(r#"{"gatewayUrl":"http://127.0.0.1:9","gatewayURL":"x"}"#),
            "unknown key",
        ),
        (
            json(r#"{"gatewayUrl":"http://127.0.0.1:9","durability":"fast"}"#),
            "bad durability",
        ),
    ] {
        let e = match celeriant_sync::SyncClient::open(options).await {
            Ok(_) => panic!("{what}: opened"),
            Err(e) => e,
        };
        assert_eq!(
            string(&e, "code"),
            "INVALID_OPTIONS",
            "{what}: {}",
            describe(&e)
        );
    }
    let client = open_nowhere(&db_name("closed"), "{}").await;
    assert!(client.persisted().is_null(), "persistence not asked for");
    let options = json(r#"{"gatewayUrl":"http://127.0.0.1:9","persist":true}"#);
    js_sys::Reflect::set(&options, &"databaseName".into(), &db_name("persist").into()).unwrap();
    let persisting = celeriant_sync::SyncClient::open(options)
        .await
        .map_err(|e| describe(&e))
        .unwrap();
    // Chromium answers at once; Firefox asks the user and, headless, nobody answers: `null`.
    let answer = persisting.persisted();
    assert!(
        answer.as_bool().is_some() || answer.is_null(),
        "a boolean or null: {answer:?}"
    );
    ok(persisting.close()).await;
    ok(client.close()).await;
    ok(client.close()).await;
    assert_eq!(string(&client.status(), "state"), "closed");
    let e = err(client.append(
        aggregate(&uuid(), &uuid()),
        Array::of1(&bytes_event(1, b"x")).into(),
    ))
    .await;
    assert_eq!(string(&e, "code"), "CLOSED");
    assert_eq!(string(&err(client.flush()).await, "code"), "CLOSED");
}

#[wasm_bindgen_test]
async fn a_version_1_database_is_upgraded_with_its_events_and_ids() {
    no_faults().await;
    let db = db_name("v1");
    let (t, a) = (uuid(), uuid());
    let ids: Vec<String> = (0..5).map(|_| uuid()).collect();
    create_v1(&db, &v1_content(&t, &a, &ids, false)).await;
    let client = open(&db, "{}").await;
    assert_eq!(
        num(&client.status(), "pending"),
        5.0,
        "every event migrated"
    );
    let names = store_names(&db).await;
    assert!(!names.contains(&"events".to_owned()), "{names:?}");
    assert!(names.contains(&"outbox".to_owned()) && names.contains(&"ids".to_owned()));
    ok(client.when_synced((&ids[4]).into())).await;
    flush_within(&client, 30).await;
    let landed: Vec<String> = read_all(&t, &a)
        .await
        .iter()
        .map(|e| string(e, "eventId"))
        .collect();
    assert_eq!(landed, ids, "each once, in order, with its id");
    let receipts = ok(client.append(
        aggregate(&t, &a),
        Array::of1(&bytes_event(1, b"next")).into(),
    ))
    .await;
    assert_eq!(seqs(&receipts), [6], "the counter carried over");
    ok(client.close()).await;
}
