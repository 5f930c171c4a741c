//! Device identity in the browser, against the real gateway with device identity on: the key
//! (WebCrypto, non-extractable, kept in the outbox's database), the client id derived from it,
//! sessions opened and renewed without ever parking, dropping or renumbering an event, the app's
//! `auth` callback, and a database made before device keys.
#![cfg(target_arch = "wasm32")]

mod browser;

use browser::*;
use js_sys::{Array, Promise, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen(module = "/tests/browser/support.js")]
extern "C" {
    #[wasm_bindgen(js_name = clientIdOf)]
    fn client_id_of(spki: &Uint8Array) -> Promise;
}

#[wasm_bindgen(
    inline_js = "export function base64ToBytes(s) { return Uint8Array.from(atob(s), (c) => c.charCodeAt(0)); }"
)]
extern "C" {
    #[wasm_bindgen(js_name = base64ToBytes)]
    fn base64_to_bytes(s: &str) -> Uint8Array;
}

#[wasm_bindgen_test]
async fn a_fresh_database_gets_a_non_extractable_key_and_the_client_id_derived_from_it() {
    let db = db_name("identity");
    let client = open(&db, "{}").await;
    let (id, public_key) = (client.client_id(), client.public_key());
    let derived = ok(client_id_of(&base64_to_bytes(&public_key))).await;
    assert_eq!(
        derived.as_string().unwrap(),
        id,
        "SHA-256(SPKI)[0..16], little-endian"
    );
    let device = get_raw(&db, "meta", &"device".into()).await;
    let key_pair = get(&device, "keyPair");
    assert_eq!(
        get(&get(&key_pair, "privateKey"), "extractable"),
        JsValue::FALSE,
        "the private key cannot be read, even by this library"
    );
    assert_eq!(
        string(&get(&get(&key_pair, "privateKey"), "algorithm"), "name"),
        "RSASSA-PKCS1-v1_5"
    );
    assert_eq!(
        num(
            &get(&get(&key_pair, "publicKey"), "algorithm"),
            "modulusLength"
        ),
        2048.0
    );
    ok(client.close()).await;
    let again = open(&db, "{}").await;
    assert_eq!(again.client_id(), id, "a reload keeps the id");
    assert_eq!(again.public_key(), public_key, "and the key");
    ok(again.close()).await;
    let other = open(&db_name("identity-other"), "{}").await;
    assert_ne!(other.client_id(), id, "another database, another device");
    ok(other.close()).await;
}

#[wasm_bindgen_test]
async fn two_contexts_opening_a_fresh_database_at_once_end_up_with_one_identity() {
    let db = db_name("identity-race");
    let options = json(&format!(
        r#"{{"gatewayUrl":"{}","databaseName":"{db}"}}"#,
        gateway()
    ));
    let (a, b) = futures_util::future::join(
        celeriant_sync::SyncClient::open(options.clone()),
        celeriant_sync::SyncClient::open(options),
    )
    .await;
    let (a, b) = (a.unwrap(), b.unwrap());
    assert_eq!(a.client_id(), b.client_id());
    assert_eq!(a.public_key(), b.public_key());
    ok(a.close()).await;
    ok(b.close()).await;
}

