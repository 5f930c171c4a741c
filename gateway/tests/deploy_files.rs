//! The deployment files docs/deploy.md shows, checked for real: the systemd unit passes
//! `systemd-analyze verify` with no complaint, and the gateway starts with exactly the flags
//! of its `ExecStart` (paths pointed into a temporary directory) and answers on its public
//! host and its metrics listener; and the backup docs/deploy.md describes (stop, copy the
//! store's directory, start) gives a copy that `verify` passes and that serves every write;
//! and so does `POST /v1/backup`, taken while writes go on.

mod support;

use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;
use support::app::{TYPE, write_by};
use support::process::*;

const UNIT: &str = include_str!("../../deploy/systemd/celeriant-gateway.service");
const INSTALLED: &str = "/usr/local/bin/celeriant-gateway";
const BINARY: &str = env!("CARGO_BIN_EXE_celeriant-gateway");
const AGGREGATE: &str = "3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e0111";
const CLIENT: &str = "5f0c3a1e-8d2b-4e6f-9a7c-1b3d5e7f9a0b";

#[test]
fn the_systemd_unit_verifies_cleanly() {
    let Ok(probe) = Command::new("systemd-analyze").arg("--version").output() else {
        panic!("systemd-analyze is not installed (Debian's systemd package has it)");
    };
    assert!(probe.status.success());
    let dir = data_dir();
    let unit = dir.path().join("celeriant-gateway.service");
    // `verify` checks that ExecStart's binary exists: the one this build made.
    std::fs::write(&unit, UNIT.replace(INSTALLED, BINARY)).unwrap();
    let out = Command::new("systemd-analyze")
        .arg("verify")
        .arg(&unit)
        .output()
        .unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(out.status.success(), "{stderr}");
    // `verify` exits 0 on unknown keys and bad values; it says so on stderr.
    let complaints: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("celeriant-gateway.service"))
        .collect();
    assert!(complaints.is_empty(), "{complaints:#?}");
}

/// The arguments of the unit's `ExecStart` (continuation lines joined), after the binary.
fn exec_start_args() -> Vec<String> {
    let joined = UNIT.replace("\\\n", " ");
    let line = joined
        .lines()
        .find_map(|l| l.strip_prefix("ExecStart="))
        .expect("the unit has an ExecStart");
    let mut words = line.split_whitespace().map(str::to_owned);
    assert_eq!(words.next().as_deref(), Some(INSTALLED));
    words.collect()
}

#[test]
fn the_gateway_starts_with_the_units_flags() {
    let dir = data_dir();
    let (state, credentials, etc) = (
        dir.path().join("state"),
        dir.path().join("credentials"),
        dir.path().join("etc"),
    );
    for d in [&state, &credentials, &etc] {
        std::fs::create_dir(d).unwrap();
    }
    std::fs::write(credentials.join("session-secret"), "s".repeat(48)).unwrap();
    std::fs::write(credentials.join("metrics-token"), "m".repeat(40)).unwrap();
    std::fs::write(
        etc.join("policy.toml"),
        "default = \"owner\"\n[types]\n\"5e0d9e1a-7c41-4b8e-9f2a-0c6b3d1e2f01\" = \"authenticated\"\n",
    )
    .unwrap();
    let (port, metrics) = (free_port(), free_port());
    let path = |p: &Path| p.to_str().unwrap().to_owned();
    let args: Vec<String> = exec_start_args()
        .into_iter()
        .map(|a| {
            a.replace("${STATE_DIRECTORY}", &path(&state))
                .replace("${CREDENTIALS_DIRECTORY}", &path(&credentials))
                .replace("/etc/celeriant-gateway", &path(&etc))
                .replace("127.0.0.1:8080", &format!("127.0.0.1:{port}"))
                .replace("127.0.0.1:9464", &format!("127.0.0.1:{metrics}"))
        })
        .collect();
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let mut child = command(&args)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if child.try_wait().unwrap().is_some() {
            let out = child.wait_with_output().unwrap();
            panic!(
                "the gateway refused the unit's flags: {}",
                String::from_utf8_lossy(&out.stderr)
            );
        }
        assert!(Instant::now() < deadline, "the gateway did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    let health = raw(
        &format!("127.0.0.1:{port}"),
        "GET /healthz HTTP/1.1\r\nhost: sync.example.com\r\nconnection: close\r\n\r\n",
    );
    assert!(health.starts_with("HTTP/1.1 200"), "{health}");
    let scrape = raw(
        &format!("127.0.0.1:{metrics}"),
        &format!(
            "GET /metrics HTTP/1.1\r\nhost: 127.0.0.1\r\nauthorization: Bearer {}\r\n\
             connection: close\r\n\r\n",
            "m".repeat(40)
        ),
    );
    assert!(scrape.starts_with("HTTP/1.1 200"), "{scrape}");
    assert!(state.join("celeriant-gateway.redb").exists());
    let _ = child.kill();
    let _ = child.wait();
}

/// `celeriant-gateway verify --data-dir dir` passes.
fn assert_verifies(dir: &Path) {
    let verified = command(&["verify", "--data-dir"])
        .arg(dir)
        .output()
        .unwrap();
    assert!(
        verified.status.success(),
        "{}",
        String::from_utf8_lossy(&verified.stdout)
    );
}

