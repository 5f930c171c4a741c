//! `/metrics` against the real `celeriant-gateway` process: not served at all by default; with
//! a token, served on the main listener to the token's holder only; on a listener of its own
//! with `--metrics-listen`; and after real traffic (sessions, writes, reads, a change stream,
//! refusals) its counters and gauges have moved, with labels that are fixed names only; an
//! unreachable Celeriant backend shows as upstream errors.

mod support;

use std::time::Duration;

use serde_json::json;
use support::app::{TYPE, write_by};
use support::device::{Device, fresh_nonce};
use support::process::*;

const AGGREGATE: &str = "3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e0077";
const TOKEN: &str = "metrics-token-0123456789abcdef0123456789";

/// `GET /metrics` at `base` as text, with the status.
fn scrape(base: &str, token: Option<&str>) -> (u16, String) {
    let agent: ureq::Agent = ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into();
    let mut request = agent.get(&format!("{base}/metrics"));
    if let Some(token) = token {
        request = request.header("authorization", &format!("Bearer {token}"));
    }
    let mut response = request.call().unwrap();
    let status = response.status().as_u16();
    (status, response.body_mut().read_to_string().unwrap())
}

/// The value of the sample `name{labels}` (labels as rendered, in order), if present.
fn value(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|line| line.strip_prefix(series)?.strip_prefix(' '))
        .map(|v| v.trim().parse().unwrap())
}

/// The sum of every sample of metric `name` whose labels contain all of `has`.
fn total(text: &str, name: &str, has: &[&str]) -> f64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| has.iter().all(|h| l.contains(h)))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .sum()
}

#[test]
fn metrics_are_off_by_default_and_never_on_the_main_listener_without_a_token() {
    let data = data_dir();
    let gw = Process::start(data.path(), &[]);
    let (status, _) = scrape(&gw.base, None);
    assert_eq!(
        status, 404,
        "no /metrics without --metrics-listen or a token"
    );

    // A listener of its own only: the main listener still has no /metrics.
    let data = data_dir();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let gw = Process::start(data.path(), &["--metrics-listen", &listen]);
    assert_eq!(scrape(&gw.base, None).0, 404);
    let (status, text) = scrape(&format!("http://{listen}"), None);
    assert_eq!(status, 200);
    assert!(
        text.contains("celeriant_gateway_watch_streams_open 0"),
        "{text}"
    );
}

