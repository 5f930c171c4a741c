//! Projections (`client.project`) against the real gateway: the confirmed events are folded
//! once (a new confirmed event is one more `apply`, not the whole log again), pending events
//! are re-applied on top at each change, a trimmed (reset) log is folded again from scratch,
//! and an `apply` that throws gives a typed `PROJECTION_FAILED` snapshot without stopping the
//! read side; the projection recovers once `apply` stops throwing.
#![cfg(target_arch = "wasm32")]

mod browser;

use browser::*;
use celeriant_sync::{CeleriantSyncError, SyncClient};
use js_sys::{Array, Function, Promise};
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen(module = "/tests/browser/support.js")]
extern "C" {
    #[wasm_bindgen(js_name = trim)]
    fn trim_js(gateway: &str, secret: &str, type_id: &str, id: &str, before: f64) -> Promise;
}

/// `{ initial: 0, apply }` whose `apply` adds the events' `n`, counts its calls per event
/// status in `counter` (`confirmed`, `pending`), and throws on type 7 while `counter.poison`.
fn summing(counter: &JsValue) -> JsValue {
    let make = Function::new_with_args(
        "c",
        "return { initial: 0, apply: function (s, e) {
            c[e.status] = (c[e.status] || 0) + 1;
            if (c.poison && e.type === 7) throw new Error('poisoned');
            return s + e.json().n;
        } };",
    );
    make.call1(&JsValue::NULL, counter).unwrap()
}

/// A listener that counts its calls in `counter.deliveries`.
fn counting_listener(counter: &JsValue) -> JsValue {
    Function::new_with_args(
        "c",
        "return function () { c.deliveries = (c.deliveries || 0) + 1; };",
    )
    .call1(&JsValue::NULL, counter)
    .unwrap()
}

fn count(counter: &JsValue, key: &str) -> f64 {
    get(counter, key).as_f64().unwrap_or(0.0)
}

fn method(object: &JsValue, name: &str) -> Function {
    get(object, name).unchecked_into()
}

