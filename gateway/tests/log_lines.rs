//! A real gateway's log (`RUST_LOG=info`, standard output) stays one event per line whatever a
//! request puts in it: a line break in a JSON key at `POST /v1/session`, in a write's body, in an
//! app token's subject, in a query, in a `Host` header (where HTTP allows no line break, the
//! other control characters) reaches the log escaped, and no line of the log starts with text
//! a client chose. Refusals a client can cause at will (session refusals, refused writes) are
//! logged at most once per interval, with the number not logged.

mod support;

use std::time::Instant;

use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use support::device::{Device, fresh_nonce};
use support::process::{Process, data_dir, get, post, raw};

const FORGED: &str = "FORGED-LINE";
const APP_SECRET: &str = "an app secret of at least thirty-two bytes";

/// Each way a client could try to end a log line.
fn breaks() -> [String; 5] {
    [
        format!("\n{FORGED} WARN celeriant_gateway: a"),
        format!("\r\n{FORGED} b"),
        format!("\r{FORGED} c"),
        format!("\u{2028}{FORGED} d"),
        format!("\u{85}{FORGED} e"),
    ]
}

#[test]
fn no_request_can_forge_a_log_line() {
    let dir = data_dir();
    let key_file = dir.path().join("app-secret");
    std::fs::write(&key_file, APP_SECRET).unwrap();
    let log_file = dir.path().join("gateway.log");
    let gateway = Process::start_logged(
        dir.path(),
        &[
            "--session-rate-per-minute",
            "0",
            "--app-token-alg",
            "hs256",
            "--app-token-key-file",
            key_file.to_str().unwrap(),
            "--app-token-issuer",
            "https://sign-in.example",
            "--app-token-audience",
            "celeriant-sync-tests",
        ],
        &log_file,
    );
    let base = gateway.base.clone();
    let device = Device::a();
    let app_token = |sub: &str| {
        jsonwebtoken::encode(
            &Header::new(Algorithm::HS256),
            &json!({
                "sub": sub,
                "iss": "https://sign-in.example",
                "aud": "celeriant-sync-tests",
                "exp": jsonwebtoken::get_current_timestamp() + 600
            }),
            &EncodingKey::from_secret(APP_SECRET.as_bytes()),
        )
        .unwrap()
    };
    // Session refusals are logged once per interval: the first one carries every break at once
    // (a JSON key at POST /v1/session holding all of them; refused: unknown field, named in the
    // message).
    let mut body = device.session_body(fresh_nonce());
    body[breaks().concat().as_str()] = json!(1);
    let r = post(&base, "/v1/session", Some(&app_token("u")), &body);
    assert_eq!(r.status, 400, "{:?}", r.json);
    for text in breaks() {
        // A JSON key at POST /v1/session (refused: unknown field, named in the message).
        let mut body = device.session_body(fresh_nonce());
        body[text.as_str()] = json!(1);
        let r = post(&base, "/v1/session", Some(&app_token("u")), &body);
        assert_eq!(r.status, 400, "{:?}", r.json);
        // A JSON value there (the public key).
        let mut body = device.session_body(fresh_nonce());
        body["publicKey"] = Value::String(text.clone());
        assert_eq!(
            post(&base, "/v1/session", Some(&app_token("u")), &body).status,
            400
        );
        // An app token's subject with the text: the session opens and the subject is logged —
        // unless it has control characters, which no principal can hold: then it is refused
        // (and nothing of the subject starts a line either way).
        let attempt = post(
            &base,
            "/v1/session",
            Some(&app_token(&format!("user{text}"))),
            &device.session_body(fresh_nonce()),
        );
        let opened = if text.chars().any(char::is_control) {
            assert_eq!(attempt.status, 401, "{:?}", attempt.json);
            assert_eq!(attempt.json["code"], 40121, "{:?}", attempt.json);
            post(
                &base,
                "/v1/session",
                Some(&app_token("u")),
                &device.session_body(fresh_nonce()),
            )
        } else {
            attempt
        };
        assert_eq!(opened.status, 200, "{:?}", opened.json);
        let token = opened.json["token"].as_str().unwrap().to_owned();
        // A key in a write's body, and a query parameter.
        let write = json!({"clientId": device.client_id, "writes": [], text.as_str(): 1});
        assert_eq!(post(&base, "/v1/write", Some(&token), &write).status, 400);
        let query: String = text
            .bytes()
            .map(|b| format!("%{b:02X}"))
            .collect::<String>();
        let path = format!(
            "/v1/aggregates/{}/{}/events?{query}=1",
            support::app::TYPE,
            support::app::ID
        );
        assert_eq!(get(&base, &path, Some(&token)).status, 400);
    }
    // A Host header cannot hold a line break, but it can hold other control bytes.
    let answer = raw(
        &gateway.addr,
        "GET /healthz HTTP/1.1\r\nHost: evil\x1b[2K\x08.example\r\nConnection: close\r\n\r\n",
    );
    assert!(answer.starts_with("HTTP/1.1 4"), "{answer}");

    drop(gateway); // killed and waited for: the log is complete
    let log = std::fs::read_to_string(&log_file).unwrap();
    let mut reached = 0;
    for line in log.split(['\n', '\r', '\u{85}', '\u{2028}', '\u{2029}']) {
        assert!(
            !line.trim_start().starts_with(FORGED),
            "a forged line: {line:?}\n--- log:\n{log}"
        );
        assert!(!line.contains('\u{1b}'), "a raw escape: {line:?}");
        reached += line.matches(FORGED).count();
    }
    // The inputs did reach the log (escaped): the session refusals and the subjects at least.
    assert!(reached >= 10, "{reached} escaped inputs in the log:\n{log}");
}

#[test]
fn refusals_a_client_causes_at_will_do_not_flood_the_log() {
    const FLOOD: usize = 300;
    let dir = data_dir();
    let log_file = dir.path().join("gateway.log");
    let gateway = Process::start_logged(dir.path(), &["--session-rate-per-minute", "0"], &log_file);
    let base = gateway.base.clone();
    let started = Instant::now();
    // Session refusals: a body with an unknown field (400), as fast as one client can send.
    let device = Device::a();
    for _ in 0..FLOOD {
        let mut body = device.session_body(fresh_nonce());
        body["unknown"] = json!(1);
        assert_eq!(post(&base, "/v1/session", None, &body).status, 400);
    }
    // Refused writes: a session of device A writing as device B (403).
    let opened = post(
        &base,
        "/v1/session",
        None,
        &device.session_body(fresh_nonce()),
    );
    assert_eq!(opened.status, 200, "{:?}", opened.json);
    let token = opened.json["token"].as_str().unwrap().to_owned();
    let other = Device::b();
    let write = json!({"clientId": other.client_id, "writes": []});
    for _ in 0..FLOOD {
        let r = post(&base, "/v1/write", Some(&token), &write);
        assert_eq!(r.status, 403, "{:?}", r.json);
    }
    let elapsed = started.elapsed();
    drop(gateway); // killed and waited for: the log is complete
    let log = std::fs::read_to_string(&log_file).unwrap();
    // One line per 5 s interval at most (and at least the first).
    let allowed = 1 + (elapsed.as_secs() / 5) as usize + 1;
    for what in ["session refused", "write refused"] {
        let lines = log.lines().filter(|l| l.contains(what)).count();
        println!("{FLOOD} refusals in {elapsed:?}: {lines} \"{what}\" lines");
        assert!(
            (1..=allowed).contains(&lines),
            "{lines} \"{what}\" lines for {FLOOD} refusals in {elapsed:?}"
        );
    }
    assert!(log.contains("suppressed"), "{log}");
}
