//! End-to-end encryption (`SyncClient.open({ encryption })`) against the real gateway: `data`
//! is encrypted before it is stored (AES-GCM, a fresh 12-byte nonce in `iv`, the ciphertext
//! followed by its 16-byte tag, which an independent WebCrypto decrypt opens); views and
//! projections show the plaintext; an event that does not decrypt (another key, a key function
//! that throws) is flagged with a typed `decryptError`, never dropped; an append whose
//! encryption fails (or that brings its own `iv`) stores nothing; the option is strict; an
//! event stored in the clear where the aggregate has a key is flagged `NOT_ENCRYPTED`; appends
//! keep call order while they await WebCrypto.
#![cfg(target_arch = "wasm32")]

mod browser;

use browser::*;
use celeriant_sync::SyncClient;
use js_sys::{Array, Function, Promise, Reflect, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen(inline_js = r#"
export function aesKey(usages) {
  return crypto.subtle.generateKey({ name: "AES-GCM", length: 256 }, false, usages || ["encrypt", "decrypt"]);
}
export function cbcKey() {
  return crypto.subtle.generateKey({ name: "AES-CBC", length: 256 }, false, ["encrypt", "decrypt"]);
}
const unb64 = (s) => Uint8Array.from(atob(s), (c) => c.charCodeAt(0));
export function fromBase64(s) { return unb64(s); }
// An independent decrypt of a stored event (base64 iv and data, as the gateway serves them).
export async function openStored(key, iv, data) {
  const plain = await crypto.subtle.decrypt({ name: "AES-GCM", iv: unb64(iv) }, key, unb64(data));
  return new TextDecoder().decode(plain);
}
export function text(bytes) { return new TextDecoder().decode(bytes); }
// A key with own accessors on the key itself: `usages` answering `given` (and, when `given` is
// null, `usages` and `algorithm` throwing). WebCrypto uses the key's internal slots; only code
// that reads the properties runs them.
export function keyWithOwnUsages(key, given) {
  Object.defineProperty(key, "usages", { get() { if (given === null) throw new Error("no"); return given; } });
  if (given === null) Object.defineProperty(key, "algorithm", { get() { throw new Error("no"); } });
  return key;
}
export function withOptions(extra, db, gateway) { return Object.assign({ gatewayUrl: gateway, databaseName: db }, extra); }
"#)]
extern "C" {
    #[wasm_bindgen(js_name = aesKey)]
    fn aes_key_js(usages: &JsValue) -> Promise;
    #[wasm_bindgen(js_name = cbcKey)]
    fn cbc_key_js() -> Promise;
    #[wasm_bindgen(js_name = fromBase64)]
    fn from_base64(s: &str) -> Uint8Array;
    #[wasm_bindgen(js_name = openStored)]
    fn open_stored(key: &JsValue, iv: &str, data: &str) -> Promise;
    #[wasm_bindgen(js_name = text)]
    fn text(bytes: &JsValue) -> String;
    #[wasm_bindgen(js_name = keyWithOwnUsages)]
    fn key_with_own_usages(key: &JsValue, given: &JsValue) -> JsValue;
    #[wasm_bindgen(js_name = withOptions)]
    fn with_options(extra: &JsValue, db: &str, gateway: &str) -> JsValue;
}

async fn aes_key() -> JsValue {
    ok(aes_key_js(&JsValue::UNDEFINED)).await
}

/// Opens a client with these options (JS values, e.g. a `CryptoKey`) besides the gateway and
/// database.
async fn open_with(db: &str, extra: &[(&str, JsValue)]) -> Result<SyncClient, JsValue> {
    SyncClient::open(with_options(&object(extra), db, gateway())).await
}

async fn open_encrypted(db: &str, encryption: JsValue) -> SyncClient {
    match open_with(db, &[("encryption", encryption)]).await {
        Ok(client) => client,
        Err(e) => panic!("open failed: {}", describe(&e)),
    }
}

fn json_event(event_type: u32, data: &str) -> JsValue {
    object(&[("type", event_type.into()), ("data", json(data))])
}

fn events(list: &[JsValue]) -> JsValue {
    list.iter().collect::<Array>().into()
}

async fn view_events(client: &SyncClient, agg: &JsValue) -> Vec<JsValue> {
    let view = ok(client.read(agg.clone())).await;
    get(&view, "events")
        .unchecked_into::<Array>()
        .iter()
        .collect()
}

/// `e.json()` as JSON text.
fn json_of(event: &JsValue) -> String {
    let json = get(event, "json").unchecked_into::<Function>();
    let value = json
        .call0(event)
        .unwrap_or_else(|e| panic!("json() threw {}", describe(&e)));
    js_sys::JSON::stringify(&value)
        .unwrap()
        .as_string()
        .unwrap()
}

fn key_function(body: &str) -> JsValue {
    Function::new_with_args("aggregate", body).into()
}

#[wasm_bindgen_test]
async fn round_trip_in_views_and_projections() {
    no_faults().await;
    let key = aes_key().await;
    let client = open_encrypted(&db_name("enc-round-trip"), key).await;
    let agg = aggregate(SHARED_TYPE, &uuid());
    ok(client.append(
        agg.clone(),
        events(&[json_event(1, r#"{"n":1}"#), json_event(1, r#"{"n":2}"#)]),
    ))
    .await;
    // Pending (from the outbox's ciphertext) and then confirmed (from the server's pages).
    let pending = view_events(&client, &agg).await;
    assert_eq!(pending.len(), 2);
    assert_eq!(json_of(&pending[0]), r#"{"n":1}"#);
    assert_eq!(
        get(&pending[1], "iv")
            .unchecked_into::<Uint8Array>()
            .length(),
        12
    );
    flush_within(&client, 20).await;
    let confirmed = view_events(&client, &agg).await;
    assert_eq!(confirmed.len(), 2);
    for (event, n) in confirmed.iter().zip([1, 2]) {
        assert_eq!(string(event, "status"), "confirmed");
        assert!(get(event, "decryptError").is_undefined());
        assert_eq!(json_of(event), format!(r#"{{"n":{n}}}"#));
    }
    let spec = Function::new_no_args("return { initial: 0, apply: (s, e) => s + e.json().n };")
        .call0(&JsValue::NULL)
        .unwrap();
    let projection = client.project(agg.clone(), spec).unwrap();
    let value = get(&projection, "value").unchecked_into::<Function>();
    let state = ok(value.call0(&projection).unwrap().unchecked_into()).await;
    assert_eq!(
        state.as_f64(),
        Some(3.0),
        "the projection folds the plaintext"
    );
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn the_server_holds_ciphertext_in_celeriants_layout() {
    no_faults().await;
    let key = aes_key().await;
    let client = open_encrypted(&db_name("enc-server"), key.clone()).await;
    let (type_id, id) = (SHARED_TYPE, uuid());
    let agg = aggregate(type_id, &id);
    let plaintext = r#"{"secret":"the same plaintext twice"}"#;
    ok(client.append(
        agg.clone(),
        events(&[json_event(1, plaintext), json_event(1, plaintext)]),
    ))
    .await;
    flush_within(&client, 20).await;
    let stored = read_all(type_id, &id).await;
    assert_eq!(stored.len(), 2);
    let mut seen = Vec::new();
    for event in &stored {
        let data_b64 = string(event, "data");
        let iv_b64 = string(event, "iv");
        let data = from_base64(&data_b64).to_vec();
        let iv = from_base64(&iv_b64).to_vec();
        assert_eq!(iv.len(), 12, "a 12-byte nonce");
        assert_eq!(
            data.len(),
            plaintext.len() + 16,
            "ciphertext then the 16-byte tag"
        );
        assert_ne!(data, plaintext.as_bytes());
        assert!(
            !String::from_utf8_lossy(&data).contains("secret"),
            "no plaintext on the server"
        );
        let opened = ok(open_stored(&key, &iv_b64, &data_b64)).await;
        assert_eq!(opened.as_string().as_deref(), Some(plaintext));
        seen.push((data, iv));
    }
    assert_ne!(
        seen[0].0, seen[1].0,
        "the same plaintext twice: two ciphertexts"
    );
    assert_ne!(seen[0].1, seen[1].1, "a fresh nonce each time");
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn events_that_do_not_decrypt_are_flagged_not_dropped() {
    no_faults().await;
    let encryption = |key: JsValue| object(&[("key", key), ("types", json("[1]"))]);
    let writer = open_encrypted(&db_name("enc-writer"), encryption(aes_key().await)).await;
    let agg = aggregate(SHARED_TYPE, &uuid());
    ok(writer.append(
        agg.clone(),
        events(&[
            json_event(1, r#"{"a":1}"#),
            json_event(2, r#"{"clear":true}"#),
        ]),
    ))
    .await;
    flush_within(&writer, 20).await;
    ok(writer.close()).await;

    // Another device with another key: the encrypted event is flagged, the clear one is fine.
    let other = open_encrypted(&db_name("enc-other"), encryption(aes_key().await)).await;
    let seen = view_events(&other, &agg).await;
    assert_eq!(seen.len(), 2, "nothing is dropped");
    let error = get(&seen[0], "decryptError");
    assert_eq!(string(&error, "code"), "DECRYPT_FAILED");
    assert_eq!(string(&error, "name"), "CeleriantSyncError");
    assert_eq!(
        get(&seen[0], "data")
            .unchecked_into::<Uint8Array>()
            .length() as usize,
        r#"{"a":1}"#.len() + 16,
        "its data is left as stored"
    );
    let json = get(&seen[0], "json").unchecked_into::<Function>();
    let thrown = json
        .call0(&seen[0])
        .expect_err("json() of an undecryptable event throws");
    assert_eq!(string(&thrown, "code"), "DECRYPT_FAILED");
    assert!(get(&seen[1], "decryptError").is_undefined());
    assert_eq!(json_of(&seen[1]), r#"{"clear":true}"#);
    // A subscriber gets the same flagged view, and a projection's apply can skip it.
    let spec = Function::new_no_args(
        "return { initial: 0, apply: (s, e) => e.decryptError ? s + 100 : s + 1 };",
    )
    .call0(&JsValue::NULL)
    .unwrap();
    let projection = other.project(agg.clone(), spec).unwrap();
    let value = get(&projection, "value").unchecked_into::<Function>();
    let state = ok(value.call0(&projection).unwrap().unchecked_into()).await;
    assert_eq!(state.as_f64(), Some(101.0));
    ok(other.close()).await;

    // A key function that throws: flagged KEY_UNAVAILABLE, never thrown into the read.
    let throwing = open_encrypted(
        &db_name("enc-throwing"),
        key_function("throw new Error('vault locked');"),
    )
    .await;
    let seen = view_events(&throwing, &agg).await;
    assert_eq!(seen.len(), 2);
    let error = get(&seen[0], "decryptError");
    assert_eq!(string(&error, "code"), "KEY_UNAVAILABLE");
    assert!(string(&error, "message").contains("vault locked"));
    assert!(
        get(&seen[1], "decryptError").is_undefined(),
        "no iv: not encrypted"
    );
    ok(throwing.close()).await;
}

#[wasm_bindgen_test]
async fn a_failed_encryption_stores_nothing() {
    no_faults().await;
    let agg = aggregate(SHARED_TYPE, &uuid());
    let cases: Vec<(&str, JsValue, &str)> = vec![
        (
            "throws",
            key_function("throw new Error('no key');"),
            "ENCRYPTION_FAILED",
        ),
        (
            "rejects",
            key_function("return Promise.reject(new Error('no key'));"),
            "ENCRYPTION_FAILED",
        ),
        (
            "not-a-key",
            key_function("return 'secret';"),
            "ENCRYPTION_FAILED",
        ),
        // A cache miss or a forgotten return: never "send it in the clear" (that is null).
        (
            "undefined",
            key_function("return undefined;"),
            "ENCRYPTION_FAILED",
        ),
    ];
    for (name, encryption, code) in cases {
        let db = db_name(&format!("enc-fail-{name}"));
        let client = open_encrypted(&db, encryption).await;
        let e = err(client.append(
            agg.clone(),
            events(&[json_event(1, r#"{"n":1}"#), json_event(1, r#"{"n":2}"#)]),
        ))
        .await;
        assert_eq!(string(&e, "code"), code, "{name}: {}", describe(&e));
        assert_eq!(outbox_events(&db).await, 0, "{name}: nothing stored");
        ok(client.close()).await;
    }
    // A key WebCrypto will not encrypt with (decrypt only), from a promise.
    let decrypt_only = ok(aes_key_js(&json(r#"["decrypt"]"#))).await;
    let holder = object(&[("key", decrypt_only)]);
    let db = db_name("enc-fail-usage");
    let client = open_encrypted(
        &db,
        Function::new_with_args("h", "return () => Promise.resolve(h.key);")
            .call1(&JsValue::NULL, &holder)
            .unwrap(),
    )
    .await;
    let e = err(client.append(agg.clone(), events(&[json_event(1, "{}")]))).await;
    assert_eq!(string(&e, "code"), "ENCRYPTION_FAILED", "{}", describe(&e));
    assert!(
        get(&e, "cause").is_object(),
        "WebCrypto's error is the cause"
    );
    assert_eq!(outbox_events(&db).await, 0);
    ok(client.close()).await;

    // The app's own iv on an event the client encrypts: refused, nothing stored.
    let db = db_name("enc-own-iv");
    let client = open_encrypted(&db, aes_key().await).await;
    let with_iv = json_event(1, "{}");
    Reflect::set(&with_iv, &"iv".into(), &Uint8Array::new_with_length(12)).unwrap();
    let e = err(client.append(agg.clone(), events(&[json_event(1, "{}"), with_iv]))).await;
    assert_eq!(string(&e, "code"), "IV_NOT_ALLOWED");
    assert_eq!(num(&e, "index"), 1.0);
    assert_eq!(outbox_events(&db).await, 0);
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn the_option_is_strict_and_null_means_not_encrypted() {
    no_faults().await;
    let key = aes_key().await;
    let refused: Vec<(&str, JsValue)> = vec![
        ("a string", "key".into()),
        (
            "unknown field",
            object(&[("key", key.clone()), ("typo", 1.into())]),
        ),
        (
            "empty types",
            object(&[("key", key.clone()), ("types", json("[]"))]),
        ),
        (
            "type 0",
            object(&[("key", key.clone()), ("types", json("[0]"))]),
        ),
        // Refused before it is copied: copying a sparse 2^32 − 1 would fill the tab's memory.
        (
            "2^32 - 1 types",
            object(&[
                ("key", key.clone()),
                ("types", js_sys::Array::new_with_length(u32::MAX).into()),
            ]),
        ),
        ("no key", object(&[("types", json("[1]"))])),
        ("an AES-CBC key", ok(cbc_key_js()).await),
        // A key that may only encrypt, whose own `usages` accessor says it may decrypt too:
        // the key's real usages decide (web-sys' getter ran the accessor).
        (
            "an encrypt-only key that says otherwise",
            key_with_own_usages(
                &ok(aes_key_js(&json(r#"["encrypt"]"#))).await,
                &json(r#"["encrypt","decrypt"]"#),
            ),
        ),
    ];
    for (what, encryption) in refused {
        let e = open_with(&db_name("enc-options"), &[("encryption", encryption)])
            .await
            .err()
            .unwrap_or_else(|| panic!("{what}: accepted"));
        assert_eq!(
            string(&e, "code"),
            "INVALID_OPTIONS",
            "{what}: {}",
            describe(&e)
        );
    }

    // A good key whose own `usages` and `algorithm` accessors throw: never run, so the key is
    // taken (web-sys' getter ran `usages` and the throw crossed the module's frames: `open`
    // threw "no" instead of returning a promise).
    let odd = key_with_own_usages(&aes_key().await, &JsValue::NULL);
    let client = open_encrypted(&db_name("enc-own-usages"), odd).await;
    ok(client.close()).await;

    // A key function giving null for an aggregate: stored and sent in the clear.
    let (type_id, id) = (SHARED_TYPE, uuid());
    let agg = aggregate(type_id, &id);
    let client = open_encrypted(&db_name("enc-null"), key_function("return null;")).await;
    ok(client.append(agg.clone(), events(&[json_event(1, r#"{"n":7}"#)]))).await;
    flush_within(&client, 20).await;
    let stored = read_all(type_id, &id).await;
    assert_eq!(stored.len(), 1);
    assert!(get(&stored[0], "iv").is_null());
    assert_eq!(
        text(&from_base64(&string(&stored[0], "data"))),
        r#"{"n":7}"#
    );
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn parked_events_are_decrypted_or_flagged_too() {
    set_faults(r#"{"rejectType":13}"#).await;
    let db = db_name("enc-parked");
    let client = open_encrypted(&db, aes_key().await).await;
    let agg = aggregate(SHARED_TYPE, &uuid());
    ok(client.append(agg.clone(), events(&[json_event(13, r#"{"p":1}"#)]))).await;
    let e = within(client.flush(), 15_000, "flush")
        .await
        .expect_err("flush rejects while parked");
    no_faults().await;
    assert_eq!(string(&e, "code"), "PARKED", "{}", describe(&e));
    let parked: Vec<JsValue> = ok(client.parked_events())
        .await
        .unchecked_into::<Array>()
        .iter()
        .collect();
    assert_eq!(parked.len(), 1);
    assert!(get(&parked[0], "decryptError").is_undefined());
    assert_eq!(json_of(&parked[0]), r#"{"p":1}"#);
    assert_eq!(
        get(&parked[0], "iv")
            .unchecked_into::<Uint8Array>()
            .length(),
        12
    );
    ok(client.close()).await;

    // The same database reopened with another key: the parked event is flagged, not dropped.
    let reopened = open_encrypted(&db, aes_key().await).await;
    let parked: Vec<JsValue> = ok(reopened.parked_events())
        .await
        .unchecked_into::<Array>()
        .iter()
        .collect();
    assert_eq!(parked.len(), 1);
    assert_eq!(
        string(&get(&parked[0], "decryptError"), "code"),
        "DECRYPT_FAILED"
    );
    ok(reopened.close()).await;
}

#[wasm_bindgen_test]
async fn plaintext_where_the_aggregate_has_a_key_is_flagged_not_encrypted() {
    no_faults().await;
    // A writer without encryption (a forger, an old version of the app) puts plaintext in.
    let agg = aggregate(SHARED_TYPE, &uuid());
    let plain = open_with(&db_name("enc-forger"), &[])
        .await
        .unwrap_or_else(|e| panic!("open failed: {}", describe(&e)));
    ok(plain.append(
        agg.clone(),
        events(&[json_event(1, r#"{"owner":"mallory"}"#)]),
    ))
    .await;
    flush_within(&plain, 20).await;
    ok(plain.close()).await;

    let reader = open_encrypted(&db_name("enc-forged-reader"), aes_key().await).await;
    let seen = view_events(&reader, &agg).await;
    assert_eq!(seen.len(), 1, "flagged, not dropped");
    let error = get(&seen[0], "decryptError");
    assert_eq!(
        string(&error, "code"),
        "NOT_ENCRYPTED",
        "{}",
        describe(&error)
    );
    assert_eq!(
        text(&get(&seen[0], "data")),
        r#"{"owner":"mallory"}"#,
        "its data is as stored"
    );
    let json = get(&seen[0], "json").unchecked_into::<Function>();
    let thrown = json
        .call0(&seen[0])
        .expect_err("json() of unauthenticated data throws");
    assert_eq!(string(&thrown, "code"), "NOT_ENCRYPTED");
    ok(reader.close()).await;

    // A key function that says the aggregate is not encrypted (null): clear data is expected.
    let clear = open_encrypted(&db_name("enc-forged-null"), key_function("return null;")).await;
    let seen = view_events(&clear, &agg).await;
    assert!(get(&seen[0], "decryptError").is_undefined());
    assert_eq!(json_of(&seen[0]), r#"{"owner":"mallory"}"#);
    ok(clear.close()).await;
}

#[wasm_bindgen_test]
async fn unawaited_appends_keep_call_order_while_encrypting() {
    no_faults().await;
    // Type 1 is encrypted (it awaits WebCrypto, with a large event), type 2 is not (no await):
    // without the call order the second append would reach the outbox first.
    let encryption = object(&[("key", aes_key().await), ("types", json("[1]"))]);
    let client = open_encrypted(&db_name("enc-order"), encryption).await;
    let agg = aggregate(SHARED_TYPE, &uuid());
    let big = format!(r#"{{"pad":"{}"}}"#, "x".repeat(600_000));
    let first = client.append(agg.clone(), events(&[json_event(1, &big)]));
    let second = client.append(agg.clone(), events(&[json_event(2, r#"{"n":2}"#)]));
    let third = client.append(agg.clone(), events(&[json_event(1, r#"{"n":3}"#)]));
    let mut seqs = Vec::new();
    for receipts in [first, second, third] {
        let receipts = ok(receipts).await.unchecked_into::<Array>();
        seqs.push(num(&receipts.get(0), "clientSeq"));
    }
    assert_eq!(seqs, vec![1.0, 2.0, 3.0], "sequences follow call order");
    let seen = view_events(&client, &agg).await;
    let types: Vec<f64> = seen.iter().map(|e| num(e, "type")).collect();
    assert_eq!(types, vec![1.0, 2.0, 1.0]);
    ok(client.close()).await;
}