#[test]
fn a_scrape_after_traffic_shows_the_counters_moved() {
    let data = data_dir();
    let token_file = data.path().join("metrics-token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let port = free_port();
    let listen = format!("127.0.0.1:{port}");
    let gw = Process::start(
        data.path(),
        &[
            "--metrics-token-file",
            token_file.to_str().unwrap(),
            "--metrics-listen",
            &listen,
            // Few reads per address, so the test can run into the fair share's rate.
            "--rate-per-ip",
            "1",
            "--burst-per-ip",
            "8",
        ],
    );

    // Refused without the token, or with a wrong one, on both listeners.
    for base in [gw.base.clone(), format!("http://{listen}")] {
        assert_eq!(scrape(&base, None).0, 401);
        assert_eq!(scrape(&base, Some(&TOKEN[1..])).0, 401);
        assert_eq!(scrape(&base, Some(&format!("{TOKEN}x"))).0, 401);
    }

    // Traffic: a session refused, one opened, a write, a read, an unknown route, a stream.
    let device = Device::a();
    let mut bad = device.session_body(fresh_nonce());
    // Signed for another nonce.
    bad["signature"] = json!(device.sign("1"));
    assert_eq!(post(&gw.base, "/v1/session", None, &bad).status, 401);
    let opened = post(
        &gw.base,
        "/v1/session",
        None,
        &device.session_body(fresh_nonce()),
    );
    assert_eq!(opened.status, 200, "{:?}", opened.json);
    let session = opened.json["token"].as_str().unwrap().to_owned();
    let write = write_by(&device.client_id, TYPE, AGGREGATE, &[1, 2]);
    let w = post(&gw.base, "/v1/write", Some(&session), &write);
    assert_eq!(w.status, 200, "{:?}", w.json);
    let events = format!("/v1/aggregates/{TYPE}/{AGGREGATE}/events");
    assert_eq!(get(&gw.base, &events, Some(&session)).status, 200);
    let secret_path = "/v1/aggregates/some-secret-path-x9";
    assert_eq!(get(&gw.base, secret_path, None).status, 404);
    let body = json!({"aggregates": [{"typeId": TYPE, "id": AGGREGATE}]});
    let mut stream = support::sse::open(&gw.addr, "POST", "/v1/watch", Some(&session), Some(&body));
    assert_eq!(stream.status, 200, "{}", stream.body);
    assert_eq!(stream.expect(Duration::from_secs(5)).event, "ready");
    // Reads until the address's rate refuses one.
    let refused = (0..20)
        .map(|_| get(&gw.base, &events, Some(&session)).status)
        .any(|s| s == 429);
    assert!(refused, "the rate per address never refused a read");

    let (status, text) = scrape(&gw.base, Some(TOKEN));
    assert_eq!(status, 200);
    let (status, other) = scrape(&format!("http://{listen}"), Some(TOKEN));
    assert_eq!(status, 200);
    assert!(other.contains("celeriant_gateway_requests_total"));

    let writes = total(
        &text,
        "celeriant_gateway_requests_total",
        &["route=\"write\"", "outcome=\"landed\"", "status=\"200\""],
    );
    assert_eq!(writes, 1.0, "{text}");
    assert!(
        total(
            &text,
            "celeriant_gateway_requests_total",
            &["route=\"events\""]
        ) >= 2.0
    );
    assert_eq!(
        total(
            &text,
            "celeriant_gateway_requests_total",
            &["route=\"api_other\"", "code=\"40400\"", "status=\"404\""]
        ),
        1.0,
        "{text}"
    );
    assert_eq!(
        value(&text, "celeriant_gateway_sessions_total{result=\"opened\"}"),
        Some(1.0)
    );
    assert_eq!(
        value(
            &text,
            "celeriant_gateway_sessions_total{result=\"refused\"}"
        ),
        Some(1.0)
    );
    assert_eq!(
        value(&text, "celeriant_gateway_watch_streams_open"),
        Some(1.0)
    );
    assert!(
        total(
            &text,
            "celeriant_gateway_budget_refusals_total",
            &["kind=\"reads\"", "reason=\"rate\""]
        ) >= 1.0,
        "{text}"
    );
    assert!(
        total(
            &text,
            "celeriant_gateway_request_duration_seconds_count",
            &["route=\"write\""]
        ) >= 1.0,
        "{text}"
    );
    assert!(value(&text, "celeriant_gateway_store_free_bytes").unwrap() > 0.0);
    assert!(value(&text, "celeriant_gateway_store_bytes").unwrap() > 0.0);
    assert_eq!(
        value(&text, "celeriant_gateway_store_checksum_failures_total"),
        Some(0.0)
    );
    // Nothing a client sent is a label value.
    for sent in [
        AGGREGATE,
        &device.client_id,
        "some-secret-path-x9",
        "127.0.0.1",
    ] {
        assert!(!text.contains(sent), "{sent} in the metrics");
    }

    // The stream closed: the gauge follows.
    drop(stream);
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    loop {
        let (_, text) = scrape(&gw.base, Some(TOKEN));
        if value(&text, "celeriant_gateway_watch_streams_open") == Some(0.0) {
            break;
        }
        assert!(std::time::Instant::now() < deadline, "{text}");
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
fn a_short_metrics_token_is_refused_at_start() {
    let data = data_dir();
    let token_file = data.path().join("short");
    std::fs::write(&token_file, "short\n").unwrap();
    let out = run_to_exit(
        data.path(),
        &["--metrics-token-file", token_file.to_str().unwrap()],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stderr.contains("--metrics-token-file"), "{stderr}");
}

#[test]
fn an_unreachable_celeriant_backend_counts_as_upstream_errors() {
    let data = data_dir();
    let dead = support::fake_celeriant::dead_address();
    let listen = format!("127.0.0.1:{}", free_port());
    let gw = Process::start(
        data.path(),
        &[
            "--backend",
            "celeriant",
            "--celeriant-addr",
            &dead,
            "--auth",
            "none",
            "--metrics-listen",
            &listen,
        ],
    );
    let client = "5f0c3a1e-8d2b-4e6f-9a7c-1b3d5e7f9a0c";
    let r = post(
        &gw.base,
        "/v1/write",
        None,
        &write_by(client, TYPE, AGGREGATE, &[1]),
    );
    assert_eq!(r.status, 503, "{:?}", r.json);
    let (status, text) = scrape(&format!("http://{listen}"), None);
    assert_eq!(status, 200);
    assert!(
        total(
            &text,
            "celeriant_gateway_upstream_errors_total",
            &["kind=\"connection\""]
        ) >= 1.0,
        "{text}"
    );
    let code = format!("code=\"{}\"", r.code());
    assert_eq!(
        total(
            &text,
            "celeriant_gateway_requests_total",
            &["route=\"write\"", "outcome=\"retry\"", &code]
        ),
        1.0,
        "{text}"
    );
    // No embedded store: no store gauges.
    assert!(!text.contains("celeriant_gateway_store_"), "{text}");
}
