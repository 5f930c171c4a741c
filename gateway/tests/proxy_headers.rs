//! `--trusted-proxy` against a real gateway process: whose address a request counts under when
//! it comes through trusted proxies (ranges, chains, `Forwarded` and `X-Forwarded-For`), and
//! that nobody else can choose it by header. The per-address read rate is tiny (a burst of 3,
//! then 1 a second), so "counted as client X" shows as "refused once X ran out". Each request
//! is a fresh connection from a chosen loopback source address (127.0.0.0/8 is all loopback on
//! Linux), standing in for a proxy or a client. The unit tests in `src/proxy/tests.rs` cover each rule
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
/// (refused 429 42910; panics if it never is), then waits for the one token that comes back
/// and spends it: the next comes a second after that. The time it was spent is returned, so a
/// probe can tell a refill from an answer (the token bucket is GCRA: after a refusal alone the
/// next token may be a millisecond away).
fn exhaust(gw: &Process, source: [u8; 4], headers: &[&str]) -> Instant {
    let mut ran_out = false;
    for _ in 0..20 {
        let r = read(gw, source, headers);
        if r.status == 429 {
            assert_eq!(r.code(), 42910, "{r:?}");
            ran_out = true;
            break;
        }
        assert_eq!(r.status, 200, "{r:?}");
    }
    assert!(
        ran_out,
        "{headers:?} from {source:?} was never refused: not counted under one address"
    );
    let deadline = Instant::now() + Duration::from_secs(3);
    loop {
        let r = read(gw, source, headers);
        if r.status == 200 {
            return Instant::now();
        }
        assert_eq!((r.status, r.code()), (429, 42910), "{r:?}");
        assert!(Instant::now() < deadline, "no token came back within 3 s");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A probe after an exhaust means something only if it was answered before the next token.
const WITHIN: Duration = Duration::from_millis(800);

/// Whether a read from `source` with `probe` headers counts under the address that `exhaust`
/// from `by` with `as_a` counts under: exhausts it, then reads; refused (429 42910) = the same
/// address, answered = another. A probe that took longer than [`WITHIN`] is done again (a
/// token may have come back), up to 5 times.
fn counted_as(gw: &Process, by: ([u8; 4], &[&str]), source: [u8; 4], probe: &[&str]) -> bool {
    for _ in 0..5 {
        let spent = exhaust(gw, by.0, by.1);
        let r = read(gw, source, probe);
        assert!(
            r.status == 200 || (r.status, r.code()) == (429, 42910),
            "{r:?}"
        );
        if spent.elapsed() < WITHIN {
            return r.status == 429;
        }
    }
    panic!("five probes of {probe:?} each took longer than {WITHIN:?}");
}

/// A gateway with the tiny rate, trusting nginx-like proxies anywhere in 127.0.0.0/29 and a
/// CDN in 10.0.0.0/8 in front of them, reading `header`.
fn behind_proxies(dir: &std::path::Path, header: Option<&str>) -> Process {
    let mut args = vec![
        "--auth",
        "none",
        "--trusted-proxy",
        "127.0.0.0/29",
        "--trusted-proxy",
        "10.0.0.0/8",
    ];
    if let Some(header) = header {
        args.extend(["--forwarded-header", header]);
    }
    args.extend(RATE);
    Process::start(dir, &args)
}

const NGINX: [u8; 4] = [127, 0, 0, 1];
const OTHER_NGINX: [u8; 4] = [127, 0, 0, 5];

#[test]
fn behind_trusted_ranges_and_chains_each_x_forwarded_for_client_has_its_own_rate() {
    let dir = data_dir();
    // The default header: X-Forwarded-For.
    let gw = behind_proxies(dir.path(), None);
    let a: &[&str] = &["X-Forwarded-For: 198.51.100.7"];
    let as_a = |probe: &[&str]| counted_as(&gw, (NGINX, a), OTHER_NGINX, probe);

    // Client b, through another proxy of the range, has its own rate; so has the proxies' own
    // address (a request without a header counts under it).
    assert!(!as_a(&["X-Forwarded-For: 198.51.100.8"]));
    assert!(!counted_as(&gw, (NGINX, a), NGINX, &[]));

    // Each of these is client a, however it is written.
    for probe in [
        // A chain: the CDN's entry for a, then the proxy's for the CDN.
        &["X-Forwarded-For: 198.51.100.7, 10.0.0.5"][..],
        // Several lines are one list.
        &["X-Forwarded-For: 198.51.100.7", "X-Forwarded-For: 10.0.0.5"],
        // With a port.
        &["X-Forwarded-For: 198.51.100.7:5678"],
        // A client-written entry to the left is never read.
        &["X-Forwarded-For: 198.51.100.99, 198.51.100.7"],
        // `Forwarded` is never read in this mode, present or not.
        &[
            "Forwarded: for=198.51.100.9",
            "X-Forwarded-For: 198.51.100.7",
        ],
    ] {
        assert!(as_a(probe), "{probe:?} was not counted as client a");
    }
    // A `Forwarded` header alone names nobody: the request counts under the proxy itself.
    assert!(!as_a(&["Forwarded: for=198.51.100.7"]));
    assert!(counted_as(
        &gw,
        (OTHER_NGINX, &[]),
        OTHER_NGINX,
        &["Forwarded: for=198.51.100.7"]
    ));

    // A trusted chain ending in something that is no address counts under the last trusted
    // hop (10.0.0.5 here), never under the client's 198.51.100.7 further left.
    let unreadable: &[&str] = &["X-Forwarded-For: 198.51.100.7, unknown, 10.0.0.5"];
    assert!(!as_a(unreadable));
    assert!(counted_as(
        &gw,
        (NGINX, unreadable),
        OTHER_NGINX,
        &["X-Forwarded-For: 10.0.0.5"]
    ));
}

#[test]
fn with_forwarded_header_forwarded_only_rfc_7239_is_read() {
    let dir = data_dir();
    let gw = behind_proxies(dir.path(), Some("forwarded"));
    let a: &[&str] = &["Forwarded: for=198.51.100.7"];
    let as_a = |probe: &[&str]| counted_as(&gw, (NGINX, a), OTHER_NGINX, probe);

    assert!(!as_a(&["Forwarded: for=198.51.100.8"]));
    for probe in [
        // A chain, with parameters and a quoted port.
        &["Forwarded: for=198.51.100.7;proto=https, for=\"10.0.0.5:443\""][..],
        // Several lines are one list.
        &["Forwarded: for=198.51.100.7", "Forwarded: for=10.0.0.5"],
        // A client-written element to the left is never read.
        &["Forwarded: for=198.51.100.98, for=198.51.100.7"],
        // X-Forwarded-For is never read in this mode.
        &[
            "Forwarded: for=198.51.100.7",
            "X-Forwarded-For: 198.51.100.10",
        ],
        // An IPv4-mapped IPv6 entry is the IPv4 address it maps.
        &["Forwarded: for=\"[::ffff:198.51.100.7]\""],
    ] {
        assert!(as_a(probe), "{probe:?} was not counted as client a");
    }
    for probe in [
        // X-Forwarded-For alone names nobody: counted as the proxy.
        &["X-Forwarded-For: 198.51.100.7"][..],
        // A `for=` inside a quoted string is no element: counted as .8, not a.
        &["Forwarded: for=198.51.100.8;host=\"a;for=198.51.100.7\""],
        &[
            "Forwarded: for=\"[2001:db8::1]:4711\"",
            "X-Forwarded-For: 198.51.100.7",
        ],
    ] {
        assert!(!as_a(probe), "{probe:?} was counted as client a");
    }
}

#[test]
fn a_peer_outside_the_trusted_range_cannot_choose_its_address_by_header() {
    let dir = data_dir();
    let mut args = vec!["--auth", "none", "--trusted-proxy", "127.0.0.1/32"];
    args.extend(RATE);
    let gw = Process::start(dir.path(), &args);
    let (proxy, intruder, bystander) = ([127, 0, 0, 1], [127, 0, 0, 2], [127, 0, 0, 3]);

    // 127.0.0.2 names a new client in every request: all count under 127.0.0.2, so it runs out
    // within its burst of 3.
    let mut refused_at = None;
    for i in 0..20 {
        let header = format!("X-Forwarded-For: 198.51.100.{}", i + 1);
        if read(&gw, intruder, &[&header]).status == 429 {
            refused_at = Some(i);
            break;
        }
    }
    assert!(
        refused_at.is_some_and(|i| i <= 4),
        "headers of an untrusted peer were believed: {refused_at:?}"
    );
    for probe in [
        &["X-Forwarded-For: 198.51.100.100"][..],
        &["Forwarded: for=198.51.100.200"],
        &["X-Forwarded-For: 127.0.0.3"],
        &["Forwarded: for=127.0.0.3"],
    ] {
        assert!(
            counted_as(&gw, (intruder, &[]), intruder, probe),
            "{probe:?}"
        );
    }
    // Another address, and a client through the trusted proxy, are untouched.
    assert!(!counted_as(&gw, (intruder, &[]), bystander, &[]));
    assert!(!counted_as(
        &gw,
        (intruder, &[]),
        proxy,
        &["X-Forwarded-For: 198.51.100.250"]
    ));
    // The trusted proxy is believed: a client it names 127.0.0.2 is counted as 127.0.0.2.
    assert!(counted_as(
        &gw,
        (intruder, &[]),
        proxy,
        &["X-Forwarded-For: 127.0.0.2"]
    ));
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
        ("0.0.0.0/0", "a range wider than /13"),
        ("::ffff:0.0.0.0/96", "a range wider than /13"),
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
