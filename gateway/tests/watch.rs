//! The change stream (`POST`/`GET /v1/watch`) against a real gateway process over real
//! sockets: ready then changed, coalescing that never goes backwards, two streams, the limits,
//! auth, heartbeats, a trim (reset, 410, reading from minVersion), a session expiring, and a
//! `kill -9` mid-stream followed by a restart.

mod support;

use std::time::Duration;

use serde_json::{Value, json};
use support::app::{TYPE, write_by};
use support::device::{Device, fresh_nonce};
use support::process::*;
use support::sse::{self, Next};

const A1: &str = "3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e0101";
const A2: &str = "3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e0102";
const WAIT: Duration = Duration::from_secs(5);

fn session(base: &str, device: &Device) -> String {
    let r = post(
        base,
        "/v1/session",
        None,
        &device.session_body(fresh_nonce()),
    );
    assert_eq!(r.status, 200, "{:?}", r.json);
    r.json["token"].as_str().unwrap().to_owned()
}

fn write(base: &str, token: &str, device: &Device, id: &str, seq: u64) {
    let r = post(
        base,
        "/v1/write",
        Some(token),
        &write_by(&device.client_id, TYPE, id, &[seq]),
    );
    assert_eq!(r.json["outcome"], "landed", "{:?}", r.json);
}

fn body(ids: &[&str]) -> Value {
    json!({"aggregates": ids.iter().map(|id| json!({"typeId": TYPE, "id": id})).collect::<Vec<_>>()})
}

fn watch(gw: &Process, token: &str, ids: &[&str]) -> sse::Stream {
    let mut s = sse::open(&gw.addr, "POST", "/v1/watch", Some(token), Some(&body(ids)));
    assert_eq!(s.status, 200, "{}", s.body);
    let ready = s.expect(WAIT);
    assert_eq!(ready.event, "ready");
    // The stream forgets what it sent only on a deletion, and says so.
    assert_eq!(ready.data["deletedResets"], true, "{:?}", ready.data);
    s
}

fn changed(id: &str, version: u64) -> sse::Sse {
    sse::Sse {
        event: "changed".into(),
        data: json!({"typeId": TYPE, "id": id, "version": version}),
    }
}

#[test]
fn ready_then_changed_two_streams_and_the_stream_count() {
    let dir = data_dir();
    let gw = Process::start(dir.path(), &["--faults"]);
    let a = Device::a();
    let token = session(&gw.base, &a);
    let mut both = watch(&gw, &token, &[A1, A2, A1]);
    assert_eq!(
        both.header("content-type").as_deref(),
        Some("text/event-stream")
    );
    assert_eq!(both.header("cache-control").as_deref(), Some("no-store"));
    let path = format!("/v1/watch?aggregate={TYPE}/{A2}");
    let mut second = sse::open(&gw.addr, "GET", &path, Some(&token), None);
    assert_eq!(second.status, 200, "{}", second.body);
    assert_eq!(second.expect(WAIT).event, "ready");

    write(&gw.base, &token, &a, A1, 1);
    assert_eq!(both.expect(WAIT), changed(A1, 1));
    write(&gw.base, &token, &a, A2, 1);
    assert_eq!(both.expect(WAIT), changed(A2, 1));
    assert_eq!(
        second.expect(WAIT),
        changed(A2, 1),
        "the A1 write is not on this stream"
    );

    let counts = gw.faults_get("/v1/faults").json["counts"].clone();
    assert_eq!(counts["watchStreams"], 2, "{counts}");
    assert_eq!(counts["watchStreamsByClient"][&a.client_id], 2, "{counts}");
    drop(second);
    std::thread::sleep(Duration::from_millis(300));
    write(&gw.base, &token, &a, A2, 2);
    assert_eq!(both.expect(WAIT), changed(A2, 2));
    let counts = gw.faults_get("/v1/faults").json["counts"].clone();
    assert_eq!(
        counts["watchStreams"], 1,
        "a closed stream is forgotten: {counts}"
    );
}

