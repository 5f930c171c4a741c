//! A page read a trickle at a time is closed at the minimum page rate, and its share of the
//! read budget released (issue 26, the hostile review's "M1, the drip-feed"; real process).
//!
//! The finding: a page's reservation is held until its bytes have left the socket, and a
//! connection stays open while bytes move. A client that asks for a large page and
//! acknowledges a few bytes now and then, just often enough to beat the idle timeout, held the
//! page's reservation for hours; a handful of addresses doing that filled the read budget, and
//! everyone's reads were refused 429 (42900). Now a page's n-th byte must leave the socket by
//! idle timeout + n / `--min-page-rate-bytes-per-sec`, or its connection is closed (reset).
//!
//! Here, with a read budget of two pages (2 MiB, 1 MiB per address) and a short idle timeout
//! (2.5 s) and a high minimum rate (256 KiB/s) so the test is quick: two attacking addresses
//! ask for a 0.8 MB page each with the smallest receive buffer and read what has arrived every
//! 300 ms (a few KB/s: never idle for 2.5 s). A device on a third address is refused while
//! they hold the budget, and answered once they are cut, which must happen within the bound
//! (grace + their bytes / rate: under 3 s; 8 s allowed) — without the minimum rate they would
//! hold it for the minutes their trickle takes. Then a reader on a fourth address reads the
//! page four times on one keep-alive connection at about 1 MB/s (four times the minimum) with
//! a 64 KiB receive buffer: never cut. `/metrics` counts exactly the two slow readers.

mod support;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use support::hostile::{aggregate, ask, exchange, small_buffer_from, write_request};
use support::process::{Process, data_dir};

const BATCHES: u64 = 3;
const BATCH_BYTES: usize = 192 << 10;
const IDLE_MS: u64 = 2_500;
const MIN_RATE: u64 = 256 << 10;
/// How long an attacker may keep its page: the grace (the idle timeout) plus its bytes at the
/// minimum rate come to under 3 s; the rest is room for a loaded machine.
const BOUND: Duration = Duration::from_secs(8);
/// How long an attacker trickles before it gives up waiting to be cut.
const ATTACK_FOR: Duration = Duration::from_secs(15);
const WRITER: &str = "6f1c1c5e-6a4c-4f52-9a37-1e2a8d2f0031";
const DEVICE: &str = "6f1c1c5e-6a4c-4f52-9a37-1e2a8d2f0032";
const TOKEN: &str = "metrics-token-drip-0123456789abcdef01234567";

fn page_request(id: &str, extra: &str) -> String {
    format!(
        "GET /v1/aggregates/{}/{id}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n",
        support::app::TYPE
    )
}

/// What one drip-feeding attacker saw.
#[derive(Debug)]
struct Drip {
    status: String,
    /// Bytes it read, head included.
    read: usize,
    /// From its request until the gateway closed (or reset) the connection; `None`: still
    /// open after [`ATTACK_FOR`].
    cut_after: Option<Duration>,
}

/// Asks for the page from `source` with the smallest receive buffer, then every 300 ms reads
/// what has arrived (at most 4 KiB), until the gateway closes the connection.
fn drip(source: Ipv4Addr, addr: &str, request: String) -> Drip {
    let mut stream = small_buffer_from(source, addr);
    let started = Instant::now();
    stream.write_all(request.as_bytes()).unwrap();
    stream.set_nonblocking(true).unwrap();
    let mut data = Vec::new();
    let mut chunk = [0u8; 4 << 10];
    while started.elapsed() < ATTACK_FOR {
        std::thread::sleep(Duration::from_millis(300));
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => data.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => continue,
            Err(_) => break, // reset
        }
    }
    let cut_after = (started.elapsed() < ATTACK_FOR).then(|| started.elapsed());
    Drip {
        status: String::from_utf8_lossy(&data[..data.len().min(12)]).into_owned(),
        read: data.len(),
        cut_after,
    }
}

