//! Hostile clients for the tests of issue 15: raw HTTP/1.1 over real sockets, each exchange
//! with a deadline (a gateway that never answers fails the test instead of hanging it),
//! connections from other loopback addresses (127.0.0.0/8 is all loopback on Linux, so one
//! test can be several client addresses), the gateway's resident memory, and root for a tmpfs.
//! For issue 26: clients with the smallest receive buffer (a reader that stops reading fills it
//! at once) and an exchange that counts a missing answer instead of panicking ([`ask`]), for
//! the figures of a device measured during an attack.

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use serde_json::Value;

/// One answer read off a socket.
#[derive(Debug, Clone)]
pub struct Raw {
    /// The status, 0 when the connection closed without one.
    pub status: u16,
    /// The status line and headers.
    pub head: String,
    /// The body (by `Content-Length`).
    pub body: Vec<u8>,
    /// How long the exchange took.
    pub elapsed: Duration,
}

impl Raw {
    /// The body as JSON (`Null` when it is not).
    pub fn json(&self) -> Value {
        serde_json::from_slice(&self.body).unwrap_or(Value::Null)
    }

    /// The protocol code of the body, 0 when there is none.
    pub fn code(&self) -> u64 {
        self.json()["code"].as_u64().unwrap_or(0)
    }

    /// A header's value (case-insensitive name).
    pub fn header(&self, name: &str) -> Option<String> {
        self.head.lines().skip(1).find_map(|line| {
            let (k, v) = line.split_once(':')?;
            k.trim()
                .eq_ignore_ascii_case(name)
                .then(|| v.trim().to_owned())
        })
    }
}

/// A connection to `addr` from the loopback address `source`.
pub fn connect_from(source: Ipv4Addr, addr: &str) -> TcpStream {
    let target: SocketAddr = addr.parse().unwrap();
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.bind(&SocketAddr::from((source, 0)).into()).unwrap();
    socket.connect(&target.into()).unwrap();
    socket.into()
}

/// A connection from `source` whose receive buffer is as small as the kernel allows.
pub fn small_buffer_from(source: Ipv4Addr, addr: &str) -> TcpStream {
    let target: SocketAddr = addr.parse().unwrap();
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(1024).unwrap();
    socket.bind(&SocketAddr::from((source, 0)).into()).unwrap();
    socket.connect(&target.into()).unwrap();
    socket.into()
}

/// Sends `request` from `source` and reads one answer within `wait`; status 0 when there was
/// none in time (or the connection failed): the measurements count it, they do not panic.
pub fn ask(source: Ipv4Addr, addr: &str, request: &[u8], wait: Duration) -> Raw {
    let started = Instant::now();
    let none = |started: Instant| Raw {
        status: 0,
        head: String::new(),
        body: Vec::new(),
        elapsed: started.elapsed(),
    };
    let target: SocketAddr = addr.parse().unwrap();
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    if socket.bind(&SocketAddr::from((source, 0)).into()).is_err()
        || socket.connect_timeout(&target.into(), wait).is_err()
    {
        return none(started);
    }
    let mut stream: TcpStream = socket.into();
    if stream.write_all(request).is_err() {
        return none(started);
    }
    let mut data = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        if let Some(end) = data.windows(4).position(|w| w == b"\r\n\r\n") {
            let head = String::from_utf8_lossy(&data[..end]).to_string();
            let length: usize = head
                .lines()
                .find_map(|l| {
                    let (k, v) = l.split_once(':')?;
                    k.trim()
                        .eq_ignore_ascii_case("content-length")
                        .then(|| v.trim().parse().ok())?
                })
                .unwrap_or(0);
            if data.len() >= end + 4 + length {
                return Raw {
                    status: head
                        .split(' ')
                        .nth(1)
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(0),
                    body: data[end + 4..end + 4 + length].to_vec(),
                    head,
                    elapsed: started.elapsed(),
                };
            }
        }
        let left = (started + wait).saturating_duration_since(Instant::now());
        if left.is_zero() {
            return none(started);
        }
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return none(started),
            Ok(n) => data.extend_from_slice(&chunk[..n]),
        }
    }
}

