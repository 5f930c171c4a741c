//! Device identity against the real `celeriant-gateway` process, over real sockets: the spoofing
//! attack end to end, reads without a session, a DNS-rebinding request, the per-address rate
//! limit on session creation, a secret rotated across a restart, and the configurations the
//! gateway refuses to start with.

mod support;

use serde_json::Value;
use support::app::{TYPE, write_by};
use support::device::{Device, fresh_nonce};
use support::process::*;

const AGGREGATE: &str = "3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e0042";

fn open(base: &str, device: &Device) -> String {
    let r = post(
        base,
        "/v1/session",
        None,
        &device.session_body(fresh_nonce()),
    );
    assert_eq!(r.status, 200, "{:?}", r.json);
    r.json["token"].as_str().unwrap().to_owned()
}

fn seqs(base: &str, token: &str) -> Vec<u64> {
    let r = get(
        base,
        &format!("/v1/aggregates/{TYPE}/{AGGREGATE}/events"),
        Some(token),
    );
    assert_eq!(r.status, 200, "{:?}", r.json);
    r.json["batches"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|b| b["events"].as_array().unwrap().clone())
        .map(|e: Value| e["clientSeq"].as_u64().unwrap())
        .collect()
}

fn write(base: &str, token: Option<&str>, client: &str, seq: u64) -> Answer {
    post(
        base,
        "/v1/write",
        token,
        &write_by(client, TYPE, AGGREGATE, &[seq]),
    )
}

#[test]
fn the_spoofing_attack_fails_against_a_real_gateway() {
    let dir = data_dir();
    let gw = Process::start(dir.path(), &[]);
    let (victim, attacker) = (Device::a(), Device::b());
    let victim_token = open(&gw.base, &victim);
    assert_eq!(
        write(&gw.base, Some(&victim_token), &victim.client_id, 1).json["aggregateVersion"],
        1
    );

    // Without a session at all (how the attack used to be done).
    let r = write(&gw.base, None, &victim.client_id, 1_000_000);
    assert_eq!((r.status, r.code()), (401, 40100), "{:?}", r.json);
    // With the attacker's own valid session.
    let attacker_token = open(&gw.base, &attacker);
    let r = write(
        &gw.base,
        Some(&attacker_token),
        &victim.client_id,
        1_000_000,
    );
    assert_eq!(
        (r.status, r.json["outcome"].as_str(), r.code()),
        (403, Some("rejected"), 40300)
    );

    for seq in 2..=4 {
        let r = write(&gw.base, Some(&victim_token), &victim.client_id, seq);
        assert_eq!(r.json["duplicate"], false, "seq {seq}: {:?}", r.json);
    }
    assert_eq!(seqs(&gw.base, &victim_token), [1, 2, 3, 4]);
    // Reads without a session are refused too.
    let r = get(
        &gw.base,
        &format!("/v1/aggregates/{TYPE}/{AGGREGATE}/events"),
        None,
    );
    assert_eq!((r.status, r.code()), (401, 40100));
}