/// Reads one answer off `stream` at about `rate` bytes a second (after each read, a pause until
/// the bytes read so far are due at that rate); the status and the body's length, status 0 if
/// the connection closed first.
fn read_at(stream: &mut TcpStream, rate: u64) -> (u16, usize) {
    let chunk_bytes = 64 << 10;
    let started = Instant::now();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    let mut data = Vec::new();
    let mut chunk = vec![0u8; chunk_bytes];
    let mut needed = None;
    loop {
        if let Some((end, len)) = needed
            && data.len() >= end + len
        {
            let status = String::from_utf8_lossy(&data[9..12]).parse().unwrap_or(0);
            return (status, data.len() - end);
        }
        match stream.read(&mut chunk) {
            Ok(0) | Err(_) => return (0, 0),
            Ok(n) => data.extend_from_slice(&chunk[..n]),
        }
        if needed.is_none()
            && let Some(at) = data.windows(4).position(|w| w == b"\r\n\r\n")
        {
            let head = String::from_utf8_lossy(&data[..at]).to_lowercase();
            let len = head
                .lines()
                .find_map(|l| l.strip_prefix("content-length:"))
                .and_then(|v| v.trim().parse().ok())
                .unwrap_or(0);
            needed = Some((at + 4, len));
        }
        let due = started + Duration::from_micros(data.len() as u64 * 1_000_000 / rate);
        std::thread::sleep(due.saturating_duration_since(Instant::now()));
    }
}

