//! `--trusted-proxy` against a real gateway process: whose address a request counts under when
//! it comes through trusted proxies (ranges, chains, `Forwarded` and `X-Forwarded-For`), and
//! that nobody else can choose it by header. The per-address read rate is tiny (a burst of 3,
//! then 1 a second), so "counted as client X" shows as "refused once X ran out". Each request
//! is a fresh connection from a chosen loopback source address (127.0.0.0/8 is all loopback on
//! Linux), standing in for a proxy or a client. The unit tests in `src/proxy.rs` cover each rule
//! of the walk; this file shows the process applies them, from the command line on.

mod support;

use std::net::Ipv4Addr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use support::app::TYPE;
use support::hostile::{Raw, aggregate, ask};
use support::process::{Process, command, data_dir, run_to_exit};

const WAIT: Duration = Duration::from_secs(10);

/// A tiny per-address read rate: a burst of 3, then 1 a second.
const RATE: [&str; 4] = ["--rate-per-ip", "1", "--burst-per-ip", "3"];

/// One read, from `source`, with `headers` (each `name: value`).
fn read(gw: &Process, source: [u8; 4], headers: &[&str]) -> Raw {
    let mut request = format!(
        "GET /v1/aggregates/{TYPE}/{}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\
         Connection: close\r\n",
        aggregate(1)
    );
    for header in headers {
        request.push_str(header);
        request.push_str("\r\n");
    }
    request.push_str("\r\n");
    ask(Ipv4Addr::from(source), &gw.addr, request.as_bytes(), WAIT)
}

/// Reads from `source` with `headers` until the address they count under runs out of its rate
/// (refused 429 42910); panics if it never does.
fn exhaust(gw: &Process, source: [u8; 4], headers: &[&str]) {
    for _ in 0..20 {
        let r = read(gw, source, headers);
        if r.status == 429 {
            assert_eq!(r.code(), 42910, "{r:?}");
            return;
        }
        assert_eq!(r.status, 200, "{r:?}");
    }
    panic!("{headers:?} from {source:?} was never refused: not counted under one address");
}

/// Whether a read from `source` with `headers` is refused by the rate (counted under an address
/// that ran out) or answered (counted under a fresh one).
fn refused(gw: &Process, source: [u8; 4], headers: &[&str]) -> bool {
    let r = read(gw, source, headers);
    assert!(
        r.status == 200 || (r.status, r.code()) == (429, 42910),
        "{r:?}"
    );
    r.status == 429
}

#[test]
fn behind_trusted_ranges_and_chains_each_forwarded_client_has_its_own_rate() {
    let dir = data_dir();
    let mut args = vec![
        "--auth",
        "none",
        // nginx-like proxies anywhere in 127.0.0.0/29, a CDN in 10.0.0.0/8 in front of them.
        "--trusted-proxy",
        "127.0.0.0/29",
        "--trusted-proxy",
        "10.0.0.0/8",
    ];
    args.extend(RATE);
    let gw = Process::start(dir.path(), &args);
    let (nginx, other_nginx) = ([127, 0, 0, 1], [127, 0, 0, 5]);
    let a_xff = ["X-Forwarded-For: 198.51.100.7"];

    // Client a (by `X-Forwarded-For`, through one proxy) runs out of its rate.
    exhaust(&gw, nginx, &a_xff);
    // Client b, by `Forwarded`, through another proxy of the range: its own rate.
    assert!(!refused(&gw, other_nginx, &["Forwarded: for=198.51.100.8"]));
    // The proxies' own address is untouched too (a request without a header counts under it).
    assert!(!refused(&gw, nginx, &[]));

    // Each of these is client a, however it is written: refused at once.
    let as_a: [&[&str]; 6] = [
        // A chain: the CDN's entry for a, then the proxy's for the CDN.
        &["X-Forwarded-For: 198.51.100.7, 10.0.0.5"],
        &["Forwarded: for=198.51.100.7;proto=https, for=\"10.0.0.5:443\""],
        // Several lines are one list.
        &["X-Forwarded-For: 198.51.100.7", "X-Forwarded-For: 10.0.0.5"],
        // With a port.
        &["X-Forwarded-For: 198.51.100.7:5678"],
        // A client-written entry to the left is never read.
        &["X-Forwarded-For: 198.51.100.99, 198.51.100.7"],
        &["Forwarded: for=198.51.100.98, for=198.51.100.7"],
    ];
    for headers in as_a {
        exhaust(&gw, nginx, &a_xff);
        assert!(
            refused(&gw, other_nginx, headers),
            "{headers:?} was not counted as client a"
        );
    }

    // `Forwarded` wins over `X-Forwarded-For` (never merged): counted as a fresh client.
    exhaust(&gw, nginx, &a_xff);
    assert!(!refused(
        &gw,
        nginx,
        &[
            "Forwarded: for=\"[2001:db8::1]:4711\"",
            "X-Forwarded-For: 198.51.100.7"
        ]
    ));
    // A trusted chain ending in something that is no address counts under the last trusted
    // hop (10.0.0.5 here), never under the client's 198.51.100.7 further left.
    exhaust(&gw, nginx, &a_xff);
    assert!(!refused(
        &gw,
        nginx,
        &["X-Forwarded-For: 198.51.100.7, unknown, 10.0.0.5"]
    ));
    exhaust(
        &gw,
        nginx,
        &["X-Forwarded-For: 198.51.100.7, unknown, 10.0.0.5"],
    );
    assert!(refused(&gw, other_nginx, &["Forwarded: for=10.0.0.5"]));
}

