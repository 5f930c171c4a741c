//! The view a catch-up builds from the pages it just stored (`src/browser/idb/kept.rs`)
//! instead of reading them back from IndexedDB, against the real gateway: it must equal, field by
//! field, the view read back from the log in the same state — over an existing partial log, with
//! this device's own confirmed and pending events, across a trim (410) in the middle of the
//! catch-up, and when something else rewrote the log after the pages were stored (then it must
//! read the log back). Pages are cut to a few batches each (`smallPages`), so a catch-up of a
//! handful of batches spans several pages, as a large aggregate's does.
#![cfg(target_arch = "wasm32")]

mod browser;

use browser::*;
use celeriant_sync::SyncClient;
use js_sys::Array;
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen(module = "/tests/browser/kept.js")]
extern "C" {
    #[wasm_bindgen(js_name = smallPages)]
    fn small_pages(n: u32, trim_at: &JsValue) -> JsValue;
    #[wasm_bindgen(js_name = countLogReads)]
    fn count_log_reads() -> JsValue;
    #[wasm_bindgen(js_name = interfereBeforeSnapshot)]
    fn interfere_before_snapshot() -> JsValue;
    #[wasm_bindgen(js_name = viewDigest)]
    fn view_digest(view: &JsValue) -> String;
    #[wasm_bindgen(js_name = serverTimestamps)]
    fn server_timestamps(view: &JsValue) -> Array;
}

#[wasm_bindgen(module = "/tests/browser/support.js")]
extern "C" {
    #[wasm_bindgen(js_name = scriptWrites)]
    fn script_writes_js(script: &Array) -> JsValue;
}

fn call0(object: &JsValue, method: &str) {
    let f: js_sys::Function = get(object, method).unchecked_into();
    f.call0(object).unwrap();
}