#[test]
fn a_dns_rebinding_request_gets_no_cors_permission_and_no_answer() {
    let dir = data_dir();
    let gw = Process::start(dir.path(), &["--auth", "none", "--faults"]);
    let port = gw.addr.rsplit(':').next().unwrap();
    // evil.example resolved to 127.0.0.1: the browser sends its own name as Host and Origin.
    for request in [
        format!(
            "OPTIONS /v1/write HTTP/1.1\r\nHost: evil.example:{port}\r\nOrigin: http://evil.example:{port}\r\nAccess-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: content-type\r\nConnection: close\r\n\r\n"
        ),
        format!(
            "GET /v1/faults HTTP/1.1\r\nHost: evil.example:{port}\r\nOrigin: http://evil.example:{port}\r\nConnection: close\r\n\r\n"
        ),
        format!(
            "PUT /v1/faults HTTP/1.1\r\nHost: evil.example:{port}\r\nOrigin: http://evil.example:{port}\r\nContent-Type: application/json\r\nContent-Length: 2\r\nConnection: close\r\n\r\n{{}}"
        ),
    ] {
        let answer = raw(&gw.addr, &request);
        assert!(answer.starts_with("HTTP/1.1 421"), "{answer}");
        assert!(
            !answer
                .to_ascii_lowercase()
                .contains("access-control-allow-origin"),
            "{answer}"
        );
        assert!(answer.contains("\"code\":42100"), "{answer}");
    }
    // The gateway's own names and addresses are answered, and a loopback page gets CORS; the
    // faults endpoints still want the secret, which a page does not have.
    let answer = raw(
        &gw.addr,
        &format!(
            "GET /v1/faults HTTP/1.1\r\nHost: localhost:{port}\r\nOrigin: http://localhost:5173\r\nConnection: close\r\n\r\n"
        ),
    );
    assert!(answer.starts_with("HTTP/1.1 401"), "{answer}");
    assert!(answer.contains("\"code\":40190"), "{answer}");
    let answer = raw(
        &gw.addr,
        &format!(
            "GET /v1/faults HTTP/1.1\r\nHost: localhost:{port}\r\nOrigin: http://localhost:5173\r\n{}Connection: close\r\n\r\n",
            gw.faults_header_line()
        ),
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        answer.contains("access-control-allow-origin: http://localhost:5173"),
        "{answer}"
    );
    // A foreign origin with a good Host: answered, but without CORS permission.
    let answer = raw(
        &gw.addr,
        &format!(
            "GET /healthz HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nOrigin: http://evil.example:{port}\r\nConnection: close\r\n\r\n"
        ),
    );
    assert!(answer.starts_with("HTTP/1.1 200"), "{answer}");
    assert!(
        !answer
            .to_ascii_lowercase()
            .contains("access-control-allow-origin"),
        "{answer}"
    );
}

/// A page on an origin that is not allowed cannot send the faults secret header at all: its
/// preflight gets no CORS permission (so the browser never sends the request), whereas an
/// allowed origin's does.
#[test]
fn only_allowed_origins_may_send_the_faults_secret_header() {
    let dir = data_dir();
    let gw = Process::start(
        dir.path(),
        &[
            "--auth",
            "none",
            "--faults",
            "--allow-origin",
            "http://localhost:5173",
        ],
    );
    let preflight = |origin: &str| {
        raw(
            &gw.addr,
            &format!(
                "OPTIONS /v1/faults HTTP/1.1\r\nHost: {}\r\nOrigin: {origin}\r\nAccess-Control-Request-Method: PUT\r\nAccess-Control-Request-Headers: celeriant-faults-secret,content-type\r\nConnection: close\r\n\r\n",
                gw.addr
            ),
        )
        .to_ascii_lowercase()
    };
    for foreign in [
        "http://localhost:3000",
        "http://127.0.0.1:9999",
        "http://evil.example",
        "null",
    ] {
        let answer = preflight(foreign);
        // (tower-http lists the allowed headers anyway; without an allowed origin the browser
        // fails the preflight and never sends the request.)
        assert!(
            !answer.contains("access-control-allow-origin"),
            "{foreign}: {answer}"
        );
    }
    let answer = preflight("http://localhost:5173");
    assert!(
        answer.contains("access-control-allow-origin: http://localhost:5173"),
        "{answer}"
    );
    assert!(answer.contains("celeriant-faults-secret"), "{answer}");
}

