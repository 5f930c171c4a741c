//! The legitimate device of issue 26's attack tests, in one place so every attack measures
//! the same thing: "it keeps at least 90 % of its writes, reads, watches and health checks
//! answered normally, and the test prints its figures".
//!
//! A [`Legit`] device works from its own loopback source address, one request per round, the
//! kinds in turn: a write that must land, a read of an aggregate (200, and the exact page
//! length when one is given), a change stream opened until its `ready` event (then closed;
//! its place is freed when the gateway sees the connection end, which was at once when tried
//! with a cap of one stream per address, and at the stream's next heartbeat at the latest: a
//! gateway whose caps closed streams could reach runs with short heartbeats), and a
//! `/healthz`. Without a
//! session it writes as a fixed client id (`--auth none`); with one, every request carries the
//! token and its `DPoP` proof, as a real device's do. Nothing here panics on a refused or
//! missing answer: it is counted in a [`Tally`], printed per kind, and
//! [`Tally::assert_each_kind`] asserts the 90 % per kind (and a minimum asked of each, so a
//! kind that was never tried cannot pass).

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::json;

use super::app::TYPE;
use super::device::{Device, fresh_nonce};
use super::hostile::{Raw, ask};

/// The kinds of a device's requests, in the order of [`Tally`]'s counts.
pub const KINDS: [&str; 4] = ["write", "read", "watch", "healthz"];
pub const WRITE: usize = 0;
pub const READ: usize = 1;
pub const WATCH: usize = 2;
pub const HEALTHZ: usize = 3;

/// The legitimate device's figures: answered normally / asked, per kind, and what the
/// others got (status and code), for the message of a failed assertion.
#[derive(Default, Debug, Clone)]
pub struct Tally {
    pub asked: [u32; 4],
    pub ok: [u32; 4],
    pub failures: Vec<String>,
}

impl Tally {
    /// Counts one request of `kind`; `what` says how it went when it was not normal.
    pub fn record(&mut self, kind: usize, ok: bool, what: impl FnOnce() -> String) {
        self.asked[kind] += 1;
        if ok {
            self.ok[kind] += 1;
        } else {
            self.failures.push(format!("{}: {}", KINDS[kind], what()));
        }
    }

    pub fn total(&self) -> (u32, u32) {
        (self.ok.iter().sum(), self.asked.iter().sum())
    }

    /// One line: the total and each kind's figures, under `what` (the attack).
    pub fn print(&self, what: &str) {
        let parts: Vec<String> = (0..4)
            .map(|k| {
                format!(
                    "{} {}/{} ({:.0} %)",
                    KINDS[k],
                    self.ok[k],
                    self.asked[k],
                    100.0 * f64::from(self.ok[k]) / f64::from(self.asked[k].max(1))
                )
            })
            .collect();
        let (ok, asked) = self.total();
        println!(
            "{what}: legitimate device answered normally {ok}/{asked} ({:.0} %): {}; not \
             normal: {:?}",
            100.0 * f64::from(ok) / f64::from(asked.max(1)),
            parts.join(", "),
            self.failures
        );
    }

    /// Each kind asked at least `at_least` times and answered normally at least 90 % of them.
    pub fn assert_each_kind(&self, at_least: u32) {
        for (k, kind) in KINDS.iter().enumerate() {
            assert!(
                self.asked[k] >= at_least,
                "{kind}: asked only {} times (at least {at_least}): {self:?}",
                self.asked[k]
            );
            assert!(
                self.ok[k] * 10 >= self.asked[k] * 9,
                "{kind}: {} of {} answered normally, under 90 %: {self:?}",
                self.ok[k],
                self.asked[k]
            );
        }
    }
}

