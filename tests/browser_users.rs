//! One browser, many users, against a real gateway that requires app tokens
//! (`CELERIANT_TEST_APP_GATEWAY`, HS256, started by scripts/browser-tests.sh): a database is
//! bound to the first user whose session it sees (or to `open`'s `user`), another user's session
//! is never used for its events (`wrongUser`), and `signOut` / `deleteDatabase` delete it.
#![cfg(target_arch = "wasm32")]

mod browser;

use browser::*;
use celeriant_sync::SyncClient;
use js_sys::{Array, Promise, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen(module = "/tests/browser/support.js")]
extern "C" {
    #[wasm_bindgen(js_name = signIn)]
    fn sign_in(secret: &str, user: &str) -> JsValue;
    #[wasm_bindgen(js_name = appToken)]
    fn app_token(secret: &str, sub: &str) -> Promise;
    #[wasm_bindgen(js_name = readAll)]
    fn read_all_with(gateway: &str, type_id: &str, id: &str, session: &JsValue) -> Promise;
    #[wasm_bindgen(js_name = openSession)]
    fn open_session(gateway: &str, options: &JsValue) -> Promise;
}

/// Options without `user`: refused when `auth` is given.
const FAST: &str = r#"{"maxBackoffMs":1000}"#;

/// The gateway with app tokens on, and its HS256 secret.
fn app_gateway() -> (&'static str, &'static str) {
    match (
        option_env!("CELERIANT_TEST_APP_GATEWAY"),
        option_env!("CELERIANT_TEST_APP_SECRET"),
    ) {
        (Some(gateway), Some(secret)) => (gateway, secret),
        _ => panic!("run the browser tests through `npm test`, which starts the app-token gateway"),
    }
}

/// Opens `db` on the app-token gateway with `signed_in`'s `auth` callback and extra options.
async fn open_as(db: &str, signed_in: &JsValue, extra: &str) -> Result<SyncClient, JsValue> {
    let options = json(extra);
    Reflect::set(&options, &"gatewayUrl".into(), &app_gateway().0.into()).unwrap();
    Reflect::set(&options, &"databaseName".into(), &db.into()).unwrap();
    Reflect::set(&options, &"auth".into(), &get(signed_in, "auth")).unwrap();
    SyncClient::open(options).await
}

/// Every event of an aggregate on the app-token gateway, read with a session of `user`'s.
async fn stored(t: &str, a: &str, user: &str) -> Vec<JsValue> {
    let (gateway, secret) = app_gateway();
    let token = ok(app_token(secret, user)).await;
    let session = ok(open_session(gateway, &object(&[("appToken", token)]))).await;
    let events = ok(read_all_with(gateway, t, a, &session)).await;
    Array::from(&events).iter().collect()
}

