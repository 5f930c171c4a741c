//! Storage that goes away under a running client, in the browser against the real gateway
//! (issue 30): a connection closed under the client is reopened and nothing is lost or doubled,
//! the `storage` event saying so while it happens; a database deleted (or gone when the client
//! reopens it, as after an eviction) makes the storage `lost` — the pending events reported with
//! their ranges, later calls refused with `STORAGE_LOST`, the database never recreated with a new
//! identity; `inspect()` shows `persisted` and the storage estimate. An open or reopen whose
//! future is dropped midway (a drain's operation dropped on `close()` or a takeover) creates
//! nothing and leaves no connection open, and a reopened connection yields to another context's
//! upgrade from the moment it exists.
//!
//! The browser's abnormal `close` event cannot be fired on a real connection from a page; the
//! tests provoke the same handling through another connection opening a higher version
//! (`versionchange`), which the client handles with the same function as `close`
//! (`connection_lost` in `src/browser/idb/db.rs`).
#![cfg(target_arch = "wasm32")]

mod browser;

use browser::*;
use celeriant_sync::browser::idb::db::{Db, Storage, open_database, stores};
use celeriant_sync::browser::idb::schema;
use futures_util::future::{Either, join, select};
use js_sys::{Array, Promise};
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen(module = "/tests/browser/storage.js")]
extern "C" {
    #[wasm_bindgen(js_name = listenStorage)]
    fn listen_storage(client: &JsValue) -> JsValue;
    #[wasm_bindgen(js_name = deleteRaw)]
    fn delete_raw(db: &str) -> Promise;
    #[wasm_bindgen(js_name = existsRaw)]
    fn exists_raw(db: &str) -> Promise;
    #[wasm_bindgen(js_name = engineEstimate)]
    fn engine_estimate() -> Promise;
    #[wasm_bindgen(js_name = holdStoreOnNextOpen)]
    fn hold_store_on_next_open(db: &str, store: &str, ms: u32) -> Promise;
}

fn states(seen: &JsValue) -> Vec<String> {
    get(seen, "states")
        .unchecked_into::<Array>()
        .iter()
        .map(|s| s.as_string().unwrap())
        .collect()
}

fn events(n: u8) -> JsValue {
    let events: Array = (0..n).map(|i| bytes_event(4, &[i])).collect();
    events.into()
}

async fn exists(db: &str) -> bool {
    ok(exists_raw(db)).await.as_bool().unwrap()
}

async fn landed_seqs(t: &str, a: &str) -> Vec<f64> {
    read_all(t, a)
        .await
        .iter()
        .map(|e| num(e, "clientSeq"))
        .collect()
}