#[test]
fn session_creation_is_rate_limited_per_address() {
    let dir = data_dir();
    let gw = Process::start(
        dir.path(),
        &["--session-rate-per-minute", "1", "--session-burst", "3"],
    );
    let device = Device::a();
    for _ in 0..3 {
        open(&gw.base, &device);
    }
    let r = post(
        &gw.base,
        "/v1/session",
        None,
        &device.session_body(fresh_nonce()),
    );
    assert_eq!(
        (r.status, r.json["outcome"].as_str(), r.code()),
        (429, Some("retry"), 42901),
        "{:?}",
        r.json
    );
    let retry_after: u64 = r.header("retry-after").unwrap().parse().unwrap();
    assert!((1..=60).contains(&retry_after), "{retry_after}");
    let ms = r.json["retryAfterMs"].as_u64().unwrap();
    assert!(
        ms > 0 && ms <= 60_000 && ms.div_ceil(1000) == retry_after,
        "{ms}"
    );
    assert!(r.json["serverTime"].as_u64().is_some());
    // The limit is checked before the body is read: garbage is limited too.
    let r = post(&gw.base, "/v1/session", None, &serde_json::json!({}));
    assert_eq!((r.status, r.code()), (429, 42901));
}

#[test]
fn a_rotated_secret_turns_old_tokens_into_401_and_new_sessions_work() {
    let dir = data_dir();
    let device = Device::a();
    let first = "the first secret, thirty-two bytes or more";
    let second = "the second secret, thirty-two bytes or more";
    let old_token = {
        let gw = Process::start(dir.path(), &["--session-secret", first]);
        let token = open(&gw.base, &device);
        assert_eq!(
            write(&gw.base, Some(&token), &device.client_id, 1).json["outcome"],
            "landed"
        );
        token
    };
    // Restarted with the same secret: the token still works (sessions survive restarts).
    {
        let gw = Process::start(dir.path(), &["--session-secret", first]);
        assert_eq!(seqs(&gw.base, &old_token), [1]);
    }
    let gw = Process::start(dir.path(), &["--session-secret", second]);
    let r = write(&gw.base, Some(&old_token), &device.client_id, 2);
    assert_eq!(
        (r.status, r.json["outcome"].as_str(), r.code()),
        (401, Some("unauthorized"), 40101)
    );
    let fresh = open(&gw.base, &device);
    assert_eq!(
        write(&gw.base, Some(&fresh), &device.client_id, 2).json["outcome"],
        "landed"
    );
    assert_eq!(
        seqs(&gw.base, &fresh),
        [1, 2],
        "the refused write was not stored"
    );
}

#[test]
fn the_generated_secret_is_kept_in_the_data_directory() {
    let dir = data_dir();
    let device = Device::a();
    let token = {
        let gw = Process::start(dir.path(), &[]);
        open(&gw.base, &device)
    };
    let gw = Process::start(dir.path(), &[]);
    assert_eq!(
        get(
            &gw.base,
            &format!("/v1/aggregates/{TYPE}/{AGGREGATE}/events"),
            Some(&token)
        )
        .status,
        200
    );
}

