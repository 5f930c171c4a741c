//! Conditional appends (`append(…, { expectedVersion })`, issue 27) in the browser against the
//! real gateway: bad options refused with nothing stored; a stale guard parked with 2003 and the
//! current version, nothing stored at the server, and the aggregate's later events held behind
//! it; the trap of `docs/protocol.md` 6.1 (a conditional write that landed but whose answer was
//! dropped gets 2003 on its resend) settled as landed, exactly once.
#![cfg(target_arch = "wasm32")]

mod browser;

use browser::*;
use celeriant_sync::SyncClient;
use js_sys::Array;
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen(inline_js = r#"
export function encryptedOptions(db, gateway) {
  return crypto.subtle.generateKey({ name: "AES-GCM", length: 256 }, false, ["encrypt", "decrypt"])
    .then((key) => ({ gatewayUrl: gateway, databaseName: db, encryption: key }));
}
"#)]
extern "C" {
    #[wasm_bindgen(js_name = encryptedOptions)]
    fn encrypted_options(db: &str, gateway: &str) -> js_sys::Promise;
}

fn events(tags: &[u8]) -> JsValue {
    tags.iter()
        .map(|t| bytes_event(1, &[*t; 8]))
        .collect::<Array>()
        .into()
}

fn guard(version: u64) -> JsValue {
    object(&[("expectedVersion", (version as f64).into())])
}

fn code(e: &JsValue) -> String {
    string(e, "code")
}

#[wasm_bindgen_test]
async fn bad_append_options_are_refused_and_nothing_is_stored() {
    no_faults().await;
    let db = db_name("cond-options");
    let client = open(&db, "{}").await;
    let a = aggregate(&uuid(), &uuid());
    for options in [
        json(r#"{"expectedVersion":-1}"#),
        json(r#"{"expectedVersion":1.5}"#),
        json(r#"{"expectedVersion":"3"}"#),
        json(r#"{"expectedVersion":9007199254740992}"#),
        // expected + 1 must stay a safe integer (it is read back after a 2003).
        json(r#"{"expectedVersion":9007199254740991}"#),
        json(r#"{"expectedVersionn":3}"#),
        json(r#"{"expectedVersion":1,"force":true}"#),
        json("[]"),
        JsValue::from(3),
    ] {
        let e = err(client.append_with(a.clone(), events(&[1]), options.clone())).await;
        assert_eq!(code(&e), "INVALID_OPTIONS", "{options:?}: {}", describe(&e));
    }
    assert_eq!(outbox_events(&db).await, 0, "nothing stored");
    // `undefined`, `null` and `{}` are no guard; `{ expectedVersion: null }` neither.
    for options in [
        JsValue::UNDEFINED,
        JsValue::NULL,
        json("{}"),
        json(r#"{"expectedVersion":null}"#),
    ] {
        ok(client.append_with(a.clone(), events(&[2]), options)).await;
    }
    flush_within(&client, 30).await;
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn a_stale_conditional_append_is_parked_with_2003_and_nothing_is_stored() {
    no_faults().await;
    let log = record_writes();
    let db = db_name("cond-stale");
    let client = open(&db, "{}").await;
    let (t, id) = (uuid(), uuid());
    let a = aggregate(&t, &id);
    // An unconditional event first, in the same outbox: it goes alone, before the guarded ones,
    // and makes version 1, so their guard of 0 ("only if it does not exist yet") is stale.
    // All three appends are made at once, so they are stored in one group commit (one run per
    // guard) and the first cut sees them all.
    let first = client.append(a.clone(), events(&[1]));
    let conditional = client.append_with(a.clone(), events(&[2, 3]), guard(0));
    // A later unconditional event of the same aggregate stays behind it.
    let later = client.append(a.clone(), events(&[4]));
    ok(first).await;
    assert_eq!(seqs(&ok(conditional).await), [2, 3]);
    ok(later).await;
    let e = err(client.flush()).await;
    assert_eq!(code(&e), "PARKED", "{}", describe(&e));
    assert_eq!(num(&e, "parkCode"), 2003.0);
    let parked: Array = ok(client.parked_events()).await.unchecked_into();
    assert_eq!(
        parked.length(),
        2,
        "exactly the conditional append's events"
    );
    for p in parked.iter() {
        assert_eq!(num(&p, "code"), 2003.0);
        assert_eq!(
            num(&p, "currentVersion"),
            1.0,
            "the version the server reported"
        );
        assert_eq!(
            get(&p, "mayHaveLanded"),
            JsValue::FALSE,
            "read back: not landed"
        );
    }
    assert_eq!(
        read_all(&t, &id).await.len(),
        1,
        "nothing of it stored at the server"
    );
    // Its request carried the guard; the events after it went in no request.
    let guarded: Vec<String> = raw_bodies(&log)
        .into_iter()
        .filter(|b| b.contains(r#""expectedVersion":0,"#))
        .collect();
    assert!(!guarded.is_empty());
    assert_eq!(
        body_seqs(&json(&raw_bodies(&log)[0])).1,
        [1],
        "the unconditional event before it is cut stopping before it"
    );
    for body in &guarded {
        assert_eq!(body_seqs(&json(body)).1, [2, 3], "alone, whole: {body}");
    }
    assert!(
        raw_bodies(&log)
            .iter()
            .all(|b| !body_seqs(&json(b)).1.contains(&4)),
        "the later event did not overtake the parked ones"
    );
    restore(&log);
    // Discarded, the aggregate goes on with the later event.
    assert_eq!(
        ok(client.discard_parked(a.clone())).await.as_f64(),
        Some(2.0)
    );
    flush_within(&client, 30).await;
    let stored = read_all(&t, &id).await;
    assert_eq!(stored.len(), 2);
    assert_eq!(num(&stored[1], "clientSeq"), 4.0);
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn the_trap_a_dropped_answer_then_2003_settles_as_landed_exactly_once() {
    no_faults().await;
    let db = db_name("cond-trap");
    let client = open(&db, r#"{"requestTimeoutMs":2000}"#).await;
    let seen = listened(&client);
    let log = record_writes();
    let (t, id) = (uuid(), uuid());
    let a = aggregate(&t, &id);
    // Every answer is dropped after the write committed.
    set_faults(r#"{"dropAfterCommit":1.0}"#).await;
    ok(client.append_with(a.clone(), events(&[1, 2]), guard(0))).await;
    let mut waited = 0;
    while read_all(&t, &id).await.is_empty() {
        assert!(waited < 20_000, "the conditional write never landed");
        sleep(100).await;
        waited += 100;
    }
    // Let a resend or two meet the guard (2003, its answer dropped too), then answer again.
    sleep(500).await;
    no_faults().await;
    flush_within(&client, 30).await;
    restore(&log);
    let stored = read_all(&t, &id).await;
    assert_eq!(stored.len(), 2, "landed once, not twice");
    let bodies = raw_bodies(&log);
    assert!(bodies.len() >= 2, "resent after the dropped answer");
    assert!(
        bodies.iter().all(|b| b == &bodies[0]),
        "every resend byte-identical"
    );
    assert_eq!(num(&client.status(), "parked"), 0.0, "never a conflict");
    let synced = list(&seen, "synced");
    let ids: usize = synced.iter().map(|s| list(s, "eventIds").len()).sum();
    assert_eq!(ids, 2, "synced told once per event");
    assert!(list(&seen, "parked").is_empty());
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn the_trap_across_a_reload_settles_as_landed_once() {
    no_faults().await;
    let db = db_name("cond-trap-reload");
    let client = open(&db, r#"{"requestTimeoutMs":2000}"#).await;
    let (t, id) = (uuid(), uuid());
    let a = aggregate(&t, &id);
    set_faults(r#"{"dropAfterCommit":1.0}"#).await;
    ok(client.append_with(a.clone(), events(&[1, 2, 3]), guard(0))).await;
    let mut waited = 0;
    while read_all(&t, &id).await.is_empty() {
        assert!(waited < 20_000, "the conditional write never landed");
        sleep(100).await;
        waited += 100;
    }
    // The tab goes away with the answer lost; the next one finds the batch pinned.
    ok(client.close()).await;
    no_faults().await;
    let log = record_writes();
    let client = open(&db, "{}").await;
    flush_within(&client, 30).await;
    restore(&log);
    let bodies = raw_bodies(&log);
    assert!(!bodies.is_empty(), "resent after the reload");
    assert!(bodies.iter().all(|b| b.contains(r#""expectedVersion":0,"#)));
    assert_eq!(read_all(&t, &id).await.len(), 3, "landed once, not twice");
    assert_eq!(num(&client.status(), "parked"), 0.0, "never a conflict");
    assert_eq!(
        js_sys::Array::from(&ok(client.parked_events()).await).length(),
        0
    );
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn a_conditional_appends_records_hide_their_wires_from_older_releases() {
    no_faults().await;
    let db = db_name("cond-gw");
    let client = open(&db, "{}").await;
    client.set_offline(true.into()).unwrap();
    let (t, id) = (uuid(), uuid());
    let a = aggregate(&t, &id);
    ok(client.append_with(a.clone(), events(&[1, 2]), guard(0))).await;
    ok(client.append(a.clone(), events(&[3]))).await;
    // The guarded run (sequences 1..=2, key [t, a, last, n]) keeps its wires under `gw`: a
    // release that ignores `g` finds no `w` and sends nothing rather than an unguarded write.
    let run = get_raw(&db, "outbox", &json(&format!(r#"["{t}","{id}",2,2]"#))).await;
    assert!(get(&run, "w").is_undefined(), "no w: {}", describe(&run));
    assert_eq!(js_sys::Array::from(&get(&run, "gw")).length(), 2);
    assert_eq!(js_sys::Array::from(&get(&run, "g")).length(), 3);
    let plain = get_raw(&db, "outbox", &json(&format!(r#"["{t}","{id}",3]"#))).await;
    assert!(get(&plain, "w").is_string(), "{}", describe(&plain));
    assert!(get(&plain, "gw").is_undefined());
    // This release reads both: everything lands, the guarded run with its guard.
    let log = record_writes();
    client.set_offline(false.into()).unwrap();
    flush_within(&client, 30).await;
    restore(&log);
    assert_eq!(read_all(&t, &id).await.len(), 3);
    let bodies = raw_bodies(&log);
    assert!(
        bodies.iter().any(|b| b.contains(r#""expectedVersion":0,"#)),
        "{bodies:?}"
    );
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn decide_rejects_with_parked_when_another_append_is_parked_ahead_of_its_write() {
    no_faults().await;
    let db = db_name("cond-decide-behind");
    let client = open(&db, "{}").await;
    let (t, agg_id) = (uuid(), uuid());
    let a = aggregate(&t, &agg_id);
    // Events of type 13 are refused (2022) by the gateway.
    set_faults(r#"{"rejectType":13}"#).await;
    // decide itself appends a refused event first: it is parked ahead of decide's own write,
    // which waits behind it until the app discards it. decide must not wait for ever.
    let ahead = {
        let (client, a) = (client.clone(), a.clone());
        Closure::<dyn FnMut(JsValue) -> JsValue>::new(move |_view: JsValue| {
            let (client, a) = (client.clone(), a.clone());
            wasm_bindgen_futures::future_to_promise(async move {
                wait(client.append(a, Array::of1(&bytes_event(13, b"refused")).into())).await?;
                Ok(Array::of1(&bytes_event(1, b"decided")).into())
            })
            .into()
        })
        .into_js_value()
        .unchecked_into::<js_sys::Function>()
    };
    let e = within(
        client.decide(a.clone(), ahead, JsValue::UNDEFINED),
        20_000,
        "decide behind a park",
    )
    .await
    .expect_err("decide must reject");
    no_faults().await;
    assert_eq!(code(&e), "PARKED", "{}", describe(&e));
    assert_eq!(num(&e, "parkCode"), 2022.0);
    // The rejection describes decide's own write, still pending behind the other park: it may
    // land, so the app must track it, never decide again.
    assert_eq!(get(&e, "mayHaveLanded"), JsValue::TRUE, "{}", describe(&e));
    assert_eq!(get(&e, "pendingBehindPark"), JsValue::TRUE);
    let ids = list(&e, "eventIds");
    assert_eq!(ids.len(), 1, "{}", describe(&e));
    assert_eq!(seqs(&get(&e, "receipts")), [2]);
    assert_eq!((num(&e, "firstSeq"), num(&e, "lastSeq")), (2.0, 2.0));
    // Left for the app: the refused event is parked, decide's own one pending behind it.
    assert_eq!(outbox_events(&db).await, 2);
    // Once the blocking park is discarded, the attempt is sent and lands, exactly once.
    assert_eq!(
        ok(client.discard_parked(a.clone())).await.as_f64(),
        Some(1.0)
    );
    let id = ids[0].as_string().expect("an event id");
    within(
        client.when_synced((&id).into()),
        20_000,
        "the attempt lands",
    )
    .await
    .expect("the pending attempt lands once the park ahead is discarded");
    let stored = read_all(&t, &agg_id).await;
    assert_eq!(stored.len(), 1, "landed exactly once");
    // Landed events are pruned in the background once the drain is idle (WebKit can take a
    // moment longer than `whenSynced`).
    pruned_within(&db, 20_000).await;
    assert_eq!(read_all(&t, &agg_id).await.len(), 1, "still exactly once");
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn a_conditional_append_that_encryption_pushes_past_one_request_is_refused() {
    no_faults().await;
    let db = db_name("cond-encrypted-size");
    let options = ok(encrypted_options(&db, gateway())).await;
    let client = SyncClient::open(options).await.expect("open");
    let a = aggregate(&uuid(), &uuid());
    // Five events of 838,856 bytes: 4,194,280 bytes of data, within one 4 MiB request; the
    // 16-byte tag of each takes it to 4,194,360, past it.
    let big = |n: u8| bytes_event(1, &vec![n; 838_856]);
    let five: JsValue = (1..=5).map(big).collect::<Array>().into();
    let e = err(client.append_with(a.clone(), five, guard(0))).await;
    assert_eq!(code(&e), "TOO_MANY_EVENTS", "{}", describe(&e));
    assert_eq!(outbox_events(&db).await, 0, "nothing stored");
    ok(client.close()).await;
}

/// A decide function: reads the view's version `v` and appends the counter's next value,
/// `v + 1`, as the event's data (its decimal digits); counts its calls.
fn next_counter(calls: std::rc::Rc<std::cell::Cell<u32>>) -> js_sys::Function {
    Closure::<dyn FnMut(JsValue) -> JsValue>::new(move |view: JsValue| {
        calls.set(calls.get() + 1);
        let next = num(&view, "version") as u64 + 1;
        Array::of1(&bytes_event(1, next.to_string().as_bytes())).into()
    })
    .into_js_value()
    .unchecked_into()
}

#[wasm_bindgen_test]
async fn decide_from_two_devices_on_one_counter_yields_1_to_n_with_no_gap_and_no_repeat() {
    no_faults().await;
    // Two devices: two databases, two device keys, two client ids.
    let options = r#"{"requestTimeoutMs":2000}"#;
    let one = open(&db_name("cond-decide-1"), options).await;
    let two = open(&db_name("cond-decide-2"), options).await;
    let id = uuid();
    let a = aggregate(SHARED_TYPE, &id);
    // Some answers are dropped after the write committed: the trap under contention.
    set_faults(r#"{"dropAfterCommit":0.25}"#).await;
    let calls = std::rc::Rc::new(std::cell::Cell::new(0));
    let per_device = 6;
    let run = |client: SyncClient| {
        let (a, calls) = (a.clone(), calls.clone());
        async move {
            let mut attempts = 0.0;
            for _ in 0..per_device {
                let decided = ok(client.decide(
                    a.clone(),
                    next_counter(calls.clone()),
                    json(r#"{"maxAttempts":50}"#),
                ))
                .await;
                assert_eq!(list(&decided, "receipts").len(), 1);
                attempts += num(&decided, "attempts");
            }
            attempts
        }
    };
    let (attempts_one, attempts_two) =
        futures_util::future::join(run(one.clone()), run(two.clone())).await;
    no_faults().await;
    let stored = read_all(SHARED_TYPE, &id).await;
    let values: Vec<String> = stored.iter().map(|e| string(e, "data")).collect();
    let expected: Vec<String> = (1..=2 * per_device)
        .map(|n| base64(n.to_string().as_bytes()))
        .collect();
    assert_eq!(values, expected, "1..=N in order, no gap, no repeat");
    assert_eq!(
        attempts_one + attempts_two,
        f64::from(calls.get()),
        "every call of decide was one attempt"
    );
    for client in [one, two] {
        assert_eq!(num(&client.status(), "parked"), 0.0);
        assert_eq!(num(&client.status(), "pending"), 0.0);
        ok(client.close()).await;
    }
}

#[wasm_bindgen_test]
async fn decide_offline_rejects_at_once_and_contention_is_surfaced() {
    no_faults().await;
    let db = db_name("cond-decide-offline");
    let one = open(&db, "{}").await;
    let a = aggregate(SHARED_TYPE, &uuid());
    let calls = std::rc::Rc::new(std::cell::Cell::new(0));
    one.set_offline(true.into()).unwrap();
    let e = err(one.decide(a.clone(), next_counter(calls.clone()), JsValue::UNDEFINED)).await;
    assert_eq!(code(&e), "OFFLINE", "{}", describe(&e));
    assert_eq!(calls.get(), 0, "decide not called");
    assert_eq!(outbox_events(&db).await, 0, "nothing stored");
    one.set_offline(false.into()).unwrap();
    let e = err(one.decide(
        a.clone(),
        next_counter(calls.clone()),
        json(r#"{"maxAttempts":0}"#),
    ))
    .await;
    assert_eq!(code(&e), "INVALID_OPTIONS");
    // Nothing to do: resolves without a write.
    let none: js_sys::Function = Closure::<dyn FnMut(JsValue) -> JsValue>::new(|_| JsValue::NULL)
        .into_js_value()
        .unchecked_into();
    let decided = ok(one.decide(a.clone(), none, JsValue::UNDEFINED)).await;
    assert!(list(&decided, "receipts").is_empty());
    // Another device writes while each attempt decides: every attempt conflicts.
    let two = open(&db_name("cond-decide-rival"), "{}").await;
    let rival = {
        let (two, a, calls) = (two.clone(), a.clone(), calls.clone());
        Closure::<dyn FnMut(JsValue) -> JsValue>::new(move |view: JsValue| {
            calls.set(calls.get() + 1);
            let (two, a) = (two.clone(), a.clone());
            let next = num(&view, "version") as u64 + 1;
            wasm_bindgen_futures::future_to_promise(async move {
                wait(two.append(a, Array::of1(&bytes_event(2, b"rival")).into())).await?;
                wait(two.flush()).await?;
                Ok(Array::of1(&bytes_event(1, next.to_string().as_bytes())).into())
            })
            .into()
        })
        .into_js_value()
        .unchecked_into::<js_sys::Function>()
    };
    calls.set(0);
    let e = err(one.decide(a.clone(), rival, json(r#"{"maxAttempts":3}"#))).await;
    assert_eq!(code(&e), "CONTENTION", "{}", describe(&e));
    assert_eq!(num(&e, "attempts"), 3.0);
    assert_eq!(calls.get(), 3);
    let stored = read_all(SHARED_TYPE, &string(&a, "id")).await;
    assert_eq!(stored.len(), 3, "only the rival's events");
    assert!(stored.iter().all(|e| num(e, "type") == 2.0));
    assert_eq!(
        num(&one.status(), "parked"),
        0.0,
        "each conflict was discarded"
    );
    assert_eq!(outbox_events(&db).await, 0);
    for client in [one, two] {
        ok(client.close()).await;
    }
}