/// `celeriant_gateway_budget_refusals_total{kind="read responses",reason="slow reader"}`.
fn slow_readers_cut(addr: &str) -> f64 {
    let request = format!(
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nAuthorization: Bearer {TOKEN}\r\n\
         Connection: close\r\n\r\n"
    );
    let answer = exchange(addr, request.as_bytes(), Duration::from_secs(10));
    assert_eq!(answer.status, 200, "{}", answer.head);
    String::from_utf8_lossy(&answer.body)
        .lines()
        .filter(|l| l.starts_with("celeriant_gateway_budget_refusals_total{"))
        .filter(|l| l.contains(r#"kind="read responses""#) && l.contains(r#"reason="slow reader""#))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
        .fold(0.0, |a, b| a + b)
}

#[test]
fn a_page_read_a_trickle_at_a_time_is_cut_and_its_budget_released() {
    let dir = data_dir();
    let token_file = dir.path().join("metrics-token");
    std::fs::write(&token_file, format!("{TOKEN}\n")).unwrap();
    let idle = IDLE_MS.to_string();
    let rate = MIN_RATE.to_string();
    let gateway = Process::start(
        dir.path(),
        &[
            "--auth",
            "none",
            "--idle-timeout-ms",
            &idle,
            "--request-timeout-ms",
            "2000",
            "--read-page-bytes",
            "1048576",
            "--max-body-bytes",
            "1048576",
            "--read-buffer-bytes",
            "2097152",
            "--min-page-rate-bytes-per-sec",
            &rate,
            "--metrics-token-file",
            token_file.to_str().unwrap(),
        ],
    );
    let big = aggregate(31);
    let data = vec![0x31u8; BATCH_BYTES];
    for seq in 1..=BATCHES {
        let request = write_request(WRITER, &big, &[(seq, &data)], "Connection: close\r\n");
        let answer = exchange(&gateway.addr, &request, Duration::from_secs(30));
        assert_eq!(answer.status, 200, "seeding: {}", answer.head);
    }
    let close = "Connection: close\r\n";
    let probe = exchange(
        &gateway.addr,
        page_request(&big, close).as_bytes(),
        Duration::from_secs(10),
    );
    assert_eq!(probe.status, 200, "{}", probe.head);
    let page_bytes = probe.body.len();
    assert!(page_bytes > 700_000, "a large page: {page_bytes} bytes");
    // The probe's reservation is given back once the gateway has seen its last bytes
    // acknowledged (a look at the send queue, not the instant the probe read them).
    std::thread::sleep(Duration::from_millis(300));
    let device = Ipv4Addr::new(127, 0, 6, 3);
    let own = aggregate(32);
    let landed = ask(
        device,
        &gateway.addr,
        &write_request(DEVICE, &own, &[(1, b"ok")], close),
        Duration::from_secs(10),
    );
    assert_eq!(landed.status, 200, "{}", landed.head);

    // The attack: two addresses, one page each, read a trickle at a time.
    let started = Instant::now();
    let attackers: Vec<_> = [Ipv4Addr::new(127, 0, 6, 1), Ipv4Addr::new(127, 0, 6, 2)]
        .into_iter()
        .map(|source| {
            let (addr, request) = (gateway.addr.clone(), page_request(&big, ""));
            std::thread::spawn(move || drip(source, &addr, request))
        })
        .collect();
    // The device reads its own small aggregate every 250 ms: refused while the attackers hold
    // the budget, answered once they are cut.
    std::thread::sleep(Duration::from_millis(500));
    let (mut refused, mut first_answered) = (Vec::new(), None);
    while started.elapsed() < ATTACK_FOR {
        let answer = ask(
            device,
            &gateway.addr,
            page_request(&own, close).as_bytes(),
            Duration::from_secs(5),
        );
        if answer.status == 200 {
            first_answered = Some(started.elapsed());
            break;
        }
        refused.push((answer.status, answer.code()));
        std::thread::sleep(Duration::from_millis(250));
    }
    let drips: Vec<Drip> = attackers.into_iter().map(|t| t.join().unwrap()).collect();
    // And after: every read of the device answered, the large page whole.
    let after: Vec<(u16, usize)> = (0..5)
        .map(|_| {
            let answer = ask(
                device,
                &gateway.addr,
                page_request(&big, close).as_bytes(),
                Duration::from_secs(5),
            );
            (answer.status, answer.body.len())
        })
        .collect();
    let cut_during_attack = slow_readers_cut(&gateway.addr);

    // A reader at four times the minimum rate, four pages on one keep-alive connection.
    let target: SocketAddr = gateway.addr.parse().unwrap();
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(64 << 10).unwrap();
    socket
        .bind(&SocketAddr::from((Ipv4Addr::new(127, 0, 6, 4), 0)).into())
        .unwrap();
    socket.connect(&target.into()).unwrap();
    let mut reader: TcpStream = socket.into();
    let reading = Instant::now();
    let mut pages = Vec::new();
    for _ in 0..4 {
        reader.write_all(page_request(&big, "").as_bytes()).unwrap();
        pages.push(read_at(&mut reader, 4 * MIN_RATE));
    }
    let read_for = reading.elapsed();
    let cut_in_all = slow_readers_cut(&gateway.addr);

    println!(
        "drip-feed: 2 attackers asked for a {:.2} MB page each (read budget 2 MiB, 1 MiB per \
         address), reading what arrived every 300 ms; idle timeout {IDLE_MS} ms, minimum page \
         rate {MIN_RATE} B/s: {drips:?}; device refused {} times while they held it \
         ({refused:?}), answered {:.1?} after the attack began; after: {after:?}; slow readers \
         cut (metrics): {cut_during_attack}; reader at {} B/s: {pages:?} in {read_for:.1?} \
         ({:.0} KB/s), slow readers cut in all: {cut_in_all}",
        page_bytes as f64 / 1e6,
        refused.len(),
        first_answered,
        4 * MIN_RATE,
        (4 * page_bytes) as f64 / read_for.as_secs_f64() / 1e3,
    );
    for drip in &drips {
        assert!(
            drip.status.starts_with("HTTP/1.1 200"),
            "the attacker was served its page: {drip:?}"
        );
        assert!(
            drip.read < page_bytes / 2,
            "the attacker read only a trickle: {drip:?}"
        );
        let cut = drip.cut_after.unwrap_or_else(|| {
            panic!(
                "an attacker reading a trickle still held its page after {ATTACK_FOR:?}: {drip:?}"
            )
        });
        assert!(
            cut >= Duration::from_millis(IDLE_MS) && cut < BOUND,
            "cut after the grace ({IDLE_MS} ms) and within {BOUND:?}: {drip:?}"
        );
    }
    assert!(
        !refused.is_empty() && refused.iter().all(|r| *r == (429, 42900)),
        "the attack held the read budget (the device refused 429 42900) until cut: {refused:?}"
    );
    assert!(first_answered.is_some(), "the device was never answered");
    assert!(
        after.iter().all(|a| *a == (200, page_bytes)),
        "the reservations were released: {after:?}"
    );
    assert_eq!(cut_during_attack, 2.0, "both attackers cut as slow readers");
    assert!(
        pages.iter().all(|p| *p == (200, page_bytes)),
        "a reader at four times the minimum rate is never cut: {pages:?}"
    );
    assert_eq!(cut_in_all, 2.0, "nobody but the attackers cut");
}
