//! The gateway behind Debian's nginx with TLS, as `deploy/nginx/celeriant-gateway.conf` sets it
//! up: a certificate made here (openssl), nginx started here on its own prefix, pid and logs in
//! a temporary directory on a free 127.0.0.1 port, curl as the client. Over TLS a device opens
//! a session, writes, reads and holds a change stream that receives the change promptly
//! (nothing buffers it); the gateway counts each client's own address (`--trusted-proxy`), so
//! one client running into its per-address rate leaves another untouched, and no client picks
//! its address by sending `Forwarded` or `X-Forwarded-For` itself; nginx keeps its
//! connections to the gateway alive (far fewer connections than requests); `/metrics` is not
//! reachable through the proxy. Needs `nginx`, `openssl` and `curl` (scripts/setup.sh).

mod support;

use std::io::{BufRead, BufReader};
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::app::{TYPE, write_by};
use support::device::{Device, fresh_nonce, proof_for};
use support::process::{Process, data_dir, free_port};

const HOST: &str = "gateway.test";
const AGGREGATE: &str = "3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e0099";
const TEMPLATE: &str = include_str!("../../deploy/nginx/celeriant-gateway.conf");

/// nginx, stopped (SIGQUIT, then SIGKILL) and reaped on drop: only the master this test
/// started, by its pid; its workers exit with it.
struct Nginx {
    child: Child,
}

impl Drop for Nginx {
    fn drop(&mut self) {
        let pid = self.child.id().to_string();
        let _ = Command::new("kill").args(["-QUIT", &pid]).status();
        let deadline = Instant::now() + Duration::from_secs(5);
        while self.child.try_wait().ok().flatten().is_none() && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(20));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn nginx_binary() -> String {
    for candidate in ["/usr/sbin/nginx", "/usr/bin/nginx"] {
        if Path::new(candidate).exists() {
            return candidate.into();
        }
    }
    panic!("nginx is not installed: run `bash scripts/setup.sh` (it installs Debian's nginx)");
}

/// A self-signed certificate for [`HOST`] in `dir`: (certificate, key).
fn certificate(dir: &Path) -> (String, String) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let status = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:P-256",
        ])
        .args(["-nodes", "-days", "1", "-subj", &format!("/CN={HOST}")])
        .args(["-addext", &format!("subjectAltName=DNS:{HOST}")])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .unwrap();
    assert!(status.success(), "openssl could not make a certificate");
    let path = |p: &Path| p.to_str().unwrap().to_owned();
    (path(&cert), path(&key))
}

/// Starts nginx in front of `upstream` with the repository's server file, on a free port.
fn start_nginx(dir: &Path, upstream: &str) -> (Nginx, u16) {
    let (cert, key) = certificate(dir);
    let port = free_port();
    let server = TEMPLATE
        .replace("@LISTEN@", &format!("127.0.0.1:{port}"))
        .replace("@SERVER_NAME@", HOST)
        .replace("@CERT@", &cert)
        .replace("@KEY@", &key)
        .replace("@UPSTREAM@", upstream);
    assert!(!server.contains('@'), "a placeholder is left: {server}");
    let d = dir.to_str().unwrap();
    std::fs::write(dir.join("celeriant-gateway.conf"), server).unwrap();
    // The main configuration is the test's own (paths in the temporary directory); a
    // deployment uses Debian's /etc/nginx/nginx.conf, which includes conf.d/*.conf.
    // Run as root (the CI container), nginx gives its workers to `nobody`: they must reach
    // the temporary directory.
    let root = rustix::process::geteuid().is_root();
    if root {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(dir, std::fs::Permissions::from_mode(0o755)).unwrap();
    }
    let user = if root { "user nobody nogroup;" } else { "" };
    let main = format!(
        "{user}\ndaemon off;\nworker_processes 1;\npid {d}/nginx.pid;\n\
         error_log {d}/error.log warn;\nevents {{ worker_connections 256; }}\n\
         http {{\n  access_log {d}/access.log;\n  client_body_temp_path {d}/body;\n\
         proxy_temp_path {d}/proxy;\n  fastcgi_temp_path {d}/fastcgi;\n\
         uwsgi_temp_path {d}/uwsgi;\n  scgi_temp_path {d}/scgi;\n\
         include {d}/celeriant-gateway.conf;\n}}\n"
    );
    std::fs::write(dir.join("nginx.conf"), main).unwrap();
    let child = Command::new(nginx_binary())
        .args([
            "-p",
            d,
            "-c",
            &format!("{d}/nginx.conf"),
            "-e",
            &format!("{d}/error.log"),
        ])
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let mut nginx = Nginx { child };
    let deadline = Instant::now() + Duration::from_secs(10);
    while std::net::TcpStream::connect(("127.0.0.1", port)).is_err() {
        if let Some(status) = nginx.child.try_wait().unwrap() {
            let log = std::fs::read_to_string(dir.join("error.log")).unwrap_or_default();
            panic!("nginx exited ({status}): {log}");
        }
        assert!(Instant::now() < deadline, "nginx did not start");
        std::thread::sleep(Duration::from_millis(20));
    }
    (nginx, port)
}

