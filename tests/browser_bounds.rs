//! What an app passes in is copied into the module only within bounds, in a real browser: the
//! module's memory (4 GiB at most) is never given back, so a value copied whole before it is
//! refused costs the page that memory for good, and one too large aborts the module. Each test
//! measures the module's memory around calls that would have copied hundreds of megabytes (in
//! a file whose tests leave no large free space behind, so a copy shows as growth): key names
//! of an options object, a described bad value, the `auth` callback's token; and a projection
//! whose view a listener sabotaged still folds. Appends' data: `browser_held.rs`.
#![cfg(target_arch = "wasm32")]

mod browser;

use browser::bounds::*;
use browser::*;
use celeriant_sync::SyncClient;
use js_sys::{Array, Function, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen_test]
async fn key_names_and_described_values_are_cut_before_they_are_copied() {
    no_faults().await;
    let db = db_name("bounds-keys");
    let client = open(&db, "{}").await;
    client.set_offline(true.into()).unwrap();
    let a = aggregate(&uuid(), &uuid());
    let small = repeated(&event(Uint8Array::new_with_length(1).into()), 1);
    let before = memory_bytes();
    // No large free space left by an earlier test (the module never shrinks): a copy of what
    // follows would then show as growth.
    assert!(before < 128.0 * f64::from(MIB), "memory already {before}");
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
    // No large free space left by an earlier test (the module never shrinks): a copy of what
    // follows would then show as growth.
    assert!(before < 128.0 * f64::from(MIB), "memory already {before}");
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
