//! The gateway as a real process: `kill -9` right after a 200 loses nothing (the write is
//! durable before it is acknowledged), a restart on the same data serves it once, SIGTERM
//! shuts down gracefully, and the fault flags can be set through environment variables.

use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use serde_json::{Value, json};

struct Gateway {
    child: Child,
    base: String,
}

impl Gateway {
    fn start(data: &Path) -> Gateway {
        Gateway::start_with(data, &[])
    }

    // The child is waited on by `Drop for Gateway` (or just below when it fails to start).
    #[allow(clippy::zombie_processes)]
    fn start_with(data: &Path, env: &[(&str, &str)]) -> Gateway {
        let port_file = data.join("port");
        let _ = std::fs::remove_file(&port_file);
        // These tests are about durability and configuration, not about who writes: no
        // sessions (auth_process.rs tests the gateway with device identity on).
        let mut child = Command::new(env!("CARGO_BIN_EXE_celeriant-gateway"))
            .args(["--auth", "none", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data.join("db"))
            .arg("--port-file")
            .arg(&port_file)
            .env("RUST_LOG", "warn")
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(addr) = std::fs::read_to_string(&port_file)
                && !addr.is_empty()
            {
                return Gateway {
                    child,
                    base: format!("http://{addr}"),
                };
            }
            if Instant::now() > deadline {
                let _ = child.kill();
                let _ = child.wait();
                panic!("gateway did not start");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Gateway {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

fn write(base: &str, seq: u64) -> Value {
    let body = json!({"clientId": "6f1c1c5e-6a4c-4f52-9a37-1e2a8d2f0001", "writes": [{
        "aggregate": {"typeId": "0d6c7b1a-2b55-4f0e-8a7d-6c4e9b3a0002", "id": "3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e0003"},
        "allowCreate": true,
        "events": [{"clientSeq": seq, "eventId": null, "timestamp": 1, "type": 3, "minor": 0, "data": "aGk=", "iv": null}]}]});
    agent()
        .post(&format!("{base}/v1/write"))
        .header("content-type", "application/json")
        .send(serde_json::to_vec(&body).unwrap())
        .unwrap()
        .body_mut()
        .read_to_string()
        .map(|text| serde_json::from_str(&text).unwrap())
        .unwrap()
}

fn read(base: &str) -> Vec<u64> {
    let page: Value = agent()
        .get(&format!(
            "{base}/v1/aggregates/0d6c7b1a-2b55-4f0e-8a7d-6c4e9b3a0002/3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e0003/events"
        ))
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .map(|text| serde_json::from_str(&text).unwrap())
        .unwrap();
    page["batches"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|b| {
            b["events"]
                .as_array()
                .unwrap()
                .iter()
                .map(|e| e["clientSeq"].as_u64().unwrap())
        })
        .collect()
}

#[test]
fn kill_9_right_after_a_200_loses_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let mut expected = Vec::new();
    for seq in 1..=3 {
        let mut gateway = Gateway::start(dir.path());
        let answer = write(&gateway.base, seq);
        assert_eq!(answer["outcome"], "landed");
        assert_eq!(answer["duplicate"], false);
        gateway.child.kill().unwrap(); // SIGKILL, immediately after the 200
        gateway.child.wait().unwrap();
        expected.push(seq);
        let gateway = Gateway::start(dir.path());
        assert_eq!(read(&gateway.base), expected, "after kill -9 number {seq}");
        assert_eq!(
            write(&gateway.base, seq)["code"],
            2002,
            "the sequence is durable too"
        );
    }
}

#[test]
fn sigterm_shuts_down_gracefully() {
    let dir = tempfile::tempdir().unwrap();
    let mut gateway = Gateway::start(dir.path());
    assert_eq!(write(&gateway.base, 1)["outcome"], "landed");
    let pid = gateway.child.id().to_string();
    assert!(
        Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success()
    );
    let status = gateway.child.wait().unwrap();
    assert!(status.success(), "{status:?}");
}

#[test]
fn fault_flags_are_read_from_environment_variables() {
    let dir = tempfile::tempdir().unwrap();
    let secret = "f".repeat(48);
    let secret_file = dir.path().join("faults-secret");
    std::fs::write(&secret_file, format!("{secret}\n")).unwrap();
    let gateway = Gateway::start_with(
        dir.path(),
        &[
            ("CELERIANT_GATEWAY_FAULTS", "true"),
            (
                "CELERIANT_GATEWAY_FAULTS_SECRET_FILE",
                secret_file.to_str().unwrap(),
            ),
            ("CELERIANT_GATEWAY_FAULT_SEED", "9"),
            ("CELERIANT_GATEWAY_FAULT_DROP_AFTER_COMMIT", "0.125"),
            ("CELERIANT_GATEWAY_FAULT_TIMEOUT", "0.25"),
            ("CELERIANT_GATEWAY_FAULT_INFLIGHT", "0.0625"),
            ("CELERIANT_GATEWAY_FAULT_BUSY", "0.5"),
            ("CELERIANT_GATEWAY_FAULT_RESET", "0.03125"),
            // 0 means the default, and the report says which.
            ("CELERIANT_GATEWAY_FAULT_DELAY_MS", "0"),
            ("CELERIANT_GATEWAY_FAULT_RETRY_AFTER_MS", "1500"),
            ("CELERIANT_GATEWAY_FAULT_REJECT_TYPE", "7"),
        ],
    );
    let report: Value = agent()
        .get(&format!("{}/v1/faults", gateway.base))
        .header("celeriant-faults-secret", &secret)
        .call()
        .unwrap()
        .body_mut()
        .read_to_string()
        .map(|text| serde_json::from_str(&text).unwrap())
        .unwrap();
    assert_eq!(report["seed"], 9);
    assert_eq!(
        report["rates"],
        json!({"dropAfterCommit": 0.125, "timeout": 0.25, "inflight": 0.0625, "busy": 0.5,
               "resetBeforeCommit": 0.03125, "delayMs": 5000, "retryAfterMs": 1500, "rejectType": 7})
    );
}

/// The data directory is created 0700 and the store and the session secret 0600, whatever the
/// umask; a store left looser by an older gateway (0755 / 0644) is tightened at the next start.
#[test]
fn the_data_directory_and_the_store_are_private() {
    use std::os::unix::fs::PermissionsExt as _;
    let mode = |p: &Path| std::fs::metadata(p).unwrap().permissions().mode() & 0o777;
    let dir = tempfile::tempdir().unwrap();
    let db = dir.path().join("db");
    let store = db.join("celeriant-gateway.redb");
    {
        let gateway = Gateway::start(dir.path());
        assert_eq!(write(&gateway.base, 1)["outcome"], "landed");
        assert_eq!(mode(&db), 0o700);
        assert_eq!(mode(&store), 0o600);
        assert_eq!(mode(&db.join("session-secret")), 0o600);
    }
    std::fs::set_permissions(&db, std::fs::Permissions::from_mode(0o755)).unwrap();
    std::fs::set_permissions(&store, std::fs::Permissions::from_mode(0o644)).unwrap();
    let gateway = Gateway::start(dir.path());
    assert_eq!((mode(&db), mode(&store)), (0o700, 0o600));
    assert_eq!(
        write(&gateway.base, 1)["duplicate"],
        true,
        "the same store, kept"
    );
}