#[test]
fn unsafe_configurations_beyond_loopback_refuse_to_start() {
    let dir = data_dir();
    for (args, needle) in [
        (
            &[
                "--listen",
                "0.0.0.0:0",
                "--allow-origin",
                "https://app.example",
                "--auth",
                "none",
            ][..],
            "--auth none",
        ),
        (
            &[
                "--listen",
                "0.0.0.0:0",
                "--allow-origin",
                "https://app.example",
                "--faults",
            ][..],
            "--faults",
        ),
        (&["--listen", "0.0.0.0:0"][..], "--allow-origin"),
        // On loopback, but reached from beyond it: a reverse proxy connects from 127.0.0.1.
        (
            &[
                "--listen",
                "127.0.0.1:0",
                "--public-host",
                "sync.example.com",
                "--auth",
                "none",
            ][..],
            "--auth none is refused with --public-host",
        ),
        (
            &[
                "--listen",
                "127.0.0.1:0",
                "--public-host",
                "sync.example.com",
                "--faults",
            ][..],
            "--faults is refused with --public-host",
        ),
        // App tokens minted for another service, or by another issuer, must not open sessions.
        (
            &[
                "--app-token-alg",
                "hs256",
                "--app-token-key-file",
                "app-secret",
            ][..],
            "--app-token-issuer and --app-token-audience",
        ),
        (
            &[
                "--app-token-alg",
                "hs256",
                "--app-token-key-file",
                "app-secret",
                "--app-token-issuer",
                "https://sign-in.example",
            ][..],
            "--app-token-issuer and --app-token-audience",
        ),
        (
            &[
                "--app-token-alg",
                "hs256",
                "--app-token-key-file",
                "app-secret",
                "--app-token-issuer",
                "",
                "--app-token-audience",
                "celeriant-sync-tests",
            ][..],
            "--app-token-issuer and --app-token-audience",
        ),
    ] {
        let out = run_to_exit(dir.path(), args);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{args:?}: {stderr}");
        assert!(stderr.contains(needle), "{args:?}: {stderr}");
        assert!(
            !String::from_utf8_lossy(&out.stdout).contains("listening"),
            "{args:?}"
        );
    }
    // The environment twins are refused the same way.
    let mut command = command(&[]);
    let out = command
        .env("CELERIANT_GATEWAY_LISTEN", "0.0.0.0:0")
        .env("CELERIANT_GATEWAY_ALLOW_ORIGIN", "https://app.example")
        .env("CELERIANT_GATEWAY_AUTH", "none")
        .arg("--data-dir")
        .arg(dir.path())
        .output()
        .unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8_lossy(&out.stderr).contains("--auth none"));
}

#[test]
fn the_documented_handshake_script_opens_a_session_with_openssl_and_curl() {
    let dir = data_dir();
    let gw = Process::start(dir.path(), &[]);
    let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("..");
    let key = dir.path().join("device-key.pem");
    let run = || {
        let out = std::process::Command::new("bash")
            .arg(root.join("scripts/session.sh"))
            .arg(&gw.base)
            .arg(&key)
            .output()
            .expect("bash");
        assert!(
            out.status.success(),
            "{}",
            String::from_utf8_lossy(&out.stderr)
        );
        serde_json::from_slice::<Value>(&out.stdout).unwrap()
    };
    let first = run();
    let second = run();
    assert_eq!(
        first["clientId"], second["clientId"],
        "one key, one client id"
    );
    // The id the script's key proves is Celeriant's derivation from its SPKI.
    let spki = std::process::Command::new("openssl")
        .args(["pkey", "-pubout", "-outform", "DER", "-in"])
        .arg(&key)
        .output()
        .unwrap()
        .stdout;
    let id = celeriant_crypto::Crypto::generate_short_client_identity(&spki);
    let client = uuid::Uuid::from_u128(id).to_string();
    assert_eq!(first["clientId"], client.as_str());
    let token = second["token"].as_str().unwrap();
    // Without its proof the token writes nothing; with the proof scripts/proof.sh makes from
    // the same key file, the write lands.
    assert_eq!(write(&gw.base, Some(token), &client, 1).status, 401);
    let body = serde_json::to_string(&write_by(&client, TYPE, AGGREGATE, &[1])).unwrap();
    let proof = std::process::Command::new("bash")
        .arg(root.join("scripts/proof.sh"))
        .arg(&key)
        .args(["POST", "/v1/write", token, &body])
        .output()
        .expect("bash");
    assert!(
        proof.status.success(),
        "{}",
        String::from_utf8_lossy(&proof.stderr)
    );
    let proof = String::from_utf8(proof.stdout).unwrap();
    let r = send_with(
        "POST",
        &gw.base,
        "/v1/write",
        &[
            ("content-type", "application/json"),
            ("authorization", &format!("Bearer {token}")),
            ("dpop", proof.trim()),
        ],
        body.as_bytes(),
    );
    assert_eq!(r.json["outcome"], "landed", "{:?}", r.json);
    // A refusal exits 1 with the body on stdout.
    let refused = std::process::Command::new("bash")
        .arg(root.join("scripts/session.sh"))
        .arg(&gw.base)
        .arg(&key)
        .env("APP_TOKEN", "x")
        .output()
        .unwrap();
    assert!(
        refused.status.success(),
        "no app token required here, so it is ignored"
    );
    let gw_app = {
        let secret = dir.path().join("app-secret");
        std::fs::write(&secret, "an app secret of at least thirty-two bytes").unwrap();
        Process::start(
            &dir.path().join("app"),
            &[
                "--app-token-alg",
                "hs256",
                "--app-token-key-file",
                secret.to_str().unwrap(),
                "--app-token-issuer",
                "https://sign-in.example",
                "--app-token-audience",
                "celeriant-sync-tests",
            ],
        )
    };
    let refused = std::process::Command::new("bash")
        .arg(root.join("scripts/session.sh"))
        .arg(&gw_app.base)
        .arg(&key)
        .output()
        .unwrap();
    assert_eq!(refused.status.code(), Some(1));
    let body: Value = serde_json::from_slice(&refused.stdout).unwrap();
    assert_eq!(body["code"], 40120);
}

