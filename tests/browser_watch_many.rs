//! More aggregates watched than one change stream may name, against the real gateway. The test
//! gateway caps a stream at 50 aggregates (`--watch-max-aggregates 50` in
//! scripts/browser-tests.sh; 1,000 by default), below the client's 1,000 per stream: the
//! client's first streams are refused (413 for a body past the gateway's bound, then 400,
//! 40020), so it halves what a stream names until the gateway takes it (1,000 → … → 31) and
//! splits the watched set over its 3 streams. Changes to
//! aggregates of every stream reach their views live; what fits in no stream is reported in
//! `status().read.refused` with code 40020, and watched live again once a stream has room.
//! A new subscription reopens its stream, whose `ready` gives each aggregate's version: only
//! what moved is read again. Against a gateway that lets a client hold 2 streams, the device
//! uses fewer streams instead of retrying a refused one, and polls what fits in none.
#![cfg(target_arch = "wasm32")]

mod browser;

use browser::*;
use celeriant_sync::SyncClient;
use js_sys::{Array, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen(module = "/tests/browser/support.js")]
extern "C" {
    #[wasm_bindgen(js_name = signIn)]
    fn sign_in(secret: &str, user: &str) -> JsValue;
}

/// Opens `db` on the app-token gateway (`CELERIANT_TEST_APP_GATEWAY`, which lets a client hold
/// 2 streams: `--watch-max-streams-per-client 2` in scripts/browser-tests.sh) as `user`.
async fn open_on_app_gateway(db: &str, user: &str) -> SyncClient {
    let (Some(gateway), Some(secret)) = (
        option_env!("CELERIANT_TEST_APP_GATEWAY"),
        option_env!("CELERIANT_TEST_APP_SECRET"),
    ) else {
        panic!("run the browser tests through `npm test`, which starts the app-token gateway")
    };
    let options = json(&format!(r#"{{"user":"{user}","maxBackoffMs":1000}}"#));
    Reflect::set(&options, &"gatewayUrl".into(), &gateway.into()).unwrap();
    Reflect::set(&options, &"databaseName".into(), &db.into()).unwrap();
    let signed_in = sign_in(secret, user);
    Reflect::set(&options, &"auth".into(), &get(&signed_in, "auth")).unwrap();
    SyncClient::open(options).await.unwrap()
}

/// One event appended by `other` to `id`, seen in `log`'s view within `ms`.
async fn change_seen(other: &SyncClient, id: &str, log: &JsValue, ms: u32, what: &str) {
    let event = object(&[("type", 1.into()), ("data", json(r#"{"n":1}"#))]);
    ok(other.append(aggregate(SHARED_TYPE, id), Array::of1(&event).into())).await;
    flush_within(other, 20).await;
    until(ms, what, || {
        let last = get(log, "last");
        !last.is_null() && view_keys(&last).len() == 1
    })
    .await;
}

fn call(object: &JsValue, method: &str) {
    let f: js_sys::Function = get(object, method).unchecked_into();
    f.call0(object).unwrap();
}

fn read_state(client: &SyncClient) -> String {
    string(&get(&client.status(), "read"), "state")
}

/// `status().read.refused`, as (id, code) pairs.
fn refused(client: &SyncClient) -> Vec<(String, f64)> {
    list(&get(&client.status(), "read"), "refused")
        .iter()
        .map(|r| (string(&get(r, "aggregate"), "id"), num(r, "code")))
        .collect()
}

/// Waits until the gateway counts `want` streams of the device (a replaced stream is counted
/// until the gateway notices its connection closed); the last count seen.
async fn streams_of(client: &SyncClient, want: f64) -> f64 {
    let mut seen = 0.0;
    for _ in 0..100 {
        let report = ok(fault_report_js(gateway(), faults_secret())).await;
        let by_client = get(&get(&report, "counts"), "watchStreamsByClient");
        seen = get(&by_client, &client.client_id()).as_f64().unwrap_or(0.0);
        if seen == want {
            break;
        }
        sleep(200).await;
    }
    seen
}

/// The other device writes one event to each of `ids`; every one's view shows it, live.
async fn changes_arrive(client_logs: &[(String, JsValue)], other: &SyncClient, which: &[usize]) {
    for &i in which {
        let (id, _) = &client_logs[i];
        let event = object(&[("type", 1.into()), ("data", json(r#"{"n":1}"#))]);
        ok(other.append(aggregate(SHARED_TYPE, id), Array::of1(&event).into())).await;
    }
    flush_within(other, 20).await;
    for &i in which {
        let (id, log) = &client_logs[i];
        let want = server_keys(SHARED_TYPE, id).await;
        assert!(!want.is_empty());
        until(15_000, &format!("aggregate {i}'s view"), || {
            let last = get(log, "last");
            !last.is_null() && view_keys(&last) == want
        })
        .await;
    }
}

#[wasm_bindgen_test]
async fn more_aggregates_than_a_stream_may_name_are_watched_over_several_streams() {
    no_faults().await;
    let client = open(&db_name("watch-many"), "{}").await;
    let other = open(&db_name("watch-many-other"), "{}").await;
    let handle = JsValue::from(client.clone());
    let subscribe = |n: usize| -> Vec<(String, JsValue)> {
        (0..n)
            .map(|_| {
                let id = uuid();
                let log = record_views(&handle, &aggregate(SHARED_TYPE, &id));
                (id, log)
            })
            .collect()
    };
    // 130 aggregates at once: one stream of 130 is refused 413 (its body, 93 bytes an
    // aggregate, is past the gateway's 200 × 50 + 1,024 bytes) at 1,000, 500 and 250 per
    // stream; at 125 the stream of 125 is refused 413 too; at 62 the streams of 62 are refused
    // 40020; at 31, 3 streams of 31 are taken and 37 fit in none.
    let mut logs = subscribe(130);
    until(60_000, "every stream connected", || {
        read_state(&client) == "connected" && refused(&client).len() == 37
    })
    .await;
    assert!(
        refused(&client).iter().all(|(_, code)| *code == 40020.0),
        "{:?}",
        refused(&client)
    );
    assert_eq!(streams_of(&client, 3.0).await, 3.0, "one device, 3 streams");
    let unwatched: Vec<String> = refused(&client).into_iter().map(|(id, _)| id).collect();
    let watched: Vec<usize> = (0..logs.len())
        .filter(|i| !unwatched.contains(&logs[*i].0))
        .collect();
    // Changes to aggregates of the first, middle and last watched ones arrive live.
    changes_arrive(
        &logs,
        &other,
        &[
            watched[0],
            watched[watched.len() / 2],
            watched[watched.len() - 1],
        ],
    )
    .await;

    // Unwatching 40 of the watched ones makes room: the 37 move into streams and their
    // changes arrive live.
    let dropped: Vec<usize> = watched.iter().copied().take(40).collect();
    for &i in &dropped {
        call(&logs[i].1, "unsubscribe");
    }
    let mut i = 0;
    logs.retain(|_| {
        i += 1;
        !dropped.contains(&(i - 1))
    });
    until(30_000, "room for the unwatched", || {
        refused(&client).is_empty() && read_state(&client) == "connected"
    })
    .await;
    let moved: Vec<usize> = logs
        .iter()
        .enumerate()
        .filter(|(_, (id, _))| unwatched.contains(id))
        .map(|(i, _)| i)
        .collect();
    assert_eq!(moved.len(), 37);
    changes_arrive(&logs, &other, &moved).await;
    assert_eq!(streams_of(&client, 3.0).await, 3.0, "still 3 streams");

    for (_, log) in &logs {
        call(log, "unsubscribe");
    }
    until(15_000, "nothing watched", || read_state(&client) == "idle").await;
    ok(client.close()).await;
    ok(other.close()).await;
}

#[wasm_bindgen_test]
async fn a_new_subscription_reads_only_what_moved() {
    no_faults().await;
    let client = open(&db_name("watch-tips"), "{}").await;
    let other = open(&db_name("watch-tips-other"), "{}").await;
    let handle = JsValue::from(client.clone());
    let mut logs: Vec<(String, JsValue)> = (0..20)
        .map(|_| {
            let id = uuid();
            let log = record_views(&handle, &aggregate(SHARED_TYPE, &id));
            (id, log)
        })
        .collect();
    // Five of them exist on the server, with events the views show.
    changes_arrive(&logs, &other, &[0, 5, 10, 15, 19]).await;
    until(30_000, "connected and caught up", || {
        read_state(&client) == "connected"
    })
    .await;
    let fetches = count_fetches();
    let id = uuid();
    let log = record_views(&handle, &aggregate(SHARED_TYPE, &id));
    logs.push((id, log));
    until(30_000, "the new stream ready and caught up", || {
        get(&get(&fetches, "paths"), "/v1/watch")
            .as_f64()
            .is_some_and(|n| n >= 1.0)
            && read_state(&client) == "connected"
    })
    .await;
    // Idle a moment: a page still coming would be counted.
    sleep(300).await;
    call(&fetches, "restore");
    let pages = get(&get(&fetches, "paths"), "/v1/aggregates")
        .as_f64()
        .unwrap_or(0.0);
    // The new aggregate once when subscribed; none of the 20 others again (without tips: 21
    // more, one per aggregate of the reopened stream).
    assert!(
        pages <= 2.0,
        "{pages} pages read for one new subscription of 21: {}",
        describe(&get(&fetches, "paths"))
    );
    // Changes after the new stream is ready still arrive, to the new and an old aggregate.
    changes_arrive(&logs, &other, &[20, 10]).await;
    for (_, log) in &logs {
        call(log, "unsubscribe");
    }
    ok(client.close()).await;
    ok(other.close()).await;
}

/// A gateway that lets a client hold fewer streams than the device opens refuses the extra one
/// (429, 42920): the device uses one stream less instead of retrying it forever, and what fits
/// in no stream is polled (every 30 s here) so that its changes still reach the views.
#[wasm_bindgen_test]
async fn fewer_streams_than_the_device_opens_are_used_and_the_rest_is_polled() {
    // A user of its own per run: the three browsers share one app-token gateway, which caps
    // one user's live sessions (42902), and each run opens two devices.
    let user = format!("watcher-{}", uuid());
    let client = open_on_app_gateway(&db_name("watch-cap"), &user).await;
    let other = open_on_app_gateway(&db_name("watch-cap-other"), &user).await;
    let handle = JsValue::from(client.clone());
    // 100 aggregates: at 31 a stream (halved from 1,000 as in the test above) they need 4
    // streams, the device opens 3, and the gateway takes 2 (one while a stream is replaced).
    let logs: Vec<(String, JsValue)> = (0..100)
        .map(|_| {
            let id = uuid();
            let log = record_views(&handle, &aggregate(SHARED_TYPE, &id));
            (id, log)
        })
        .collect();
    // 2 streams of 31 (38 unwatched), or 1 if a replacement raced the old stream's close.
    until(60_000, "the streams the gateway allows connected", || {
        read_state(&client) == "connected" && [38, 69].contains(&refused(&client).len())
    })
    .await;
    assert!(
        refused(&client).iter().all(|(_, code)| *code == 40020.0),
        "{:?}",
        refused(&client)
    );
    let unwatched: Vec<String> = refused(&client).into_iter().map(|(id, _)| id).collect();
    let watched = logs.iter().find(|(id, _)| !unwatched.contains(id)).unwrap();
    let polled = logs.iter().find(|(id, _)| unwatched.contains(id)).unwrap();
    // A watched aggregate's change arrives live; an unwatched one's by the next poll.
    change_seen(&other, &watched.0, &watched.1, 15_000, "a watched change").await;
    change_seen(
        &other,
        &polled.0,
        &polled.1,
        45_000,
        "an unwatched change, polled",
    )
    .await;
    // Every stream the device still wants is up (none refused and retried for ever); the poll
    // may be reading the unwatched ones at any moment, so this is waited for.
    until(30_000, "connected after the poll", || {
        read_state(&client) == "connected" && [38, 69].contains(&refused(&client).len())
    })
    .await;

    for (_, log) in &logs {
        call(log, "unsubscribe");
    }
    until(15_000, "nothing watched", || read_state(&client) == "idle").await;
    ok(client.close()).await;
    ok(other.close()).await;
}
