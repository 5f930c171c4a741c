//! The read side against the real gateway: two devices (separate databases, separate client
//! ids) converge on the server's log under faults while one is cut off for a while, and no
//! `subscribe` listener ever sees an event vanish, reappear or appear twice; the contexts of
//! one device share one change stream; a trimmed aggregate is read again from its minimum
//! version; `read` answers from the local log offline; the reader writes under the drain's
//! session instead of opening its own.
#![cfg(target_arch = "wasm32")]

mod browser;

use browser::*;
use celeriant_sync::SyncClient;
use js_sys::{Array, Promise};
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen(module = "/tests/browser/support.js")]
extern "C" {
    #[wasm_bindgen(js_name = cutOff)]
    fn cut_off() -> JsValue;
    #[wasm_bindgen(js_name = flicker)]
    fn flicker(views: &JsValue) -> JsValue;
    #[wasm_bindgen(js_name = spoilPages)]
    fn spoil_pages() -> JsValue;
    #[wasm_bindgen(js_name = trim)]
    fn trim_js(gateway: &str, secret: &str, type_id: &str, id: &str, before: f64) -> Promise;
    #[wasm_bindgen(js_name = deletedPages)]
    fn deleted_pages(id: &str) -> JsValue;
}

fn call(object: &JsValue, method: &str, arg: &JsValue) {
    let f: js_sys::Function = get(object, method).unchecked_into();
    f.call1(object, arg).unwrap();
}

fn json_event(value: &str) -> JsValue {
    object(&[("type", 1.into()), ("data", json(value))])
}

async fn append_json(client: &SyncClient, agg: &JsValue, value: &str) {
    ok(client.append(agg.clone(), Array::of1(&json_event(value)).into())).await;
}

/// `read` of the aggregate, until it equals the server's log with nothing pending.
async fn converged(client: &SyncClient, t: &str, id: &str, what: &str) -> Vec<String> {
    let want = server_keys(t, id).await;
    let mut last = Vec::new();
    for _ in 0..150 {
        let view = ok(client.read(aggregate(t, id))).await;
        last = view_keys(&view);
        if last == want && num(&view, "pending") == 0.0 {
            return want;
        }
        sleep(200).await;
    }
    panic!("{what}: the view never converged\n view:   {last:?}\n server: {want:?}");
}