fn client_seqs(base: &str) -> Vec<u64> {
    let r = get(
        base,
        &format!("/v1/aggregates/{TYPE}/{AGGREGATE}/events"),
        None,
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

#[test]
fn a_copy_taken_while_the_gateway_is_stopped_is_a_working_backup() {
    let data = data_dir();
    let mut gw = Process::start(data.path(), &["--auth", "none"]);
    for seq in 1..=20u64 {
        let r = post(
            &gw.base,
            "/v1/write",
            None,
            &write_by(CLIENT, TYPE, AGGREGATE, &[seq]),
        );
        assert_eq!(r.status, 200, "{:?}", r.json);
    }
    // Stop (SIGTERM: requests in progress finish), copy the directory, start again.
    gw.stop();
    let backup = data_dir();
    let copy = backup.path().join("db");
    std::fs::create_dir(&copy).unwrap();
    for entry in std::fs::read_dir(data.path().join("db")).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), copy.join(entry.file_name())).unwrap();
    }
    drop(gw);
    assert_verifies(&copy);
    // The copy serves every write, as the original does.
    let restored = Process::start(backup.path(), &["--auth", "none"]);
    assert_eq!(client_seqs(&restored.base), (1..=20).collect::<Vec<_>>());
    let original = Process::start(data.path(), &["--auth", "none"]);
    assert_eq!(client_seqs(&original.base), (1..=20).collect::<Vec<_>>());
}

const OPERATOR: &str = "operator-secret-of-at-least-thirty-two-characters";

#[test]
fn a_backup_taken_while_writes_go_on_is_one_consistent_working_copy() {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
    let data = data_dir();
    let token = data.path().join("operator");
    std::fs::write(&token, OPERATOR).unwrap();
    let token = token.to_str().unwrap().to_owned();
    let gw = Process::start(
        data.path(),
        &["--auth", "none", "--operator-token-file", &token],
    );
    let operator = format!("Operator {OPERATOR}");
    // Without the operator credential: refused, nothing made or told.
    for method in ["POST", "GET"] {
        let refused = with_authorization(method, &gw.base, "/v1/backup", None, None);
        assert_eq!(
            (refused.status, refused.code()),
            (403, 40305),
            "{method}: {:?}",
            refused.json
        );
    }
    // A writer that goes on during the backup; it counts the writes answered so far.
    let landed = Arc::new(AtomicU64::new(0));
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (base, landed, stop) = (gw.base.clone(), landed.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut seq = 0;
            while !stop.load(Ordering::Acquire) && seq < 50_000 {
                seq += 1;
                let r = post(
                    &base,
                    "/v1/write",
                    None,
                    &write_by(CLIENT, TYPE, AGGREGATE, &[seq]),
                );
                assert_eq!(r.status, 200, "{:?}", r.json);
                landed.store(seq, Ordering::Release);
            }
        })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while landed.load(Ordering::Acquire) < 200 {
        assert!(Instant::now() < deadline, "the writer is stuck");
        std::thread::sleep(Duration::from_millis(5));
    }
    let before = landed.load(Ordering::Acquire);
    let started = with_authorization("POST", &gw.base, "/v1/backup", Some(&operator), None);
    assert_eq!(started.status, 202, "{:?}", started.json);
    let dir = started.json["dir"].as_str().unwrap().to_owned();
    // The job's status until it ended.
    let made = loop {
        let status = with_authorization("GET", &gw.base, "/v1/backup", Some(&operator), None);
        assert_eq!(status.status, 200, "{:?}", status.json);
        if status.json["running"].is_null() {
            break status.json["last"].clone();
        }
        assert!(Instant::now() < deadline, "the backup never ended");
        std::thread::sleep(Duration::from_millis(10));
    };
    let after = landed.load(Ordering::Acquire);
    assert_eq!(
        (made["state"].as_str(), made["dir"].as_str()),
        (Some("made"), Some(dir.as_str())),
        "{made:?}"
    );
    // Writes go on after the backup, too: the copy must not follow them.
    while landed.load(Ordering::Acquire) < after + 50 {
        assert!(Instant::now() < deadline, "the writer is stuck");
        std::thread::sleep(Duration::from_millis(5));
    }
    stop.store(true, Ordering::Release);
    writer.join().unwrap();
    let dir = std::path::PathBuf::from(dir);
    assert!(
        dir.starts_with(data.path().join("db").join("backups")),
        "{dir:?}"
    );
    assert!(made["bytes"].as_u64().unwrap() > 0);
    assert!(!dir.with_extension("partial").exists());
    // Private like the store: the copy holds every payload.
    use std::os::unix::fs::PermissionsExt;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    assert_eq!(
        (mode(&dir), mode(&dir.join("celeriant-gateway.redb"))),
        (0o700, 0o600)
    );
    assert_verifies(&dir);
    // The copy is the store as of one commit: every write answered before the backup was
    // asked for, a gap-free run of sequence numbers, nothing answered after it ended but the
    // writes in flight.
    let restore = data_dir();
    std::fs::rename(&dir, restore.path().join("db")).unwrap();
    let restored = Process::start(restore.path(), &["--auth", "none"]);
    let seqs = client_seqs(&restored.base);
    let last = *seqs.last().unwrap();
    assert_eq!(seqs, (1..=last).collect::<Vec<_>>());
    assert!(
        before <= last && last <= after + 1,
        "copied up to {last}; {before} answered before the backup, {after} when it had ended"
    );
    println!(
        "backup: {} rows, {} bytes in {} ms; {before} writes answered before, {last} in the \
         copy, {after} answered when it had ended",
        made["rows"], made["bytes"], made["tookMs"]
    );
}
