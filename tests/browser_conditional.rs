//! Conditional appends (`append(…, { expectedVersion })`, issue 27) in the browser against the
//! real gateway: bad options refused with nothing stored; a stale guard parked with 2003 and the
//! current version, nothing stored at the server, and the aggregate's later events held behind
//! it; the trap of `docs/protocol.md` 6.1 (a conditional write that landed but whose answer was
//! dropped gets 2003 on its resend) settled as landed, exactly once.
#![cfg(target_arch = "wasm32")]

mod browser;

use browser::*;
use js_sys::Array;
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

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