#[wasm_bindgen_test]
async fn two_devices_converge_under_faults_while_one_is_cut_off_and_no_listener_sees_flicker() {
    no_faults().await;
    let net = cut_off();
    let (a, b) = (
        open(&db_name("read-a"), "{}").await,
        open(&db_name("read-b"), "{}").await,
    );
    assert_ne!(a.client_id(), b.client_id(), "two devices");
    // Two devices write the same aggregates: a type they share.
    let t = SHARED_TYPE.to_owned();
    let ids: Vec<String> = (0..3).map(|_| uuid()).collect();
    let aggs: Vec<JsValue> = ids.iter().map(|id| aggregate(&t, id)).collect();
    let mut logs = Vec::new();
    for agg in &aggs {
        logs.push(("a", record_views(&JsValue::from(a.clone()), agg)));
        logs.push(("b", record_views(&JsValue::from(b.clone()), agg)));
    }
    set_faults(r#"{"dropAfterCommit":0.2,"timeout":0.1,"delayMs":300}"#).await;
    for round in 0..15u32 {
        if round == 4 {
            call(&net, "cut", &b.public_key().into());
        }
        if round == 10 {
            call(&net, "heal", &b.public_key().into());
        }
        let agg = &aggs[round as usize % 3];
        append_json(&a, agg, &format!(r#"{{"device":"a","round":{round}}}"#)).await;
        append_json(&b, agg, &format!(r#"{{"device":"b","round":{round}}}"#)).await;
        sleep(150).await;
    }
    no_faults().await;
    flush_within(&a, 60).await;
    flush_within(&b, 60).await;
    for (i, id) in ids.iter().enumerate() {
        let want = converged(&a, &t, id, "device a").await;
        assert_eq!(converged(&b, &t, id, "device b").await, want);
        assert_eq!(
            want.len(),
            10,
            "five rounds of two devices on each aggregate"
        );
        // Every listener's last view is the server's log too (it may need a moment more).
        for (device, log) in &logs[i * 2..i * 2 + 2] {
            until(10_000, "the listener's last view", || {
                let last = get(log, "last");
                !last.is_null() && view_keys(&last) == want
            })
            .await;
            let problem = flicker(&get(log, "views"));
            assert!(
                problem.is_null(),
                "device {device}: {}",
                problem.as_string().unwrap_or_default()
            );
        }
    }
    // The JSON value comes back.
    let view = ok(a.read(aggs[0].clone())).await;
    let first = get(&view, "events").unchecked_into::<Array>().get(0);
    let value = get(&first, "json")
        .unchecked_into::<js_sys::Function>()
        .call0(&first)
        .unwrap();
    assert_eq!(get(&value, "round").as_f64(), Some(0.0));
    call(&net, "restore", &JsValue::UNDEFINED);
    for (_, log) in &logs {
        call(log, "unsubscribe", &JsValue::UNDEFINED);
    }
    ok(a.close()).await;
    ok(b.close()).await;
}

#[wasm_bindgen_test]
async fn the_contexts_of_one_device_share_one_stream_and_see_the_same_views() {
    no_faults().await;
    let db = db_name("read-tabs");
    let (a, b) = (open(&db, "{}").await, open(&db, "{}").await);
    let other = open(&db_name("read-tabs-other"), "{}").await;
    // `other` (another device) writes the aggregate too: a type they share.
    let (t, id) = (SHARED_TYPE.to_owned(), uuid());
    let agg = aggregate(&t, &id);
    let (la, lb) = (
        record_views(&JsValue::from(a.clone()), &agg),
        record_views(&JsValue::from(b.clone()), &agg),
    );
    until(10_000, "the stream connected", || {
        string(&get(&a.status(), "read"), "state") == "connected"
            && string(&get(&b.status(), "read"), "state") == "connected"
    })
    .await;
    // The other device writes; both tabs of this one see it, through one stream.
    append_json(&other, &agg, r#"{"from":"other"}"#).await;
    append_json(&b, &agg, r#"{"from":"b"}"#).await;
    flush_within(&other, 20).await;
    flush_within(&b, 20).await;
    let want = server_keys(&t, &id).await;
    assert_eq!(want.len(), 2);
    for (tab, log) in [("a", &la), ("b", &lb)] {
        until(10_000, "the tab's view", || {
            let last = get(log, "last");
            !last.is_null() && view_keys(&last) == want
        })
        .await;
        assert!(flicker(&get(log, "views")).is_null(), "tab {tab}");
    }
    let report = ok(fault_report_js(gateway(), faults_secret())).await;
    let by_client = get(&get(&report, "counts"), "watchStreamsByClient");
    assert_eq!(
        get(&by_client, &a.client_id()).as_f64(),
        Some(1.0),
        "one stream for the device's two contexts: {}",
        describe(&report)
    );
    call(&la, "unsubscribe", &JsValue::UNDEFINED);
    call(&lb, "unsubscribe", &JsValue::UNDEFINED);
    ok(a.close()).await;
    ok(b.close()).await;
    ok(other.close()).await;
}

#[wasm_bindgen_test]
async fn a_trimmed_aggregate_is_read_again_from_its_minimum_version() {
    no_faults().await;
    let client = open(&db_name("read-trim"), "{}").await;
    let (t, id) = (uuid(), uuid());
    let agg = aggregate(&t, &id);
    for i in 0..5 {
        append_json(&client, &agg, &format!(r#"{{"i":{i}}}"#)).await;
        flush_within(&client, 20).await;
    }
    let log = record_views(&JsValue::from(client.clone()), &agg);
    converged(&client, &t, &id, "before the trim").await;
    ok(trim_js(gateway(), faults_secret(), &t, &id, 4.0)).await;
    let want = server_keys(&t, &id).await;
    assert_eq!(want.len(), 2, "versions 4 and 5 are left");
    let mut last = Vec::new();
    for _ in 0..100 {
        last = view_keys(&get(&log, "last"));
        if last == want {
            break;
        }
        sleep(200).await;
    }
    assert_eq!(last, want, "the view re-read from version 4");
    let view = ok(client.read(agg.clone())).await;
    assert_eq!(num(&view, "version"), 5.0);
    let versions: Vec<f64> = get(&view, "events")
        .unchecked_into::<Array>()
        .iter()
        .map(|e| num(&e, "version"))
        .collect();
    assert_eq!(versions, [4.0, 5.0]);
    call(&log, "unsubscribe", &JsValue::UNDEFINED);
    ok(client.close()).await;
}

/// A deletion no `reset` announced (the stream was down, or lagged) is found by the next page:
/// its tip is below the local cursor (`engine::read::page::shrunk`, found by
/// `tests/read_model.rs`).
#[wasm_bindgen_test]
async fn a_deletion_the_stream_did_not_announce_is_found_by_the_next_page() {
    no_faults().await;
    let writer = open(&db_name("read-deleted-writer"), "{}").await;
    let reader = open(&db_name("read-deleted-reader"), "{}").await;
    let (t, id) = (uuid(), uuid());
    let agg = aggregate(&t, &id);
    for i in 0..2 {
        append_json(&writer, &agg, &format!(r#"{{"i":{i}}}"#)).await;
    }
    flush_within(&writer, 20).await;
    assert_eq!(converged(&reader, &t, &id, "before").await.len(), 2);
    let deleted = deleted_pages(&id);
    let view = ok(reader.read(agg.clone())).await;
    call(&deleted, "restore", &JsValue::UNDEFINED);
    assert!(
        num(&deleted, "answered") >= 1.0,
        "the page was answered as deleted"
    );
    assert_eq!(
        view_keys(&view),
        Vec::<String>::new(),
        "the deleted log is dropped"
    );
    assert_eq!(num(&view, "version"), 0.0);
    assert_eq!(count_store(&reader.database_name(), "log").await, 0);
    ok(writer.close()).await;
    ok(reader.close()).await;
}

#[wasm_bindgen_test]
async fn offline_a_read_answers_from_the_local_log_with_pending_events_on_top() {
    no_faults().await;
    let client = open(&db_name("read-offline"), "{}").await;
    let (t, id) = (uuid(), uuid());
    let agg = aggregate(&t, &id);
    append_json(&client, &agg, r#"{"n":1}"#).await;
    flush_within(&client, 20).await;
    converged(&client, &t, &id, "online").await;
    set_online(false);
    append_json(&client, &agg, r#"{"n":2}"#).await;
    let view = ok(client.read(agg.clone())).await;
    set_online(true);
    assert_eq!(get(&view, "fromCache").as_bool(), Some(true));
    let me = client.client_id();
    assert_eq!(
        view_keys(&view),
        [format!("{me}:1:confirmed"), format!("{me}:2:pending")]
    );
    assert_eq!(num(&view, "pending"), 1.0);
    flush_within(&client, 20).await;
    converged(&client, &t, &id, "back online").await;
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn a_hostile_page_never_enters_the_local_log_and_the_view_recovers() {
    no_faults().await;
    let client = open(&db_name("read-hostile"), "{}").await;
    let (t, id) = (uuid(), uuid());
    let agg = aggregate(&t, &id);
    append_json(&client, &agg, r#"{"n":1}"#).await;
    flush_within(&client, 20).await;
    let spoiled = spoil_pages();
    let view = ok(client.read(agg.clone())).await;
    assert!(num(&spoiled, "spoiled") >= 1.0, "the page was spoiled");
    assert_eq!(
        get(&view, "fromCache").as_bool(),
        Some(true),
        "a refused page is not a catch-up"
    );
    let me = client.client_id();
    assert_eq!(
        view_keys(&view),
        [format!("{me}:1:pending")],
        "nothing of the bad page is shown; the event stays pending"
    );
    assert_eq!(count_store(&client.database_name(), "log").await, 0);
    call(&spoiled, "restore", &JsValue::UNDEFINED);
    assert_eq!(
        converged(&client, &t, &id, "after the gateway is honest again").await,
        [format!("{me}:1:confirmed")]
    );
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn a_read_right_after_open_is_caught_up_even_before_this_context_drains() {
    no_faults().await;
    let writer = open(&db_name("read-early-writer"), "{}").await;
    let (t, id) = (uuid(), uuid());
    let agg = aggregate(&t, &id);
    append_json(&writer, &agg, r#"{"n":1}"#).await;
    flush_within(&writer, 20).await;
    let want = server_keys(&t, &id).await;
    for round in 0..3 {
        // `read` at once: the drain lock may not be granted yet, so its catch-up request has
        // nobody to go to until this context becomes the drainer.
        let reader = open(&db_name(&format!("read-early-{round}")), "{}").await;
        let started = js_sys::Date::now();
        let view = ok(reader.read(agg.clone())).await;
        let took = js_sys::Date::now() - started;
        assert_eq!(
            get(&view, "fromCache").as_bool(),
            Some(false),
            "round {round}"
        );
        assert_eq!(view_keys(&view), want, "round {round}");
        assert!(took < 5_000.0, "round {round}: the read waited {took} ms");
        ok(reader.close()).await;
    }
    ok(writer.close()).await;
}

/// One session cache for the drain and the reader: once the drain has a session, the read side
/// (the pages of a `read`, the change stream of a `subscribe`) goes under it and opens none of
/// its own (it did, one more `POST /v1/session` per draining context).
#[wasm_bindgen_test]
async fn the_reader_reads_under_the_drains_session() {
    no_faults().await;
    let log = count_fetches();
    let client = open(&db_name("read-one-session"), "{}").await;
    let (t, id) = (uuid(), uuid());
    let agg = aggregate(&t, &id);
    append_json(&client, &agg, r#"{"n":1}"#).await;
    flush_within(&client, 20).await;
    let sessions = |log: &JsValue| get(&get(log, "paths"), "/v1/session").as_f64();
    assert_eq!(sessions(&log), Some(1.0), "the drain opened one session");
    // Not `converged`: the test's own reads of the server open sessions of their own.
    let view = ok(client.read(agg.clone())).await;
    assert_eq!(get(&view, "fromCache").as_bool(), Some(false), "caught up");
    let me = client.client_id();
    assert_eq!(view_keys(&view), [format!("{me}:1:confirmed")]);
    let views = record_views(&JsValue::from(client.clone()), &agg);
    until(10_000, "the stream connected", || {
        string(&get(&client.status(), "read"), "state") == "connected"
    })
    .await;
    let paths = get(&log, "paths");
    let count = |path: &str| get(&paths, path).as_f64().unwrap_or(0.0);
    assert!(
        count("/v1/aggregates") >= 1.0 && count("/v1/watch") >= 1.0,
        "a page was read and a stream opened: {}",
        describe(&paths)
    );
    assert_eq!(
        sessions(&log),
        Some(1.0),
        "the reader used the drain's session: {}",
        describe(&paths)
    );
    call(&views, "unsubscribe", &JsValue::UNDEFINED);
    call(&log, "restore", &JsValue::UNDEFINED);
    ok(client.close()).await;
}