#[test]
fn ready_carries_each_aggregate_s_version_in_the_order_named() {
    let dir = data_dir();
    let gw = Process::start(dir.path(), &[]);
    let a = Device::a();
    let token = session(&gw.base, &a);
    write(&gw.base, &token, &a, A1, 1);
    write(&gw.base, &token, &a, A1, 2);
    let mut s = sse::open(
        &gw.addr,
        "POST",
        "/v1/watch",
        Some(&token),
        Some(&body(&[A2, A1, A2])),
    );
    let ready = s.expect(WAIT);
    assert_eq!(ready.event, "ready");
    assert_eq!(
        ready.data,
        json!({"tips": [null, 2, null], "deletedResets": true}),
        "A1 is at 2; A2 does not exist yet, so nobody owns it and (the default policy being \
         owner) it may be watched but not read: no version; a duplicate gets the same"
    );
    // A change after `ready` is notified, above the tip it gave.
    write(&gw.base, &token, &a, A1, 3);
    assert_eq!(s.expect(WAIT), changed(A1, 3));
}

#[test]
fn versions_only_advance_and_the_last_one_arrives() {
    let dir = data_dir();
    let gw = Process::start(dir.path(), &[]);
    let a = Device::a();
    let token = session(&gw.base, &a);
    let mut s = watch(&gw, &token, &[A1]);
    for seq in 1..=40 {
        write(&gw.base, &token, &a, A1, seq);
    }
    let mut last = 0;
    while last < 40 {
        let e = s.expect(WAIT);
        assert_eq!(e.event, "changed");
        let v = e.data["version"].as_u64().unwrap();
        assert!(v > last, "went from {last} to {v}");
        last = v;
    }
}

#[test]
fn limits_are_typed_refusals() {
    let dir = data_dir();
    let gw = Process::start(
        dir.path(),
        &[
            "--watch-max-aggregates",
            "2",
            "--watch-max-streams-per-client",
            "1",
            "--watch-max-streams",
            "2",
        ],
    );
    let (a, b) = (Device::a(), Device::b());
    let (ta, tb) = (session(&gw.base, &a), session(&gw.base, &b));
    let three = ["3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e0201", A1, A2];
    let s = sse::open(
        &gw.addr,
        "POST",
        "/v1/watch",
        Some(&ta),
        Some(&body(&three)),
    );
    assert_eq!(
        (s.status, s.json()["code"].as_u64()),
        (400, Some(40020)),
        "{}",
        s.body
    );
    assert_eq!(s.json()["outcome"], "rejected");
    let _one = watch(&gw, &ta, &[A1, A2, A1]);
    let s = sse::open(&gw.addr, "POST", "/v1/watch", Some(&ta), Some(&body(&[A1])));
    assert_eq!(
        (s.status, s.json()["code"].as_u64()),
        (429, Some(42920)),
        "{}",
        s.body
    );
    assert_eq!(s.json()["outcome"], "retry");
    assert!(s.header("retry-after").is_some());
    let _two = watch(&gw, &tb, &[A1]);
    let s = sse::open(&gw.addr, "POST", "/v1/watch", Some(&tb), Some(&body(&[A1])));
    assert_eq!(
        (s.status, s.json()["code"].as_u64()),
        (429, Some(42921)),
        "{}",
        s.body
    );
    let bad = sse::open(&gw.addr, "GET", "/v1/watch?aggregate=nope", Some(&ta), None);
    assert_eq!(
        (bad.status, bad.json()["code"].as_u64()),
        (400, Some(40014)),
        "{}",
        bad.body
    );
    let bad = sse::open(
        &gw.addr,
        "POST",
        "/v1/watch",
        Some(&ta),
        Some(&json!({"aggregates": [{"typeId": "x", "id": A1}]})),
    );
    assert_eq!(
        (bad.status, bad.json()["code"].as_u64()),
        (400, Some(40001)),
        "{}",
        bad.body
    );
}

