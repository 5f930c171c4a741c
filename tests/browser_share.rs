//! Sharing against the real gateway (`share`, `acceptShare`, `unshare`, `members`): an owner
//! shares an aggregate of a `members` type (`tests/browser/policy.toml`) with another device,
//! which can read it (and append with `readWrite`) only once it accepted the share; unsharing
//! takes that away; a pre-created id shared with its victim does not take the victim's writes; a non-owner's share
//! and a stranger's are refused typed; offline, and with bad input, nothing is sent. And a change
//! stream's refusals (`ready.refused`) reach the app typed, in `status().read.refused`. And a
//! device the operator revokes is `unauthorized` with 40103, its events kept, until lifted.
#![cfg(target_arch = "wasm32")]

mod browser;

use browser::*;
use celeriant_sync::SyncClient;
use js_sys::Array;
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen(module = "/tests/browser/support.js")]
extern "C" {
    #[wasm_bindgen(js_name = countMembersRequests)]
    fn count_members_requests() -> JsValue;
    #[wasm_bindgen(js_name = asOperator)]
    fn as_operator_js(gateway: &str, secret: &str, path: &str, body: &JsValue) -> js_sys::Promise;
}

/// The browser gateway's operator secret (`CELERIANT_TEST_OPERATOR_SECRET` at build time).
fn operator_secret() -> &'static str {
    match option_env!("CELERIANT_TEST_OPERATOR_SECRET") {
        Some(secret) => secret,
        None => panic!("run the browser tests through scripts/browser-tests.sh"),
    }
}

/// `POST path` with the operator credential: (status, body).
async fn as_operator(path: &str, body: &str) -> (f64, JsValue) {
    let answer = ok(as_operator_js(
        gateway(),
        operator_secret(),
        path,
        &json(body),
    ))
    .await;
    (num(&answer, "status"), get(&answer, "body"))
}

fn restore(log: &JsValue) {
    let f: js_sys::Function = get(log, "restore").unchecked_into();
    f.call0(log).unwrap();
}

/// A type the browser gateway's policy makes `members`.
const MEMBERS_TYPE: &str = "5a4ed000-0000-4000-8000-00000000b002";

fn me(client: &SyncClient) -> String {
    format!("device:{}", client.client_id())
}

async fn append_text(client: &SyncClient, agg: &JsValue, text: &str) {
    let event = object(&[("type", 1.into()), ("data", text.into())]);
    ok(client.append(agg.clone(), Array::of1(&event).into())).await;
}

/// The events of the view `read` answers after a catch-up (not from the cache).
async fn server_view(client: &SyncClient, agg: &JsValue) -> (usize, bool) {
    let view = ok(client.read(agg.clone())).await;
    let events = get(&view, "events").unchecked_into::<Array>();
    let confirmed = events
        .iter()
        .filter(|e| get(e, "status").as_string().as_deref() == Some("confirmed"))
        .count();
    (confirmed, get(&view, "fromCache").as_bool().unwrap())
}

/// How many members a `Members` answer lists.
fn member_count(record: &JsValue) -> u32 {
    js_sys::Object::keys(get(record, "members").unchecked_ref::<js_sys::Object>()).length()
}

/// How many invitations a `Members` answer lists.
fn invited_count(record: &JsValue) -> u32 {
    js_sys::Object::keys(get(record, "invited").unchecked_ref::<js_sys::Object>()).length()
}

fn code(error: &JsValue) -> String {
    assert_eq!(
        get(error, "name").as_string().as_deref(),
        Some("CeleriantSyncError"),
        "{}",
        describe(error)
    );
    string(error, "code")
}

