//! Abandoned faulted writes give their admission slots back (issue 15, real process).
//!
//! The finding: with `--faults` (which `npm start` passes), `PUT /v1/faults
//! {"timeout":1,"delayMs":<u64 max>}` and 1,100 abandoned writes held every admission slot:
//! every later write got 429 for as long as the gateway ran, even after the rates were reset.
//! Now `delayMs` is bounded (2 minutes), and a delay ends when the client goes away or the
//! request deadline passes: the write then proceeds at once, and its slot comes back when the
//! store answered. Here a gateway with 4 slots takes 40 abandoned two-minute-delay writes, in
//! waves of 4, and then still admits writes; every abandoned write landed.

mod support;

use std::io::Write;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use serde_json::json;
use support::hostile::{aggregate, exchange, read_all, read_answer, write_request};
use support::process::{Process, data_dir};

const CLIENT: &str = "6f1c1c5e-6a4c-4f52-9a37-1e2a8d2f0001";

fn put_faults(gw: &Process, rates: &serde_json::Value) -> support::hostile::Raw {
    let body = rates.to_string();
    let request = format!(
        "PUT /v1/faults HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         {}Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        gw.faults_header_line(),
        body.len()
    );
    exchange(&gw.addr, request.as_bytes(), Duration::from_secs(5))
}

#[test]
fn abandoned_faulted_writes_release_their_slots() {
    let dir = data_dir();
    let gw = Process::start(
        dir.path(),
        &[
            "--auth",
            "none",
            "--faults",
            "--max-inflight",
            "4",
            "--request-timeout-ms",
            "1500",
            "--idle-timeout-ms",
            "3000",
        ],
    );
    // Unbounded delays are refused.
    let refused = put_faults(&gw, &json!({"timeout": 1, "delayMs": u64::MAX}));
    assert_eq!(
        (refused.status, refused.code()),
        (400, 40001),
        "{refused:?}"
    );
    assert!(
        String::from_utf8_lossy(&refused.body).contains("over the 120000 ms maximum"),
        "{refused:?}"
    );
    let set = put_faults(&gw, &json!({"timeout": 1, "delayMs": 120_000}));
    assert_eq!(set.status, 200, "{set:?}");

    // 40 writes, 4 at a time (every slot), each abandoned after 200 ms.
    let started = Instant::now();
    let mut refused = 0;
    for wave in 0..10u64 {
        let clients: Vec<TcpStream> = (0..4u64)
            .map(|i| {
                let mut s = TcpStream::connect(&gw.addr).unwrap();
                let n = wave * 4 + i;
                s.write_all(&write_request(
                    CLIENT,
                    &aggregate(n),
                    &[(1, b"abandoned")],
                    "",
                ))
                .unwrap();
                s
            })
            .collect();
        std::thread::sleep(Duration::from_millis(200));
        for mut s in clients {
            // Nothing may have been answered yet but a refusal.
            s.set_nonblocking(true).unwrap();
            let mut byte = [0u8; 1];
            if std::io::Read::read(&mut s, &mut byte).is_ok_and(|n| n > 0) {
                refused += 1;
            }
            drop(s); // the client goes away
        }
        // Each write then proceeds at once (no two-minute wait) and, answered by the store,
        // gives its slot back.
        let deadline = Instant::now() + Duration::from_secs(10);
        for n in wave * 4..wave * 4 + 4 {
            while read_all(&gw.addr, &aggregate(n), "").len() != 1 {
                assert!(
                    Instant::now() < deadline,
                    "abandoned write {n} never landed"
                );
                std::thread::sleep(Duration::from_millis(10));
            }
        }
    }
    assert_eq!(refused, 0, "abandoned writes kept slots from later ones");
    println!(
        "faults: 40 writes delayed by 120 s and abandoned after 200 ms, 4 at a time on a \
         gateway with 4 slots, in {:.1?}: none refused, each landed once its client left",
        started.elapsed()
    );

    // With the rates reset, a write is admitted and lands at once; four at once too.
    assert_eq!(put_faults(&gw, &json!({})).status, 200);
    let mut burst: Vec<TcpStream> = (100..104u64)
        .map(|n| {
            let mut s = TcpStream::connect(&gw.addr).unwrap();
            s.write_all(&write_request(
                CLIENT,
                &aggregate(n),
                &[(1, b"after")],
                "Connection: close\r\n",
            ))
            .unwrap();
            s
        })
        .collect();
    for s in &mut burst {
        let answer = read_answer(s, Duration::from_secs(10));
        assert_eq!(answer.status, 200, "{answer:?}");
    }
    // Every abandoned write went on without its client, once it had left.
    let report = gw.faults_get("/v1/faults");
    assert_eq!(report.json["counts"]["timeout"], 40, "{:?}", report.json);
    let deadline = Instant::now() + Duration::from_secs(20);
    for n in 0..40u64 {
        while read_all(&gw.addr, &aggregate(n), "").len() != 1 {
            assert!(
                Instant::now() < deadline,
                "abandoned write {n} never landed"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    // A client that waits gets the deadline's 504 (`unknown`) and gives its slot back with it.
    assert_eq!(
        put_faults(&gw, &json!({"timeout": 1, "delayMs": 120_000})).status,
        200
    );
    let waited = exchange(
        &gw.addr,
        &write_request(
            CLIENT,
            &aggregate(200),
            &[(1, b"waits")],
            "Connection: close\r\n",
        ),
        Duration::from_secs(10),
    );
    assert_eq!((waited.status, waited.code()), (504, 50400), "{waited:?}");
    assert!(waited.elapsed < Duration::from_secs(3), "{waited:?}");
    assert_eq!(put_faults(&gw, &json!({})).status, 200);
    let after = exchange(
        &gw.addr,
        &write_request(
            CLIENT,
            &aggregate(201),
            &[(1, b"x")],
            "Connection: close\r\n",
        ),
        Duration::from_secs(10),
    );
    assert_eq!(after.status, 200, "{after:?}");
}
