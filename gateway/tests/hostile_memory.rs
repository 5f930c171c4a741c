//! Many connections with large bodies stay within a memory bound (issue 15, real process).
//!
//! The finding: 128 connections each sending an 8 MiB body took the gateway from 90 MB to
//! 1.1 GB of resident memory (and killed it in a 1 GiB limit), because admission was decided
//! after each body had been buffered. Now a write's `Content-Length` is admitted against
//! `--write-buffer-bytes` (64 MiB by default) before its body is read, and held until the store
//! answered; the bodies over the budget are refused with 429 (42900) unread.
//!
//! Here 128 connections, from 64 loopback addresses (one address may hold only an eighth of
//! the budget, 42910 past it), each send a legal write of 5.6 MB (four events of 1 MiB, the
//! protocol's 4 MiB per request) at once, to a gateway with default limits. The bound: the
//! gateway's peak resident memory (`VmHWM`) stays under [`BOUND_MIB`] — its memory at rest,
//! about three times the write budget (the body, the parsed request and the stored record of
//! each admitted write), the store's 64 MiB page cache, and allocator slack. Every write
//! answered `landed` is then read back whole.
//!
//! The admitted writes reach the disk one after another, 4 MiB each with its fsync; on a slow
//! disk (a CI machine's, after the build has used up its burst) a write can pass the request
//! deadline and be answered 504 (50400, `unknown`). That is the protocol's typed answer, and
//! its reservation is still held until the store answered, so it stays in the bound; such a
//! write must then be all there or not there at all, never part of it.

mod support;

use std::io::Write;
use std::net::Ipv4Addr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use support::hostile::{
    PeakSampler, aggregate, connect_from, healthz, memory_kib, read_all, read_answer,
};
use support::process::{Process, data_dir};

const CONNECTIONS: u64 = 128;
const EVENTS: u64 = 4;
const PAYLOAD: usize = 1 << 20;
const BOUND_MIB: u64 = 400;
const CLIENT: &str = "6f1c1c5e-6a4c-4f52-9a37-1e2a8d2f0001";

#[derive(Debug, Default)]
struct Tally {
    landed: Vec<u64>,
    unknown: Vec<u64>,
    busy: u64,
    share: u64,
    cut: u64,
    other: Vec<String>,
}

#[test]
fn many_connections_with_large_bodies_stay_within_the_memory_bound() {
    let dir = data_dir();
    let gateway = Process::start(dir.path(), &["--auth", "none"]);
    let pid = gateway.pid();
    let at_rest = memory_kib(pid, "VmRSS");
    let payload = Arc::new(celeriant_sync_protocol::encoding::encode_base64(
        &[0x5A; PAYLOAD],
    ));

    // Sample the resident memory while the bodies arrive.
    let sampler = PeakSampler::start(Duration::from_millis(20), move || memory_kib(pid, "VmRSS"));

    let started = Instant::now();
    let clients: Vec<_> = (0..CONNECTIONS)
        .map(|n| {
            let (addr, payload) = (gateway.addr.clone(), payload.clone());
            std::thread::spawn(move || send_large_write(&addr, n, &payload))
        })
        .collect();
    let mut tally = Tally::default();
    for (n, client) in clients.into_iter().enumerate() {
        match client.join().unwrap() {
            (200, _) => tally.landed.push(n as u64),
            (504, 50400) => tally.unknown.push(n as u64),
            (429, 42900) => tally.busy += 1,
            (429, 42910) => tally.share += 1,
            (0, _) => tally.cut += 1,
            other => tally.other.push(format!("{other:?}")),
        }
    }
    let elapsed = started.elapsed();
    let sampled = sampler.stop();
    let peak = memory_kib(pid, "VmHWM");
    println!(
        "memory bound: {CONNECTIONS} connections × {:.1} MB bodies in {elapsed:.1?}: resident \
         {} MiB at rest, {} MiB peak sampled, {} MiB peak (VmHWM); bound {BOUND_MIB} MiB; \
         {} landed, {} past the request deadline (50400), {} refused 429 (42900) before their \
         body was read, {} past their address's share (42910), {} cut while sending (the 429 \
         raced the upload)",
        (EVENTS as usize * payload.len()) as f64 / 1e6,
        at_rest / 1024,
        sampled / 1024,
        peak / 1024,
        tally.landed.len(),
        tally.unknown.len(),
        tally.busy,
        tally.share,
        tally.cut,
    );
    assert!(tally.other.is_empty(), "untyped answers: {:?}", tally.other);
    assert!(
        tally.landed.len() + tally.unknown.len() > 0,
        "some writes must be admitted"
    );
    assert!(
        peak / 1024 < BOUND_MIB,
        "peak resident memory {} MiB is over the {BOUND_MIB} MiB bound",
        peak / 1024
    );

    // Healthy; every acknowledged write is there in full, and one answered `unknown` is there
    // whole or not at all.
    assert_eq!(healthz(&gateway.addr).status, 200);
    let landed = tally.landed.iter().map(|n| (*n, false));
    for (n, unknown) in landed.chain(tally.unknown.iter().map(|n| (*n, true))) {
        let events = read_all(&gateway.addr, &aggregate(1000 + n), "");
        assert!(
            events.len() == EVENTS as usize || (unknown && events.is_empty()),
            "aggregate {n}: {} of {EVENTS} events of a write answered {}",
            events.len(),
            if unknown { "50400" } else { "landed" }
        );
        assert!(
            events
                .iter()
                .all(|e| e["data"].as_str() == Some(payload.as_str()))
        );
    }
}

/// One client: a write of four 1 MiB events to its own aggregate, sent as fast as the socket
/// takes it; returns the answer's status and code (0, 0 when the connection was cut).
fn send_large_write(addr: &str, n: u64, payload: &str) -> (u16, u64) {
    let event =
        |seq: u64| format!(r#"{{"clientSeq":{seq},"timestamp":1700000000000,"type":3,"data":""#);
    let head = format!(
        r#"{{"clientId":"{CLIENT}","writes":[{{"aggregate":{{"typeId":"{}","id":"{}"}},"events":["#,
        support::app::TYPE,
        aggregate(1000 + n)
    );
    let length = head.len()
        + (1..=EVENTS)
            .map(|s| event(s).len() + payload.len() + 2)
            .sum::<usize>()
        + (EVENTS as usize - 1)
        + "]}]}".len();
    // From 64 addresses: each address may hold only an eighth of the budget, and the bound
    // here is the budget's own.
    let source = Ipv4Addr::new(127, 0, 1, 1 + (n % 64) as u8);
    let Ok(mut stream) = std::panic::catch_unwind(|| connect_from(source, addr)) else {
        return (0, 0);
    };
    let mut send = || -> std::io::Result<()> {
        write!(
            stream,
            "POST /v1/write HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
             Content-Length: {length}\r\nConnection: close\r\n\r\n{head}"
        )?;
        for seq in 1..=EVENTS {
            if seq > 1 {
                stream.write_all(b",")?;
            }
            stream.write_all(event(seq).as_bytes())?;
            stream.write_all(payload.as_bytes())?;
            stream.write_all(b"\"}")?;
        }
        stream.write_all(b"]}]}")
    };
    // A refused body is not read: the upload fails, but the 429 may already be waiting.
    let _ = send();
    let answer = read_answer(&mut stream, Duration::from_secs(120));
    (answer.status, answer.code())
}