async fn append_n(client: &SyncClient, agg: &JsValue, event_type: u32, ns: &[u32]) {
    let events: Array = ns
        .iter()
        .map(|n| {
            object(&[
                ("type", event_type.into()),
                ("data", json(&format!(r#"{{"n":{n}}}"#))),
            ])
        })
        .collect();
    ok(client.append(agg.clone(), events.into())).await;
}

/// Waits until the projection's snapshot has this state and this many pending events, with a
/// confirmed version (and no error unless `error`).
async fn settled(
    projection: &JsValue,
    state: f64,
    pending: f64,
    error: bool,
    what: &str,
) -> JsValue {
    let mut last = JsValue::NULL;
    for _ in 0..200 {
        last = get(projection, "current");
        if !last.is_null()
            && num(&last, "state") == state
            && num(&last, "pending") == pending
            && num(&last, "version") > 0.0
            && get(&last, "error").is_null() != error
        {
            return last;
        }
        sleep(100).await;
    }
    panic!(
        "{what}: the projection never settled at state {state}, pending {pending}; last {:?}",
        js_sys::JSON::stringify(&last)
    );
}

#[wasm_bindgen_test]
async fn confirmed_events_are_folded_once_and_pending_ones_on_top() {
    no_faults().await;
    let client = open(&db_name("project-incremental"), "{}").await;
    let agg = aggregate(&uuid(), &uuid());
    let ns: Vec<u32> = (1..=20).collect();
    append_n(&client, &agg, 1, &ns).await;
    flush_within(&client, 20).await;
    let counter = object(&[]);
    let projection = client.project(agg.clone(), summing(&counter)).unwrap();
    settled(&projection, 210.0, 0.0, false, "20 confirmed").await;
    assert_eq!(
        count(&counter, "confirmed"),
        20.0,
        "each confirmed event folded once"
    );

    // One more confirmed event: one more apply, not 21.
    append_n(&client, &agg, 1, &[100]).await;
    flush_within(&client, 20).await;
    settled(&projection, 310.0, 0.0, false, "21 confirmed").await;
    assert_eq!(
        count(&counter, "confirmed"),
        21.0,
        "only the new event was folded"
    );

    // Pending events are re-applied on top of the kept state at every change.
    let unsubscribe = method(&projection, "subscribe")
        .call1(&projection, &counting_listener(&counter))
        .unwrap();
    client.set_offline(true.into()).unwrap();
    append_n(&client, &agg, 1, &[1000, 2000]).await;
    settled(&projection, 3310.0, 2.0, false, "two pending").await;
    let (deliveries, pending_calls) = (count(&counter, "deliveries"), count(&counter, "pending"));
    append_n(&client, &agg, 1, &[5]).await;
    settled(&projection, 3315.0, 3.0, false, "three pending").await;
    let changes = count(&counter, "deliveries") - deliveries;
    assert!(changes >= 1.0);
    assert_eq!(
        count(&counter, "pending") - pending_calls,
        3.0 * changes,
        "the three pending events, once per change"
    );
    assert_eq!(
        count(&counter, "confirmed"),
        21.0,
        "nothing confirmed folded again"
    );

    client.set_offline(false.into()).unwrap();
    flush_within(&client, 20).await;
    settled(&projection, 3315.0, 0.0, false, "all confirmed").await;
    assert_eq!(
        count(&counter, "confirmed"),
        24.0,
        "each newly confirmed event once"
    );
    let value = ok(method(&projection, "value")
        .call0(&projection)
        .unwrap()
        .unchecked_into())
    .await;
    assert_eq!(value.as_f64(), Some(3315.0));
    unsubscribe
        .unchecked_into::<Function>()
        .call0(&JsValue::NULL)
        .unwrap();
    method(&projection, "close").call0(&projection).unwrap();
    // A projection of a client that closes settles (its first fold, or CLOSED): it never waits
    // for ever.
    let last = client.project(agg.clone(), summing(&counter)).unwrap();
    let pending_value: Promise = method(&last, "value")
        .call0(&last)
        .unwrap()
        .unchecked_into();
    ok(client.close()).await;
    match within(
        pending_value,
        5_000,
        "the value of a projection whose client closed",
    )
    .await
    {
        Ok(v) => assert_eq!(v.as_f64(), Some(3315.0)),
        Err(e) => assert_eq!(string(&e, "code"), "CLOSED", "{}", describe(&e)),
    }
    // A closed client makes no projection.
    let e = client.project(agg, summing(&counter)).expect_err("closed");
    assert_eq!(string(&e, "code"), "CLOSED");
}

#[wasm_bindgen_test]
async fn a_reset_folds_again_from_scratch() {
    no_faults().await;
    let client = open(&db_name("project-reset"), "{}").await;
    let (t, id) = (uuid(), uuid());
    let agg = aggregate(&t, &id);
    for n in 1..=5 {
        append_n(&client, &agg, 1, &[n]).await;
        flush_within(&client, 20).await;
    }
    let counter = object(&[]);
    let projection = client.project(agg.clone(), summing(&counter)).unwrap();
    settled(&projection, 15.0, 0.0, false, "before the trim").await;
    assert_eq!(count(&counter, "confirmed"), 5.0);
    // Versions 1..3 trimmed away: the log is read again from version 4, and folded again.
    ok(trim_js(gateway(), faults_secret(), &t, &id, 4.0)).await;
    let snapshot = settled(&projection, 9.0, 0.0, false, "after the trim").await;
    assert_eq!(num(&snapshot, "version"), 5.0);
    assert_eq!(
        count(&counter, "confirmed"),
        7.0,
        "the two events left, folded again"
    );
    method(&projection, "close").call0(&projection).unwrap();
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn a_throwing_apply_is_a_typed_failure_and_never_stops_the_read_side() {
    no_faults().await;
    let client = open(&db_name("project-throw"), "{}").await;
    let agg = aggregate(&uuid(), &uuid());
    let counter = object(&[("poison", true.into())]);
    append_n(&client, &agg, 1, &[1]).await;
    append_n(&client, &agg, 7, &[2]).await;
    flush_within(&client, 20).await;
    let projection = client.project(agg.clone(), summing(&counter)).unwrap();
    // A plain subscriber of the same aggregate, to show the read side goes on.
    let views = object(&[]);
    let listener = Function::new_with_args("v", "this.last = v;").bind0(&views);
    let unsubscribe: Function = client
        .subscribe(agg.clone(), listener)
        .unwrap()
        .unchecked_into();
    let snapshot = settled(&projection, 0.0, 0.0, true, "failed, confirmed").await;
    let error = get(&snapshot, "error");
    assert_eq!(string(&error, "code"), "PROJECTION_FAILED");
    let class = CeleriantSyncError::class();
    let instance = Function::new_with_args("v, c", "return v instanceof c");
    assert_eq!(
        instance.call2(&JsValue::NULL, &error, &class).unwrap(),
        JsValue::TRUE
    );
    assert_eq!(string(&get(&error, "cause"), "message"), "poisoned");
    assert_eq!(num(&get(&error, "event"), "type"), 7.0);
    let rejected = err(method(&projection, "value")
        .call0(&projection)
        .unwrap()
        .unchecked_into())
    .await;
    assert_eq!(string(&rejected, "code"), "PROJECTION_FAILED");

    // The read side goes on: a new event reaches the plain subscriber and `read`.
    append_n(&client, &agg, 1, &[3]).await;
    flush_within(&client, 20).await;
    until(
        20_000,
        "the subscriber to see three confirmed events",
        || {
            let last = get(&views, "last");
            !last.is_undefined()
                && num(&last, "pending") == 0.0
                && get(&last, "events").unchecked_into::<Array>().length() == 3
        },
    )
    .await;
    let view = ok(client.read(agg.clone())).await;
    assert_eq!(get(&view, "events").unchecked_into::<Array>().length(), 3);

    // Once apply stops throwing, the next change folds everything again.
    js_sys::Reflect::set(&counter, &"poison".into(), &false.into()).unwrap();
    append_n(&client, &agg, 1, &[4]).await;
    flush_within(&client, 20).await;
    settled(&projection, 10.0, 0.0, false, "recovered").await;
    let value = ok(method(&projection, "value")
        .call0(&projection)
        .unwrap()
        .unchecked_into())
    .await;
    assert_eq!(value.as_f64(), Some(10.0));
    unsubscribe.call0(&JsValue::NULL).unwrap();
    method(&projection, "close").call0(&projection).unwrap();
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn one_new_event_on_ten_thousand_confirmed_is_one_apply() {
    no_faults().await;
    let client = open(&db_name("project-large"), "{}").await;
    let agg = aggregate(&uuid(), &uuid());
    let ns: Vec<u32> = vec![1; 10_000];
    append_n(&client, &agg, 1, &ns).await;
    flush_within(&client, 40).await;
    let counter = object(&[]);
    let projection = client.project(agg.clone(), summing(&counter)).unwrap();
    settled(&projection, 10_000.0, 0.0, false, "10,000 confirmed").await;
    assert_eq!(count(&counter, "confirmed"), 10_000.0);
    let started = js_sys::Date::now();
    let pending_before = count(&counter, "pending");
    append_n(&client, &agg, 1, &[5]).await;
    flush_within(&client, 20).await;
    settled(&projection, 10_005.0, 0.0, false, "10,001 confirmed").await;
    assert_eq!(
        count(&counter, "confirmed"),
        10_001.0,
        "the new event alone was folded"
    );
    web_sys::console::log_1(
        &format!(
            "project-large: one new event on 10,000 confirmed: 1 confirmed apply, {} pending \
             applies (it, while pending), {:.0} ms from append to the folded snapshot",
            count(&counter, "pending") - pending_before,
            js_sys::Date::now() - started
        )
        .into(),
    );
    method(&projection, "close").call0(&projection).unwrap();
    ok(client.close()).await;
}