#[test]
fn auth_is_that_of_reads() {
    let dir = data_dir();
    let secret = dir.path().join("app-secret");
    std::fs::write(&secret, "an app secret of at least thirty-two bytes\n").unwrap();
    let gw = Process::start(
        dir.path(),
        &[
            "--app-token-alg",
            "hs256",
            "--app-token-key-file",
            secret.to_str().unwrap(),
            "--app-token-issuer",
            "https://sign-in.example",
            "--app-token-audience",
            "celeriant-sync-tests",
        ],
    );
    let s = sse::open(&gw.addr, "POST", "/v1/watch", None, Some(&body(&[A1])));
    assert_eq!(
        (s.status, s.json()["code"].as_u64()),
        (401, Some(40100)),
        "{}",
        s.body
    );
    let s = sse::open(
        &gw.addr,
        "GET",
        &format!("/v1/watch?aggregate={TYPE}/{A1}"),
        Some("not.a.token"),
        None,
    );
    assert_eq!(s.status, 401, "{}", s.body);
    let other = "0d6c7b1a-2b55-4f0e-8a7d-6c4e9b3a0999";
    let app = jsonwebtoken::encode(
        &jsonwebtoken::Header::new(jsonwebtoken::Algorithm::HS256),
        &json!({
            "sub": "user-1",
            "iss": "https://sign-in.example",
            "aud": "celeriant-sync-tests",
            "exp": jsonwebtoken::get_current_timestamp() + 300,
            "celeriant_types": [other]
        }),
        &jsonwebtoken::EncodingKey::from_secret(b"an app secret of at least thirty-two bytes"),
    )
    .unwrap();
    let r = post(
        &gw.base,
        "/v1/session",
        Some(&app),
        &Device::a().session_body(fresh_nonce()),
    );
    assert_eq!(r.status, 200, "{:?}", r.json);
    let token = r.json["token"].as_str().unwrap();
    let s = sse::open(
        &gw.addr,
        "POST",
        "/v1/watch",
        Some(token),
        Some(&body(&[A1])),
    );
    assert_eq!(
        (s.status, s.json()["code"].as_u64()),
        (403, Some(40301)),
        "{}",
        s.body
    );
    let mixed = json!({"aggregates": [{"typeId": other, "id": A1}, {"typeId": TYPE, "id": A1}]});
    let s = sse::open(&gw.addr, "POST", "/v1/watch", Some(token), Some(&mixed));
    assert_eq!(
        s.status, 403,
        "every type named must be allowed: {}",
        s.body
    );
    let allowed = json!({"aggregates": [{"typeId": other, "id": A1}]});
    let mut s = sse::open(&gw.addr, "POST", "/v1/watch", Some(token), Some(&allowed));
    assert_eq!(s.status, 200, "{}", s.body);
    assert_eq!(s.expect(WAIT).event, "ready");
}

#[test]
fn heartbeats_arrive_on_an_idle_stream() {
    let dir = data_dir();
    let gw = Process::start(dir.path(), &["--watch-heartbeat-secs", "1"]);
    let token = session(&gw.base, &Device::a());
    let mut s = watch(&gw, &token, &[]);
    for _ in 0..2 {
        match s.next(Duration::from_millis(2500)) {
            Next::Event(e) => assert_eq!(e.event, "heartbeat"),
            other => panic!("{other:?}"),
        }
    }
}