/// curl over TLS to nginx, trusting only the test's certificate, from source address `from`.
fn curl(dir: &Path, port: u16, from: &str) -> Command {
    let mut command = Command::new("curl");
    command
        .args(["-sS", "--max-time", "20", "--interface", from])
        .args(["--resolve", &format!("{HOST}:{port}:127.0.0.1")])
        .arg("--cacert")
        .arg(dir.join("cert.pem"));
    command
}

/// One request through the proxy: (status, JSON body).
fn call(
    dir: &Path,
    port: u16,
    from: &str,
    method: &str,
    path: &str,
    token: Option<&str>,
    body: Option<&Value>,
) -> (u16, Value) {
    let mut command = curl(dir, port, from);
    command.args(["-X", method, "-w", "\n%{http_code}"]);
    if let Some(token) = token {
        command.args(["-H", &format!("authorization: Bearer {token}")]);
        // Every request under a session carries its proof (`--proofs required`, the default).
        let sent = body.map(Value::to_string).unwrap_or_default();
        let proof = proof_for(token, method, path, sent.as_bytes()).expect("a loaded device");
        command.args(["-H", &format!("dpop: {proof}")]);
    }
    if let Some(body) = body {
        command.args(["-H", "content-type: application/json", "--data-binary"]);
        command.arg(body.to_string());
    }
    let out = command
        .arg(format!("https://{HOST}:{port}{path}"))
        .output()
        .unwrap();
    assert!(
        out.status.success(),
        "curl: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    let text = String::from_utf8(out.stdout).unwrap();
    let (body, status) = text.rsplit_once('\n').unwrap();
    (
        status.trim().parse().unwrap(),
        serde_json::from_str(body).unwrap_or(Value::Null),
    )
}

#[test]
fn a_device_syncs_over_tls_through_nginx_and_the_gateway_sees_each_client() {
    let dir = data_dir();
    let metrics = format!("127.0.0.1:{}", free_port());
    let gw = Process::start(
        dir.path(),
        &[
            "--metrics-listen",
            &metrics,
            "--trusted-proxy",
            "127.0.0.1",
            "--public-host",
            HOST,
            // A small per-address budget of reads, to show whose address the gateway counts.
            "--rate-per-ip",
            "1",
            "--burst-per-ip",
            "6",
        ],
    );
    let nginx_dir = tempfile::tempdir().unwrap();
    let (_nginx, port) = start_nginx(nginx_dir.path(), &gw.addr);
    let d = nginx_dir.path();
    let (a, b) = ("127.0.0.2", "127.0.0.3");

    // A session, a write and a read over TLS.
    let device = Device::a();
    let body = device.session_body(fresh_nonce());
    let (status, session) = call(d, port, a, "POST", "/v1/session", None, Some(&body));
    assert_eq!(status, 200, "{session}");
    let token = session["token"].as_str().unwrap().to_owned();
    let write = |seqs: &[u64]| {
        let body = write_by(&device.client_id, TYPE, AGGREGATE, seqs);
        call(d, port, a, "POST", "/v1/write", Some(&token), Some(&body))
    };
    let (status, landed) = write(&[1]);
    assert_eq!((status, landed["outcome"].as_str()), (200, Some("landed")));
    let events = format!("/v1/aggregates/{TYPE}/{AGGREGATE}/events");
    let (status, read) = call(d, port, a, "GET", &events, Some(&token), None);
    assert_eq!(status, 200, "{read}");
    assert_eq!(read["batches"][0]["events"][0]["clientSeq"], 1);

    // A change stream through the proxy: `ready`, then the change of a write made after it,
    // within a second (a buffering proxy would hold it until the next heartbeat, 15 s).
    let watch = json!({"aggregates": [{"typeId": TYPE, "id": AGGREGATE}]});
    let mut stream = curl(d, port, a)
        .args(["-N", "--max-time", "30", "-X", "POST"])
        .args(["-H", &format!("authorization: Bearer {token}")])
        .args([
            "-H",
            &format!(
                "dpop: {}",
                proof_for(&token, "POST", "/v1/watch", watch.to_string().as_bytes()).unwrap()
            ),
        ])
        .args(["-H", "content-type: application/json", "--data-binary"])
        .arg(watch.to_string())
        .arg(format!("https://{HOST}:{port}/v1/watch"))
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let (lines, received) = mpsc::channel();
    let out = stream.stdout.take().unwrap();
    std::thread::spawn(move || {
        for line in BufReader::new(out).lines().map_while(Result::ok) {
            if lines.send((Instant::now(), line)).is_err() {
                return;
            }
        }
    });
    let wait_for = |event: &str| -> Instant {
        loop {
            let (at, line) = received
                .recv_timeout(Duration::from_secs(10))
                .unwrap_or_else(|_| panic!("no `{event}` event through the proxy"));
            if line == format!("event: {event}") {
                return at;
            }
        }
    };
    wait_for("ready");
    let sent = Instant::now();
    assert_eq!(write(&[2]).0, 200);
    let changed = wait_for("changed");
    let latency = changed.saturating_duration_since(sent);
    let _ = stream.kill();
    let _ = stream.wait();
    assert!(
        latency < Duration::from_secs(1),
        "the change took {latency:?}"
    );

    // Client a runs into its per-address read rate; client b, through the same nginx, does not.
    let refused = (0..20).find_map(|_| {
        let (status, body) = call(d, port, a, "GET", &events, Some(&token), None);
        (status == 429).then_some(body)
    });
    let refused = refused.expect("client a was never refused");
    assert_eq!(refused["code"], 42910, "{refused}");
    let (status, body) = call(d, port, b, "GET", &events, Some(&token), None);
    assert_eq!(status, 200, "client b was counted with client a: {body}");
    // A client cannot choose its address by header through nginx: b naming a new client in
    // `X-Forwarded-For` (replaced by nginx; the only header the gateway reads by default) and
    // `Forwarded` (never read; nginx removes it too) is still counted as b, until b too runs
    // out of its rate.
    let spoofed = (0..20).find(|i| {
        let mut command = curl(d, port, b);
        command
            .args(["-H", &format!("forwarded: for=198.51.100.{i}")])
            .args(["-H", &format!("x-forwarded-for: 198.51.100.{i}")])
            .args(["-o", "/dev/null", "-w", "%{http_code}"]);
        command.args(["-H", &format!("authorization: Bearer {token}")]);
        let proof = proof_for(&token, "GET", &events, b"").unwrap();
        command.args(["-H", &format!("dpop: {proof}")]);
        let out = command
            .arg(format!("https://{HOST}:{port}{events}"))
            .output()
            .unwrap();
        String::from_utf8_lossy(&out.stdout) == "429"
    });
    assert!(
        spoofed.is_some_and(|i| i <= 8),
        "client b chose its address by header through nginx: {spoofed:?}"
    );

    // A Host other than the public host is refused by the gateway (421) even through nginx.
    let out = curl(d, port, b)
        .args([
            "-o",
            "/dev/null",
            "-w",
            "%{http_code}",
            "-H",
            "host: evil.example",
        ])
        .arg(format!("https://{HOST}:{port}/healthz"))
        .output()
        .unwrap();
    assert_eq!(String::from_utf8_lossy(&out.stdout), "421");

    // /metrics is not reachable through the proxy.
    let (status, _) = call(d, port, b, "GET", "/metrics", None, None);
    assert_eq!(status, 404);

    // Keep-alive upstream: the gateway saw far fewer connections than requests (each curl run
    // above is a new TLS connection to nginx; nginx reuses its connections to the gateway).
    let scrape = support::process::raw(
        &metrics,
        "GET /metrics HTTP/1.1\r\nhost: 127.0.0.1\r\nconnection: close\r\n\r\n",
    );
    let sample = |name: &str| -> f64 {
        scrape
            .lines()
            .filter(|l| l.starts_with(name))
            .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum()
    };
    let (connections, requests) = (
        sample("celeriant_gateway_connections_accepted_total"),
        sample("celeriant_gateway_requests_total{"),
    );
    assert!(requests >= 10.0, "{scrape}");
    assert!(
        connections * 3.0 <= requests,
        "{connections} connections for {requests} requests: no keep-alive upstream"
    );
    eprintln!(
        "nginx_proxy: change through the proxy in {latency:?}; {requests} requests over \
         {connections} upstream connections"
    );
}
