//! Several contexts on one database, simulated by several clients in one page (each requests
//! the drain lock and talks over the database's BroadcastChannel exactly as a tab would): one
//! drainer at a time, status and events in every context, takeover when the drainer closes,
//! a follower's `read` answered by the drainer's catch-up, a page the drainer stored as it
//! closed reaching the other contexts' views, `whenSynced`
//! across a reload, and another tab's schema upgrade.
#![cfg(target_arch = "wasm32")]

mod browser;

use browser::*;
use celeriant_sync::SyncClient;
use js_sys::{Array, Promise};
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen(module = "/tests/browser/tabs.js")]
extern "C" {
    #[wasm_bindgen(js_name = holdLock)]
    fn hold_lock(name: &str) -> JsValue;
    #[wasm_bindgen(js_name = closeAsPageStoreBegins)]
    fn close_as_page_store_begins(client: &JsValue, db: &str) -> JsValue;
}

fn role(client: &SyncClient) -> String {
    string(&client.status(), "role")
}

#[wasm_bindgen_test]
async fn two_contexts_appending_to_one_aggregate_get_distinct_contiguous_sequences() {
    no_faults().await;
    let db = db_name("tabs-seq");
    let (a, b) = (open(&db, "{}").await, open(&db, "{}").await);
    let (t, id) = (uuid(), uuid());
    let mut promises = Vec::new();
    for i in 0..40u8 {
        let client = if i % 2 == 0 { &a } else { &b };
        promises.push(client.append(
            aggregate(&t, &id),
            Array::of2(&bytes_event(1, &[i]), &bytes_event(1, &[i, i])).into(),
        ));
    }
    let mut all = Vec::new();
    for p in promises {
        let s = seqs(&ok(p).await);
        assert_eq!(s[1], s[0] + 1, "one append's events are contiguous");
        all.extend(s);
    }
    let mut sorted = all.clone();
    sorted.sort();
    assert_eq!(sorted, (1..=80).collect::<Vec<u64>>(), "distinct, no gaps");
    flush_within(&a, 30).await;
    flush_within(&b, 30).await;
    let landed: Vec<f64> = read_all(&t, &id)
        .await
        .iter()
        .map(|e| num(e, "clientSeq"))
        .collect();
    assert_eq!(landed, (1..=80).map(f64::from).collect::<Vec<_>>());
    ok(a.close()).await;
    ok(b.close()).await;
}

