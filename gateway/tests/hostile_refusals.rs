//! Cheap refusals have a per-address rate (issue 26, real process).
//!
//! CORS preflights (`OPTIONS`), wrong methods (405) and requests for a `Host` the gateway does
//! not answer to (421) cost nothing to send and had no per-address limit (each refused `Host`
//! was also a log line). Now each address bucket has `--refusal-rate-per-ip` of them per second
//! after a burst of `--refusal-burst-per-ip`; past it 429 (42911) with `Retry-After` and the
//! connection closed. Another address is unaffected, and the flooding address's health checks
//! (a budget of their own) still pass.

mod support;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use support::hostile::{Raw, ask};
use support::process::{Process, data_dir};

const WAIT: Duration = Duration::from_secs(5);

/// The three kinds of cheap refusal, in turn: a preflight from a development origin (answered
/// 200 by CORS), `GET /v1/write` (405), and a foreign `Host` (421).
fn cheap(n: usize, from: Ipv4Addr, addr: &str) -> Raw {
    let request = match n % 3 {
        0 => "OPTIONS /v1/write HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://localhost:5173\r\n\
              Access-Control-Request-Method: POST\r\n\
              Access-Control-Request-Headers: content-type,authorization,dpop\r\n\r\n"
            .to_owned(),
        1 => "GET /v1/write HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".to_owned(),
        _ => "GET /healthz HTTP/1.1\r\nHost: evil.example\r\n\r\n".to_owned(),
    };
    ask(from, addr, request.as_bytes(), WAIT)
}

fn expected(n: usize) -> u16 {
    [200, 405, 421][n % 3]
}

#[test]
fn a_flood_of_preflights_wrong_methods_and_foreign_hosts_is_refused_per_address() {
    let dir = data_dir();
    let gw = Process::start(
        dir.path(),
        &["--refusal-rate-per-ip", "1", "--refusal-burst-per-ip", "12"],
    );
    let flooder = Ipv4Addr::new(127, 0, 4, 10);
    let (mut normal, mut limited) = (0, 0);
    let started = Instant::now();
    for n in 0..60 {
        let r = cheap(n, flooder, &gw.addr);
        if r.status == 429 {
            assert_eq!(r.code(), 42911, "{r:?}");
            assert!(r.header("retry-after").is_some(), "{r:?}");
            assert_eq!(r.header("connection").as_deref(), Some("close"), "{r:?}");
            limited += 1;
        } else {
            assert_eq!(r.status, expected(n), "request {n}: {r:?}");
            normal += 1;
        }
    }
    let elapsed = started.elapsed();
    println!(
        "flooding address: {normal} answered as usual, {limited} refused 429 (42911) in {elapsed:?}"
    );
    // The burst, plus what the rate (1 a second) refilled during the flood as measured: one
    // more per second begun, and one for a refill landing between the clock reads. A loaded
    // machine stretches the flood and the bound with it; no limit at all answers 60.
    let refilled = elapsed.as_secs() as usize + 1;
    assert!(
        (12..=12 + refilled + 1).contains(&normal),
        "{normal} answered in {elapsed:?}"
    );
    assert!(limited > 0, "the flood was never refused in {elapsed:?}");
    assert_eq!(normal + limited, 60);
    // Every kind is refused once over: the burst is spent.
    for n in 0..3 {
        let r = cheap(n, flooder, &gw.addr);
        assert_eq!((r.status, r.code()), (429, 42911), "kind {n}: {r:?}");
    }
    // On `/v1/session` the refusal carries `serverTime`, as every answer there does.
    for host in ["127.0.0.1", "evil.example"] {
        let request = format!("GET /v1/session HTTP/1.1\r\nHost: {host}\r\n\r\n");
        let r = ask(flooder, &gw.addr, request.as_bytes(), WAIT);
        assert_eq!((r.status, r.code()), (429, 42911), "{r:?}");
        assert!(r.json()["serverTime"].as_u64().is_some(), "{r:?}");
    }
    // Another address is unaffected, every kind.
    let other = Ipv4Addr::new(127, 0, 4, 11);
    for n in 0..6 {
        let r = cheap(n, other, &gw.addr);
        assert_eq!(r.status, expected(n), "other address, request {n}: {r:?}");
    }
    // The flooding address's health check has a budget of its own.
    let health = ask(
        flooder,
        &gw.addr,
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        WAIT,
    );
    assert_eq!(health.status, 200, "{health:?}");
}
