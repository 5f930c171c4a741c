//! Atomic writes across the contexts of one database (tabs, workers; here two clients on one
//! page): a parked write reaches every context with all of its legs (the park message carries
//! them: another context's `parked` event names the aggregates parked with it, `atomicWith`),
//! and a discard in any context, naming any leg, unparks every leg everywhere — or the drain
//! would go on skipping the other legs' aggregates, and their later events would never go
//! (`Discarded::also`, `src/browser/runtime.rs`). And across a database's move from a random
//! client id to its device key: a pinned atomic write is parked whole, every leg.
#![cfg(target_arch = "wasm32")]

mod browser;

use browser::*;
use celeriant_sync::browser::idb::db::Durability;
use celeriant_sync::browser::idb::outbox::IdbOutbox;
use celeriant_sync::engine::conformance::event;
use celeriant_sync::engine::model::{AggregateRef, Batch, NewEvent};
use celeriant_sync::engine::outbox::Outbox;
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

#[wasm_bindgen_test]
async fn a_discard_in_another_context_unparks_every_leg_everywhere() {
    no_faults().await;
    let db = db_name("atomic-contexts");
    let options = r#"{"requestTimeoutMs":2000}"#;
    let x = open(&db, options).await;
    until(10_000, "x drains", || {
        string(&x.status(), "role") == "drainer"
    })
    .await;
    let y = open(&db, options).await;
    let seen_by_y = listened(&y);
    let (t, ida, idb) = (uuid(), uuid(), uuid());
    let (a, b) = (aggregate(&t, &ida), aggregate(&t, &idb));
    // B exists: the write's guard on B ("only if B does not exist yet") is stale, so the
    // server names B; the app then discards the write by naming A, in the other context.
    ok(x.append(b.clone(), events(&[1]))).await;
    flush_within(&x, 30).await;
    let write = Array::of2(&write(&a, &[2, 3], None), &write(&b, &[4], Some(0)));
    ok(x.append_atomic(write.into())).await;
    ok(x.append(a.clone(), events(&[5]))).await;
    ok(x.append(b.clone(), events(&[6]))).await;
    let e = err(x.flush()).await;
    assert_eq!(string(&e, "code"), "PARKED", "{}", describe(&e));
    assert_eq!(string(&y.status(), "role"), "follower", "y does not drain");
    until(10_000, "y sees both legs parked", || {
        num(&y.status(), "parked") == 3.0
    })
    .await;
    let told = list(&seen_by_y, "parked");
    assert_eq!(
        told.len(),
        2,
        "one parked event per leg in the other context too"
    );
    for detail in &told {
        assert!(
            Array::is_array(&get(detail, "atomicWith")),
            "the other context's detail names the legs parked with it: {}",
            js_sys::JSON::stringify(detail)
                .map(String::from)
                .unwrap_or_default()
        );
        let with = list(detail, "atomicWith");
        let (mine, other) = (
            string(&get(detail, "aggregate"), "id"),
            string(&with[0], "id"),
        );
        assert_eq!(with.len(), 1, "{}", describe(detail));
        assert!(mine != other && [&ida, &idb].contains(&&other));
    }
    assert_eq!(ok(y.discard_parked(a.clone())).await.as_f64(), Some(3.0));
    // The drainer (x) sends both aggregates' later events: neither is skipped any more.
    flush_within(&x, 30).await;
    flush_within(&y, 30).await;
    for client in [&x, &y] {
        until(
            10_000,
            "nothing parked or pending in either context",
            || {
                let s = client.status();
                num(&s, "parked") == 0.0 && num(&s, "pending") == 0.0
            },
        )
        .await;
    }
    assert_eq!(read_all(&t, &ida).await.len(), 1, "A: only its later event");
    assert_eq!(
        read_all(&t, &idb).await.len(),
        2,
        "B: its first and its later event"
    );
    ok(y.close()).await;
    ok(x.close()).await;
}

/// A database from before device keys whose pinned batch is an atomic write: the move to the
/// device key parks every leg (`IDENTITY_CHANGED`, may have landed), each naming the other, and
/// a discard of either drops the whole write; what followed it then lands under the new id.
#[wasm_bindgen_test]
async fn a_pinned_atomic_write_is_parked_whole_when_the_identity_changes() {
    no_faults().await;
    let db = db_name("atomic-identity");
    let (t, ida, idb) = (uuid(), uuid(), uuid());
    let agg = |id: &str| AggregateRef {
        type_id: t.parse().unwrap(),
        id: id.parse().unwrap(),
    };
    let fresh = |tag: u8| NewEvent {
        event_id: uuid().parse().unwrap(),
        iv: None,
        ..event(tag, 8)
    };
    let old = IdbOutbox::open(&db, Durability::Strict).await.unwrap();
    old.client_id(uuid().parse().unwrap()).await.unwrap();
    let (leg_a, leg_b) = (vec![fresh(1), fresh(2)], vec![fresh(3)]);
    old.append_atomic(&[(agg(&ida), &leg_a, None), (agg(&idb), &leg_b, None)])
        .await
        .unwrap();
    old.append(agg(&ida), vec![fresh(4)]).await.unwrap();
    let write = old.next_batch(everything()).await.unwrap().unwrap();
    let legs = write[0]
        .atomic
        .clone()
        .expect("the atomic write heads both");
    assert!(
        old.pin(&Batch::of_atomic(&legs).unwrap(), None)
            .await
            .unwrap()
    );
    old.close();

    let client = open(&db, "{}").await;
    let parked = Array::from(&ok(client.parked_events()).await);
    assert_eq!(parked.length(), 3, "every leg's events, nothing else");
    for p in parked.iter() {
        assert_eq!(num(&p, "code"), 1.0, "IDENTITY_CHANGED");
        assert_eq!(get(&p, "mayHaveLanded"), JsValue::TRUE);
        assert_eq!(list(&p, "atomicWith").len(), 1, "names the other leg");
    }
    assert_eq!(num(&client.status(), "pending"), 1.0);
    let dropped = ok(client.discard_parked(aggregate(&t, &idb))).await;
    assert_eq!(dropped.as_f64(), Some(3.0), "the whole write");
    assert_eq!(Array::from(&ok(client.parked_events()).await).length(), 0);
    flush_within(&client, 30).await;
    assert_eq!(read_all(&t, &ida).await.len(), 1, "A's later event only");
    assert!(read_all(&t, &idb).await.is_empty());
    ok(client.close()).await;
}

fn everything() -> celeriant_sync::engine::outbox::CutQuery<'static> {
    celeriant_sync::engine::outbox::CutQuery {
        after: None,
        skip: &[],
        assume_landed: None,
        max_events: 100,
        max_bytes: usize::MAX,
    }
}
