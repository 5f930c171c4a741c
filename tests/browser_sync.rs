//! The drain loop in headless Chromium against the real gateway process (started by
//! `npm test` with fault injection on): the exactly-once run under faults, and rules 3–8 but 5
//! (the replies: `browser_sync_replies.rs`).
//!
//! Requests go through the real `fetch`; some tests wrap it to record each request body (to
//! prove resends are byte-identical) or to script a few answers before handing over to the real
//! gateway.
#![cfg(target_arch = "wasm32")]

mod browser;

use std::collections::HashMap;

use browser::*;
use js_sys::Array;
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen_test]
async fn chaos_500_events_over_5_aggregates_land_exactly_once() {
    no_faults().await;
    let before =
        set_faults(r#"{"dropAfterCommit":0.3,"timeout":0.1,"inflight":0.1,"delayMs":1500}"#).await;
    let client = open(
        &db_name("chaos"),
        r#"{"requestTimeoutMs":600,"maxBatchEvents":25}"#,
    )
    .await;
    let type_id = uuid();
    let aggregates: Vec<String> = (0..5).map(|_| uuid()).collect();
    // What each append returned, per aggregate, in append order: (seq, eventId, base64 payload).
    let mut expected: HashMap<String, Vec<(u64, String, String)>> = HashMap::new();
    let mut pending = Vec::new();
    for i in 0..250 {
        let id = &aggregates[i % 5];
        let data: Vec<Vec<u8>> = (0..2)
            .map(|j| payload(&format!("event {i}.{j} of {id}")))
            .collect();
        let events = Array::of2(&bytes_event(7, &data[0]), &bytes_event(8, &data[1]));
        pending.push((
            id.clone(),
            data,
            client.append(aggregate(&type_id, id), events.into()),
        ));
        if i % 10 == 9 {
            // Let the drain loop run between bursts of appends.
            for (id, data, promise) in pending.drain(..) {
                let receipts: Array = ok(promise).await.unchecked_into();
                for (r, bytes) in receipts.iter().zip(data) {
                    let entry = (
                        num(&r, "clientSeq") as u64,
                        string(&r, "eventId"),
                        base64(&bytes),
                    );
                    expected.entry(id.clone()).or_default().push(entry);
                }
            }
            sleep(40).await;
        }
    }
    flush_within(&client, 240).await;
    let report = set_faults("{}").await;
    let counts = get(&report, "counts");
    let injected = |k: &str| num(&counts, k) - num(&get(&before, "counts"), k);
    web_sys::console::log_1(
        &format!(
            "chaos: requests {}, drop-after-commit {}, timeouts {}, 2013 {}",
            injected("requests"),
            injected("dropAfterCommit"),
            injected("timeout"),
            injected("inflight")
        )
        .into(),
    );
    assert!(
        injected("dropAfterCommit") > 0.0
            && injected("timeout") > 0.0
            && injected("inflight") > 0.0
    );

    for id in &aggregates {
        let landed = read_all(&type_id, id).await;
        let got: Vec<(u64, String, String)> = landed
            .iter()
            .map(|e| {
                (
                    num(e, "clientSeq") as u64,
                    string(e, "eventId"),
                    string(e, "data"),
                )
            })
            .collect();
        let want = &expected[id];
        assert_eq!(want.len(), 100);
        assert_eq!(
            want.iter().map(|w| w.0).collect::<Vec<_>>(),
            (1..=100).collect::<Vec<u64>>(),
            "append order"
        );
        assert_eq!(
            &got, want,
            "aggregate {id}: every event once, in order, bytes identical"
        );
    }
    assert_eq!(num(&client.status(), "pending"), 0.0);
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn rule3_one_request_at_a_time_one_aggregate_each_in_order_cut_by_count_and_bytes() {
    no_faults().await;
    let log = record_writes();
    let client = open(
        &db_name("rule3"),
        r#"{"maxBatchEvents":7,"maxBatchBytes":4096}"#,
    )
    .await;
    let type_id = uuid();
    let ids: Vec<String> = (0..3).map(|_| uuid()).collect();
    for round in 0..10 {
        for id in &ids {
            let events: Array = (0..3)
                .map(|k| bytes_event(1, &[round as u8 + k; 150]))
                .collect();
            ok(client.append(aggregate(&type_id, id), events.into())).await;
        }
    }
    ok(client.append(
        aggregate(&type_id, &ids[0]),
        Array::of1(&bytes_event(1, &[9; 6000])).into(),
    ))
    .await;
    flush_within(&client, 60).await;
    restore(&log);
    assert_eq!(
        num(&log, "maxConcurrent"),
        1.0,
        "never two requests in flight"
    );
    let mut per_aggregate: HashMap<String, Vec<u64>> = HashMap::new();
    for (raw, body) in raw_bodies(&log).iter().zip(bodies(&log)) {
        let (id, seqs) = body_seqs(&body);
        assert!(seqs.len() <= 7, "count limit: {seqs:?}");
        assert!(
            raw.len() <= 4096 || seqs.len() == 1,
            "byte limit: {} bytes for {seqs:?}",
            raw.len()
        );
        assert!(
            seqs.windows(2).all(|w| w[1] == w[0] + 1),
            "a run of consecutive events"
        );
        per_aggregate.entry(id).or_default().extend(seqs);
    }
    assert_eq!(
        per_aggregate[&ids[0]],
        (1..=31).collect::<Vec<_>>(),
        "strictly in order, never skipping"
    );
    assert_eq!(per_aggregate[&ids[1]], (1..=30).collect::<Vec<_>>());
    assert_eq!(per_aggregate[&ids[2]], (1..=30).collect::<Vec<_>>());
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn rule4_a_pinned_batch_is_resent_byte_identical_also_after_a_reload() {
    no_faults().await;
    let db = db_name("rule4");
    let (t, a) = (uuid(), uuid());
    // First session: the first request never gets an answer; the tab goes away meanwhile.
    let hang = script_writes(&Array::of1(&json(r#"{"hang":true}"#)));
    let client = open(&db, "{}").await;
    let five: Array = (0..5)
        .map(|i| bytes_event(2, &payload(&format!("pinned {i}"))))
        .collect();
    ok(client.append(aggregate(&t, &a), five.into())).await;
    until(2000, "the first send", || !list(&hang, "bodies").is_empty()).await;
    let later: Array = (0..3)
        .map(|i| bytes_event(2, &payload(&format!("later {i}"))))
        .collect();
    ok(client.append(aggregate(&t, &a), later.into())).await;
    ok(client.close()).await;
    restore(&hang);
    let first = raw_bodies(&hang)[0].clone();
    assert_eq!(body_seqs(&json(&first)).1, [1, 2, 3, 4, 5]);

    // Second session: a network error, a 502, then the real gateway.
    let script = script_writes(&Array::of2(
        &json(r#"{"network":true}"#),
        &json(r#"{"status":502}"#),
    ));
    let client = open(&db, "{}").await;
    flush_within(&client, 30).await;
    restore(&script);
    let sent = raw_bodies(&script);
    assert!(sent.len() >= 4, "{sent:?}");
    for resend in &sent[..3] {
        assert_eq!(
            resend, &first,
            "byte-identical after the reload, whatever happened before"
        );
    }
    assert_eq!(
        body_seqs(&json(&sent[3])).1,
        [6, 7, 8],
        "later events were never added to the pinned batch"
    );
    let landed: Vec<f64> = read_all(&t, &a)
        .await
        .iter()
        .map(|e| num(e, "clientSeq"))
        .collect();
    assert_eq!(landed, [1.0, 2.0, 3.0, 4.0, 5.0, 6.0, 7.0, 8.0]);
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn rule6_an_append_wakes_the_loop_at_once_and_offline_waits_for_online() {
    no_faults().await;
    let client = open(&db_name("rule6"), "{}").await;
    let seen = listened(&client);
    sleep(200).await; // idle now
    let started = js_sys::Date::now();
    let (t, a) = (uuid(), uuid());
    ok(client.append(
        aggregate(&t, &a),
        Array::of1(&bytes_event(1, b"now")).into(),
    ))
    .await;
    until(2000, "synced", || !list(&seen, "synced").is_empty()).await;
    assert!(
        js_sys::Date::now() - started < 1500.0,
        "woken by the append, not by the 30 s idle poll"
    );

    set_online(false);
    let log = record_writes();
    ok(client.append(
        aggregate(&t, &a),
        Array::of1(&bytes_event(1, b"offline")).into(),
    ))
    .await;
    until(2000, "the offline state", || {
        string(&client.status(), "state") == "offline"
    })
    .await;
    sleep(700).await;
    assert!(
        raw_bodies(&log).is_empty(),
        "nothing is sent while offline (the probe is 15 s away)"
    );
    set_online(true); // fires `online`
    flush_within(&client, 5).await;
    restore(&log);
    assert_eq!(raw_bodies(&log).len(), 1);
    assert_eq!(read_all(&t, &a).await.len(), 2);
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn rule7_reopening_a_non_empty_outbox_drains_it_pinned_batch_first() {
    no_faults().await;
    let db = db_name("rule7");
    let t = uuid();
    let (a, b) = (uuid(), uuid());
    {
        let offline = open_nowhere(&db, "{}").await;
        ok(offline.append(
            aggregate(&t, &a),
            Array::of3(
                &bytes_event(1, b"1"),
                &bytes_event(1, b"2"),
                &bytes_event(1, b"3"),
            )
            .into(),
        ))
        .await;
        ok(offline.append(
            aggregate(&t, &b),
            Array::of2(&bytes_event(1, b"1"), &bytes_event(1, b"2")).into(),
        ))
        .await;
        until(5000, "a failed attempt", || {
            !get(&offline.status(), "lastError").is_null()
        })
        .await;
        ok(offline.close()).await;
    }
    let pin = get_raw(&db, "meta", &"pin".into()).await;
    assert!(
        !pin.is_null(),
        "a batch was pinned before the first attempt"
    );
    let log = record_writes();
    let client = open(&db, "{}").await;
    flush_within(&client, 30).await;
    restore(&log);
    let sent = bodies(&log);
    let (id, seqs) = body_seqs(&sent[0]);
    assert_eq!(id, string(&pin, "a"), "the pinned batch goes first");
    assert_eq!(
        (seqs[0], *seqs.last().unwrap()),
        (num(&pin, "first") as u64, num(&pin, "last") as u64)
    );
    assert_eq!(read_all(&t, &a).await.len(), 3);
    assert_eq!(read_all(&t, &b).await.len(), 2);
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn rule8_a_backlog_of_100000_events_drains_in_order_and_is_pruned() {
    no_faults().await;
    let db = db_name("rule8");
    let t = uuid();
    let ids: Vec<String> = (0..10).map(|_| uuid()).collect();
    {
        let offline = open_nowhere(&db, r#"{"durability":"relaxed"}"#).await;
        for round in 0..10u32 {
            for id in &ids {
                let events: Array = (0..1000u32)
                    .map(|i| bytes_event(1, &(round * 1000 + i).to_le_bytes()))
                    .collect();
                ok(offline.append(aggregate(&t, id), events.into())).await;
            }
        }
        assert_eq!(num(&offline.status(), "pending"), 100_000.0);
        ok(offline.close()).await;
    }
    assert_eq!(outbox_events(&db).await, 100_000);
    let client = open(&db, "{}").await;
    assert_eq!(
        num(&client.status(), "pending"),
        100_000.0,
        "counted at open, not loaded"
    );
    let started = js_sys::Date::now();
    flush_within(&client, 300).await;
    let ms = js_sys::Date::now() - started;
    // The drain rate per engine (printed with the runner's --nocapture; docs/browsers.md).
    console_log!(
        "rule8: 100000 events drained in {ms:.0} ms ({:.0} events/s)",
        100_000.0 / (ms / 1000.0)
    );
    pruned_within(&db, 120_000).await; // synced events are pruned

    for id in &ids {
        let landed = read_all(&t, id).await;
        assert_eq!(landed.len(), 10_000);
        for (i, e) in landed.iter().enumerate() {
            assert_eq!(num(e, "clientSeq") as usize, i + 1);
            assert_eq!(string(e, "data"), base64(&(i as u32).to_le_bytes()));
        }
    }
    ok(client.close()).await;
}

/// `status().pending` is exact while appends overlap the drain's start, whose recount reads
/// the outbox while they commit: every append made is counted once (CI once saw WebKit count
/// one append twice, 101,000 pending for 100,000 appended).
#[wasm_bindgen_test]
async fn the_pending_count_is_exact_while_appends_overlap_the_recount() {
    let db = db_name("recount");
    let t = uuid();
    let ids: Vec<String> = (0..4).map(|_| uuid()).collect();
    let mut expected = 0.0;
    for round in 0..12u32 {
        // A fresh client each round: its drain starts (and recounts) while the appends go on,
        // some large and awaited, some small and not.
        let client = open_nowhere(&db, r#"{"durability":"relaxed"}"#).await;
        let mut waiting = Vec::new();
        for i in 0..24u32 {
            let n = if i % 4 == 0 { 500 } else { 1 + i % 3 };
            let events: Array = (0..n)
                .map(|k| bytes_event(1, &(round * 100_000 + i * 1000 + k).to_le_bytes()))
                .collect();
            let appended = client.append(aggregate(&t, &ids[(i % 4) as usize]), events.into());
            expected += f64::from(n);
            if n > 100 {
                ok(appended).await;
            } else {
                waiting.push(appended);
            }
        }
        for appended in waiting {
            ok(appended).await;
        }
        // Exact at every moment: with the recount perhaps still out, and once the drain's
        // start (its recount included) is over, after a failed attempt.
        assert_eq!(
            num(&client.status(), "pending"),
            expected,
            "round {round}: counted once each"
        );
        until(10_000, "a failed attempt", || {
            !get(&client.status(), "lastError").is_null()
        })
        .await;
        assert_eq!(
            num(&client.status(), "pending"),
            expected,
            "round {round}: counted once each, after the start"
        );
        ok(client.close()).await;
    }
    assert_eq!(f64::from(outbox_events(&db).await), expected);
}