#[test]
fn a_trim_resets_watchers_and_reads_follow_min_version() {
    let dir = data_dir();
    let gw = Process::start(dir.path(), &["--faults"]);
    let a = Device::a();
    let token = session(&gw.base, &a);
    for seq in 1..=3 {
        write(&gw.base, &token, &a, A1, seq);
    }
    let mut s = watch(&gw, &token, &[A1]);
    let r = gw.faults_post(
        "/v1/faults/trim",
        &json!({"typeId": TYPE, "id": A1, "before": 3}),
    );
    assert_eq!((r.status, &r.json), (200, &json!({"minVersion": 3})));
    // The writes before the stream may still be fanning out when it registers: a `changed` of
    // them can come first (notifications are at least those after `ready`, never fewer).
    let mut e = s.expect(WAIT);
    while e.event == "changed" {
        assert!(
            e.data["id"] == A1 && e.data["version"].as_u64() <= Some(3),
            "{e:?}"
        );
        e = s.expect(WAIT);
    }
    assert_eq!(
        (e.event.as_str(), &e.data),
        (
            "reset",
            &json!({"typeId": TYPE, "id": A1, "deleted": false})
        )
    );

    let events = format!("/v1/aggregates/{TYPE}/{A1}/events");
    let r = get(&gw.base, &events, Some(&token));
    assert_eq!(r.status, 410, "{:?}", r.json);
    assert_eq!(r.json["outcome"], "rejected");
    assert_eq!(r.json["code"], 1000);
    assert_eq!(r.json["minVersion"], 3);
    let r = get(&gw.base, &format!("{events}?from=3"), Some(&token));
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(r.json["tip"], 3);
    assert_eq!(r.json["batches"][0]["version"], 3);
    assert_eq!(r.json["batches"].as_array().unwrap().len(), 1);
    write(&gw.base, &token, &a, A1, 4);
    assert_eq!(s.expect(WAIT), changed(A1, 4));
    let r = get(&gw.base, &format!("{events}?from=4"), Some(&token));
    assert_eq!(
        (r.json["tip"].as_u64(), r.json["next"].clone()),
        (Some(4), Value::Null)
    );
    let r = gw.faults_post(
        "/v1/faults/trim",
        &json!({"typeId": TYPE, "id": A1, "before": 9}),
    );
    assert_eq!(
        (r.status, r.json["code"].as_u64()),
        (400, Some(40001)),
        "{:?}",
        r.json
    );
    let unknown = get(
        &gw.base,
        &format!("/v1/aggregates/{TYPE}/{A2}/events"),
        Some(&token),
    );
    assert_eq!(
        (
            unknown.json["tip"].as_u64(),
            unknown.json["batches"].clone()
        ),
        (Some(0), json!([]))
    );
}

#[test]
fn a_stream_ends_when_its_session_expires() {
    let dir = data_dir();
    let gw = Process::start(
        dir.path(),
        &["--session-ttl-secs", "2", "--watch-heartbeat-secs", "1"],
    );
    let token = session(&gw.base, &Device::a());
    let mut s = watch(&gw, &token, &[A1]);
    let start = std::time::Instant::now();
    loop {
        match s.next(Duration::from_secs(5)) {
            Next::Event(e) => assert_eq!(e.event, "heartbeat"),
            Next::Closed => break,
            Next::Quiet => panic!("the stream outlived its session"),
        }
    }
    assert!(
        start.elapsed() < Duration::from_secs(4),
        "{:?}",
        start.elapsed()
    );
}

#[test]
fn kill_9_ends_the_stream_and_a_restarted_gateway_streams_again() {
    let dir = data_dir();
    let mut gw = Process::start(
        dir.path(),
        &[
            "--session-secret",
            "a session secret of at least thirty-two bytes",
        ],
    );
    let a = Device::a();
    let token = session(&gw.base, &a);
    let mut s = watch(&gw, &token, &[A1]);
    write(&gw.base, &token, &a, A1, 1);
    assert_eq!(s.expect(WAIT), changed(A1, 1));
    let pid = gw.pid().to_string();
    assert!(
        std::process::Command::new("kill")
            .args(["-9", &pid])
            .status()
            .unwrap()
            .success()
    );
    assert!(
        matches!(s.next(WAIT), Next::Closed),
        "the stream must end with the process"
    );
    drop(std::mem::replace(
        &mut gw,
        Process::start(
            dir.path(),
            &[
                "--session-secret",
                "a session secret of at least thirty-two bytes",
            ],
        ),
    ));
    let mut s = watch(&gw, &token, &[A1]);
    write(&gw.base, &token, &a, A1, 2);
    assert_eq!(s.expect(WAIT), changed(A1, 2));
}
