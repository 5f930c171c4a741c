//! Watch registrations at scale (security review, real process): the total of aggregates
//! watched over all streams is capped (`--watch-max-registrations`, 429 42921), and removing a
//! stream costs one lookup per aggregate it watches, not a scan of every stream watching them.
//! Prints the resident memory of 200 streams × 1000 aggregates and how long closing them took.

mod support;

use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::hostile::memory_kib;
use support::process::{Process, data_dir};
use support::sse;

const WAIT: Duration = Duration::from_secs(10);

/// The body of a stream watching aggregates `from..from + n`.
fn body(from: u64, n: u64) -> Value {
    let aggregates: Vec<Value> = (from..from + n)
        .map(|i| json!({"typeId": support::app::TYPE, "id": support::hostile::aggregate(i)}))
        .collect();
    json!({ "aggregates": aggregates })
}

fn open(gw: &Process, body: &Value) -> sse::Stream {
    sse::open(&gw.addr, "POST", "/v1/watch", None, Some(body))
}

fn streams(gw: &Process) -> u64 {
    gw.faults_get("/v1/faults").json["counts"]["watchStreams"]
        .as_u64()
        .unwrap()
}

#[test]
fn registrations_are_capped_process_wide() {
    let dir = data_dir();
    let gw = Process::start(
        dir.path(),
        &[
            "--auth",
            "none",
            "--faults",
            "--watch-max-registrations",
            "2500",
            // One address opens every stream here; 0 lifts the per-address cap and with it the
            // reserve for light addresses, so only the process-wide registration cap is under test.
            "--watch-max-streams-per-ip",
            "0",
        ],
    );
    let mut first = open(&gw, &body(0, 1000));
    assert_eq!(first.status, 200, "{}", first.body);
    assert_eq!(first.expect(WAIT).event, "ready");
    let mut second = open(&gw, &body(1000, 1000));
    assert_eq!(second.expect(WAIT).event, "ready");
    let third = open(&gw, &body(2000, 1000));
    assert_eq!(third.status, 429, "{}", third.body);
    assert_eq!(third.json()["code"], 42921, "{}", third.body);
    assert_eq!(third.json()["outcome"], "retry");
    assert_eq!(third.header("retry-after").as_deref(), Some("1"));
    let small = open(&gw, &body(2000, 500));
    assert_eq!(small.status, 200, "up to the cap exactly: {}", small.body);
    drop(small);
    drop(first);
    let deadline = Instant::now() + WAIT;
    while streams(&gw) != 1 {
        assert!(
            Instant::now() < deadline,
            "the closed streams are forgotten"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut third = open(&gw, &body(2000, 1000));
    assert_eq!(
        third.status, 200,
        "room again once a stream closed: {}",
        third.body
    );
    assert_eq!(third.expect(WAIT).event, "ready");
    drop(second);
}

#[test]
fn two_hundred_streams_of_a_thousand_aggregates() {
    let dir = data_dir();
    // All 200 from 127.0.0.1: past the default share of one address (64), which is not what
    // this test measures.
    let gw = Process::start(
        dir.path(),
        &[
            "--auth",
            "none",
            "--faults",
            "--watch-max-streams-per-ip",
            "0",
        ],
    );
    let at_rest = memory_kib(gw.pid(), "VmRSS");
    // Every stream watches the same 1000 aggregates: the worst case for removing one.
    let body = body(0, 1000);
    let started = Instant::now();
    let mut open_streams: Vec<sse::Stream> = (0..200)
        .map(|_| {
            let mut s = open(&gw, &body);
            assert_eq!(s.status, 200, "{}", s.body);
            assert_eq!(s.expect(WAIT).event, "ready");
            s
        })
        .collect();
    let opening = started.elapsed();
    let open_rss = memory_kib(gw.pid(), "VmRSS");
    assert_eq!(streams(&gw), 200);
    let started = Instant::now();
    open_streams.clear();
    while streams(&gw) != 0 {
        assert!(started.elapsed() < WAIT, "every stream is forgotten");
        std::thread::sleep(Duration::from_millis(5));
    }
    let closing = started.elapsed();
    let after = memory_kib(gw.pid(), "VmRSS");
    println!(
        "200 streams x 1000 aggregates: resident {} MiB at rest, {} MiB with the streams open \
         (+{} MiB), {} MiB after closing them; opened in {opening:.1?}, all forgotten {closing:.1?} \
         after closing",
        at_rest / 1024,
        open_rss / 1024,
        (open_rss - at_rest) / 1024,
        after / 1024,
    );
}