#[wasm_bindgen_test]
async fn one_context_drains_the_others_follow_with_status_events_and_flush() {
    no_faults().await;
    let db = db_name("tabs-roles");
    let log = record_writes();
    let a = open(&db, "{}").await;
    let b = open(&db, "{}").await;
    until(2000, "a drainer", || role(&a) == "drainer").await;
    assert_eq!(role(&b), "follower", "one drainer per database");
    let seen_b = listened(&b);
    let (t, id) = (uuid(), uuid());
    // The follower appends; the drainer is woken through the channel and sends.
    let receipts: Array = ok(b.append(
        aggregate(&t, &id),
        Array::of3(
            &bytes_event(1, b"1"),
            &bytes_event(1, b"2"),
            &bytes_event(1, b"3"),
        )
        .into(),
    ))
    .await
    .unchecked_into();
    flush_within(&b, 10).await;
    until(2000, "synced in the follower", || {
        !list(&seen_b, "synced").is_empty()
    })
    .await;
    let synced = &list(&seen_b, "synced")[0];
    assert_eq!(list(synced, "eventIds").len(), 3);
    assert_eq!(
        list(synced, "eventIds")[0].as_string().unwrap(),
        string(&receipts.get(0), "eventId")
    );
    until(2000, "the follower's status", || {
        num(&b.status(), "pending") == 0.0
    })
    .await;
    assert!(
        list(&seen_b, "status")
            .iter()
            .any(|s| string(s, "role") == "follower")
    );
    // The follower learns about a parked aggregate too.
    set_faults(r#"{"rejectType":13}"#).await;
    let (p, q) = (uuid(), uuid());
    ok(b.append(
        aggregate(&t, &p),
        Array::of1(&bytes_event(13, b"bad")).into(),
    ))
    .await;
    until(5000, "parked in the follower", || {
        !list(&seen_b, "parked").is_empty()
    })
    .await;
    let e = within(b.flush(), 5000, "flush").await.expect_err("parked");
    assert_eq!(string(&e, "code"), "PARKED");
    assert_eq!(
        ok(b.discard_parked(aggregate(&t, &p))).await.as_f64(),
        Some(1.0)
    );
    ok(b.append(
        aggregate(&t, &q),
        Array::of1(&bytes_event(1, b"after")).into(),
    ))
    .await;
    flush_within(&a, 10).await;
    no_faults().await;
    restore(&log);
    assert_eq!(
        num(&log, "maxConcurrent"),
        1.0,
        "never two requests in flight"
    );
    ok(a.close()).await;
    ok(b.close()).await;
}

#[wasm_bindgen_test]
async fn a_followers_appends_are_announced_merged_at_most_every_40_ms() {
    // 200 awaited appends in a follower: each is its own group commit, so without the merge
    // (`engine::coord::outgoing`) each would post an "appended" of its own. Merged, the posts
    // leave at most once per 40 ms, and their counts still add up to every event.
    no_faults().await;
    let db = db_name("tabs-merge");
    let a = open(&db, "{}").await;
    let b = open(&db, "{}").await;
    until(2000, "a drainer", || role(&a) == "drainer").await;
    assert_eq!(role(&b), "follower");
    let (t, id) = (uuid(), uuid());
    let posts = count_posts();
    let started = js_sys::Date::now();
    for i in 0..200u32 {
        ok(b.append(
            aggregate(&t, &id),
            Array::of1(&bytes_event(1, &i.to_le_bytes())).into(),
        ))
        .await;
    }
    let elapsed = js_sys::Date::now() - started;
    until(2000, "every append announced", || {
        num(&posts, "appended") >= 200.0
    })
    .await;
    sleep(100).await;
    restore(&posts);
    let appended = num(&get(&posts, "kinds"), "appended");
    assert_eq!(num(&posts, "appended"), 200.0, "the merged counts add up");
    assert!(
        appended <= (elapsed / 40.0).ceil() + 2.0,
        "{appended} \"appended\" posts in {elapsed} ms"
    );
    flush_within(&b, 30).await;
    assert_eq!(read_all(&t, &id).await.len(), 200);
    ok(a.close()).await;
    ok(b.close()).await;
}

#[wasm_bindgen_test]
async fn when_the_drainer_closes_another_context_takes_over() {
    no_faults().await;
    let db = db_name("tabs-takeover");
    let a = open(&db, "{}").await;
    until(2000, "a drainer", || role(&a) == "drainer").await;
    let b = open(&db, "{}").await;
    let c = open(&db, "{}").await;
    assert_eq!((role(&b), role(&c)), ("follower".into(), "follower".into()));
    ok(a.close()).await;
    let started = js_sys::Date::now();
    until(3000, "a new drainer", || {
        role(&b) == "drainer" || role(&c) == "drainer"
    })
    .await;
    assert!(
        js_sys::Date::now() - started < 1000.0,
        "takeover within a second"
    );
    assert!(
        !(role(&b) == "drainer" && role(&c) == "drainer"),
        "exactly one"
    );
    let (t, id) = (uuid(), uuid());
    ok(c.append(
        aggregate(&t, &id),
        Array::of1(&bytes_event(1, b"after takeover")).into(),
    ))
    .await;
    flush_within(&b, 10).await;
    assert_eq!(read_all(&t, &id).await.len(), 1);
    ok(b.close()).await;
    ok(c.close()).await;
}

/// The drainer closes while its reader's page store is under way: the store lands and its log
/// change is told to the other contexts before the lock passes, so their views show the page
/// without a further change and without another drainer's catch-up (the test holds the lock
/// next, so nobody drains until it lets it go). Before the fix the close ended first, the
/// store committing after it with its news told to nobody: the follower's view stayed empty.
#[wasm_bindgen_test]
async fn a_followers_read_is_answered_by_the_catch_up_it_asked_the_drainer_for() {
    // A `read` in a context that does not drain asks the drainer over the channel, under a tag;
    // the drainer's `caughtUp` names it. Were the tag lost on the way (its encoding, the
    // routing), every such read would wait out its timeout (20 s) and answer from the cache.
    no_faults().await;
    let db = db_name("tabs-follower-read");
    let a = open(&db, "{}").await;
    until(2000, "a drainer", || role(&a) == "drainer").await;
    let c = open(&db, "{}").await;
    let other = open(&db_name("tabs-follower-read-other"), "{}").await;
    let (t, id) = (SHARED_TYPE.to_owned(), uuid());
    let agg = aggregate(&t, &id);
    for n in 1..=2u8 {
        // Another device writes; `c` reads at once, nothing watched: only its own catch-up
        // can bring the page.
        ok(other.append(agg.clone(), Array::of1(&bytes_event(1, &[n])).into())).await;
        flush_within(&other, 20).await;
        let want = server_keys(&t, &id).await;
        assert_eq!(want.len(), usize::from(n));
        assert_eq!(role(&c), "follower");
        let started = js_sys::Date::now();
        let view = within(c.read(agg.clone()), 5000, "c's read").await.unwrap();
        let took = js_sys::Date::now() - started;
        assert_eq!(get(&view, "fromCache").as_bool(), Some(false), "read {n}");
        assert_eq!(view_keys(&view), want, "read {n}, after {took} ms");
    }
    ok(c.close()).await;
    ok(a.close()).await;
    ok(other.close()).await;
}

#[wasm_bindgen_test]
async fn a_page_the_drainer_stored_as_it_closed_reaches_the_other_contexts_views() {
    no_faults().await;
    let db = db_name("tabs-closing-store");
    let a = open(&db, "{}").await;
    until(2000, "a drainer", || role(&a) == "drainer").await;
    // Queued behind `a`, before `c`: the test gets the lock when `a` lets it go.
    let lock = hold_lock(&format!("celeriant-sync:drain:{db}"));
    let c = open(&db, "{}").await;
    let other = open(&db_name("tabs-closing-store-other"), "{}").await;
    let (t, id) = (SHARED_TYPE.to_owned(), uuid());
    let agg = aggregate(&t, &id);
    let view = record_views(&JsValue::from(c.clone()), &agg);
    until(10_000, "the stream connected", || {
        string(&get(&c.status(), "read"), "state") == "connected"
    })
    .await;
    let closing = close_as_page_store_begins(&JsValue::from(a.clone()), &db);
    // Another device writes: `a`'s stream tells, its reader reads the page and stores it.
    ok(other.append(agg.clone(), Array::of1(&bytes_event(1, b"late")).into())).await;
    flush_within(&other, 20).await;
    let want = server_keys(&t, &id).await;
    assert_eq!(want.len(), 1);
    within(get(&closing, "closed").unchecked_into(), 10_000, "a closed")
        .await
        .unwrap();
    ok(get(&lock, "granted").unchecked_into::<Promise>()).await;
    assert_eq!(role(&c), "follower", "the test holds the lock");
    until(
        3000,
        "c's view shows the page a stored as it closed",
        || {
            let last = get(&view, "last");
            !last.is_null() && view_keys(&last) == want
        },
    )
    .await;
    let release: js_sys::Function = get(&lock, "release").unchecked_into();
    release.call0(&JsValue::UNDEFINED).unwrap();
    let unsubscribe: js_sys::Function = get(&view, "unsubscribe").unchecked_into();
    unsubscribe.call0(&JsValue::UNDEFINED).unwrap();
    ok(c.close()).await;
    ok(other.close()).await;
}

#[wasm_bindgen_test]
async fn when_synced_works_across_a_reload_and_reports_parked_and_discarded_events() {
    no_faults().await;
    let db = db_name("when-synced");
    let (t, id) = (uuid(), uuid());
    let ids: Vec<String> = {
        let offline = open_nowhere(&db, "{}").await;
        let receipts: Array = ok(offline.append(
            aggregate(&t, &id),
            Array::of2(&bytes_event(1, b"x"), &bytes_event(1, b"y")).into(),
        ))
        .await
        .unchecked_into();
        ok(offline.close()).await;
        receipts.iter().map(|r| string(&r, "eventId")).collect()
    };
    // After the reload, with the gateway reachable.
    let client = open(&db, "{}").await;
    for id in &ids {
        within(client.when_synced(id.into()), 10_000, "whenSynced")
            .await
            .map_err(|e| describe(&e))
            .unwrap();
    }
    assert_eq!(
        read_all(&t, &id).await.len(),
        2,
        "resolved because they landed"
    );
    let e = err(client.when_synced("not-a-uuid".into())).await;
    assert_eq!(string(&e, "code"), "INVALID_EVENT_ID");

    set_faults(r#"{"rejectType":13}"#).await;
    let bad = uuid();
    let receipts: Array = ok(client.append(
        aggregate(&t, &bad),
        Array::of1(&bytes_event(13, b"no")).into(),
    ))
    .await
    .unchecked_into();
    let bad_id = string(&receipts.get(0), "eventId");
    let e = within(client.when_synced((&bad_id).into()), 10_000, "whenSynced")
        .await
        .expect_err("parked");
    assert_eq!(string(&e, "code"), "PARKED", "{}", describe(&e));
    ok(client.discard_parked(aggregate(&t, &bad))).await;
    let e = err(client.when_synced((&bad_id).into())).await;
    assert_eq!(string(&e, "code"), "DISCARDED");
    no_faults().await;
    ok(client.close()).await;
}

#[wasm_bindgen_test]
async fn another_tabs_schema_upgrade_neither_hangs_nor_breaks_the_client() {
    no_faults().await;
    let db = db_name("upgrade");
    let client = open(&db, "{}").await;
    let (t, id) = (uuid(), uuid());
    ok(client.append(
        aggregate(&t, &id),
        Array::of1(&bytes_event(1, b"before")).into(),
    ))
    .await;
    // A newer tab upgrades the database: the client closes its connection at once.
    let result = upgrade_raw(&db, 5000).await;
    assert_eq!(
        num(&result, "version"),
        f64::from(celeriant_sync::browser::idb::schema::VERSION + 1)
    );
    // And reopens it at the new version on its next operation.
    let receipts = ok(client.append(
        aggregate(&t, &id),
        Array::of1(&bytes_event(1, b"after")).into(),
    ))
    .await;
    assert_eq!(seqs(&receipts), [2]);
    flush_within(&client, 10).await;
    assert_eq!(read_all(&t, &id).await.len(), 2);
    // Again, while the drain loop is busy.
    let events: Array = (0..200).map(|i| bytes_event(1, &[i as u8])).collect();
    ok(client.append(aggregate(&t, &id), events.into())).await;
    upgrade_raw(&db, 5000).await;
    flush_within(&client, 20).await;
    assert_eq!(read_all(&t, &id).await.len(), 202);
    ok(client.close()).await;
}