#[wasm_bindgen_test]
async fn events_appended_under_one_user_never_leave_under_anothers_session() {
    let (_, secret) = app_gateway();
    let db = db_name("users-switch");
    let (t, a) = (uuid(), uuid());
    let signed_in = sign_in(secret, "alice");
    let as_alice = r#"{"user":"alice","maxBackoffMs":1000}"#;
    let client = open_as(&db, &signed_in, as_alice).await.unwrap();
    ok(client.append(aggregate(&t, &a), Array::of1(&bytes_event(1, &[1])).into())).await;
    flush_within(&client, 30).await;
    ok(client.close()).await;

    // Alice's database is opened again, for Alice, and she appends while offline-ish; but the
    // app's sign-in now hands out Bob's tokens (Bob signed in on this browser meanwhile). The
    // drain's new session is Bob's: it must not send Alice's waiting event under it.
    Reflect::set(&signed_in, &"user".into(), &"bob".into()).unwrap();
    let client = open_as(&db, &signed_in, as_alice).await.unwrap();
    ok(client.append(aggregate(&t, &a), Array::of1(&bytes_event(1, &[2])).into())).await;
    until(10_000, "state wrongUser", || {
        string(&client.status(), "state") == "wrongUser"
    })
    .await;
    let status = client.status();
    assert_eq!(
        num(&status, "pending"),
        1.0,
        "kept, not parked, not dropped"
    );
    assert_eq!(num(&status, "parked"), 0.0);
    let message = string(&get(&status, "lastError"), "message");
    assert!(
        message.contains("user:bob") && message.contains("user:alice"),
        "{message}"
    );
    sleep(1_500).await;
    assert_eq!(
        stored(&t, &a, "alice").await.len(),
        1,
        "the second event was not sent under Bob's session"
    );
    assert_eq!(string(&client.status(), "state"), "wrongUser");

    // Alice signs in again: the drain's next attempt opens her session and sends it, once.
    Reflect::set(&signed_in, &"user".into(), &"alice".into()).unwrap();
    flush_within(&client, 60).await;
    let seqs: Vec<f64> = stored(&t, &a, "alice")
        .await
        .iter()
        .map(|e| num(e, "clientSeq"))
        .collect();
    assert_eq!(seqs, [1.0, 2.0], "landed once each, under Alice");
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn open_with_another_users_name_is_refused_and_changes_nothing() {
    let (_, secret) = app_gateway();
    let db = db_name("users-open");
    let (t, a) = (uuid(), uuid());
    // Bound at open, before any session: an event appended offline is Alice's already.
    let alice = sign_in(secret, "alice");
    let client = open_nowhere(&db, r#"{"user":"alice"}"#).await;
    ok(client.append(aggregate(&t, &a), Array::of1(&bytes_event(1, &[1])).into())).await;
    ok(client.close()).await;

    let bob = sign_in(secret, "bob");
    let refused = open_as(&db, &bob, r#"{"user":"bob"}"#).await.err().unwrap();
    assert_eq!(
        string(&refused, "code"),
        "WRONG_USER",
        "{}",
        describe(&refused)
    );
    // With app tokens the user must be named: bound only at the first session, Alice's
    // offline event would go out as whoever's session came first.
    let unnamed = open_as(&db, &bob, FAST).await.err().unwrap();
    assert_eq!(
        string(&unnamed, "code"),
        "INVALID_OPTIONS",
        "{}",
        describe(&unnamed)
    );
    let client = open_as(&db, &alice, r#"{"user":"alice","maxBackoffMs":1000}"#)
        .await
        .unwrap();
    flush_within(&client, 60).await;
    assert_eq!(stored(&t, &a, "alice").await.len(), 1);
    for bad in [r#"{"user":""}"#, "{\"user\":\"a\\nb\"}", r#"{"user":7}"#] {
        let e = open_as(&db, &alice, bad).await.err().unwrap();
        assert_eq!(string(&e, "code"), "INVALID_OPTIONS", "{bad}");
    }
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn sign_out_refuses_to_lose_pending_events_unless_told_and_then_deletes_everything() {
    let db = db_name("users-signout");
    let (t, a) = (uuid(), uuid());
    let client = open_nowhere(&db, r#"{"user":"carol"}"#).await;
    let id = client.client_id();
    ok(client.append(aggregate(&t, &a), Array::of1(&bytes_event(1, &[1])).into())).await;
    let refused = err(client.sign_out(JsValue::UNDEFINED)).await;
    assert_eq!(
        string(&refused, "code"),
        "PENDING_EVENTS",
        "{}",
        describe(&refused)
    );
    assert_eq!(num(&client.status(), "pending"), 1.0, "nothing changed");
    let bad = err(client.sign_out(json(r#"{"discard":true}"#))).await;
    assert_eq!(string(&bad, "code"), "INVALID_OPTIONS");
    ok(client.sign_out(json(r#"{"discardPending":true}"#))).await;
    let closed =
        err(client.append(aggregate(&t, &a), Array::of1(&bytes_event(1, &[2])).into())).await;
    assert_eq!(string(&closed, "code"), "CLOSED");

    // Gone: the same name opens as a new, empty database of a new device, bound to no one.
    let client = open_nowhere(&db, r#"{"user":"dave"}"#).await;
    assert_ne!(
        client.client_id(),
        id,
        "the device key went with the database"
    );
    assert_eq!(num(&client.status(), "pending"), 0.0);
    ok(client.close()).await;
    ok(SyncClient::delete_database_named(db.into())).await;
}

#[wasm_bindgen_test]
async fn deleting_a_database_closes_the_clients_still_open_on_it() {
    let db = db_name("users-delete");
    let (t, a) = (uuid(), uuid());
    // Two clients on one database (as two tabs would be): one drains, one follows.
    let first = open(&db, "{}").await;
    let second = open(&db, "{}").await;
    ok(first.append(aggregate(&t, &a), Array::of1(&bytes_event(1, &[1])).into())).await;
    flush_within(&first, 30).await;
    ok(SyncClient::delete_database_named(db.clone().into())).await;
    // Both close themselves: no zombie keeps the drain lock, and their calls reject
    // STORAGE_LOST (the database went away under them; `client.storage` says what was pending).
    until(5_000, "both closed", || {
        string(&first.status(), "state") == "closed"
            && string(&second.status(), "state") == "closed"
    })
    .await;
    let closed =
        err(first.append(aggregate(&t, &a), Array::of1(&bytes_event(1, &[2])).into())).await;
    assert_eq!(
        string(&closed, "code"),
        "STORAGE_LOST",
        "{}",
        describe(&closed)
    );
    assert_eq!(string(&first.storage(), "state"), "lost");
    assert_eq!(
        num(&get(&first.storage(), "lost"), "pending"),
        0.0,
        "it had synced"
    );
    assert!(
        !store_names(&db).await.contains(&"outbox".to_owned()),
        "not re-created by the open clients"
    );
    // (That look opened an empty database of its own: gone again before the next client.)
    ok(SyncClient::delete_database_named(db.clone().into())).await;
    // The next client on that name is a new device and drains at once (no one holds the lock).
    let next = open(&db, "{}").await;
    let (t2, a2) = (uuid(), uuid());
    ok(next.append(
        aggregate(&t2, &a2),
        Array::of1(&bytes_event(1, &[3])).into(),
    ))
    .await;
    flush_within(&next, 30).await;
    ok(next.close()).await;
    ok(SyncClient::delete_database_named(db.into())).await;
    let empty = err(SyncClient::delete_database_named("".into())).await;
    assert_eq!(string(&empty, "code"), "INVALID_OPTIONS");
}