#[wasm_bindgen_test]
async fn a_connection_closed_under_the_client_is_reopened_and_every_event_lands_once() {
    no_faults().await;
    let db = db_name("storage-reopen");
    let client = open(&db, r#"{"offline":true}"#).await;
    let seen = listen_storage(&JsValue::from(client.clone()));
    let (t, a) = (uuid(), uuid());
    ok(client.append(aggregate(&t, &a), events(3))).await;
    let client_id = client.client_id();

    upgrade_raw(&db, 5_000).await;
    until(5_000, "the storage event `reopening`", || {
        states(&seen).first().map(String::as_str) == Some("reopening")
    })
    .await;
    // The next operation reopens the connection.
    let receipts = ok(client.append(aggregate(&t, &a), events(2))).await;
    assert_eq!(seqs(&receipts), vec![4, 5]);
    until(5_000, "the storage event `ok`", || {
        states(&seen).last().map(String::as_str) == Some("ok")
    })
    .await;
    assert_eq!(states(&seen), vec!["reopening", "ok"]);
    assert_eq!(string(&client.storage(), "state"), "ok");

    client.set_offline(false.into()).unwrap();
    flush_within(&client, 10).await;
    assert_eq!(landed_seqs(&t, &a).await, vec![1.0, 2.0, 3.0, 4.0, 5.0]);
    assert_eq!(client.client_id(), client_id);
    assert_eq!(num(&client.status(), "pending"), 0.0);
    ok(client.close()).await;
}

fn ranges(lost: &JsValue) -> Vec<(String, f64, f64, f64)> {
    let mut out: Vec<_> = list(lost, "aggregates")
        .iter()
        .map(|r| {
            (
                string(&get(r, "aggregate"), "id"),
                num(r, "firstSeq"),
                num(r, "lastSeq"),
                num(r, "count"),
            )
        })
        .collect();
    out.sort_by(|x, y| x.0.cmp(&y.0));
    out
}

/// After the loss: `lost` with the pending counts and ranges, appends refused with
/// `STORAGE_LOST`, the client closed, and the database not recreated.
async fn assert_lost(
    client: &celeriant_sync::SyncClient,
    seen: &JsValue,
    db: &str,
    expected: Vec<(String, f64, f64, f64)>,
) {
    until(5_000, "the storage event `lost`", || {
        states(seen).last().map(String::as_str) == Some("lost")
    })
    .await;
    let detail = get(seen, "last");
    let lost = get(&detail, "lost");
    assert_eq!(string(&lost, "code"), "STORAGE_LOST");
    assert_eq!(num(&lost, "pending"), 5.0);
    assert_eq!(num(&lost, "parked"), 0.0);
    assert_eq!(ranges(&lost), expected);
    assert_eq!(string(&client.storage(), "state"), "lost");
    assert_eq!(num(&get(&client.storage(), "lost"), "pending"), 5.0);

    let (t, a) = (uuid(), uuid());
    let e = err(client.append(aggregate(&t, &a), events(1))).await;
    assert_eq!(string(&e, "code"), "STORAGE_LOST", "{}", describe(&e));
    let e = err(client.inspect(None)).await;
    assert_eq!(string(&e, "code"), "STORAGE_LOST", "{}", describe(&e));
    until(5_000, "the client closed", || {
        string(&client.status(), "state") == "closed"
    })
    .await;
    sleep(300).await;
    assert!(
        !exists(db).await,
        "the database was recreated under the client"
    );
}

#[wasm_bindgen_test]
async fn a_database_deleted_under_the_client_is_reported_lost_and_never_recreated() {
    let db = db_name("storage-deleted");
    let client = open(&db, r#"{"offline":true}"#).await;
    let seen = listen_storage(&JsValue::from(client.clone()));
    let (t, a, b) = (uuid(), uuid(), uuid());
    ok(client.append(aggregate(&t, &a), events(2))).await;
    ok(client.append(aggregate(&t, &b), events(3))).await;

    within(delete_raw(&db), 5_000, "the delete").await.unwrap();
    let mut expected = vec![(a, 1.0, 2.0, 2.0), (b, 1.0, 3.0, 3.0)];
    expected.sort_by(|x, y| x.0.cmp(&y.0));
    assert_lost(&client, &seen, &db, expected).await;
}

#[wasm_bindgen_test]
async fn a_database_gone_when_the_client_reopens_it_is_lost_not_recreated() {
    // As after an eviction: the connection closed under the client, and the database gone
    // before its next operation reopens it.
    let db = db_name("storage-evicted");
    let client = open(&db, r#"{"offline":true}"#).await;
    let seen = listen_storage(&JsValue::from(client.clone()));
    let (t, a) = (uuid(), uuid());
    ok(client.append(aggregate(&t, &a), events(5))).await;

    upgrade_raw(&db, 5_000).await;
    until(5_000, "the storage event `reopening`", || {
        states(&seen).first().map(String::as_str) == Some("reopening")
    })
    .await;
    within(delete_raw(&db), 5_000, "the delete").await.unwrap();
    // The next operation tries to reopen and finds nothing.
    let e = err(client.append(aggregate(&t, &a), events(1))).await;
    assert_eq!(string(&e, "code"), "STORAGE_LOST", "{}", describe(&e));
    assert_lost(&client, &seen, &db, vec![(a, 1.0, 5.0, 5.0)]).await;
    assert_eq!(states(&seen), vec!["reopening", "lost"]);
}

#[wasm_bindgen_test]
async fn a_database_recreated_before_the_client_reopens_it_is_lost_not_adopted() {
    // The connection closed under the client, the database deleted, and another context
    // opening a new client on the same name (a new database, a new identity) before this
    // client's next operation reopens it: that database is not this client's.
    let db = db_name("storage-recreated");
    let client = open(&db, r#"{"offline":true}"#).await;
    let seen = listen_storage(&JsValue::from(client.clone()));
    let (t, a) = (uuid(), uuid());
    ok(client.append(aggregate(&t, &a), events(2))).await;

    upgrade_raw(&db, 5_000).await;
    until(5_000, "the storage event `reopening`", || {
        states(&seen).first().map(String::as_str) == Some("reopening")
    })
    .await;
    within(delete_raw(&db), 5_000, "the delete").await.unwrap();
    let other = open(&db, r#"{"offline":true}"#).await;
    assert_ne!(other.client_id(), client.client_id(), "a new identity");

    let e = err(client.append(aggregate(&t, &a), events(1))).await;
    assert_eq!(string(&e, "code"), "STORAGE_LOST", "{}", describe(&e));
    assert_eq!(states(&seen), vec!["reopening", "lost"]);
    assert_eq!(
        outbox_events(&db).await,
        0,
        "nothing written into the other database"
    );
    ok(other.close()).await;
}

#[wasm_bindgen_test]
async fn inspect_shows_persisted_and_the_storage_estimate() {
    let client = open(&db_name("storage-inspect"), r#"{"offline":true}"#).await;
    let snap = ok(client.inspect(None)).await;
    let persisted = get(&snap, "persisted");
    assert!(
        persisted.is_null() || persisted.as_bool().is_some(),
        "{persisted:?}"
    );
    // What the engine itself answers decides what inspect() must show: WebKitGTK's
    // WebDriver build has no `navigator.storage.estimate()`, Chromium and Firefox do.
    let estimate = get(&snap, "estimate");
    let engine = ok(engine_estimate()).await;
    if engine.is_null() {
        assert!(estimate.is_null(), "no estimate() here: {estimate:?}");
    } else {
        assert!(
            estimate.is_object(),
            "the engine has estimate(): {estimate:?}"
        );
        for key in ["usage", "quota"] {
            let v = get(&estimate, key);
            assert!(v.as_f64().is_some_and(|n| n >= 0.0), "{key}: {v:?}");
        }
    }
    assert_eq!(string(&get(&snap, "storage"), "state"), "ok");
    assert!(get(&get(&snap, "storage"), "lost").is_null());
    ok(client.close()).await;
}

/// Polls `open_database(name, must_exist)` once, lets it sit unpolled for `idle_ms` (events of
/// the request fire meanwhile), then drops it — a drain's operation dropped mid-reopen on
/// `close()` or a takeover.
async fn drop_open_midway(name: &str, must_exist: bool, idle_ms: u32) {
    let mut open = Box::pin(open_database(name, must_exist));
    assert!(futures_util::poll!(open.as_mut()).is_pending());
    sleep(idle_ms).await;
    drop(open);
}

#[wasm_bindgen_test]
async fn a_reopen_dropped_before_its_upgrade_creates_nothing_and_leaves_nothing_open() {
    // The request runs on after its future is dropped: without the guard (`guardOpen`,
    // src/browser/glue.js) nothing of ours handles its upgrade or closes its connection.
    let db = db_name("storage-dropped-reopen");
    drop_open_midway(&db, true, 0).await;
    sleep(300).await;
    assert!(!exists(&db).await, "a dropped reopen created the database");
    within(
        delete_raw(&db),
        2_000,
        "the delete (blocked by a leaked connection?)",
    )
    .await
    .unwrap();
}

#[wasm_bindgen_test]
async fn an_open_dropped_after_it_succeeded_but_before_it_was_taken_is_closed() {
    // The open succeeds while its future sits unpolled; dropped then, the connection it made
    // is nobody's and must be closed (else it blocks deletes and other contexts' upgrades).
    let db = db_name("storage-dropped-open");
    open_database(&db, false).await.unwrap().close();
    drop_open_midway(&db, true, 300).await;
    drop_open_midway(&db, false, 300).await;
    within(
        delete_raw(&db),
        2_000,
        "the delete (blocked by a leaked connection?)",
    )
    .await
    .unwrap();
}

/// A `Db` on a new database whose `meta` client id is bound (so that a reopen checks its
/// incarnation), its connection closed under it by another context's upgrade, and `meta` to be
/// held by another connection for up to `hold_ms` from the reopen on: the next operation
/// reopens and then waits in its incarnation check. Returns the hold (`{ held, done }`).
async fn reopen_stuck_in_its_incarnation_check(name: &str, hold_ms: u32) -> (Db, JsValue) {
    let db = Db::open(name).await.unwrap();
    let id = JsValue::from_str(&uuid());
    insert_raw(name, schema::META, &id, Some(&schema::CLIENT_ID_KEY.into())).await;
    db.bind_incarnation(id);
    upgrade_raw(name, 5_000).await;
    assert_eq!(db.storage(), Storage::Reopening);
    let hold = ok(hold_store_on_next_open(name, schema::META, hold_ms)).await;
    (db, hold)
}

/// Reads `meta` through `db` (the operation that reopens it).
async fn read_meta(db: &Db) -> Result<(), String> {
    db.read(&stores(&[schema::META]), async |_| Ok(()))
        .await
        .map_err(|e| format!("{e:?}"))
}

#[wasm_bindgen_test]
async fn a_reopen_dropped_during_its_incarnation_check_leaves_no_connection_open() {
    // The client closes (its drain's operation dropped) while a reopen checks whether the
    // database is still its own: the connection reopened must not outlive it.
    let name = db_name("storage-dropped-check");
    let (db, hold) = reopen_stuck_in_its_incarnation_check(&name, 5_000).await;
    let read = Box::pin(read_meta(&db));
    match select(read, Box::pin(sleep(300))).await {
        Either::Left((r, _)) => panic!("the read did not wait for the held store: {r:?}"),
        Either::Right((_, read)) => drop(read),
    }
    assert!(ok(get(&hold, "held").unchecked_into()).await.is_truthy());
    db.close();
    within(
        delete_raw(&name),
        2_000,
        "the delete (blocked by a leaked connection?)",
    )
    .await
    .unwrap();
    ok(get(&hold, "done").unchecked_into()).await;
}

#[wasm_bindgen_test]
async fn a_reopen_yields_to_another_upgrade_during_its_incarnation_check_then_reopens() {
    // Another context upgrades while the reopened connection is being checked: it closes at
    // once (the upgrade goes through) and is not adopted; the operation reopens again.
    let name = db_name("storage-upgrade-during-check");
    let (db, hold) = reopen_stuck_in_its_incarnation_check(&name, 5_000).await;
    let upgrade = async {
        sleep(300).await;
        upgrade_raw(&name, 2_000).await
    };
    let (read, upgraded) = join(read_meta(&db), upgrade).await;
    assert!(ok(get(&hold, "held").unchecked_into()).await.is_truthy());
    assert_eq!(num(&upgraded, "version"), f64::from(schema::VERSION + 2));
    assert_eq!(read, Ok(()));
    assert_eq!(db.storage(), Storage::Ok);
    assert_eq!(read_meta(&db).await, Ok(()));
    ok(get(&hold, "done").unchecked_into()).await;
    db.close();
}