#[wasm_bindgen_test]
async fn an_owner_shares_reads_and_writes_and_takes_them_back() {
    let owner = open(&db_name("share-owner"), "{}").await;
    let friend = open(&db_name("share-friend"), "{}").await;
    let reader = open(&db_name("share-reader"), "{}").await;
    let stranger = open(&db_name("share-stranger"), "{}").await;
    let agg = aggregate(MEMBERS_TYPE, &uuid());
    append_text(&owner, &agg, "one").await;
    ok(owner.flush()).await;

    // Before any share: the others see nothing of it.
    assert_eq!(server_view(&friend, &agg).await, (0, false));
    let e = err(friend.members(agg.clone())).await;
    assert_eq!(code(&e), "NOT_FOUND");
    assert_eq!(num(&e, "serverCode"), 40400.0);

    // readWrite to the friend, read to the reader: invitations, nothing until accepted.
    let shared = ok(owner.share(agg.clone(), me(&friend).into(), "readWrite".into())).await;
    assert_eq!(string(&shared, "owner"), me(&owner));
    assert_eq!(string(&get(&shared, "invited"), &me(&friend)), "readWrite");
    assert_eq!(member_count(&shared), 0);
    let shared = ok(owner.share(agg.clone(), me(&reader).into(), "read".into())).await;
    assert_eq!(string(&get(&shared, "invited"), &me(&reader)), "read");
    assert_eq!(server_view(&friend, &agg).await, (0, false));
    append_text(&friend, &agg, "too early").await;
    let e = err(friend.flush()).await;
    assert_eq!((code(&e), num(&e, "parkCode")), ("PARKED".into(), 40302.0));
    ok(friend.discard_parked(agg.clone())).await;
    // The invited device sees who invites it before it accepts.
    let seen = ok(friend.members(agg.clone())).await;
    assert_eq!(string(&seen, "owner"), me(&owner));
    assert_eq!((member_count(&seen), invited_count(&seen)), (0, 1));
    // A stranger has nothing to accept (NOT_FOUND, as for a missing aggregate).
    let e = err(stranger.accept_share(agg.clone())).await;
    assert_eq!(
        (code(&e), num(&e, "serverCode")),
        ("NOT_FOUND".into(), 40400.0)
    );
    let accepted = ok(friend.accept_share(agg.clone())).await;
    assert_eq!(
        string(&get(&accepted, "members"), &me(&friend)),
        "readWrite"
    );
    assert_eq!(invited_count(&accepted), 0);
    ok(reader.accept_share(agg.clone())).await;
    let listed = ok(owner.members(agg.clone())).await;
    assert_eq!((member_count(&listed), invited_count(&listed)), (2, 0));
    // A member sees the owner and its own grant only.
    let seen = ok(friend.members(agg.clone())).await;
    assert_eq!(string(&seen, "owner"), me(&owner));
    assert_eq!(member_count(&seen), 1);

    assert_eq!(server_view(&friend, &agg).await, (1, false));
    assert_eq!(server_view(&reader, &agg).await, (1, false));
    append_text(&friend, &agg, "two").await;
    ok(friend.flush()).await;
    assert_eq!(server_view(&owner, &agg).await, (2, false));
    // A reader's append is refused by the gateway (parked, 40302).
    append_text(&reader, &agg, "not mine").await;
    let e = err(reader.flush()).await;
    assert_eq!(code(&e), "PARKED");
    assert_eq!(num(&e, "parkCode"), 40302.0);

    // Only the owner shares: a member is refused NOT_OWNER, a stranger NOT_FOUND.
    let e = err(friend.share(agg.clone(), me(&stranger).into(), "read".into())).await;
    assert_eq!(
        (code(&e), num(&e, "serverCode")),
        ("NOT_OWNER".into(), 40303.0)
    );
    let e = err(stranger.share(agg.clone(), me(&stranger).into(), "read".into())).await;
    assert_eq!(
        (code(&e), num(&e, "serverCode")),
        ("NOT_FOUND".into(), 40400.0)
    );
    assert_eq!(server_view(&stranger, &agg).await, (0, false));

    // Unshare: the friend may no longer append, nor see the members.
    let after = ok(owner.unshare(agg.clone(), me(&friend).into())).await;
    assert!(get(&get(&after, "members"), &me(&friend)).is_undefined());
    let e = err(friend.members(agg.clone())).await;
    assert_eq!(code(&e), "NOT_FOUND");
    append_text(&friend, &agg, "three").await;
    let e = err(friend.flush()).await;
    assert_eq!((code(&e), num(&e, "parkCode")), ("PARKED".into(), 40302.0));
    assert_eq!(
        server_view(&owner, &agg).await,
        (2, false),
        "nothing more landed"
    );
    for client in [owner, friend, reader, stranger] {
        ok(client.close()).await;
    }
}