/// Without `--faults-secret-file` or `--faults-secret-out`, the generated faults secret is
/// printed once on standard output (never in the log), and it is what the endpoints want; a
/// second start generates another one.
#[test]
fn a_generated_faults_secret_is_printed_once_and_required() {
    use std::io::BufRead as _;
    let mut secrets = Vec::new();
    for _ in 0..2 {
        let dir = data_dir();
        let port_file = dir.path().join("port");
        let mut child = support::process::command(&["--auth", "none", "--faults"])
            .env("RUST_LOG", "info")
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(dir.path().join("db"))
            .arg("--port-file")
            .arg(&port_file)
            .stdout(std::process::Stdio::piped())
            .stderr(std::process::Stdio::piped())
            .spawn()
            .unwrap();
        // Standard output is read to its end (the log goes there too: a closed pipe would
        // fail the gateway's writes).
        let stdout = std::io::BufReader::new(child.stdout.take().unwrap());
        let (lines, seen) = std::sync::mpsc::channel();
        let reader = std::thread::spawn(move || {
            for line in stdout.lines().map_while(Result::ok) {
                let _ = lines.send(line);
            }
        });
        let mut printed = Vec::new();
        while !printed.iter().any(|l: &String| l.contains("listening on")) {
            printed.push(
                seen.recv_timeout(std::time::Duration::from_secs(20))
                    .unwrap(),
            );
        }
        let secret_lines: Vec<&String> = printed
            .iter()
            .filter(|l| l.contains("faults secret"))
            .collect();
        assert_eq!(secret_lines.len(), 1, "{printed:?}");
        let secret = secret_lines[0].rsplit(' ').next().unwrap().to_owned();
        assert_eq!(secret.len(), 64, "{secret}");
        let base = format!("http://{}", std::fs::read_to_string(&port_file).unwrap());
        assert_eq!(get(&base, "/v1/faults", None).code(), 40190);
        let ok = ureq::get(&format!("{base}/v1/faults"))
            .header("celeriant-faults-secret", &secret)
            .call()
            .unwrap();
        assert_eq!(ok.status(), 200);
        let _ = child.kill();
        let output = child.wait_with_output().unwrap();
        reader.join().unwrap();
        printed.extend(seen.try_iter());
        let log = format!(
            "{}\n{}",
            printed
                .iter()
                .filter(|l| !l.contains("faults secret"))
                .cloned()
                .collect::<Vec<_>>()
                .join("\n"),
            String::from_utf8_lossy(&output.stderr)
        );
        assert!(!log.contains(&secret), "never in the log: {log}");
        secrets.push(secret);
    }
    assert_ne!(secrets[0], secrets[1]);
}
