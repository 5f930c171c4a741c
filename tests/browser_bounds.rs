//! What an app passes in is copied into the module only within bounds, in a real browser: the
//! module's memory (4 GiB at most) is never given back, so a value copied whole before it is
//! refused costs the page that memory for good, and one too large aborts the module. Each test
//! measures the module's memory around calls that would have copied hundreds of megabytes, or
//! checks the bound that stops them: one append's data in all (64 MiB), what a client's appends
//! hold until stored (256 MiB), key names of an options object, a described bad value, the
//! `auth` callback's token; and a projection whose view a listener sabotaged still folds.
#![cfg(target_arch = "wasm32")]

mod browser;

use browser::*;
use celeriant_sync::SyncClient;
use js_sys::{Array, Function, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

const MIB: u32 = 1 << 20;

fn memory_bytes() -> f64 {
    let memory: js_sys::WebAssembly::Memory = wasm_bindgen::memory().unchecked_into();
    get(&memory.buffer(), "byteLength").as_f64().unwrap()
}

fn eval(source: &str) -> JsValue {
    Function::new_no_args(source).call0(&JsValue::NULL).unwrap()
}

fn event(data: JsValue) -> JsValue {
    object(&[("type", 1.into()), ("data", data)])
}

/// `n` times the same event (one array of references: nothing is copied in JS).
fn repeated(event: &JsValue, n: u32) -> JsValue {
    let events = Array::new();
    for _ in 0..n {
        events.push(event);
    }
    events.into()
}

fn code_and_message(e: &JsValue) -> (String, String) {
    (string(e, "code"), string(e, "message"))
}

#[wasm_bindgen_test]
async fn one_append_holds_at_most_64_mib_counted_while_it_is_copied() {
    no_faults().await;
    let db = db_name("bounds-append-total");
    let client = open(&db, "{}").await;
    client.set_offline(true.into()).unwrap();
    let a = aggregate(&uuid(), &uuid());
    let mib = event(Uint8Array::new_with_length(MIB).into());
    let before = memory_bytes();
    // 10,000 events of 1 MiB each are each valid: 10 GiB to copy, which aborted the module.
    // Refused once 64 MiB are counted, having copied no more.
    let e = err(client.append(a.clone(), repeated(&mib, 10_000))).await;
    let (code, message) = code_and_message(&e);
    assert_eq!(code, "TOO_MANY_EVENTS", "{message}");
    assert!(
        message.starts_with("events[64]: an append holds 68157440 bytes of data or more"),
        "{message}"
    );
    assert_eq!(
        num(&e, "index"),
        64.0,
        "the event that went past: {message}"
    );
    let grown = memory_bytes() - before;
    assert!(
        grown < 96.0 * f64::from(MIB),
        "the module grew by {grown} bytes"
    );
    // Nothing of it was stored, no sequence taken; exactly 64 MiB is taken, one byte more not.
    let small = event(Uint8Array::new_with_length(1).into());
    let receipts = ok(client.append(a.clone(), repeated(&small, 1))).await;
    assert_eq!(seqs(&receipts), [1]);
    let over = Array::new();
    for _ in 0..64 {
        over.push(&mib);
    }
    over.push(&small);
    let e = err(client.append(a.clone(), over.clone().into())).await;
    assert_eq!(code_and_message(&e).0, "TOO_MANY_EVENTS");
    assert_eq!(num(&e, "index"), 64.0);
    over.pop();
    let receipts = ok(client.append(a.clone(), over.into())).await;
    assert_eq!(seqs(&receipts), (2..=65).collect::<Vec<u64>>());

    // JSON data is measured in UTF-16 units before it is copied and counted in UTF-8 after:
    // "é" is one unit and two bytes. A conditional append (one request, 4 MiB): four events of
    // 900,002 bytes, and a fifth whose 450,002 units fit what is left but whose bytes do not.
    let e_acute = event(eval(r#"return "é".repeat(450000)"#));
    let options = object(&[("expectedVersion", 65.into())]);
    let e = err(client.append_with(a.clone(), repeated(&e_acute, 5), options.clone())).await;
    let (code, message) = code_and_message(&e);
    assert_eq!(code, "TOO_MANY_EVENTS", "{message}");
    assert!(
        message.starts_with(
            "events[4]: a conditional append, sent as one request, holds 4500010 bytes"
        ),
        "{message}"
    );
    assert_eq!(num(&e, "index"), 4.0);
    let receipts = ok(client.append_with(a.clone(), repeated(&e_acute, 4), options)).await;
    assert_eq!(seqs(&receipts), [66, 67, 68, 69]);

    // An atomic write is one request: a later write gets what the earlier ones left.
    let b = aggregate(&uuid(), &uuid());
    let write =
        |agg: &JsValue| object(&[("aggregate", agg.clone()), ("events", repeated(&mib, 3))]);
    let writes = Array::of2(&write(&b), &write(&aggregate(&uuid(), &uuid())));
    let e = err(client.append_atomic(writes.into())).await;
    let (code, message) = code_and_message(&e);
    assert_eq!(code, "TOO_MANY_EVENTS", "{message}");
    assert_eq!(num(&e, "write"), 1.0, "{message}");
    assert_eq!(num(&e, "index"), 1.0, "{message}");
    ok(client.close()).await;
    ok(SyncClient::delete_database_named(db.into())).await;
}

#[wasm_bindgen_test]
async fn what_a_clients_appends_hold_until_stored_is_bounded_across_calls() {
    // Calls made without awaiting, each valid (64 MiB), each copied at once: their events wait
    // for IndexedDB (here: for an encryption key that comes later) and used to pile up until
    // the module aborted. A client holds at most 256 MiB; the next call is BUSY.
    no_faults().await;
    let db = db_name("bounds-held");
    let gate = eval(
        "const s = {}; s.key = new Promise((_, no) => { s.fail = no; }); \
         s.key.catch(() => {}); s.keyFor = () => s.key; return s;",
    );
    let options = json(&format!(
        r#"{{"gatewayUrl":"{}","databaseName":"{db}"}}"#,
        gateway()
    ));
    js_sys::Reflect::set(&options, &"encryption".into(), &get(&gate, "keyFor")).unwrap();
    let client = SyncClient::open(options).await.unwrap();
    client.set_offline(true.into()).unwrap();
    let a = aggregate(&uuid(), &uuid());
    let mib = event(Uint8Array::new_with_length(MIB).into());
    let waiting: Vec<js_sys::Promise> = (0..4)
        .map(|_| client.append(a.clone(), repeated(&mib, 64)))
        .collect();
    let e = err(client.append(a.clone(), repeated(&mib, 64))).await;
    let (code, message) = code_and_message(&e);
    assert_eq!(code, "BUSY", "{message}");
    assert_eq!(num(&e, "index"), 0.0, "{message}");
    // Not even one byte more.
    let e = err(client.append(a.clone(), repeated(&event(1.into()), 1))).await;
    assert_eq!(code_and_message(&e).0, "BUSY");
    // The key never comes: the four fail, and what they held is given back.
    get(&gate, "fail")
        .unchecked_into::<Function>()
        .call1(&JsValue::NULL, &js_sys::Error::new("no key"))
        .unwrap();
    for w in waiting {
        assert_eq!(code_and_message(&err(w).await).0, "ENCRYPTION_FAILED");
    }
    let e = err(client.append(a.clone(), repeated(&mib, 64))).await;
    assert_eq!(
        code_and_message(&e).0,
        "ENCRYPTION_FAILED",
        "not BUSY any more"
    );
    ok(client.close()).await;
    ok(SyncClient::delete_database_named(db.into())).await;
}

#[wasm_bindgen_test]
async fn key_names_and_described_values_are_cut_before_they_are_copied() {
    no_faults().await;
    let db = db_name("bounds-keys");
    let client = open(&db, "{}").await;
    client.set_offline(true.into()).unwrap();
    let a = aggregate(&uuid(), &uuid());
    let small = repeated(&event(Uint8Array::new_with_length(1).into()), 1);
    let before = memory_bytes();
    // A key of 2^27 characters (128 MiB as UTF-8), where a key is checked against the known
    // ones: append's options, an event, open's options.
    let long_key = eval(r#"return { ["k".repeat(2 ** 27)]: 1 }"#);
    let e = err(client.append_with(a.clone(), small.clone(), long_key.clone())).await;
    let (code, message) = code_and_message(&e);
    assert_eq!(code, "INVALID_OPTIONS");
    assert!(
        message.contains(&format!("\"{}…\"", "k".repeat(64))),
        "{message}"
    );
    assert!(message.len() < 400, "{} characters", message.len());
    let bad_event = eval(r#"return [{ type: 1, data: 1, ["z".repeat(2 ** 27)]: 1 }]"#);
    let e = err(client.append(a.clone(), bad_event)).await;
    assert_eq!(code_and_message(&e).0, "INVALID_EVENT");
    let options = eval(r#"return { databaseName: "x", ["o".repeat(2 ** 27)]: 1 }"#);
    let e = SyncClient::open(options)
        .await
        .map(|_| ())
        .expect_err("unknown option");
    assert_eq!(code_and_message(&e).0, "INVALID_OPTIONS");
    // 400,000 keys of 64 characters (25 MB as UTF-8 if copied): refused all the same, the
    // first 64 looked at.
    let many = eval(
        "const o = {}; for (let i = 0; i < 4e5; i++) o[String(i).padStart(64, 'k')] = i; return o;",
    );
    let e = err(client.append_with(a.clone(), small.clone(), many)).await;
    assert_eq!(code_and_message(&e).0, "INVALID_OPTIONS");
    // A bad expectedVersion of 2^27 characters is shown cut, not copied.
    let long_value = eval(r#"return { expectedVersion: "v".repeat(2 ** 27) }"#);
    let e = err(client.append_with(a.clone(), small.clone(), long_value)).await;
    let (code, message) = code_and_message(&e);
    assert_eq!(code, "INVALID_OPTIONS");
    assert!(
        message.ends_with(&format!("\"{}…", "v".repeat(99))),
        "{message}"
    );
    let grown = memory_bytes() - before;
    assert!(
        grown < 16.0 * f64::from(MIB),
        "the module grew by {grown} bytes"
    );
    // A known key still passes, and nothing was stored by the refusals.
    let receipts =
        ok(client.append_with(a.clone(), small, object(&[("expectedVersion", 0.into())]))).await;
    assert_eq!(seqs(&receipts), [1]);
    ok(client.close()).await;
    ok(SyncClient::delete_database_named(db.into())).await;
}

#[wasm_bindgen_test]
async fn an_auth_token_over_16384_characters_is_refused_without_copying_it() {
    no_faults().await;
    let db = db_name("bounds-auth");
    let options = json(&format!(
        r#"{{"gatewayUrl":"{}","databaseName":"{db}","user":"someone"}}"#,
        gateway()
    ));
    let auth = eval(r#"const t = "t".repeat(2 ** 27); return async () => t;"#);
    js_sys::Reflect::set(&options, &"auth".into(), &auth).unwrap();
    let before = memory_bytes();
    let client = SyncClient::open(options).await.unwrap();
    let a = aggregate(&uuid(), &uuid());
    ok(client.append(a, repeated(&event(1.into()), 1))).await;
    until(10_000, "state unauthorized", || {
        string(&client.status(), "state") == "unauthorized"
    })
    .await;
    let message = string(&get(&client.status(), "lastError"), "message");
    assert!(message.contains("of at most 16384 characters"), "{message}");
    let grown = memory_bytes() - before;
    assert!(
        grown < 16.0 * f64::from(MIB),
        "the module grew by {grown} bytes"
    );
    assert_eq!(num(&client.status(), "pending"), 1.0, "kept, not dropped");
    ok(client.close()).await;
    ok(SyncClient::delete_database_named(db.into())).await;
}

#[wasm_bindgen_test]
async fn a_projection_folds_what_its_view_was_built_with_whatever_a_listener_does_to_it() {
    no_faults().await;
    let db = db_name("bounds-projection");
    let client = open(&db, "{}").await;
    client.set_offline(true.into()).unwrap();
    let a = aggregate(&uuid(), &uuid());
    // The app's listener runs before the projection's, on the same view object: it sets the
    // list's length to 2^32 - 1. A projection copying up to that length looped 4 billion
    // times; it copies at most the events the view was built with.
    let sabotage = eval(
        "return (view) => { view.sabotaged = (view.sabotaged || 0) + 1; \
         view.events.length = 2 ** 32 - 1; };",
    );
    let unsubscribe = client
        .subscribe(a.clone(), sabotage.unchecked_into())
        .unwrap();
    let sum = eval("return { initial: 0, apply: (s, e) => s + (e.json().n ?? 0) };");
    let projection = client.project(a.clone(), sum).unwrap();
    let events: Array = (1..=5)
        .map(|n| event(json(&format!(r#"{{"n":{n}}}"#))))
        .collect();
    ok(client.append(a.clone(), events.into())).await;
    let mut last = JsValue::NULL;
    for _ in 0..100 {
        last = get(&projection, "current");
        if !last.is_null() && num(&last, "state") == 15.0 && num(&last, "pending") == 5.0 {
            break;
        }
        sleep(100).await;
    }
    assert_eq!(
        num(&last, "state"),
        15.0,
        "{:?}",
        js_sys::JSON::stringify(&last)
    );
    assert_eq!(num(&last, "pending"), 5.0);
    unsubscribe
        .unchecked_into::<Function>()
        .call0(&JsValue::NULL)
        .unwrap();
    get(&projection, "close")
        .unchecked_into::<Function>()
        .call0(&projection)
        .unwrap();
    ok(client.close()).await;
    ok(SyncClient::delete_database_named(db.into())).await;
}