/// Appends `n` batches of one event each, each flushed before the next (one version each).
async fn batches(client: &SyncClient, agg: &JsValue, from: u32, n: u32) {
    for i in from..from + n {
        let event = object(&[
            ("type", 1.into()),
            ("data", json(&format!(r#"{{"i":{i}}}"#))),
        ]);
        ok(client.append(agg.clone(), Array::of1(&event).into())).await;
        flush_within(client, 20).await;
    }
}

/// `read` with the network as it is, counting the log batches read back; then the same view
/// read back from the log alone (offline: no catch-up, and nothing kept is left to use).
/// Returns (the read's view, batches it read back, the read-back view, batches that read).
async fn read_then_read_back(client: &SyncClient, agg: &JsValue) -> (JsValue, f64, JsValue, f64) {
    let reads = count_log_reads();
    let view = ok(client.read(agg.clone())).await;
    // At once: offline, nothing can change the log or the pending events in between.
    set_online(false);
    let fast = num(&reads, "batches");
    let back = ok(client.read(agg.clone())).await;
    set_online(true);
    let total = num(&reads, "batches") - fast;
    call0(&reads, "restore");
    assert_eq!(get(&view, "fromCache").as_bool(), Some(false), "caught up");
    assert_eq!(get(&back, "fromCache").as_bool(), Some(true), "read back");
    (view, fast, back, total)
}

#[wasm_bindgen_test]
async fn a_catch_up_over_a_partial_log_with_own_events_builds_the_view_the_log_would_give() {
    no_faults().await;
    let writer = open(&db_name("kept-writer"), "{}").await;
    let reader = open(&db_name("kept-reader"), "{}").await;
    // Both devices write the aggregate: a type they share.
    let (t, id) = (SHARED_TYPE.to_owned(), uuid());
    let agg = aggregate(&t, &id);
    batches(&writer, &agg, 0, 4).await;
    batches(&reader, &agg, 100, 2).await;
    let pages = small_pages(3, &JsValue::UNDEFINED);
    // The first catch-up: from an empty log, the whole view from the pages.
    let (view, fast, back, total) = read_then_read_back(&reader, &agg).await;
    assert_eq!(view_digest(&view), view_digest(&back), "from an empty log");
    assert_eq!((fast, total), (0.0, 6.0), "nothing read back, then all six");
    assert_eq!(view_keys(&view), server_keys(&t, &id).await);

    // A listener: after its first view, each catch-up's page is taken from memory too.
    let listener = record_views(&JsValue::from(reader.clone()), &agg);
    until(10_000, "the stream connected", || {
        string(&get(&reader.status(), "read"), "state") == "connected"
    })
    .await;
    batches(&writer, &agg, 4, 3).await;
    let want = server_keys(&t, &id).await;
    until(10_000, "the listener's view", || {
        view_keys(&get(&listener, "last")) == want
    })
    .await;
    set_online(false);
    let back = ok(reader.read(agg.clone())).await;
    set_online(true);
    let last = get(&listener, "last");
    assert_eq!(
        view_digest(&last),
        view_digest(&back),
        "the listener's view"
    );
    call0(&listener, "unsubscribe");

    // This device's (their landing catches the log up), then more of the other device's, then
    // two of this device's that stay pending (their writes hang): the read's catch-up starts
    // from a partial log.
    batches(&reader, &agg, 102, 2).await;
    batches(&writer, &agg, 7, 3).await;
    let hang = object(&[("hang", true.into())]);
    let writes = script_writes_js(&Array::of3(&hang, &hang, &hang));
    for i in 0..2 {
        let event = object(&[
            ("type", 1.into()),
            ("data", json(&format!(r#"{{"p":{i}}}"#))),
        ]);
        ok(reader.append(agg.clone(), Array::of1(&event).into())).await;
    }
    let (view, fast, back, total) = read_then_read_back(&reader, &agg).await;
    call0(&writes, "restore");
    call0(&pages, "restore");
    assert!(num(&pages, "pages") >= 3.0, "catch-ups of several pages");
    assert_eq!(view_digest(&view), view_digest(&back), "over a partial log");
    assert_eq!(total, 14.0, "the read back reads every batch");
    assert!(
        fast < total,
        "the catch-up's own pages were not read back ({fast} of {total})"
    );
    assert_eq!(
        num(&view, "pending"),
        2.0,
        "this device's two pending events"
    );
    let me = reader.client_id();
    let mut want = server_keys(&t, &id).await;
    want.extend((5..=6).map(|seq| format!("{me}:{seq}:pending")));
    assert_eq!(view_keys(&view), want);
    flush_within(&reader, 60).await;
    ok(writer.close()).await;
    ok(reader.close()).await;
}

#[wasm_bindgen_test]
async fn a_trim_in_the_middle_of_the_catch_up_starts_what_is_kept_again() {
    no_faults().await;
    let writer = open(&db_name("kept-trim-writer"), "{}").await;
    let reader = open(&db_name("kept-trim-reader"), "{}").await;
    let (t, id) = (uuid(), uuid());
    let agg = aggregate(&t, &id);
    batches(&writer, &agg, 0, 4).await;
    let (view, ..) = read_then_read_back(&reader, &agg).await;
    assert_eq!(
        view_keys(&view).len(),
        4,
        "the reader's log holds versions 1–4"
    );
    batches(&writer, &agg, 4, 8).await;
    // The catch-up reads 5–7, then the server drops everything below 9: its next page is a 410.
    let trim_at = object(&[
        ("gateway", gateway().into()),
        ("secret", faults_secret().into()),
        ("typeId", t.clone().into()),
        ("id", id.clone().into()),
        ("before", 9.into()),
    ]);
    let pages = small_pages(3, &trim_at);
    let (view, fast, back, total) = read_then_read_back(&reader, &agg).await;
    call0(&pages, "restore");
    assert_eq!(view_digest(&view), view_digest(&back), "across the trim");
    let versions: Vec<f64> = get(&view, "events")
        .unchecked_into::<Array>()
        .iter()
        .map(|e| num(&e, "version"))
        .collect();
    assert_eq!(
        versions,
        [9.0, 10.0, 11.0, 12.0],
        "read again from version 9"
    );
    assert_eq!((fast, total), (0.0, 4.0), "the pages after the trim, kept");
    ok(writer.close()).await;
    ok(reader.close()).await;
}

#[wasm_bindgen_test]
async fn a_log_rewritten_after_the_pages_were_stored_is_read_back() {
    no_faults().await;
    let writer = open(&db_name("kept-other-writer"), "{}").await;
    let reader = open(&db_name("kept-other-reader"), "{}").await;
    let (t, id) = (uuid(), uuid());
    let agg = aggregate(&t, &id);
    batches(&writer, &agg, 0, 5).await;
    let pages = small_pages(2, &JsValue::UNDEFINED);
    let other = interfere_before_snapshot();
    let (view, fast, back, total) = read_then_read_back(&reader, &agg).await;
    call0(&other, "restore");
    call0(&pages, "restore");
    assert_eq!(
        num(&other, "fired"),
        2.0,
        "the log was rewritten before the view's snapshot"
    );
    assert_eq!(
        view_digest(&view),
        view_digest(&back),
        "the log as it is now"
    );
    assert_eq!((fast, total), (5.0, 5.0), "the kept pages were not used");
    // What the server sent (as the writer, not rewritten, shows it), moved by one: the view
    // shows the log, not the pages kept.
    let server = server_timestamps(&ok(writer.read(agg.clone())).await);
    let moved: Vec<f64> = server.iter().map(|v| v.as_f64().unwrap() + 1.0).collect();
    let shown: Vec<f64> = server_timestamps(&view)
        .iter()
        .map(|v| v.as_f64().unwrap())
        .collect();
    assert_eq!(shown, moved);
    ok(writer.close()).await;
    ok(reader.close()).await;
}