/// Reads one answer from `stream` within `wait`: the head, then `Content-Length` bytes of
/// body. A connection closed (or reset) before a status line gives status 0.
pub fn read_answer(stream: &mut TcpStream, wait: Duration) -> Raw {
    let started = Instant::now();
    let deadline = started + wait;
    let mut data = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    let mut head_end = None;
    let mut needed = None;
    loop {
        if let Some(end) = head_end
            && let Some(len) = needed
            && data.len() >= end + len
        {
            break;
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            panic!(
                "no complete answer within {wait:?}: {:?}",
                String::from_utf8_lossy(&data)
            );
        }
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => data.extend_from_slice(&chunk[..n]),
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                panic!(
                    "no complete answer within {wait:?}: {:?}",
                    String::from_utf8_lossy(&data)
                )
            }
            Err(_) => break, // reset
        }
        if head_end.is_none()
            && let Some(at) = data.windows(4).position(|w| w == b"\r\n\r\n")
        {
            head_end = Some(at + 4);
            let head = String::from_utf8_lossy(&data[..at]).to_string();
            needed = Some(
                head.lines()
                    .find_map(|l| {
                        let (k, v) = l.split_once(':')?;
                        k.trim()
                            .eq_ignore_ascii_case("content-length")
                            .then(|| v.trim().parse().ok())?
                    })
                    .unwrap_or(0),
            );
        }
    }
    let end = head_end.unwrap_or(data.len());
    let head = String::from_utf8_lossy(&data[..end]).trim_end().to_owned();
    let status = head
        .split(' ')
        .nth(1)
        .and_then(|s| s.parse().ok())
        .filter(|_| head.starts_with("HTTP/1."))
        .unwrap_or(0);
    let body_end = (end + needed.unwrap_or(0)).min(data.len());
    Raw {
        status,
        head,
        body: data[end..body_end].to_vec(),
        elapsed: started.elapsed(),
    }
}

/// Every answer on `stream` until the peer closes it (within `wait`), in order: for pipelined
/// requests, whose answers may arrive in one read.
pub fn read_answers(stream: &mut TcpStream, wait: Duration) -> Vec<Raw> {
    let started = Instant::now();
    let mut data = Vec::new();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let left = (started + wait).saturating_duration_since(Instant::now());
        assert!(!left.is_zero(), "not closed within {wait:?}");
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => break,
            Ok(n) => data.extend_from_slice(&chunk[..n]),
        }
    }
    let mut answers = Vec::new();
    let mut rest = &data[..];
    while let Some(at) = rest.windows(4).position(|w| w == b"\r\n\r\n") {
        let head = String::from_utf8_lossy(&rest[..at]).to_string();
        let length: usize = head
            .lines()
            .find_map(|l| {
                let (k, v) = l.split_once(':')?;
                k.trim()
                    .eq_ignore_ascii_case("content-length")
                    .then(|| v.trim().parse().ok())?
            })
            .unwrap_or(0);
        let end = (at + 4 + length).min(rest.len());
        answers.push(Raw {
            status: head
                .split(' ')
                .nth(1)
                .and_then(|s| s.parse().ok())
                .unwrap_or(0),
            head,
            body: rest[at + 4..end].to_vec(),
            elapsed: started.elapsed(),
        });
        rest = &rest[end..];
    }
    answers
}

/// Whether the peer closed `stream` within `wait` (reading and discarding whatever comes), and
/// after how long.
pub fn closed_within(stream: &mut TcpStream, wait: Duration) -> Option<Duration> {
    let started = Instant::now();
    let mut chunk = [0u8; 16 * 1024];
    loop {
        let left = (started + wait).saturating_duration_since(Instant::now());
        if left.is_zero() {
            return None;
        }
        stream.set_read_timeout(Some(left)).unwrap();
        match stream.read(&mut chunk) {
            Ok(0) => return Some(started.elapsed()),
            Ok(_) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut
                ) =>
            {
                return None;
            }
            Err(_) => return Some(started.elapsed()),
        }
    }
}

/// How many of `streams` have been answered 200 and how many 429 so far, by a peek at the
/// status line (nothing is read, so a client that "does not read" stays one).
pub fn peeked_statuses(streams: &[TcpStream]) -> (usize, usize) {
    let (mut ok, mut refused) = (0, 0);
    for stream in streams {
        stream.set_nonblocking(true).unwrap();
        let mut head = [0u8; 12];
        match stream.peek(&mut head) {
            Ok(12) if &head[9..12] == b"200" => ok += 1,
            Ok(12) if &head[9..12] == b"429" => refused += 1,
            _ => {}
        }
    }
    (ok, refused)
}

/// Sends `request` on a fresh connection from 127.0.0.1 and reads one answer within `wait`.
pub fn exchange(addr: &str, request: &[u8], wait: Duration) -> Raw {
    let mut stream = TcpStream::connect(addr).unwrap();
    let started = Instant::now();
    let _ = stream.write_all(request);
    let mut raw = read_answer(&mut stream, wait);
    raw.elapsed = started.elapsed();
    raw
}

