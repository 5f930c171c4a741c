//! Atomic writes (`appendAtomic`, issue 27) in the browser against the real gateway: bad writes
//! refused whole with nothing stored; a transfer sent as one request of exactly its legs, after
//! each aggregate's earlier events and before its later ones; under commit-then-drop and a reload
//! it lands once, both legs, every resend byte-identical; a stale guarded leg parks every leg with
//! 2003 and nothing is stored at the server, and discarding one leg discards the whole write.
#![cfg(target_arch = "wasm32")]

mod browser;

use browser::*;
use celeriant_sync::SyncClient;
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

/// One write of `appendAtomic`.
fn write(aggregate: &JsValue, tags: &[u8], expected: Option<u64>) -> JsValue {
    let mut fields = vec![("aggregate", aggregate.clone()), ("events", events(tags))];
    if let Some(v) = expected {
        fields.push(("expectedVersion", (v as f64).into()));
    }
    object(&fields)
}

fn writes(list: &[JsValue]) -> JsValue {
    list.iter().collect::<Array>().into()
}

/// Each write of a request body: `(aggregate id, [clientSeq])`.
fn legs(body: &JsValue) -> Vec<(String, Vec<u64>)> {
    list(body, "writes")
        .iter()
        .map(|w| {
            let seqs = list(w, "events")
                .iter()
                .map(|e| num(e, "clientSeq") as u64)
                .collect();
            (string(&get(w, "aggregate"), "id"), seqs)
        })
        .collect()
}

fn stored_seqs(stored: &[JsValue]) -> Vec<u64> {
    stored.iter().map(|e| num(e, "clientSeq") as u64).collect()
}

