//! Cheap refusals and CORS preflights have per-address rates (issue 26, real process).
//!
//! CORS preflights (`OPTIONS`), wrong methods (405) and requests for a `Host` the gateway does
//! not answer to (421) cost nothing to send and had no per-address limit (each refused `Host`
//! was also a log line). Now each address bucket has `--refusal-rate-per-ip` wrong methods and
//! foreign `Host`s per second after a burst of `--refusal-burst-per-ip`, and
//! `--preflight-rate-per-ip` preflights after `--preflight-burst-per-ip`; past either 429
//! (42911) with `Retry-After` and the connection closed. The budgets are apart: a flood of
//! 405s and 421s leaves the same address its preflights, and a flood of preflights its 405s.
//! Another address is unaffected, and the flooding address's health checks (a budget of their
//! own) still pass.

mod support;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use support::hostile::{Raw, ask};
use support::process::{Process, data_dir};

const WAIT: Duration = Duration::from_secs(5);

/// The kinds of cheap request: a preflight from a development origin (answered 200 by CORS),
/// `GET /v1/write` (405), and a foreign `Host` (421).
const PREFLIGHT: usize = 0;

fn cheap(kind: usize, from: Ipv4Addr, addr: &str) -> Raw {
    let request = match kind % 3 {
        PREFLIGHT => {
            "OPTIONS /v1/write HTTP/1.1\r\nHost: 127.0.0.1\r\nOrigin: http://localhost:5173\r\n\
              Access-Control-Request-Method: POST\r\n\
              Access-Control-Request-Headers: content-type,authorization,dpop\r\n\r\n"
                .to_owned()
        }
        1 => "GET /v1/write HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n".to_owned(),
        _ => "GET /healthz HTTP/1.1\r\nHost: evil.example\r\n\r\n".to_owned(),
    };
    ask(from, addr, request.as_bytes(), WAIT)
}

fn expected(kind: usize) -> u16 {
    [200, 405, 421][kind % 3]
}

/// 60 requests of `kinds` in turn from `from`: (answered as usual, refused 429 42911), checked
/// against the burst of 12 plus what the rate (1 a second) refilled during the flood.
fn flood(kinds: &[usize], from: Ipv4Addr, addr: &str) -> (usize, usize) {
    let (mut normal, mut limited) = (0, 0);
    let started = Instant::now();
    for n in 0..60 {
        let kind = kinds[n % kinds.len()];
        let r = cheap(kind, from, addr);
        if r.status == 429 {
            assert_eq!(r.code(), 42911, "{r:?}");
            assert!(r.header("retry-after").is_some(), "{r:?}");
            assert_eq!(r.header("connection").as_deref(), Some("close"), "{r:?}");
            limited += 1;
        } else {
            assert_eq!(r.status, expected(kind), "request {n}: {r:?}");
            normal += 1;
        }
    }
    let elapsed = started.elapsed();
    println!(
        "flooding address {from}, kinds {kinds:?}: {normal} answered as usual, {limited} refused \
         429 (42911) in {elapsed:?}"
    );
    // One more per second begun, and one for a refill landing between the clock reads. A
    // loaded machine stretches the flood and the bound with it; no limit at all answers 60.
    let refilled = elapsed.as_secs() as usize + 1;
    assert!(
        (12..=12 + refilled + 1).contains(&normal),
        "{normal} answered in {elapsed:?}"
    );
    assert!(limited > 0, "the flood was never refused in {elapsed:?}");
    (normal, limited)
}

#[test]
fn a_flood_of_preflights_wrong_methods_and_foreign_hosts_is_refused_per_address() {
    let dir = data_dir();
    let gw = Process::start(
        dir.path(),
        &[
            "--refusal-rate-per-ip",
            "1",
            "--refusal-burst-per-ip",
            "12",
            "--preflight-rate-per-ip",
            "1",
            "--preflight-burst-per-ip",
            "12",
        ],
    );
    // Wrong methods and foreign hosts: refused past the refusal budget.
    let flooder = Ipv4Addr::new(127, 0, 4, 10);
    flood(&[1, 2], flooder, &gw.addr);
    for kind in [1, 2] {
        let r = cheap(kind, flooder, &gw.addr);
        assert_eq!((r.status, r.code()), (429, 42911), "kind {kind}: {r:?}");
    }
    // On `/v1/session` the refusal carries `serverTime`, as every answer there does.
    for host in ["127.0.0.1", "evil.example"] {
        let request = format!("GET /v1/session HTTP/1.1\r\nHost: {host}\r\n\r\n");
        let r = ask(flooder, &gw.addr, request.as_bytes(), WAIT);
        assert_eq!((r.status, r.code()), (429, 42911), "{r:?}");
        assert!(r.json()["serverTime"].as_u64().is_some(), "{r:?}");
    }
    // The same address's app still gets its preflights: a budget of their own.
    let preflight = cheap(PREFLIGHT, flooder, &gw.addr);
    assert_eq!(preflight.status, 200, "{preflight:?}");
    // Preflights from another address: refused past the preflight budget, and its wrong
    // methods are still answered as usual.
    let preflighter = Ipv4Addr::new(127, 0, 4, 12);
    flood(&[PREFLIGHT], preflighter, &gw.addr);
    let r = cheap(1, preflighter, &gw.addr);
    assert_eq!(r.status, 405, "{r:?}");
    // Another address is unaffected, every kind.
    let other = Ipv4Addr::new(127, 0, 4, 11);
    for kind in 0..6 {
        let r = cheap(kind, other, &gw.addr);
        assert_eq!(
            r.status,
            expected(kind),
            "other address, request {kind}: {r:?}"
        );
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
