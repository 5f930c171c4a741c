//! Change streams kept for established devices while fresh keys hold the stream pool, against a
//! real gateway process (issue 26).
//!
//! A stream costs an attacker a session (a key pair anyone can make) and a connection; enough
//! address buckets, each within its per-address share and the light-address reserve, fill every
//! place of `--watch-max-streams`, and no other device could watch. Here a fresh key opens one
//! stream from each of 40 loopback addresses (127.0.7.x) against a pool of 32: the pool fills,
//! the rest are refused 429 (42921). One key stands for many fresh keys: its per-client cap is
//! lifted (`--watch-max-streams-per-client`), which changes nothing of what the pool sees (a
//! client id that never landed a write). Meanwhile an established device (its write landed
//! before the attack) on its own address opens its stream, then for 20 rounds writes, reads,
//! checks `/healthz` and expects its stream to carry the write's change notice. It must keep at
//! least 90 % of each kind answered normally; without the kept streams (`crate::watch::hub`)
//! its watch is refused and every notice is missed (watches 0 of 21; 60 of 81 in all). The test
//! prints its figures.

mod support;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::app::TYPE;
use support::device::{Device, fresh_nonce};
use support::hostile::{Raw, aggregate, ask, connect_from};
use support::legit::{HEALTHZ, READ, Tally, WATCH, WRITE};
use support::process::{Process, data_dir};
use support::sse::{self, Next, Stream};

const WAIT: Duration = Duration::from_secs(5);