#[wasm_bindgen_test]
async fn bad_input_and_offline_fail_at_once_and_send_nothing() {
    let owner = open(&db_name("share-offline"), "{}").await;
    let agg = aggregate(MEMBERS_TYPE, &uuid());
    let cases = [
        ("user:bob", "write", "INVALID_ACCESS"),
        ("bob", "read", "INVALID_PRINCIPAL"),
        ("device:NOT-A-UUID", "read", "INVALID_PRINCIPAL"),
        ("user:", "read", "INVALID_PRINCIPAL"),
    ];
    let requests = count_members_requests();
    for (principal, access, want) in cases {
        let e = err(owner.share(agg.clone(), principal.into(), access.into())).await;
        assert_eq!(code(&e), want, "{principal} {access}");
    }
    let e = err(owner.share(agg.clone(), 7.into(), "read".into())).await;
    assert_eq!(code(&e), "INVALID_PRINCIPAL");
    let e = err(owner.members(json(r#"{"typeId":"x"}"#))).await;
    assert_eq!(code(&e), "INVALID_AGGREGATE");
    owner.set_offline(true.into()).unwrap();
    let e = err(owner.share(agg.clone(), "user:bob".into(), "read".into())).await;
    assert_eq!(code(&e), "OFFLINE");
    assert!(get(&e, "serverCode").is_undefined());
    assert_eq!(
        code(&err(owner.unshare(agg.clone(), "user:bob".into())).await),
        "OFFLINE"
    );
    assert_eq!(code(&err(owner.members(agg.clone())).await), "OFFLINE");
    assert_eq!(code(&err(owner.accept_share(agg.clone())).await), "OFFLINE");
    assert_eq!(num(&requests, "count"), 0.0, "nothing was sent");
    owner.set_offline(false.into()).unwrap();
    // Online again, a share of an aggregate that does not exist yet is NOT_FOUND.
    let e = err(owner.share(agg.clone(), "user:bob".into(), "read".into())).await;
    assert_eq!(code(&e), "NOT_FOUND");
    assert_eq!(num(&requests, "count"), 1.0, "this one was sent");
    // Nothing to accept on a missing aggregate either: NOT_FOUND, 40400.
    let e = err(owner.accept_share(agg.clone())).await;
    assert_eq!(
        (code(&e), num(&e, "serverCode")),
        ("NOT_FOUND".into(), 40400.0)
    );
    assert_eq!(num(&requests, "count"), 2.0, "the acceptance was sent");
    restore(&requests);
    ok(owner.close()).await;
    let e = err(owner.members(agg)).await;
    assert_eq!(code(&e), "CLOSED");
}

/// The takeover a share must not allow: A creates the id B's app will use, shares it with B
/// `readWrite`; B's first append (its app "creating" the aggregate) is refused, parked with
/// 40302, and A reads nothing of B's.
#[wasm_bindgen_test]
async fn a_pre_created_id_shared_with_its_victim_does_not_take_the_victims_writes() {
    let attacker = open(&db_name("takeover-attacker"), "{}").await;
    let victim = open(&db_name("takeover-victim"), "{}").await;
    let agg = aggregate(MEMBERS_TYPE, &uuid());
    append_text(&attacker, &agg, "bait").await;
    ok(attacker.flush()).await;
    ok(attacker.share(agg.clone(), me(&victim).into(), "readWrite".into())).await;

    append_text(&victim, &agg, "the victim's secret").await;
    let e = err(victim.flush()).await;
    assert_eq!((code(&e), num(&e, "parkCode")), ("PARKED".into(), 40302.0));
    let view = ok(attacker.read(agg.clone())).await;
    let events = get(&view, "events").unchecked_into::<Array>();
    assert_eq!(events.length(), 1, "{}", describe(&view));
    // The one event is the attacker's own (the victim's device wrote none of it).
    assert_eq!(string(&events.get(0), "clientId"), attacker.client_id());
    let seen = js_sys::JSON::stringify(&view).unwrap().as_string().unwrap();
    assert!(!seen.contains(&victim.client_id()), "{seen}");
    ok(attacker.close()).await;
    ok(victim.close()).await;
}

/// `status().read.refused` of `client`, as (aggregate id, code) pairs.
fn refused(client: &SyncClient) -> Vec<(String, f64)> {
    let status = client.status();
    get(&get(&status, "read"), "refused")
        .unchecked_into::<Array>()
        .iter()
        .map(|r| (string(&get(&r, "aggregate"), "id"), num(&r, "code")))
        .collect()
}

#[wasm_bindgen_test]
async fn a_change_stream_refusal_reaches_the_app_typed_and_clears_once_allowed() {
    let owner = open(&db_name("refused-owner"), "{}").await;
    let other = open(&db_name("refused-other"), "{}").await;
    let id = uuid();
    let agg = aggregate(MEMBERS_TYPE, &id);
    append_text(&owner, &agg, "private").await;
    ok(owner.flush()).await;
    let seen = listen(&other.clone().into());

    // Another device watches it: the gateway refuses it in `ready`, and the app sees why.
    let listener = Closure::<dyn FnMut(JsValue)>::new(|_| {}).into_js_value();
    let unsubscribe: js_sys::Function = other
        .subscribe(agg.clone(), listener.clone().unchecked_into())
        .unwrap()
        .unchecked_into();
    until(10_000, "the refusal in status().read.refused", || {
        refused(&other) == [(id.clone(), 40302.0)]
    })
    .await;
    let reported = list(&seen, "status").iter().any(|s| {
        let list = get(&get(s, "read"), "refused").unchecked_into::<Array>();
        list.length() == 1 && num(&list.get(0), "code") == 40302.0
    });
    assert!(reported, "a status event carried the refusal");
    assert_eq!(server_view(&other, &agg).await, (0, false));

    // Shared and accepted, and watched anew (the subscription set changes): nothing refused
    // any more.
    ok(owner.share(agg.clone(), me(&other).into(), "read".into())).await;
    ok(other.accept_share(agg.clone())).await;
    unsubscribe.call0(&JsValue::NULL).unwrap();
    let again: js_sys::Function = other
        .subscribe(agg.clone(), listener.unchecked_into())
        .unwrap()
        .unchecked_into();
    until(10_000, "no refusal once shared", || {
        refused(&other).is_empty()
    })
    .await;
    assert_eq!(server_view(&other, &agg).await, (1, false));
    // The owner's own stream of it was never refused.
    assert!(refused(&owner).is_empty());
    again.call0(&JsValue::NULL).unwrap();
    ok(owner.close()).await;
    ok(other.close()).await;
}

#[wasm_bindgen_test]
async fn a_revoked_device_waits_unauthorized_with_its_events_until_the_revocation_is_lifted() {
    let client = open(&db_name("revoked"), r#"{"maxBackoffMs": 1000}"#).await;
    // A type of the gateway's default (`authenticated-read`), so the tests' reader sees it.
    let (type_id, id) = (uuid(), uuid());
    let agg = aggregate(&type_id, &id);
    append_text(&client, &agg, "before").await;
    ok(client.flush()).await;
    let device = format!(r#"{{"kind":"device","id":"{}"}}"#, client.client_id());
    let (status, record) = as_operator("/v1/revocations", &device).await;
    assert_eq!(status, 200.0, "{record:?}");

    append_text(&client, &agg, "while revoked").await;
    until(15_000, "state unauthorized with 40103", || {
        let status = client.status();
        let code = get(&get(&status, "lastError"), "code").as_f64();
        string(&status, "state") == "unauthorized" && code == Some(40103.0)
    })
    .await;
    assert_eq!(num(&client.status(), "pending"), 1.0, "the event is kept");
    assert_eq!(
        read_all(&type_id, &id).await.len(),
        1,
        "nothing more landed"
    );

    let (status, _) = as_operator("/v1/revocations/lift", &device).await;
    assert_eq!(status, 200.0);
    let landed = within(client.flush(), 20_000, "the event lands once lifted").await;
    assert!(landed.is_ok(), "{}", describe(&landed.unwrap_err()));
    assert_eq!(read_all(&type_id, &id).await.len(), 2);
    ok(client.close()).await;
}