/// A session opened from `source` for `device` (a fresh nonce), within 5 s.
pub fn session_from(source: Ipv4Addr, addr: &str, device: &Device) -> Raw {
    let body = device.session_body(fresh_nonce()).to_string();
    let request = format!(
        "POST /v1/session HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    ask(source, addr, request.as_bytes(), Duration::from_secs(5))
}

/// A legitimate device on its own source address.
pub struct Legit {
    pub source: Ipv4Addr,
    pub addr: String,
    /// Its own aggregate: written, watched, and read unless [`Legit::read`] says otherwise.
    pub id: String,
    client: String,
    session: Option<(Device, String)>,
    /// Another aggregate to read, and the exact length its page must have.
    pub read: Option<(String, usize)>,
    /// How long each request may take.
    pub wait: Duration,
    pub tally: Tally,
    /// The client sequence of its last write (set it past the writes it made before).
    pub seq: u64,
    round: u64,
}

/// One round: its kind, whether it went normally, how long it took.
#[derive(Debug, Clone, Copy)]
pub struct Outcome {
    pub kind: usize,
    pub ok: bool,
    pub elapsed: Duration,
}

impl Legit {
    /// A device without a session (`--auth none`), writing as `client`.
    pub fn new(source: Ipv4Addr, addr: &str, id: &str, client: &str) -> Legit {
        Legit {
            source,
            addr: addr.to_owned(),
            id: id.to_owned(),
            client: client.to_owned(),
            session: None,
            read: None,
            wait: Duration::from_secs(3),
            tally: Tally::default(),
            seq: 0,
            round: 0,
        }
    }

    /// A device with a session: `token` was issued to `device`; its writes start after
    /// client sequence `seq` (the ones it made before).
    pub fn with_session(
        source: Ipv4Addr,
        addr: &str,
        id: &str,
        device: &Device,
        token: &str,
        seq: u64,
    ) -> Legit {
        let mut legit = Legit::new(source, addr, id, &device.client_id);
        legit.session = Some((device.clone(), token.to_owned()));
        legit.seq = seq;
        legit
    }

    /// `Authorization` and `DPoP` lines for `method target` with `body`, when in a session.
    fn auth(&self, method: &str, target: &str, body: &[u8]) -> String {
        match &self.session {
            Some((device, token)) => format!(
                "Authorization: Bearer {token}\r\nDPoP: {}\r\n",
                device.proof(method, target, token, body)
            ),
            None => String::new(),
        }
    }

    /// The next round (write, read, watch, health check in turn), counted in the tally.
    pub fn round(&mut self) -> Outcome {
        let kind = (self.round % 4) as usize;
        self.round += 1;
        let started = Instant::now();
        let (ok, what) = match kind {
            WRITE => self.write(),
            READ => self.read(),
            WATCH => self.watch(),
            _ => {
                let request = format!(
                    "GET /healthz HTTP/1.1\r\nHost: {}\r\nConnection: close\r\n\r\n",
                    self.addr
                );
                let answer = ask(self.source, &self.addr, request.as_bytes(), self.wait);
                (answer.status == 200, brief(&answer))
            }
        };
        self.tally.record(kind, ok, || what);
        Outcome {
            kind,
            ok,
            elapsed: started.elapsed(),
        }
    }

    /// Rounds until `rounds` are done, one every `every` (or back to back when they take
    /// longer).
    pub fn rounds(&mut self, rounds: u64, every: Duration) {
        for _ in 0..rounds {
            let tick = Instant::now();
            self.round();
            std::thread::sleep(every.saturating_sub(tick.elapsed()));
        }
    }

    /// Works on a thread of its own, one round every `every`, until [`Running::stop`] and
    /// at least `at_least` rounds (for an attack whose length is not known in advance).
    pub fn spawn(mut self, every: Duration, at_least: u64) -> Running {
        let stop = Arc::new(AtomicBool::new(false));
        let done = Arc::new(AtomicU64::new(0));
        let thread = std::thread::spawn({
            let (stop, done) = (stop.clone(), done.clone());
            move || {
                while done.load(Ordering::Relaxed) < at_least || !stop.load(Ordering::Relaxed) {
                    let tick = Instant::now();
                    self.round();
                    done.fetch_add(1, Ordering::Relaxed);
                    std::thread::sleep(every.saturating_sub(tick.elapsed()));
                }
                self
            }
        });
        Running { stop, done, thread }
    }

    /// A write of one event (a new client sequence each time, landed or not, so a write
    /// that landed late is never repeated) that must land.
    fn write(&mut self) -> (bool, String) {
        self.seq += 1;
        let body = json!({"clientId": self.client, "writes": [{"aggregate": {"typeId": TYPE,
            "id": self.id}, "allowCreate": true, "events": [{"clientSeq": self.seq,
            "timestamp": 1_700_000_000_000u64, "type": 3, "data": "c3luYw=="}]}]})
        .to_string();
        let request = format!(
            "POST /v1/write HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n{}\
             Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
            self.addr,
            self.auth("POST", "/v1/write", body.as_bytes()),
            body.len()
        );
        let answer = ask(self.source, &self.addr, request.as_bytes(), self.wait);
        let json = answer.json();
        (
            answer.status == 200 && json["outcome"] == "landed" && json["duplicate"] != true,
            brief(&answer),
        )
    }

    fn read(&mut self) -> (bool, String) {
        let (id, length) = match &self.read {
            Some((id, length)) => (id.clone(), Some(*length)),
            None => (self.id.clone(), None),
        };
        let target = format!("/v1/aggregates/{TYPE}/{id}/events?from=1");
        let request = format!(
            "GET {target} HTTP/1.1\r\nHost: {}\r\n{}Connection: close\r\n\r\n",
            self.addr,
            self.auth("GET", &target, b"")
        );
        let answer = ask(self.source, &self.addr, request.as_bytes(), self.wait);
        let whole = length.is_none_or(|n| answer.body.len() == n);
        (answer.status == 200 && whole, brief(&answer))
    }

    /// A change stream on its own aggregate, from its address, until the `ready` event.
    fn watch(&mut self) -> (bool, String) {
        let body = json!({"aggregates": [{"typeId": TYPE, "id": self.id}]}).to_string();
        let request = format!(
            "POST /v1/watch HTTP/1.1\r\nHost: {}\r\nContent-Type: application/json\r\n{}\
             Content-Length: {}\r\n\r\n{body}",
            self.addr,
            self.auth("POST", "/v1/watch", body.as_bytes()),
            body.len()
        );
        let (head, ready, rest) =
            until_ready(self.source, &self.addr, request.as_bytes(), self.wait);
        let status = head.split(' ').nth(1).unwrap_or("none").to_owned();
        (
            head.starts_with("HTTP/1.1 200") && ready,
            format!("{status} ready {ready} {rest}"),
        )
    }
}

/// A device working on its own thread ([`Legit::spawn`]).
pub struct Running {
    stop: Arc<AtomicBool>,
    done: Arc<AtomicU64>,
    thread: JoinHandle<Legit>,
}

impl Running {
    /// Rounds done so far.
    pub fn rounds_done(&self) -> u64 {
        self.done.load(Ordering::Relaxed)
    }

    /// Stops it (after its current round, and its minimum of rounds): the device and its tally.
    pub fn stop(self) -> Legit {
        self.stop.store(true, Ordering::Relaxed);
        self.thread.join().unwrap()
    }
}

/// The status and code of an answer, for the failures.
fn brief(answer: &Raw) -> String {
    format!("{} {}", answer.status, answer.code())
}

/// Sends a watch `request` from `source` and reads until the `ready` event (or a refusal, the
/// connection's end or `wait`): the answer's status line, whether `ready` came, and the start
/// of a refusal's body (its code). The stream is closed on return.
fn until_ready(
    source: Ipv4Addr,
    addr: &str,
    request: &[u8],
    wait: Duration,
) -> (String, bool, String) {
    let started = Instant::now();
    let none = || (String::new(), false, String::new());
    let target: SocketAddr = addr.parse().unwrap();
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    if socket.bind(&SocketAddr::from((source, 0)).into()).is_err()
        || socket.connect_timeout(&target.into(), wait).is_err()
    {
        return none();
    }
    let mut stream: TcpStream = socket.into();
    if stream.write_all(request).is_err() {
        return none();
    }
    let mut data = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        let text = String::from_utf8_lossy(&data).to_string();
        let status = text.lines().next().unwrap_or("").to_owned();
        let body = text.split_once("\r\n\r\n").map(|(_, body)| body.to_owned());
        if text.contains("event: ready") {
            return (status, true, String::new());
        }
        let left = (started + wait).saturating_duration_since(Instant::now());
        // A refusal: its body (a few dozen bytes, in the first reads) for its code.
        if let Some(body) = &body
            && !status.starts_with("HTTP/1.1 200")
            && (body.contains('}') || left.is_zero())
        {
            return (status, false, body.chars().take(40).collect());
        }
        if left.is_zero() {
            return (status, false, String::new());
        }
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return (status, false, body.unwrap_or_default()),
            Ok(n) => data.extend_from_slice(&chunk[..n]),
        }
    }
}