fn session_from(from: Ipv4Addr, addr: &str, device: &Device) -> String {
    let body = device.session_body(fresh_nonce()).to_string();
    let request = format!(
        "POST /v1/session HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    let answer = ask(from, addr, request.as_bytes(), WAIT);
    assert_eq!(answer.status, 200, "session: {answer:?}");
    answer.json()["token"].as_str().unwrap().to_owned()
}

/// `POST /v1/write` of event `seq` to aggregate `id` by `device`, with its proof, from `from`.
fn write_from(from: Ipv4Addr, addr: &str, device: &Device, token: &str, id: &str, seq: u64) -> Raw {
    let body = json!({"clientId": device.client_id, "writes": [{"aggregate": {"typeId": TYPE,
        "id": id}, "allowCreate": true, "events": [{"clientSeq": seq,
        "timestamp": 1_700_000_000_000u64, "type": 3, "data": "c3luYw=="}]}]})
    .to_string();
    let proof = device.proof("POST", "/v1/write", token, body.as_bytes());
    let request = format!(
        "POST /v1/write HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Authorization: Bearer {token}\r\nDPoP: {proof}\r\nContent-Length: {}\r\n\
         Connection: close\r\n\r\n{body}",
        body.len()
    );
    ask(from, addr, request.as_bytes(), WAIT)
}

fn read_from(from: Ipv4Addr, addr: &str, device: &Device, token: &str, id: &str) -> Raw {
    let target = format!("/v1/aggregates/{TYPE}/{id}/events?from=1");
    let proof = device.proof("GET", &target, token, b"");
    let request = format!(
        "GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {token}\r\n\
         DPoP: {proof}\r\nConnection: close\r\n\r\n"
    );
    ask(from, addr, request.as_bytes(), WAIT)
}

/// Opens a change stream on `ids` from `from` under `token` (its proof made by the loaded
/// device the token names).
fn watch_from(from: Ipv4Addr, addr: &str, token: &str, ids: &[&str]) -> Stream {
    let body: Value = json!({"aggregates": ids.iter().map(|id| json!({"typeId": TYPE, "id": id}))
        .collect::<Vec<_>>()});
    sse::open_on(
        connect_from(from, addr),
        addr,
        "POST",
        "/v1/watch",
        Some(token),
        Some(&body),
    )
}

/// Whether `stream` is still open: its buffered events read until it is quiet for 300 ms (its
/// heartbeats come every second), so a stream the gateway closed ends in `Closed`, not in an
/// event it sent before closing.
fn still_open(stream: &mut Stream) -> bool {
    for _ in 0..1_000 {
        match stream.next(Duration::from_millis(300)) {
            Next::Event(_) => continue,
            Next::Quiet => return true,
            Next::Closed => return false,
        }
    }
    panic!("a stream sent events without pause");
}

/// Whether `stream` carries a `changed` notice for `id` at `version` or later within `wait`.
fn notice(stream: &mut Stream, id: &str, version: u64, wait: Duration) -> bool {
    let deadline = Instant::now() + wait;
    loop {
        match stream.next(deadline.saturating_duration_since(Instant::now())) {
            Next::Event(e)
                if e.event == "changed"
                    && e.data["id"] == id
                    && e.data["version"].as_u64() >= Some(version) =>
            {
                return true;
            }
            Next::Event(_) => continue,
            _ => return false,
        }
    }
}

#[test]
fn an_established_device_watches_while_fresh_keys_hold_every_stream() {
    let dir = data_dir();
    let gw = Process::start(
        dir.path(),
        &[
            "--watch-max-streams",
            "32",
            "--watch-max-streams-per-client",
            "1000",
            "--watch-heartbeat-secs",
            "1",
        ],
    );
    let addr = gw.addr.clone();
    // The device: a session and a landed write from its own address, before the attack.
    let device = Device::b();
    let home = Ipv4Addr::new(127, 0, 7, 200);
    let token = session_from(home, &addr, &device);
    let id = aggregate(2602);
    let first = write_from(home, &addr, &device, &token, &id, 1);
    assert_eq!(first.status, 200, "{first:?}");
    // A fresh key opens one stream from each of 40 addresses (one stream each: every one is a
    // light address, so the light-address reserve is no help either).
    let flooder = Device::a();
    let fresh = session_from(Ipv4Addr::new(127, 0, 7, 1), &addr, &flooder);
    let (mut held, mut refused) = (Vec::new(), Vec::new());
    for n in 0..40u8 {
        let s = watch_from(
            Ipv4Addr::new(127, 0, 7, 1 + n),
            &addr,
            &fresh,
            &[&aggregate(900)],
        );
        match s.status {
            200 => held.push(s),
            _ => refused.push((s.status, s.json()["code"].as_u64().unwrap_or(0))),
        }
    }
    println!(
        "fresh key: {} streams held, {} refused {:?}",
        held.len(),
        refused.len(),
        refused.first()
    );
    assert_eq!(held.len(), 32, "the pool is full of fresh-key streams");
    assert!(refused.iter().all(|r| *r == (429, 42921)), "{refused:?}");
    // The pool is full: the device watches all the same (a kept stream). It holds that one
    // stream, as a real device does (a second is refused below: one kept stream each), so
    // its watches are counted as the stream's opening and then, each round, the change notice
    // of its write on it; then a write, a read and a `/healthz` (21 watches, 20 of the rest).
    let mut tally = Tally::default();
    let mut stream = watch_from(home, &addr, &token, &[&id]);
    let watching =
        stream.status == 200 && matches!(stream.next(WAIT), Next::Event(e) if e.event == "ready");
    tally.record(WATCH, watching, || {
        format!("opened: {} {}", stream.status, stream.body)
    });
    for round in 0..20u64 {
        let landed = write_from(home, &addr, &device, &token, &id, 2 + round);
        let wrote = landed.status == 200 && landed.json()["outcome"] == "landed";
        tally.record(WRITE, wrote, || {
            format!("{} {}", landed.status, landed.code())
        });
        let version = landed.json()["aggregateVersion"]
            .as_u64()
            .unwrap_or(u64::MAX);
        let read = read_from(home, &addr, &device, &token, &id);
        tally.record(READ, read.status == 200, || {
            format!("{} {}", read.status, read.code())
        });
        let health = format!("GET /healthz HTTP/1.1\r\nHost: {addr}\r\nConnection: close\r\n\r\n");
        let healthy = ask(home, &addr, health.as_bytes(), WAIT);
        tally.record(HEALTHZ, healthy.status == 200, || {
            format!("{} {}", healthy.status, healthy.code())
        });
        let noticed =
            watching && wrote && notice(&mut stream, &id, version, Duration::from_secs(3));
        tally.record(WATCH, noticed, || format!("no notice of version {version}"));
        std::thread::sleep(Duration::from_millis(100));
    }
    // The fresh-key streams are all still open: the device's stream did not take one of theirs.
    let still = held.iter_mut().map(still_open).filter(|open| *open).count();
    println!("fresh-key streams still open {still}/{}", held.len());
    tally.print("fresh keys holding every stream, established device (watch: its kept stream)");
    assert!(watching, "the established device's watch was refused");
    let (ok, asked) = tally.total();
    assert!(ok * 10 >= asked * 9, "{ok} of {asked}");
    tally.assert_each_kind(8);
    assert_eq!(still, held.len());
    // A second stream of the device is refused (one kept stream each), and so is a fresh key's
    // from another address: the pool is still full.
    let second = watch_from(home, &addr, &token, &[&id]);
    assert_eq!(
        (second.status, second.json()["code"].as_u64()),
        (429, Some(42921)),
        "{}",
        second.body
    );
    let newcomer = watch_from(Ipv4Addr::new(127, 0, 7, 250), &addr, &fresh, &[&id]);
    assert_eq!(
        (newcomer.status, newcomer.json()["code"].as_u64()),
        (429, Some(42921)),
        "{}",
        newcomer.body
    );
}