#[test]
fn a_peer_outside_the_trusted_range_cannot_choose_its_address_by_header() {
    let dir = data_dir();
    let mut args = vec!["--auth", "none", "--trusted-proxy", "127.0.0.1/32"];
    args.extend(RATE);
    let gw = Process::start(dir.path(), &args);
    let (proxy, intruder, bystander) = ([127, 0, 0, 1], [127, 0, 0, 2], [127, 0, 0, 3]);

    // 127.0.0.2 names a new client in every request: all count under 127.0.0.2.
    let mut n = 0;
    let mut fresh = || {
        n += 1;
        format!("X-Forwarded-For: 198.51.100.{n}")
    };
    let mut refused_at = None;
    for i in 0..20 {
        let header = fresh();
        if refused(&gw, intruder, &[&header]) {
            refused_at = Some(i);
            break;
        }
    }
    assert!(
        refused_at.is_some_and(|i| i <= 4),
        "headers of an untrusted peer were believed: {refused_at:?}"
    );
    for headers in [
        vec![fresh()],
        vec![format!("Forwarded: for=198.51.100.{}", 200)],
        vec!["X-Forwarded-For: 127.0.0.3".to_owned()],
        vec!["Forwarded: for=127.0.0.3".to_owned()],
    ] {
        let headers: Vec<&str> = headers.iter().map(String::as_str).collect();
        assert!(refused(&gw, intruder, &headers), "{headers:?}");
    }
    // Another address, and a client through the trusted proxy, are untouched.
    assert!(!refused(&gw, bystander, &[]));
    assert!(!refused(&gw, proxy, &["X-Forwarded-For: 198.51.100.250"]));
    // The trusted proxy is believed: a client it names 127.0.0.2 is counted as 127.0.0.2.
    assert!(refused(&gw, proxy, &["X-Forwarded-For: 127.0.0.2"]));
}

#[test]
fn bad_trusted_proxy_values_are_refused_at_start() {
    let dir = data_dir();
    for (value, says) in [
        (
            "10.0.0.1/8",
            "write the range 10.0.0.0/8 or the address 10.0.0.1",
        ),
        ("nginx.internal", "is not an IP address or a CIDR range"),
        ("10.0.0.0/33", "is not an IP address or a CIDR range"),
        ("0.0.0.0/0", "would trust every peer"),
    ] {
        let out = run_to_exit(dir.path(), &["--trusted-proxy", value]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{value} was accepted");
        assert!(
            stderr.contains("--trusted-proxy") && stderr.contains(says),
            "{value}: {stderr}"
        );
    }
    // The variable, comma-separated, is checked the same way.
    let mut child = command(&["--data-dir"])
        .arg(dir.path())
        .env(
            "CELERIANT_GATEWAY_TRUSTED_PROXY",
            "127.0.0.1,fd00::/8,garbage",
        )
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() && Instant::now() < deadline {
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let out = child.wait_with_output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "the variable was accepted");
    assert!(
        stderr.contains("`garbage` is not an IP address or a CIDR range"),
        "{stderr}"
    );
}
