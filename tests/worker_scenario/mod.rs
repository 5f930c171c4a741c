//! One scenario run in each kind of worker: open, append, sync, status, events, whenSynced,
//! offline and back, a second client on the same database following the first.

use js_sys::Array;
use wasm_bindgen::prelude::*;

use super::browser::*;

pub async fn run(kind: &str) {
    assert!(
        js_sys::Reflect::get(&js_sys::global(), &"window".into())
            .unwrap()
            .is_undefined(),
        "no window in a {kind}"
    );
    no_faults().await;
    let db = db_name(kind);
    let client = open(&db, "{}").await;
    let seen = listen(&JsValue::from(client.clone()));
    let (t, id) = (uuid(), uuid());
    let receipts: Array = ok(client.append(
        aggregate(&t, &id),
        Array::of2(&bytes_event(1, b"a"), &bytes_event(2, b"b")).into(),
    ))
    .await
    .unchecked_into();
    assert_eq!(seqs(&receipts), [1, 2]);
    within(client.flush(), 10_000, "flush")
        .await
        .map_err(|e| describe(&e))
        .unwrap();
    within(
        client.when_synced(string(&receipts.get(1), "eventId").into()),
        10_000,
        "whenSynced",
    )
    .await
    .unwrap();
    assert!(
        !list(&seen, "synced").is_empty(),
        "synced events are dispatched"
    );
    assert_eq!(string(&client.status(), "role"), "drainer");

    // Offline, then the `online` event on the worker's global scope.
    set_online(false);
    ok(client.append(aggregate(&t, &id), Array::of1(&bytes_event(1, b"c")).into())).await;
    until(2000, "offline", || {
        string(&client.status(), "state") == "offline"
    })
    .await;
    set_online(true);
    within(client.flush(), 10_000, "flush").await.unwrap();

    // A second client on the same database follows the first.
    let second = open(&db, "{}").await;
    assert_eq!(string(&second.status(), "role"), "follower");
    ok(second.append(aggregate(&t, &id), Array::of1(&bytes_event(1, b"d")).into())).await;
    within(second.flush(), 10_000, "flush").await.unwrap();
    let landed: Vec<f64> = read_all(&t, &id)
        .await
        .iter()
        .map(|e| num(e, "clientSeq"))
        .collect();
    assert_eq!(landed, [1.0, 2.0, 3.0, 4.0]);
    ok(second.close()).await;
    ok(client.close()).await;
}
