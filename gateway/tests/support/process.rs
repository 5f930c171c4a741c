//! The gateway as a real process on 127.0.0.1 (port 0, address read from `--port-file`), and a
//! small blocking HTTP client for it, for the tests that need real sockets: client addresses
//! (the session rate limit), restarts (secret rotation), raw `Host` headers (DNS rebinding),
//! start-up refusals.

use std::io::{Read, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Output, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// A running gateway, killed and reaped on drop.
pub struct Process {
    child: Child,
    /// `http://127.0.0.1:PORT`.
    pub base: String,
    /// `127.0.0.1:PORT`.
    pub addr: String,
    /// With `--faults`: the secret the gateway generated (`--faults-secret-out`) or was given.
    pub faults_secret: Option<String>,
}

/// The header the faults endpoints need.
pub const FAULTS_SECRET_HEADER: &str = "celeriant-faults-secret";

/// The gateway binary with `args`, not started.
pub fn command(args: &[&str]) -> Command {
    let mut command = Command::new(env!("CARGO_BIN_EXE_celeriant-gateway"));
    command.args(args).env("RUST_LOG", "warn");
    // The tests' own environment must not configure the gateway.
    for (key, _) in std::env::vars() {
        if key.starts_with("CELERIANT_GATEWAY_") {
            command.env_remove(key);
        }
    }
    command
}

impl Process {
    /// Starts the gateway on 127.0.0.1:0 with its data in `data` and the extra `args`.
    // The child is waited on by `Drop for Process` (or just below when it fails to start).
    pub fn start(data: &Path, args: &[&str]) -> Process {
        Self::start_logging(data, args, None)
    }

    /// As [`Process::start`], with its log (`RUST_LOG=info`, standard output) written to `log`.
    pub fn start_logged(data: &Path, args: &[&str], log: &Path) -> Process {
        Self::start_logging(data, args, Some(log))
    }

    #[allow(clippy::zombie_processes)]
    fn start_logging(data: &Path, args: &[&str], log: Option<&Path>) -> Process {
        let port_file = data.join("port");
        let _ = std::fs::remove_file(&port_file);
        // With --faults, the generated secret is written next to the port file (unless the
        // test gives a file of its own).
        let secret_file = data.join("faults-secret");
        let faults = args.contains(&"--faults");
        let given = args
            .iter()
            .position(|a| *a == "--faults-secret-file")
            .map(|i| PathBuf::from(args[i + 1]));
        let mut command = command(args);
        if faults && given.is_none() {
            command.arg("--faults-secret-out").arg(&secret_file);
        }
        match log {
            Some(log) => command
                .env("RUST_LOG", "info")
                .stdout(std::fs::File::create(log).unwrap()),
            None => command.stdout(Stdio::null()),
        };
        let mut child = command
            .args(["--listen", "127.0.0.1:0", "--data-dir"])
            .arg(data.join("db"))
            .arg("--port-file")
            .arg(&port_file)
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Ok(addr) = std::fs::read_to_string(&port_file)
                && !addr.is_empty()
            {
                let faults_secret = faults.then(|| {
                    let file = given.clone().unwrap_or_else(|| secret_file.clone());
                    std::fs::read_to_string(file).unwrap().trim_end().to_owned()
                });
                return Process {
                    child,
                    base: format!("http://{addr}"),
                    addr,
                    faults_secret,
                };
            }
            if Instant::now() > deadline || child.try_wait().unwrap().is_some() {
                let _ = child.kill();
                let _ = child.wait();
                panic!("gateway did not start with {args:?}");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Process {
    /// The faults secret (panics unless the gateway runs with `--faults`).
    pub fn faults_secret(&self) -> &str {
        self.faults_secret
            .as_deref()
            .expect("started with --faults")
    }

    /// `FAULTS_SECRET_HEADER: <secret>\r\n`, for raw requests.
    pub fn faults_header_line(&self) -> String {
        format!("{FAULTS_SECRET_HEADER}: {}\r\n", self.faults_secret())
    }

    /// `GET base + path` with the faults secret.
    pub fn faults_get(&self, path: &str) -> Answer {
        let request = agent()
            .get(&format!("{}{path}", self.base))
            .header(FAULTS_SECRET_HEADER, self.faults_secret());
        answer(request.call().unwrap())
    }

    /// `POST base + path` with a JSON body and the faults secret.
    pub fn faults_post(&self, path: &str, body: &Value) -> Answer {
        let request = agent()
            .post(&format!("{}{path}", self.base))
            .header("content-type", "application/json")
            .header(FAULTS_SECRET_HEADER, self.faults_secret());
        answer(request.send(serde_json::to_vec(body).unwrap()).unwrap())
    }

    /// The gateway's process id.
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGTERM, then waits for the gateway to finish (graceful shutdown); panics unless it
    /// exits with status 0 within 20 s.
    pub fn stop(&mut self) {
        let pid = self.pid().to_string();
        let sent = Command::new("kill").args(["-TERM", &pid]).status().unwrap();
        assert!(sent.success());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                assert!(status.success(), "{status:?}");
                return;
            }
            assert!(Instant::now() < deadline, "the gateway did not stop");
            std::thread::sleep(Duration::from_millis(20));
        }
    }
}

impl Drop for Process {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// Runs the gateway with `args` and waits for it to exit (for start-up refusals), at most 20 s.
pub fn run_to_exit(data: &Path, args: &[&str]) -> Output {
    let mut child = command(args)
        .arg("--data-dir")
        .arg(data)
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while child.try_wait().unwrap().is_none() {
        if Instant::now() > deadline {
            let _ = child.kill();
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    child.wait_with_output().unwrap()
}

/// One answer.
#[derive(Debug)]
pub struct Answer {
    pub status: u16,
    pub headers: Vec<(String, String)>,
    pub json: Value,
}

impl Answer {
    pub fn header(&self, name: &str) -> Option<&str> {
        self.headers
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v.as_str())
    }
    pub fn code(&self) -> u64 {
        self.json["code"].as_u64().unwrap_or(0)
    }
}

fn agent() -> ureq::Agent {
    ureq::Agent::config_builder()
        .http_status_as_error(false)
        .build()
        .into()
}

fn answer(mut response: ureq::http::Response<ureq::Body>) -> Answer {
    let status = response.status().as_u16();
    let headers = response
        .headers()
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_str().unwrap_or("").to_owned()))
        .collect();
    let text = response.body_mut().read_to_string().unwrap_or_default();
    Answer {
        status,
        headers,
        json: serde_json::from_str(&text).unwrap_or(Value::Null),
    }
}

/// `POST base + path` with a JSON body and, when given, a bearer token (and its proof, when a
/// loaded device holds the token).
pub fn post(base: &str, path: &str, token: Option<&str>, body: &Value) -> Answer {
    let mut request = agent()
        .post(&format!("{base}{path}"))
        .header("content-type", "application/json");
    let bytes = serde_json::to_vec(body).unwrap();
    if let Some(token) = token {
        request = request.header("authorization", &format!("Bearer {token}"));
        if let Some(proof) = super::device::proof_for(token, "POST", path, &bytes) {
            request = request.header("dpop", &proof);
        }
    }
    answer(request.send(bytes).unwrap())
}

/// `method base + path` with exactly these headers (no proof is added) and `body`.
pub fn send_with(
    method: &str,
    base: &str,
    path: &str,
    headers: &[(&str, &str)],
    body: &[u8],
) -> Answer {
    let request = ureq::http::Request::builder()
        .method(method)
        .uri(format!("{base}{path}"));
    let request = headers
        .iter()
        .fold(request, |r, (name, value)| r.header(*name, *value));
    let response = if method == "GET" {
        agent().run(request.body(()).unwrap())
    } else {
        agent().run(request.body(body.to_vec()).unwrap())
    };
    answer(response.unwrap())
}

/// `GET base + path` with, when given, a bearer token.
pub fn get(base: &str, path: &str, token: Option<&str>) -> Answer {
    let mut request = agent().get(&format!("{base}{path}"));
    if let Some(token) = token {
        request = request.header("authorization", &format!("Bearer {token}"));
        if let Some(proof) = super::device::proof_for(token, "GET", path, b"") {
            request = request.header("dpop", &proof);
        }
    }
    answer(request.call().unwrap())
}

/// Sends `request` (a raw HTTP/1.1 request, `Connection: close`) to `addr` and returns the raw
/// answer: for headers no HTTP client lets a test set, such as a foreign `Host`.
pub fn raw(addr: &str, request: &str) -> String {
    let mut stream = std::net::TcpStream::connect(addr).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    stream.write_all(request.as_bytes()).unwrap();
    let mut out = String::new();
    let _ = stream.read_to_string(&mut out);
    out
}

/// A temporary directory for one gateway's data.
/// A port free now on 127.0.0.1, for a listener that has no port file (`--metrics-listen`,
/// nginx's). Another process may take it before it is used: a test that binds it fails at
/// start, never silently.
pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

pub fn data_dir() -> tempfile::TempDir {
    tempfile::tempdir().unwrap()
}

/// The path of a test key file.
pub fn key_file(name: &str) -> PathBuf {
    super::device::keys_dir().join(name)
}

/// `method base + path` with a raw `Authorization` value (e.g. `Operator <secret>`) and, when
/// given, a JSON body.
pub fn with_authorization(
    method: &str,
    base: &str,
    path: &str,
    authorization: Option<&str>,
    body: Option<&Value>,
) -> Answer {
    let url = format!("{base}{path}");
    let mut request = ureq::http::Request::builder().method(method).uri(&url);
    if let Some(value) = authorization {
        request = request.header("authorization", value);
    }
    let response = match body {
        Some(body) => {
            let request = request
                .header("content-type", "application/json")
                .body(serde_json::to_vec(body).unwrap())
                .unwrap();
            agent().run(request)
        }
        None => agent().run(request.body(()).unwrap()),
    };
    answer(response.unwrap())
}
