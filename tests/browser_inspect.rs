//! `client.inspect()` in the browser against the real gateway (started by `npm test` with
//! fault injection on): after a faulted send the snapshot names the pinned range and the last
//! outcome with its code; parked events carry their reason and payloads only when asked; a
//! second client on the same database sees another context drain.
#![cfg(target_arch = "wasm32")]

mod browser;

use browser::*;
use js_sys::{Array, JSON, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

async fn inspect(client: &celeriant_sync::SyncClient, options: Option<JsValue>) -> JsValue {
    ok(client.inspect(options)).await
}

fn list(v: &JsValue, key: &str) -> Vec<JsValue> {
    get(v, key).unchecked_into::<Array>().iter().collect()
}

fn text(v: &JsValue) -> String {
    JSON::stringify(v).unwrap().as_string().unwrap()
}

#[wasm_bindgen_test]
async fn after_a_faulted_send_the_snapshot_names_the_pinned_range_and_the_last_outcome() {
    // Every write answered 503 2012 with a long Retry-After: the batch stays pinned, waiting.
    set_faults(r#"{"busy":1.0,"retryAfterMs":5000}"#).await;
    let client = open(&db_name("inspect-faulted"), "{}").await;
    let (t, a) = (uuid(), uuid());
    let events: Array = (0..3u8).map(|i| bytes_event(4, &[i, 0xff])).collect();
    ok(client.append(aggregate(&t, &a), events.into())).await;
    until(10_000, "a 2012 from the gateway", || {
        let e = get(&client.status(), "lastError");
        !e.is_null() && num(&e, "code") == 2012.0
    })
    .await;

    let snap = inspect(&client, None).await;
    assert_eq!(string(&snap, "role"), "drainer");
    assert_eq!(string(&get(&snap, "drainer"), "context"), "this");
    assert!(
        get(&get(&snap, "drainer"), "lockHolder").is_string(),
        "{}",
        text(&snap)
    );
    let pinned = get(&snap, "pinned");
    assert!(!pinned.is_null(), "a pinned batch: {}", text(&snap));
    assert_eq!(string(&get(&pinned, "aggregate"), "id"), a);
    assert_eq!(string(&get(&pinned, "aggregate"), "typeId"), t);
    assert_eq!(
        (
            num(&pinned, "firstSeq"),
            num(&pinned, "lastSeq"),
            num(&pinned, "count")
        ),
        (1.0, 3.0, 3.0)
    );
    assert!(num(&pinned, "attempts") >= 1.0, "{}", text(&pinned));
    let last = get(&pinned, "lastOutcome");
    assert_eq!(string(&last, "outcome"), "retry", "{}", text(&pinned));
    assert_eq!(num(&last, "code"), 2012.0);
    assert_eq!((num(&last, "firstSeq"), num(&last, "lastSeq")), (1.0, 3.0));
    let next = num(&pinned, "nextAttemptAt");
    assert!(
        next >= num(&last, "at") + 4_000.0,
        "Retry-After honoured: {}",
        text(&pinned)
    );
    // The ring has it too, newest last.
    let outcomes = list(&snap, "outcomes");
    let newest = outcomes.last().expect("an outcome");
    assert_eq!(string(newest, "outcome"), "retry");
    assert_eq!(num(newest, "code"), 2012.0);
    assert_eq!(num(&snap, "outcomesKept"), 50.0);
    // Per aggregate: three pending, none parked.
    let aggregates = list(&snap, "aggregates");
    assert_eq!(aggregates.len(), 1, "{}", text(&snap));
    assert_eq!(
        (
            num(&aggregates[0], "pending"),
            num(&aggregates[0], "parked")
        ),
        (3.0, 0.0)
    );
    assert!(
        !text(&snap).contains("\"data\""),
        "no payloads unless asked"
    );

    // Faults off: it lands; nothing pinned, the newest outcome is a landing.
    no_faults().await;
    flush_within(&client, 30).await;
    let snap = inspect(&client, None).await;
    assert!(get(&snap, "pinned").is_null(), "{}", text(&snap));
    assert!(list(&snap, "aggregates").is_empty(), "{}", text(&snap));
    let newest = list(&snap, "outcomes").pop().unwrap();
    assert_eq!(string(&newest, "outcome"), "landed", "{}", text(&snap));
    assert!(num(&newest, "attempt") >= 2.0);
    assert_eq!(read_all(&t, &a).await.len(), 3);
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn parked_events_carry_their_reason_and_payloads_only_when_asked() {
    set_faults(r#"{"rejectType":13}"#).await;
    let client = open(&db_name("inspect-parked"), "{}").await;
    let (t, a) = (uuid(), uuid());
    ok(client.append(
        aggregate(&t, &a),
        Array::of1(&bytes_event(13, b"no")).into(),
    ))
    .await;
    until(10_000, "parked", || num(&client.status(), "parked") == 1.0).await;
    no_faults().await;

    let snap = inspect(&client, None).await;
    let parked = list(&snap, "parked");
    assert_eq!(parked.len(), 1, "{}", text(&snap));
    assert_eq!(num(&parked[0], "code"), 2022.0);
    assert!(!string(&parked[0], "message").is_empty());
    let events = list(&parked[0], "events");
    assert_eq!(events.len(), 1);
    assert_eq!(num(&events[0], "clientSeq"), 1.0);
    assert!(get(&events[0], "eventId").is_string());
    assert!(
        get(&events[0], "data").is_undefined(),
        "no payload: {}",
        text(&events[0])
    );
    let aggregates = list(&snap, "aggregates");
    assert_eq!(
        (
            num(&aggregates[0], "pending"),
            num(&aggregates[0], "parked")
        ),
        (0.0, 1.0)
    );
    let last = list(&snap, "outcomes").pop().unwrap();
    assert_eq!(
        (string(&last, "outcome"), num(&last, "code")),
        ("rejected".to_string(), 2022.0)
    );

    let with = inspect(&client, Some(object(&[("payloads", JsValue::TRUE)]))).await;
    let event = list(&list(&with, "parked")[0], "events").pop().unwrap();
    let data: Uint8Array = get(&event, "data").dyn_into().expect("data as bytes");
    assert_eq!(data.to_vec(), b"no");

    let bad = err(client.inspect(Some(object(&[("payloads", "yes".into())])))).await;
    assert_eq!(string(&bad, "code"), "INVALID_OPTIONS");
    ok(client.discard_parked(aggregate(&t, &a))).await;
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn a_second_client_on_the_database_sees_another_context_drain() {
    no_faults().await;
    let db = db_name("inspect-follower");
    let first = open(&db, "{}").await;
    until(5_000, "the first client drains", || {
        string(&first.status(), "role") == "drainer"
    })
    .await;
    let second = open(&db, "{}").await;
    sleep(200).await;
    let snap = inspect(&second, None).await;
    assert_eq!(string(&snap, "role"), "follower", "{}", text(&snap));
    let drainer = get(&snap, "drainer");
    assert_eq!(string(&drainer, "context"), "other", "{}", text(&snap));
    let holder = string(&drainer, "lockHolder");
    let mine = inspect(&first, None).await;
    assert_eq!(
        string(&get(&mine, "drainer"), "lockHolder"),
        holder,
        "the same holder seen from both"
    );
    assert_eq!(string(&get(&mine, "drainer"), "context"), "this");
    assert!(
        list(&snap, "outcomes").is_empty(),
        "a follower never drained"
    );
    ok(second.close()).await;
    ok(first.close()).await;
}