/// `GET /healthz` on a fresh connection; panics unless answered within 5 s.
pub fn healthz(addr: &str) -> Raw {
    exchange(
        addr,
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        Duration::from_secs(5),
    )
}

/// A field of `/proc/PID/status` in KiB (`VmRSS`: resident now, `VmHWM`: the peak).
pub fn memory_kib(pid: u32, field: &str) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    status
        .lines()
        .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
        .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
        .unwrap_or_else(|| panic!("no {field} in /proc/{pid}/status"))
}

/// Panics with a clear message unless the test runs as root (it mounts a tmpfs). Not a skip:
/// a test that cannot run must not pass.
pub fn require_root(what: &str) {
    let uid = rustix::process::geteuid();
    assert!(
        uid.is_root(),
        "{what} needs root (it mounts a small tmpfs); run the tests as root, as CI does \
         (euid is {})",
        uid.as_raw()
    );
}

/// A `POST /v1/write` request of one event per `(seq, payload)` to aggregate `id` of client
/// `client`, with `extra` headers (each ending in `\r\n`).
pub fn write_request(client: &str, id: &str, events: &[(u64, &[u8])], extra: &str) -> Vec<u8> {
    let events: Vec<Value> = events
        .iter()
        .map(|(seq, data)| {
            serde_json::json!({"clientSeq": seq, "timestamp": 1_700_000_000_000u64, "type": 3,
                "data": celeriant_sync_protocol::encoding::encode_base64(data)})
        })
        .collect();
    let body = serde_json::json!({"clientId": client, "writes": [{"aggregate":
        {"typeId": super::app::TYPE, "id": id}, "events": events}]})
    .to_string();
    format!(
        "POST /v1/write HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\n{extra}\r\n{body}",
        body.len()
    )
    .into_bytes()
}

/// `GET` of every event of aggregate `id` (following `next`), with `extra` headers.
pub fn read_all(addr: &str, id: &str, extra: &str) -> Vec<Value> {
    let mut events = Vec::new();
    let mut from = 1;
    loop {
        let target = format!(
            "/v1/aggregates/{}/{id}/events?from={from}",
            super::app::TYPE
        );
        // With a session in `extra`, the read carries its proof.
        let proof = extra
            .split("\r\n")
            .find_map(|line| line.strip_prefix("Authorization: Bearer "))
            .and_then(|token| super::device::proof_for(token, "GET", &target, b""))
            .map(|proof| format!("DPoP: {proof}\r\n"))
            .unwrap_or_default();
        let request = format!(
            "GET {target} HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n{extra}{proof}\r\n"
        );
        let page = exchange(addr, request.as_bytes(), Duration::from_secs(30));
        assert_eq!(page.status, 200, "{page:?}");
        let json = page.json();
        for batch in json["batches"].as_array().unwrap() {
            events.extend(batch["events"].as_array().unwrap().iter().cloned());
        }
        match json["next"].as_u64() {
            Some(next) => from = next,
            None => return events,
        }
    }
}

/// A unique aggregate id for test number `n`.
pub fn aggregate(n: u64) -> String {
    format!("00000000-0000-4000-8000-{n:012}")
}

/// The highest value of a measurement (resident memory, kernel socket memory) while an attack
/// runs: `measure` is sampled every `every` on a thread of its own until [`PeakSampler::stop`].
pub struct PeakSampler {
    done: Arc<AtomicBool>,
    peak: Arc<AtomicU64>,
    thread: JoinHandle<()>,
}

impl PeakSampler {
    pub fn start(every: Duration, measure: impl Fn() -> u64 + Send + 'static) -> Self {
        let done = Arc::new(AtomicBool::new(false));
        let peak = Arc::new(AtomicU64::new(0));
        let thread = {
            let (done, peak) = (done.clone(), peak.clone());
            std::thread::spawn(move || {
                while !done.load(Ordering::Relaxed) {
                    peak.fetch_max(measure(), Ordering::Relaxed);
                    std::thread::sleep(every);
                }
            })
        };
        PeakSampler { done, peak, thread }
    }

    /// Stops sampling; the highest value seen.
    pub fn stop(self) -> u64 {
        self.done.store(true, Ordering::Relaxed);
        self.thread.join().unwrap();
        self.peak.load(Ordering::Relaxed)
    }
}