async fn opened(test: &str) -> (String, SyncClient) {
    no_faults().await;
    let db = db_name(test);
    let client = open(&db, r#"{"requestTimeoutMs":2000}"#).await;
    (db, client)
}

#[wasm_bindgen_test]
async fn bad_writes_are_refused_whole_and_nothing_is_stored() {
    let (db, client) = opened("atomic-bad").await;
    let (a, b) = (aggregate(&uuid(), &uuid()), aggregate(&uuid(), &uuid()));
    let good = || write(&a, &[1], None);
    let many: Vec<JsValue> = (0..17)
        .map(|_| write(&aggregate(&uuid(), &uuid()), &[1], None))
        .collect();
    let cases: Vec<(JsValue, &str, Option<u32>)> = vec![
        (JsValue::from(3), "INVALID_WRITES", None),
        (json("{}"), "INVALID_WRITES", None),
        (writes(&[good()]), "INVALID_WRITES", None),
        (writes(&many), "INVALID_WRITES", None),
        (writes(&[good(), good()]), "INVALID_WRITES", Some(1)),
        (
            writes(&[good(), JsValue::from(1)]),
            "INVALID_WRITES",
            Some(1),
        ),
        (
            writes(&[
                good(),
                object(&[
                    ("aggregate", b.clone()),
                    ("events", events(&[1])),
                    ("force", true.into()),
                ]),
            ]),
            "INVALID_WRITES",
            Some(1),
        ),
        (
            writes(&[
                good(),
                write(&json(r#"{"typeId":"x","id":"y"}"#), &[1], None),
            ]),
            "INVALID_AGGREGATE",
            Some(1),
        ),
        (
            writes(&[write(&b, &[], None), good()]),
            "EMPTY_EVENTS",
            Some(0),
        ),
        (
            writes(&[
                good(),
                object(&[
                    ("aggregate", b.clone()),
                    ("events", events(&[1])),
                    ("expectedVersion", (-1).into()),
                ]),
            ]),
            "INVALID_OPTIONS",
            Some(1),
        ),
        (
            writes(&[
                good(),
                object(&[
                    ("aggregate", b.clone()),
                    ("events", Array::of1(&bytes_event(0, b"x")).into()),
                ]),
            ]),
            "INVALID_EVENT_TYPE",
            Some(1),
        ),
    ];
    for (input, expected, index) in cases {
        let e = err(client.append_atomic(input.clone())).await;
        assert_eq!(string(&e, "code"), expected, "{input:?}: {}", describe(&e));
        match index {
            Some(i) => {
                assert_eq!(num(&e, "write"), f64::from(i), "{}", describe(&e));
                assert!(string(&e, "message").starts_with(&format!("writes[{i}]")));
            }
            None => assert!(get(&e, "write").is_undefined()),
        }
    }
    assert_eq!(outbox_events(&db).await, 0, "nothing stored");
    // And a good one goes through: receipts per write, each aggregate's own sequences.
    let receipts = ok(client.append_atomic(writes(&[
        write(&a, &[1, 2], None),
        write(&b, &[3], Some(0)),
    ])))
    .await;
    let receipts = Array::from(&receipts);
    assert_eq!(receipts.length(), 2);
    assert_eq!(seqs(&receipts.get(0)), [1, 2]);
    assert_eq!(seqs(&receipts.get(1)), [1]);
    flush_within(&client, 30).await;
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn a_transfer_is_one_request_between_each_aggregates_earlier_and_later_events() {
    let (_db, client) = opened("atomic-order").await;
    let seen = listened(&client);
    let log = record_writes();
    let (t, ida, idb) = (uuid(), uuid(), uuid());
    let (a, b) = (aggregate(&t, &ida), aggregate(&t, &idb));
    // All made at once: the earlier events and the later one around the write in call order.
    let a_before = client.append(a.clone(), events(&[1]));
    let b_before = client.append(b.clone(), events(&[2, 3]));
    let transfer = client.append_atomic(writes(&[write(&b, &[4], None), write(&a, &[5, 6], None)]));
    let a_after = client.append(a.clone(), events(&[7]));
    for p in [a_before, b_before, transfer, a_after] {
        ok(p).await;
    }
    flush_within(&client, 30).await;
    restore(&log);
    let bodies = bodies(&log);
    let all: Vec<_> = bodies.iter().map(legs).collect();
    let at = all
        .iter()
        .position(|l| l.len() == 2)
        .expect("the transfer went as one request");
    assert_eq!(
        all[at],
        [(idb.clone(), vec![3]), (ida.clone(), vec![2, 3])],
        "exactly its legs, in the call's order"
    );
    assert_eq!(all.iter().filter(|l| l.len() > 1).count(), 1, "sent once");
    let before: Vec<_> = all[..at].iter().flatten().cloned().collect();
    assert!(before.contains(&(ida.clone(), vec![1])), "{all:?}");
    assert!(before.contains(&(idb.clone(), vec![1, 2])), "{all:?}");
    assert_eq!(
        all[at + 1..],
        [vec![(ida.clone(), vec![4])]],
        "the later event after it"
    );
    assert_eq!(stored_seqs(&read_all(&t, &ida).await), [1, 2, 3, 4]);
    assert_eq!(stored_seqs(&read_all(&t, &idb).await), [1, 2, 3]);
    let synced = list(&seen, "synced");
    let ids: usize = synced.iter().map(|s| list(s, "eventIds").len()).sum();
    assert_eq!(ids, 7, "synced told once per event");
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn a_transfer_under_commit_then_drop_and_a_reload_lands_once_both_legs() {
    let (db, client) = opened("atomic-drop-reload").await;
    let (t, ida, idb) = (uuid(), uuid(), uuid());
    let (a, b) = (aggregate(&t, &ida), aggregate(&t, &idb));
    let log = record_writes();
    set_faults(r#"{"dropAfterCommit":1.0}"#).await;
    ok(client.append_atomic(writes(&[
        write(&a, &[1, 2], None),
        write(&b, &[3], Some(0)),
    ])))
    .await;
    let mut waited = 0;
    while read_all(&t, &ida).await.is_empty() {
        assert!(waited < 20_000, "the transfer never landed");
        sleep(100).await;
        waited += 100;
    }
    // Let a resend or two meet the dropped answers (2002, or 2003 on the guarded leg), then the
    // tab goes away with the answer lost: the next one finds the write pinned.
    sleep(500).await;
    ok(client.close()).await;
    no_faults().await;
    let client = open(&db, "{}").await;
    flush_within(&client, 30).await;
    restore(&log);
    let bodies = raw_bodies(&log);
    assert!(
        bodies.len() >= 2,
        "resent after the dropped answer and the reload"
    );
    assert!(
        bodies.iter().all(|b| b == &bodies[0]),
        "every resend byte-identical"
    );
    assert_eq!(
        stored_seqs(&read_all(&t, &ida).await),
        [1, 2],
        "landed once"
    );
    assert_eq!(
        stored_seqs(&read_all(&t, &idb).await),
        [1],
        "both legs, once"
    );
    assert_eq!(num(&client.status(), "parked"), 0.0, "never a conflict");
    pruned_within(&db, 20_000).await;
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn a_stale_guarded_leg_parks_every_leg_and_a_discard_drops_the_whole_write() {
    let (db, client) = opened("atomic-stale").await;
    let seen = listened(&client);
    let (t, ida, idb) = (uuid(), uuid(), uuid());
    let (a, b) = (aggregate(&t, &ida), aggregate(&t, &idb));
    // B exists (version 1): the write's guard "only if B does not exist yet" is stale.
    ok(client.append(b.clone(), events(&[1]))).await;
    flush_within(&client, 30).await;
    ok(client.append_atomic(writes(&[
        write(&a, &[2, 3], None),
        write(&b, &[4], Some(0)),
    ])))
    .await;
    // A later event of A waits behind the parked write.
    ok(client.append(a.clone(), events(&[5]))).await;
    let e = err(client.flush()).await;
    assert_eq!(string(&e, "code"), "PARKED", "{}", describe(&e));
    let parked = Array::from(&ok(client.parked_events()).await);
    assert_eq!(parked.length(), 3, "every leg's events, nothing else");
    for p in parked.iter() {
        assert_eq!(num(&p, "code"), 2003.0);
        assert_eq!(get(&p, "mayHaveLanded"), JsValue::FALSE);
        let with = list(&p, "atomicWith");
        assert_eq!(with.len(), 1, "{}", describe(&p));
        let mine = string(&get(&p, "aggregate"), "id");
        let other = string(&with[0], "id");
        assert!(mine != other && [&ida, &idb].contains(&&other));
        let version = get(&p, "currentVersion");
        if mine == idb {
            assert_eq!(version.as_f64(), Some(1.0), "the named leg's version");
        } else {
            assert!(version.is_undefined());
        }
    }
    let told = list(&seen, "parked");
    assert_eq!(told.len(), 2, "one parked event per leg");
    for detail in &told {
        assert_eq!(list(detail, "atomicWith").len(), 1, "{}", describe(detail));
    }
    assert!(
        read_all(&t, &ida).await.is_empty(),
        "nothing of it at the server"
    );
    assert_eq!(read_all(&t, &idb).await.len(), 1);
    // Discarding B's part discards the whole write; A's later event then goes.
    assert_eq!(
        ok(client.discard_parked(b.clone())).await.as_f64(),
        Some(3.0)
    );
    assert_eq!(Array::from(&ok(client.parked_events()).await).length(), 0);
    flush_within(&client, 30).await;
    assert_eq!(stored_seqs(&read_all(&t, &ida).await), [3]);
    assert_eq!(num(&client.status(), "pending"), 0.0);
    pruned_within(&db, 20_000).await;
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn a_park_on_one_leg_holds_the_other_aggregate_and_decide_says_so() {
    let (_db, client) = opened("atomic-held").await;
    let (t, ida, idb) = (uuid(), uuid(), uuid());
    let (a, b) = (aggregate(&t, &ida), aggregate(&t, &idb));
    // Events of type 13 are refused (2022): A's first event parks A.
    set_faults(r#"{"rejectType":13}"#).await;
    ok(client.append(a.clone(), Array::of1(&bytes_event(13, b"refused")).into())).await;
    ok(client.append_atomic(writes(&[write(&a, &[1], None), write(&b, &[2], None)]))).await;
    let e = err(client.flush()).await;
    assert_eq!(string(&e, "code"), "PARKED", "{}", describe(&e));
    // B is not parked, but its only event is the transfer, which waits for A's park: decide on
    // B says so at once (it would otherwise wait for ever), naming A, and stores nothing.
    let decided = Closure::<dyn FnMut(JsValue) -> JsValue>::new(|_view: JsValue| {
        JsValue::from(Array::of1(&bytes_event(1, b"decided")))
    })
    .into_js_value()
    .unchecked_into::<js_sys::Function>();
    let e = within(
        client.decide(b.clone(), decided, JsValue::UNDEFINED),
        20_000,
        "decide on B",
    )
    .await
    .expect_err("decide must reject");
    no_faults().await;
    assert_eq!(string(&e, "code"), "PARKED", "{}", describe(&e));
    assert_eq!(num(&e, "parkCode"), 2022.0);
    assert_eq!(
        string(&get(&e, "aggregate"), "id"),
        ida,
        "the park that holds B"
    );
    // Pending: the transfer's two events (the parked one counts apart); decide stored nothing.
    assert_eq!(
        num(&client.status(), "pending"),
        2.0,
        "nothing stored by decide"
    );
    // Discarding A's park lets the transfer and B go on.
    assert_eq!(
        ok(client.discard_parked(a.clone())).await.as_f64(),
        Some(1.0)
    );
    flush_within(&client, 30).await;
    assert_eq!(stored_seqs(&read_all(&t, &ida).await), [2]);
    assert_eq!(stored_seqs(&read_all(&t, &idb).await), [1]);
    ok(client.close()).await;
}