#[wasm_bindgen_test]
async fn writes_carry_a_session_and_an_expired_one_is_renewed_with_the_batch_resent_identically() {
    no_faults().await;
    let db = db_name("renew");
    let (t, a) = (uuid(), uuid());
    // The first write reaches the gateway and lands, but its answer says the session expired
    // (as after a secret rotation): the client must open a new session and send the very same
    // bytes again, which the gateway answers 2002 — nothing lands twice.
    let expired = json(
        r#"[{"realThen":{"status":401,"body":{"outcome":"unauthorized","code":40102,"message":"the session expired"}}}]"#,
    );
    let log = script_writes(&expired.unchecked_into::<Array>());
    let client = open(&db, "{}").await;
    let events: Array = (0..5).map(|i| bytes_event(1, &[i])).collect();
    ok(client.append(aggregate(&t, &a), events.into())).await;
    flush_within(&client, 30).await;
    restore(&log);
    let bodies = raw_bodies(&log);
    assert_eq!(bodies.len(), 2, "sent, then resent once");
    assert_eq!(bodies[0], bodies[1], "byte for byte");
    let tokens: Vec<String> = list(&log, "tokens")
        .iter()
        .map(|t| t.as_string().expect("every write carries Authorization"))
        .collect();
    assert!(tokens.iter().all(|t| t.starts_with("Bearer ")));
    // (Two sessions of one device issued within the same second may carry the same token.)
    assert_eq!(num(&log, "sessions"), 2.0, "one session, then its renewal");
    let landed = read_all(&t, &a).await;
    assert_eq!(landed.len(), 5, "each event once");
    assert!(
        landed
            .iter()
            .all(|e| string(e, "clientId") == client.client_id()),
        "written under the device's own id"
    );
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn a_device_clock_ten_minutes_slow_is_corrected_from_the_gateways_server_time() {
    no_faults().await;
    let db = db_name("skew");
    let (t, a) = (uuid(), uuid());
    // Nonces are this device's time: ten minutes slow, the first is refused (40111, at most
    // 2 minutes old), and the refusal's serverTime must correct the next one at once; without
    // the correction every nonce would be refused and nothing would ever land.
    let skew = skew_clock(-600_000.0);
    let log = script_writes(&Array::new());
    let client = open(&db, "{}").await;
    let events: Array = (0..3).map(|i| bytes_event(1, &[i])).collect();
    ok(client.append(aggregate(&t, &a), events.into())).await;
    flush_within(&client, 30).await;
    let sessions = num(&log, "sessions");
    restore(&log);
    restore(&skew);
    assert_eq!(
        sessions, 2.0,
        "one nonce refused as stale, the corrected one accepted"
    );
    let seqs: Vec<f64> = read_all(&t, &a)
        .await
        .iter()
        .map(|e| num(e, "clientSeq"))
        .collect();
    assert_eq!(seqs, [1.0, 2.0, 3.0], "landed once, in order");
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn a_failing_auth_callback_leaves_the_events_pending_as_unauthorized_until_it_recovers() {
    no_faults().await;
    let db = db_name("auth-callback");
    let (t, a) = (uuid(), uuid());
    // The app's own sign-in is down: its callback rejects. Then it recovers.
    let down = js_sys::eval(
        "(() => { const s = { up: false, calls: 0 }; \
         s.auth = async () => { s.calls += 1; if (!s.up) throw new Error('sign-in is down'); return null; }; \
         return s; })()",
    )
    .unwrap();
    let options = json(&format!(
        r#"{{"gatewayUrl":"{}","databaseName":"{db}","user":"someone"}}"#,
        gateway()
    ));
    js_sys::Reflect::set(&options, &"auth".into(), &get(&down, "auth")).unwrap();
    let client = celeriant_sync::SyncClient::open(options).await.unwrap();
    let events: Array = (0..3).map(|i| bytes_event(1, &[i])).collect();
    ok(client.append(aggregate(&t, &a), events.into())).await;
    until(10_000, "state unauthorized", || {
        string(&client.status(), "state") == "unauthorized"
    })
    .await;
    let status = client.status();
    assert_eq!(
        num(&status, "pending"),
        3.0,
        "nothing parked, nothing dropped"
    );
    assert_eq!(num(&status, "parked"), 0.0);
    assert!(
        string(&get(&status, "lastError"), "message").contains("sign-in is down"),
        "{:?}",
        js_sys::JSON::stringify(&status)
    );
    assert!(read_all(&t, &a).await.is_empty());
    js_sys::Reflect::set(&down, &"up".into(), &JsValue::TRUE).unwrap();
    flush_within(&client, 60).await;
    assert!(num(&down, "calls") >= 2.0, "asked again after failing");
    let seqs: Vec<f64> = read_all(&t, &a)
        .await
        .iter()
        .map(|e| num(e, "clientSeq"))
        .collect();
    assert_eq!(seqs, [1.0, 2.0, 3.0], "landed once, in order, as numbered");
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn a_database_from_before_device_keys_starts_a_new_identity_and_parks_only_its_pinned_batch()
{
    no_faults().await;
    let db = db_name("old-identity");
    let (t, a) = (uuid(), uuid());
    let ids: Vec<String> = (0..5).map(|_| uuid()).collect();
    let content = v1_content(&t, &a, &ids, true);
    let old_id = string(&content, "clientId");
    create_v1(&db, &content).await;
    let client = open(&db, "{}").await;
    assert_ne!(
        client.client_id(),
        old_id,
        "a new identity, from the device key"
    );
    // Sequences 1 and 2 were pinned: they may have landed under the old id, which nothing can
    // prove any more. Resending them under the new id could land them twice: they are parked,
    // flagged, for the app to check.
    let parked: Vec<JsValue> = ok(client.parked_events())
        .await
        .unchecked_into::<Array>()
        .iter()
        .collect();
    assert_eq!(parked.len(), 2);
    for (e, seq) in parked.iter().zip([1.0, 2.0]) {
        assert_eq!(num(e, "clientSeq"), seq);
        assert_eq!(num(e, "code"), 1.0, "IDENTITY_CHANGED");
        assert_eq!(get(e, "mayHaveLanded"), JsValue::TRUE);
    }
    assert_eq!(num(&client.status(), "parked"), 2.0);
    assert_eq!(num(&client.status(), "pending"), 3.0);
    // The app checks the aggregate (nothing of it landed here), discards, and the rest —
    // never sent under the old id — lands under the new one.
    assert!(read_all(&t, &a).await.is_empty());
    let dropped = ok(client.discard_parked(aggregate(&t, &a))).await;
    assert_eq!(dropped.as_f64(), Some(2.0));
    flush_within(&client, 30).await;
    let landed = read_all(&t, &a).await;
    let landed_ids: Vec<String> = landed.iter().map(|e| string(e, "eventId")).collect();
    assert_eq!(landed_ids, ids[2..].to_vec(), "3, 4, 5, once each");
    assert!(
        landed
            .iter()
            .all(|e| string(e, "clientId") == client.client_id())
    );
    ok(client.close()).await;
}
