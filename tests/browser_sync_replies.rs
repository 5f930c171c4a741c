//! Rule 5 of the drain loop in headless Chromium against the real gateway process: what the
//! client does with each reply. A 2002 below the batch settles that prefix and the rest is
//! resent; a retry backs off (honouring `Retry-After`, capped by `maxBackoffMs`) and resends the
//! identical body; an unknown outcome is resent identical; a rejection parks its aggregate while
//! the others go on, and a discard resumes it. Most replies are scripted in front of the real
//! gateway (kept apart from `browser_sync.rs`, which holds the exactly-once run under faults and
//! the other rules).
#![cfg(target_arch = "wasm32")]

mod browser;

use browser::*;
use js_sys::{Array, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen_test]
async fn rule5_a_2002_below_the_batch_settles_that_prefix_and_resends_the_rest() {
    no_faults().await;
    let script = script_writes(&Array::of1(&json(
        r#"{"status":200,"body":{"outcome":"landed","duplicate":true,"code":2002,"lastClientSeq":2,"attemptedClientSeq":1}}"#,
    )));
    let client = open(&db_name("rule5-2002"), "{}").await;
    let seen = listened(&client);
    let (t, a) = (uuid(), uuid());
    let events: Array = (0..5).map(|i| bytes_event(1, &[i])).collect();
    ok(client.append(aggregate(&t, &a), events.into())).await;
    flush_within(&client, 30).await;
    restore(&script);
    let sent = bodies(&script);
    assert_eq!(body_seqs(&sent[0]).1, [1, 2, 3, 4, 5]);
    assert_eq!(body_seqs(&sent[1]).1, [3, 4, 5], "only the rest is resent");
    let synced = list(&seen, "synced");
    assert_eq!(
        (num(&synced[0], "firstSeq"), num(&synced[0], "lastSeq")),
        (1.0, 2.0)
    );
    assert_eq!(get(&synced[0], "duplicate"), JsValue::TRUE);
    assert_eq!(
        (num(&synced[1], "firstSeq"), num(&synced[1], "lastSeq")),
        (3.0, 5.0)
    );
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn rule5_retry_backs_off_honouring_retry_after_and_resends_identical() {
    no_faults().await;
    let script = script_writes(&Array::of1(&json(
        r#"{"status":503,"retryAfter":2,"body":{"outcome":"retry","code":2012,"message":"busy","retryAfterMs":1200}}"#,
    )));
    let client = open(&db_name("rule5-retry"), "{}").await;
    let seen = listened(&client);
    let (t, a) = (uuid(), uuid());
    ok(client.append(
        aggregate(&t, &a),
        Array::of2(&bytes_event(1, b"a"), &bytes_event(1, b"b")).into(),
    ))
    .await;
    flush_within(&client, 30).await;
    restore(&script);
    let times = request_times(&script);
    assert!(
        times[1] - times[0] >= 1150.0,
        "waited {} ms, Retry-After asked for 1200",
        times[1] - times[0]
    );
    let sent = raw_bodies(&script);
    assert_eq!(sent[0], sent[1], "resent identical");
    let states: Vec<String> = list(&seen, "status")
        .iter()
        .map(|s| string(s, "state"))
        .collect();
    assert!(states.contains(&"backoff".to_string()), "{states:?}");

    // The real gateway's own 503 (injected busy): backoff, then it lands once the gateway recovers.
    set_faults(r#"{"busy":1.0,"retryAfterMs":300}"#).await;
    let (t, a) = (uuid(), uuid());
    ok(client.append(aggregate(&t, &a), Array::of1(&bytes_event(1, b"c")).into())).await;
    until(5000, "a 2012 from the gateway", || {
        let e = get(&client.status(), "lastError");
        !e.is_null() && num(&e, "code") == 2012.0
    })
    .await;
    no_faults().await;
    flush_within(&client, 30).await;
    assert_eq!(read_all(&t, &a).await.len(), 1);
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn rule5_max_backoff_ms_caps_every_wait() {
    // Eight failed attempts in a row: by the default backoff the later waits would be drawn
    // from windows of 2, 4 … 32 s; with `maxBackoffMs: 1000` none may exceed a second (plus
    // up to 800 ms for the attempt itself on a loaded machine: all eight gaps under 1.8 s by
    // the default backoff has a chance of about 1 in 2,000).
    no_faults().await;
    let failures: Array = (0..8).map(|_| json(r#"{"network":true}"#)).collect();
    let script = script_writes(&failures);
    let client = open(&db_name("rule5-cap"), r#"{"maxBackoffMs":1000}"#).await;
    let (t, a) = (uuid(), uuid());
    ok(client.append(aggregate(&t, &a), Array::of1(&bytes_event(1, b"x")).into())).await;
    flush_within(&client, 30).await;
    restore(&script);
    let times = request_times(&script);
    assert_eq!(times.len(), 9, "eight failures, then the real gateway");
    let gaps: Vec<f64> = times.windows(2).map(|w| w[1] - w[0]).collect();
    assert!(
        gaps.iter().all(|g| *g <= 1_800.0),
        "waits between attempts (ms): {gaps:?}"
    );
    assert_eq!(read_all(&t, &a).await.len(), 1, "landed once");
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn rule5_unknown_outcomes_resend_identical() {
    no_faults().await;
    let script = script_writes(&Array::of4(
        &json(r#"{"network":true}"#),
        &json(r#"{"hang":true}"#),
        &json(r#"{"status":502}"#),
        &json(r#"{"status":500,"body":"Internal Server Error"}"#),
    ));
    let client = open(&db_name("rule5-unknown"), r#"{"requestTimeoutMs":300}"#).await;
    let (t, a) = (uuid(), uuid());
    let events: Array = (0..4)
        .map(|i| bytes_event(5, &payload(&format!("u{i}"))))
        .collect();
    ok(client.append(aggregate(&t, &a), events.into())).await;
    flush_within(&client, 60).await;
    restore(&script);
    let sent = raw_bodies(&script);
    assert_eq!(sent.len(), 5, "four failures, then the real gateway");
    assert!(
        sent.iter().all(|b| b == &sent[0]),
        "every resend byte-identical"
    );
    assert_eq!(read_all(&t, &a).await.len(), 4, "landed once");
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn rule5_a_rejection_parks_the_aggregate_others_go_on_and_discard_resumes_it() {
    set_faults(r#"{"rejectType":13}"#).await;
    let client = open(&db_name("rule5-park"), "{}").await;
    let seen = listened(&client);
    let t = uuid();
    let (a, b) = (uuid(), uuid());
    // One batch of three events, the middle one refused by the gateway's schema.
    let events = Array::of3(
        &bytes_event(1, b"a1"),
        &bytes_event(13, b"poison"),
        &bytes_event(1, b"a3"),
    );
    ok(client.append(aggregate(&t, &a), events.into())).await;
    ok(client.append(
        aggregate(&t, &b),
        Array::of2(&bytes_event(1, b"b1"), &bytes_event(1, b"b2")).into(),
    ))
    .await;
    until(10_000, "the parked event", || {
        !list(&seen, "parked").is_empty()
    })
    .await;
    let parked = &list(&seen, "parked")[0];
    assert_eq!(string(&get(parked, "aggregate"), "id"), a);
    assert_eq!(
        (
            num(parked, "firstSeq"),
            num(parked, "lastSeq"),
            num(parked, "code")
        ),
        (2.0, 2.0, 2022.0)
    );
    assert!(string(parked, "message").contains("schema"));
    assert_eq!(get(parked, "mayHaveLanded"), JsValue::FALSE);

    let e = within(client.flush(), 10_000, "flush")
        .await
        .expect_err("flush must reject while parked");
    assert_eq!(string(&e, "code"), "PARKED", "{}", describe(&e));
    assert_eq!(string(&get(&e, "aggregate"), "id"), a);
    assert_eq!(num(&e, "parkCode"), 2022.0);
    until(10_000, "b to land", || synced_for(&seen, &b)).await;

    let parked_events: Array = ok(client.parked_events()).await.unchecked_into();
    assert_eq!(parked_events.length(), 1);
    let event = parked_events.get(0);
    assert_eq!((num(&event, "clientSeq"), num(&event, "type")), (2.0, 13.0));
    assert_eq!(
        get(&event, "data").unchecked_into::<Uint8Array>().to_vec(),
        b"poison"
    );
    // b's `synced` is told as the loop goes on (it cuts, finds nothing, recounts): the state
    // turns to `parked` once it is idle.
    until(10_000, "the loop to idle, parked", || {
        string(&client.status(), "state") == "parked"
    })
    .await;
    let status = client.status();
    assert_eq!(
        (
            string(&status, "state"),
            num(&status, "parked"),
            num(&status, "pending")
        ),
        ("parked".into(), 1.0, 1.0)
    );

    // Later events of the parked aggregate wait.
    ok(client.append(aggregate(&t, &a), Array::of1(&bytes_event(1, b"a4")).into())).await;
    sleep(300).await;
    let landed_a: Vec<f64> = read_all(&t, &a)
        .await
        .iter()
        .map(|e| num(e, "clientSeq"))
        .collect();
    assert_eq!(
        landed_a,
        [1.0],
        "the isolated good event landed; 3 and 4 wait behind the parked 2"
    );

    assert_eq!(
        ok(client.discard_parked(aggregate(&t, &a))).await.as_f64(),
        Some(1.0)
    );
    flush_within(&client, 30).await;
    let landed_a: Vec<f64> = read_all(&t, &a)
        .await
        .iter()
        .map(|e| num(e, "clientSeq"))
        .collect();
    assert_eq!(
        landed_a,
        [1.0, 3.0, 4.0],
        "the gap left by the discarded event is safe"
    );
    let landed_b: Vec<f64> = read_all(&t, &b)
        .await
        .iter()
        .map(|e| num(e, "clientSeq"))
        .collect();
    assert_eq!(landed_b, [1.0, 2.0]);
    assert_eq!(num(&client.status(), "parked"), 0.0);
    no_faults().await;
    ok(client.close()).await;
}
