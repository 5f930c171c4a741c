//! The client's network switch (`client.setOffline`) against the real gateway: switched off,
//! the client sends nothing at all — no write, no offline probe (waited past its 15 s), no
//! session, no catch-up page — and its change stream is closed, while appends are stored and
//! `read` answers from the local log; switched back on, every event lands exactly once and the
//! stream reopens. `navigator.onLine` is never touched: the switch alone does it.
#![cfg(target_arch = "wasm32")]

mod browser;

use browser::*;
use js_sys::{Array, Function};
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen(module = "/tests/browser/support.js")]
extern "C" {
    #[wasm_bindgen(js_name = countFetches)]
    fn count_fetches() -> JsValue;
}

fn json_event(n: u32) -> JsValue {
    object(&[
        ("type", 1.into()),
        ("data", json(&format!(r#"{{"n":{n}}}"#))),
    ])
}

fn read_state(status: &JsValue) -> String {
    string(&get(status, "read"), "state")
}

#[wasm_bindgen_test]
async fn switched_off_nothing_is_sent_not_even_the_probe_and_back_on_everything_lands_once() {
    no_faults().await;
    let log = count_fetches();
    let client = open(&db_name("switch"), "{}").await;
    let (t, id) = (uuid(), uuid());
    let agg = aggregate(&t, &id);
    let unsubscribe: Function = client
        .subscribe(agg.clone(), Function::new_with_args("view", ""))
        .unwrap()
        .unchecked_into();
    ok(client.append(agg.clone(), Array::of1(&json_event(1)).into())).await;
    flush_within(&client, 20).await;
    until(10_000, "the change stream", || {
        read_state(&client.status()) == "connected"
    })
    .await;
    assert_eq!(num(&log, "openStreams"), 1.0, "one change stream is open");
    assert!(!client.offline());

    client.set_offline(true.into()).unwrap();
    assert!(client.offline());
    until(2_000, "the change stream to close", || {
        num(&log, "openStreams") == 0.0
    })
    .await;
    let sent = num(&log, "total");
    ok(client.append(
        agg.clone(),
        Array::of2(&json_event(2), &json_event(3)).into(),
    ))
    .await;
    until(2_000, "the offline state", || {
        string(&client.status(), "state") == "offline"
    })
    .await;
    assert_eq!(read_state(&client.status()), "offline");
    let view = ok(client.read(agg.clone())).await;
    assert_eq!(get(&view, "fromCache").as_bool(), Some(true));
    assert_eq!(num(&view, "pending"), 2.0);
    // Past the drain's offline probe (every 15 s): still not one request of any kind.
    sleep(16_500).await;
    let paths = js_sys::JSON::stringify(&get(&log, "paths")).unwrap();
    assert_eq!(
        num(&log, "total"),
        sent,
        "nothing is fetched while switched off: {paths:?}"
    );
    assert_eq!(num(&client.status(), "pending"), 2.0);
    assert_eq!(read_all(&t, &id).await.len(), 1, "the server has only #1");

    client.set_offline(false.into()).unwrap();
    assert!(!client.offline());
    flush_within(&client, 5).await;
    let landed: Vec<f64> = read_all(&t, &id)
        .await
        .iter()
        .map(|e| num(e, "clientSeq"))
        .collect();
    assert_eq!(landed, [1.0, 2.0, 3.0], "each event landed once");
    until(10_000, "the change stream to reopen", || {
        read_state(&client.status()) == "connected" && num(&log, "openStreams") == 1.0
    })
    .await;
    unsubscribe.call0(&JsValue::NULL).unwrap();
    let restore: Function = get(&log, "restore").unchecked_into();
    restore.call0(&log).unwrap();
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn opened_with_offline_true_it_sends_nothing_until_switched_on() {
    no_faults().await;
    let log = count_fetches();
    let client = open(&db_name("switch-open"), r#"{"offline":true}"#).await;
    assert!(client.offline());
    let (t, id) = (uuid(), uuid());
    let agg = aggregate(&t, &id);
    ok(client.append(agg.clone(), Array::of1(&json_event(1)).into())).await;
    until(2_000, "the offline state", || {
        string(&client.status(), "state") == "offline"
    })
    .await;
    sleep(500).await;
    let paths = js_sys::JSON::stringify(&get(&log, "paths")).unwrap();
    assert_eq!(num(&log, "total"), 0.0, "nothing fetched: {paths:?}");
    client.set_offline(false.into()).unwrap();
    flush_within(&client, 10).await;
    assert_eq!(read_all(&t, &id).await.len(), 1);
    let restore: Function = get(&log, "restore").unchecked_into();
    restore.call0(&log).unwrap();
    ok(client.close()).await;
}
