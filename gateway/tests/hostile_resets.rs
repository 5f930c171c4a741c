//! Connections cut with bytes their client left unread (issue 26, real process): each reset is
//! counted once under the cut that made it, a flushing connection gives its place to a
//! newcomer when the pool is full, and shutdown waits for answers on their way within the
//! grace, then resets the rest.
//!
//! Why these need a process: the resets, the eviction and the shutdown are what the kernel does
//! with real sockets (`SO_LINGER` 0, `SIOCOUTQ`, SIGTERM), seen from the client's end (a read
//! ending in `ECONNRESET` rather than the answer and a normal close) and from `/metrics`.
//! Clients have the smallest receive buffer, so a client that does not read leaves the answer
//! queued in the gateway's socket. The tests take a lock so their gateways never compete with
//! each other for the machine's cores (their deadlines are generous, never their assertions).

mod support;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use support::hostile::{aggregate, connect_from, exchange, small_buffer_from, write_request};
use support::process::{Process, data_dir, free_port};

/// A batch whose page fits a connection's capped send buffer whole: hyper finishes it and the
/// connection flushes (as in `hostile_orphans`).
const SMALL_BATCH_BYTES: usize = 36 << 10;
/// A batch whose page does not: hyper is still writing it while the client does not read.
const BIG_BATCH_BYTES: usize = 512 << 10;
const WRITER: &str = "6f1c1c5e-6a4c-4f52-9a37-1e2a8d2f0041";
const METRIC: &str = "celeriant_gateway_unread_resets_total";

/// One test at a time: each runs its own gateway on a small shared machine.
static SERIAL: Mutex<()> = Mutex::new(());

fn serial() -> std::sync::MutexGuard<'static, ()> {
    SERIAL.lock().unwrap_or_else(|e| e.into_inner())
}

/// `/metrics` of the listener at `at`.
fn scrape(at: &str) -> String {
    let request = format!("GET /metrics HTTP/1.1\r\nHost: {at}\r\nConnection: close\r\n\r\n");
    let answer = exchange(at, request.as_bytes(), Duration::from_secs(10));
    assert_eq!(answer.status, 200, "{}", answer.head);
    String::from_utf8(answer.body).unwrap()
}

/// The sum of the samples of `name` whose labels contain every one of `has`.
fn total(text: &str, name: &str, has: &[&str]) -> u64 {
    text.lines()
        .filter(|l| l.starts_with(&format!("{name}{{")) || l.starts_with(&format!("{name} ")))
        .filter(|l| has.iter().all(|h| l.contains(h)))
        .map(|l| l.rsplit(' ').next().unwrap().parse::<f64>().unwrap() as u64)
        .sum()
}

/// `celeriant_gateway_unread_resets_total{reason}`, per reason (all reasons with `None`).
fn resets(text: &str, reason: Option<&str>) -> u64 {
    match reason {
        Some(reason) => total(text, METRIC, &[&format!("reason=\"{reason}\"")]),
        None => total(text, METRIC, &[]),
    }
}

/// Scrapes until `done` holds for the text, or `wait` has passed; returns the last text.
fn scrape_until(at: &str, wait: Duration, done: impl Fn(&str) -> bool) -> String {
    let deadline = Instant::now() + wait;
    loop {
        let text = scrape(at);
        if done(&text) || Instant::now() > deadline {
            return text;
        }
        std::thread::sleep(Duration::from_millis(100));
    }
}

fn page_request(id: &str, extra: &str) -> Vec<u8> {
    format!(
        "GET /v1/aggregates/{}/{id}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n",
        support::app::TYPE
    )
    .into_bytes()
}

/// Writes one batch of `bytes` to aggregate `id`: a page of about 4/3 of that to read.
fn seed(gateway: &Process, id: &str, bytes: usize) {
    let data = vec![0x31u8; bytes];
    let request = write_request(WRITER, id, &[(1, &data)], "Connection: close\r\n");
    let answer = exchange(&gateway.addr, &request, Duration::from_secs(30));
    assert_eq!(answer.status, 200, "seeding: {}", answer.head);
}

/// How a client's connection ended, as its client sees it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Ending {
    /// `ECONNRESET`: the gateway reset it.
    Reset,
    /// A normal close after whatever was sent.
    Closed,
    /// Still open, nothing more to read within the wait.
    Open,
}

/// Reads what `stream` holds until it ends (or nothing comes for `quiet`): the bytes read and
/// how it ended.
fn drain(stream: &mut TcpStream, quiet: Duration) -> (Vec<u8>, Ending) {
    stream.set_nonblocking(false).unwrap();
    stream.set_read_timeout(Some(quiet)).unwrap();
    let mut got = Vec::new();
    let mut chunk = vec![0u8; 64 << 10];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => return (got, Ending::Closed),
            Ok(n) => got.extend_from_slice(&chunk[..n]),
            Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                return (got, Ending::Reset);
            }
            Err(_) => return (got, Ending::Open),
        }
    }
}

/// Whether `stream`'s answer has begun with a 200 (a peek: nothing is read).
fn answered_200(stream: &TcpStream) -> bool {
    stream.set_nonblocking(true).unwrap();
    let mut head = [0u8; 12];
    let ok = matches!(stream.peek(&mut head), Ok(12) if &head[9..12] == b"200");
    stream.set_nonblocking(false).unwrap();
    ok
}

/// Waits until every one of `streams` has its answer's status line (the gateway has handed
/// it over), at most `wait`.
fn wait_answered(streams: &[TcpStream], wait: Duration) {
    let deadline = Instant::now() + wait;
    while !streams.iter().all(answered_200) {
        assert!(
            Instant::now() < deadline,
            "answers not begun within {wait:?}"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A client from `source` with the smallest receive buffer that sends `request` and does not
/// read.
fn not_reading(source: Ipv4Addr, addr: &str, request: &[u8]) -> TcpStream {
    let mut stream = small_buffer_from(source, addr);
    stream.write_all(request).unwrap();
    stream
}

fn count(endings: &[Ending], which: Ending) -> usize {
    endings.iter().filter(|e| **e == which).count()
}

#[test]
fn every_reset_of_an_unread_answer_is_counted_once_under_its_cut() {
    let _serial = serial();
    // Idle cuts and flush timeouts, with no page rate (so only the idle timeout cuts).
    let dir = data_dir();
    let metrics = format!("127.0.0.1:{}", free_port());
    let gateway = Process::start(
        dir.path(),
        &[
            "--auth",
            "none",
            "--idle-timeout-ms",
            "1500",
            "--request-timeout-ms",
            "1000",
            "--min-page-rate-bytes-per-sec",
            "0",
            "--metrics-listen",
            &metrics,
        ],
    );
    let (small, big) = (aggregate(41), aggregate(42));
    seed(&gateway, &small, SMALL_BATCH_BYTES);
    seed(&gateway, &big, BIG_BATCH_BYTES);
    let before = scrape(&metrics);
    assert_eq!(resets(&before, None), 0, "nothing reset yet");

    // Cut by the idle timeout while hyper writes a page nobody reads.
    let idle: Vec<TcpStream> = (0..4)
        .map(|_| {
            not_reading(
                Ipv4Addr::new(127, 0, 7, 1),
                &gateway.addr,
                &page_request(&big, ""),
            )
        })
        .collect();
    // Finished by hyper (`Connection: close`), then flushing until the idle timeout.
    let closing = page_request(&small, "Connection: close\r\n");
    let flushing: Vec<TcpStream> = (0..3)
        .map(|_| not_reading(Ipv4Addr::new(127, 0, 7, 2), &gateway.addr, &closing))
        .collect();
    // Readers that take everything: never reset, never counted.
    let mut readers: Vec<TcpStream> = (0..2)
        .map(|_| not_reading(Ipv4Addr::new(127, 0, 7, 3), &gateway.addr, &closing))
        .collect();
    let read_whole: Vec<Ending> = readers
        .iter_mut()
        .map(|r| drain(r, Duration::from_secs(10)).1)
        .collect();
    wait_answered(&idle, Duration::from_secs(10));
    wait_answered(&flushing, Duration::from_secs(10));

    let started = Instant::now();
    let text = scrape_until(&metrics, Duration::from_secs(15), |t| {
        resets(t, Some("idle")) >= 4 && resets(t, Some("flush timeout")) >= 3
    });
    let waited = started.elapsed();
    let endings = |streams: Vec<TcpStream>| -> Vec<Ending> {
        streams
            .into_iter()
            .map(|mut s| drain(&mut s, Duration::from_millis(500)).1)
            .collect()
    };
    let (idle_endings, flush_endings) = (endings(idle), endings(flushing));
    // Nothing counted twice or late.
    std::thread::sleep(Duration::from_millis(300));
    let after = scrape(&metrics);
    println!(
        "unread resets, 1.5 s idle timeout: 4 connections not reading a {} KB page: {} reset \
         as their clients saw it, counted {} under \"idle\"; 3 connections not reading a {} KB \
         answer with Connection: close: {} reset, counted {} under \"flush timeout\"; 2 readers \
         of that answer: {read_whole:?}; all reasons: {} (counted within {waited:.1?}); the \
         same after 300 ms: {}",
        BIG_BATCH_BYTES * 4 / 3 / 1000,
        count(&idle_endings, Ending::Reset),
        resets(&text, Some("idle")),
        SMALL_BATCH_BYTES * 4 / 3 / 1000,
        count(&flush_endings, Ending::Reset),
        resets(&text, Some("flush timeout")),
        resets(&text, None),
        resets(&after, None),
    );
    assert_eq!(
        read_whole,
        [Ending::Closed, Ending::Closed],
        "readers close normally"
    );
    assert_eq!(
        idle_endings,
        [Ending::Reset; 4],
        "idle cuts with bytes queued reset"
    );
    assert_eq!(flush_endings, [Ending::Reset; 3], "flush timeouts reset");
    assert_eq!(
        resets(&after, Some("idle")),
        4,
        "each idle reset counted once"
    );
    assert_eq!(
        resets(&after, Some("flush timeout")),
        3,
        "each flush reset counted once"
    );
    assert_eq!(
        resets(&after, None),
        7,
        "no reset counted under another reason"
    );
    drop(gateway);

    // Cut by the minimum page rate (the socket is set to reset before the cut reaches the
    // close): readers taking about 10 KB/s of a page that must leave at 200 KB/s.
    let dir = data_dir();
    let metrics = format!("127.0.0.1:{}", free_port());
    let gateway = Process::start(
        dir.path(),
        &[
            "--auth",
            "none",
            "--idle-timeout-ms",
            "1500",
            "--request-timeout-ms",
            "1000",
            "--min-page-rate-bytes-per-sec",
            "200000",
            "--metrics-listen",
            &metrics,
        ],
    );
    let big = aggregate(43);
    seed(&gateway, &big, BIG_BATCH_BYTES);
    let addr = gateway.addr.clone();
    let trickles: Vec<_> = (0..3)
        .map(|_| {
            let addr = addr.clone();
            let request = page_request(&big, "");
            std::thread::spawn(move || {
                let mut stream = not_reading(Ipv4Addr::new(127, 0, 7, 4), &addr, &request);
                stream
                    .set_read_timeout(Some(Duration::from_secs(5)))
                    .unwrap();
                let (started, mut got) = (Instant::now(), 0);
                let mut chunk = [0u8; 2048];
                while started.elapsed() < Duration::from_secs(15) {
                    match stream.read(&mut chunk) {
                        Ok(0) => return (got, Ending::Closed),
                        Ok(n) => got += n,
                        Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                            return (got, Ending::Reset);
                        }
                        Err(_) => return (got, Ending::Open),
                    }
                    std::thread::sleep(Duration::from_millis(100));
                }
                (got, Ending::Open)
            })
        })
        .collect();
    let trickled: Vec<(usize, Ending)> = trickles.into_iter().map(|t| t.join().unwrap()).collect();
    let text = scrape_until(&metrics, Duration::from_secs(5), |t| {
        resets(t, Some("slow reader")) >= 3
    });
    let refusals = total(
        &text,
        "celeriant_gateway_budget_refusals_total",
        &["kind=\"read responses\"", "reason=\"slow reader\""],
    );
    println!(
        "unread resets, 200 KB/s minimum page rate: 3 clients reading about 10 KB/s of a {} KB \
         page (bytes read, ending): {trickled:?}; counted {} under \"slow reader\" ({} slow \
         reader refusals); all reasons: {}",
        BIG_BATCH_BYTES * 4 / 3 / 1000,
        resets(&text, Some("slow reader")),
        refusals,
        resets(&text, None),
    );
    assert!(
        trickled.iter().all(|(_, e)| *e == Ending::Reset),
        "slow readers are reset: {trickled:?}"
    );
    assert_eq!(resets(&text, Some("slow reader")), 3, "each counted once");
    assert_eq!(resets(&text, None), 3, "under that reason only");
    assert_eq!(refusals, 3, "the cut itself counted once as a refusal");
}

#[test]
fn a_flushing_connection_of_the_heaviest_address_gives_its_place_to_a_newcomer() {
    let _serial = serial();
    let dir = data_dir();
    let metrics = format!("127.0.0.1:{}", free_port());
    // A pool of 8 places; the idle timeout long enough that only an eviction ends a flush here.
    let gateway = Process::start(
        dir.path(),
        &[
            "--auth",
            "none",
            "--max-connections",
            "8",
            "--max-connections-per-ip",
            "8",
            "--idle-timeout-ms",
            "30000",
            "--request-timeout-ms",
            "5000",
            "--metrics-listen",
            &metrics,
        ],
    );
    let small = aggregate(44);
    seed(&gateway, &small, SMALL_BATCH_BYTES);
    let closing = page_request(&small, "Connection: close\r\n");

    // The attacker: 6 answers with `Connection: close` it never reads, each in its flush (hyper
    // has finished: the whole answer is in the kernel), in order of admission.
    let attacker = Ipv4Addr::new(127, 0, 8, 1);
    let mut held = Vec::new();
    for _ in 0..6 {
        held.push(not_reading(attacker, &gateway.addr, &closing));
        wait_answered(&held, Duration::from_secs(10));
    }
    // Another address's two keep-alive connections, each answered once: the pool is full.
    let other = Ipv4Addr::new(127, 0, 8, 2);
    let health = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
    let mut kept: Vec<TcpStream> = (0..2).map(|_| connect_from(other, &gateway.addr)).collect();
    for stream in &mut kept {
        stream.write_all(health).unwrap();
        let answer = support::hostile::read_answer(stream, Duration::from_secs(10));
        assert_eq!(answer.status, 200, "{}", answer.head);
    }
    let before = scrape(&metrics);

    // A newcomer on a third address: the attacker's oldest flushing connection gives way.
    let newcomer = Ipv4Addr::new(127, 0, 8, 3);
    let closing_health = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
    let asked = Instant::now();
    let answer = support::hostile::ask(
        newcomer,
        &gateway.addr,
        closing_health,
        Duration::from_secs(10),
    );
    // The evicted one is reset at once (not at the 30 s idle timeout).
    let (_, first) = drain(&mut held[0], Duration::from_secs(5));
    let reset_after = asked.elapsed();
    // The others were left alone: read now, each answer arrives whole and closes normally.
    let others: Vec<(Vec<u8>, Ending)> = held[1..]
        .iter_mut()
        .map(|s| drain(s, Duration::from_secs(5)))
        .collect();
    let page_bytes = SMALL_BATCH_BYTES * 4 / 3;
    let whole = others
        .iter()
        .filter(|(got, _)| got.len() > page_bytes)
        .count();
    let others: Vec<Ending> = others.into_iter().map(|(_, e)| e).collect();
    // The lighter address's connections were left alone: each still answers.
    let lighter: Vec<u16> = kept
        .iter_mut()
        .map(|stream| {
            if stream.write_all(health).is_err() {
                return 0;
            }
            support::hostile::read_answer(stream, Duration::from_secs(5)).status
        })
        .collect();
    let text = scrape_until(&metrics, Duration::from_secs(5), |t| {
        resets(t, Some("evicted")) >= 1
    });
    let evictions = |t: &str| {
        total(
            t,
            "celeriant_gateway_budget_refusals_total",
            &["kind=\"connections\"", "reason=\"evicted\""],
        )
    };
    println!(
        "eviction of a flushing connection: pool of 8 full (6 flushing answers of {attacker} \
         nobody reads, 2 keep-alive connections of {other}); newcomer from {newcomer} answered \
         {} in {:.1?}; the attacker's oldest: {first:?} within {reset_after:.1?} of the newcomer's \
         request; its other 5, read then: {others:?}, {whole} with the whole answer; {other}'s connections then answered {lighter:?}; evictions {} -> {}, resets counted under \"evicted\": {} (all reasons {})",
        answer.status,
        answer.elapsed,
        evictions(&before),
        evictions(&text),
        resets(&text, Some("evicted")),
        resets(&text, None),
    );
    assert_eq!(answer.status, 200, "the newcomer got in: {}", answer.head);
    assert_eq!(
        first,
        Ending::Reset,
        "the evicted flush is reset, its bytes dropped"
    );
    assert_eq!(others, [Ending::Closed; 5], "the rest were not cut");
    assert_eq!(whole, 5, "the rest got their answers whole");
    assert_eq!(lighter, [200, 200], "the lighter address gave nothing");
    assert_eq!(evictions(&text) - evictions(&before), 1, "one place moved");
    assert_eq!(resets(&text, Some("evicted")), 1, "its reset counted once");
    assert_eq!(resets(&text, None), 1);
}

/// A gateway whose shutdown grace is 3 s (the request timeout, 2 s, plus a second), and whose
/// idle timeout (30 s) does not cut anything first.
fn with_a_3_s_grace(dir: &tempfile::TempDir) -> Process {
    Process::start(
        dir.path(),
        &[
            "--auth",
            "none",
            "--request-timeout-ms",
            "2000",
            "--idle-timeout-ms",
            "30000",
        ],
    )
}

#[test]
fn shutdown_waits_for_answers_on_their_way_then_resets_the_rest() {
    let _serial = serial();
    let dir = data_dir();
    let grace = Duration::from_secs(3);
    let mut gateway = with_a_3_s_grace(&dir);
    let small = aggregate(45);
    seed(&gateway, &small, SMALL_BATCH_BYTES);
    let closing = page_request(&small, "Connection: close\r\n");
    let mut slow = not_reading(Ipv4Addr::new(127, 0, 9, 1), &gateway.addr, &closing);
    let mut never = not_reading(Ipv4Addr::new(127, 0, 9, 2), &gateway.addr, &closing);
    wait_answered(
        &[slow.try_clone().unwrap(), never.try_clone().unwrap()],
        Duration::from_secs(10),
    );

    // SIGTERM while both answers are queued; the slow client starts reading 0.5 s later, 1 KiB
    // every 5 ms.
    let term = Instant::now();
    let reader = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(500));
        slow.set_read_timeout(Some(Duration::from_secs(10)))
            .unwrap();
        let (mut got, mut chunk) = (Vec::new(), [0u8; 1024]);
        let ending = loop {
            match slow.read(&mut chunk) {
                Ok(0) => break Ending::Closed,
                Ok(n) => got.extend_from_slice(&chunk[..n]),
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => break Ending::Reset,
                Err(_) => break Ending::Open,
            }
            std::thread::sleep(Duration::from_millis(5));
        };
        (got, ending, term.elapsed())
    });
    gateway.stop();
    let exited = term.elapsed();
    let (got, slow_ending, slow_done) = reader.join().unwrap();
    let (never_got, never_ending) = drain(&mut never, Duration::from_secs(2));
    let whole = {
        let text = String::from_utf8_lossy(&got);
        let head_end = text.find("\r\n\r\n").map_or(0, |i| i + 4);
        let length: usize = text[..head_end]
            .lines()
            .find_map(|l| l.strip_prefix("content-length: ")?.trim().parse().ok())
            .unwrap_or(usize::MAX);
        got.starts_with(b"HTTP/1.1 200") && got.len() == head_end + length
    };
    println!(
        "shutdown with a {grace:?} grace: a client reading from 0.5 s after SIGTERM got {} \
         bytes (whole answer: {whole}), {slow_ending:?} {slow_done:.1?} after SIGTERM; a client \
         that never reads: {never_ending:?} after {} bytes (its kernel's buffer); the process \
         exited {exited:.1?} after SIGTERM",
        got.len(),
        never_got.len(),
    );
    assert!(
        whole && slow_ending == Ending::Closed,
        "the slow reader got its whole answer"
    );
    assert_eq!(
        never_ending,
        Ending::Reset,
        "the answer nobody read was reset"
    );
    assert!(
        exited >= grace - Duration::from_millis(200),
        "the process waited for the answer on its way until the grace ended: {exited:?}"
    );
    assert!(
        exited <= grace + Duration::from_secs(3),
        "the process exited within the grace and a margin: {exited:?}"
    );
}

#[test]
fn an_answer_hyper_is_still_writing_at_the_end_of_the_grace_is_reset() {
    let _serial = serial();
    let dir = data_dir();
    let grace = Duration::from_secs(3);
    let mut gateway = with_a_3_s_grace(&dir);
    let big = aggregate(46);
    seed(&gateway, &big, BIG_BATCH_BYTES);
    // A page larger than a send buffer, not read: hyper is still writing it at the grace's
    // end. Left to the process's exit, the socket would close normally and the kernel would go
    // on sending what it holds to a client that does not read, outside every bound.
    let mut never = not_reading(
        Ipv4Addr::new(127, 0, 9, 3),
        &gateway.addr,
        &page_request(&big, ""),
    );
    wait_answered(&[never.try_clone().unwrap()], Duration::from_secs(10));
    let term = Instant::now();
    gateway.stop();
    let exited = term.elapsed();
    let (got, ending) = drain(&mut never, Duration::from_secs(2));
    println!(
        "shutdown with a {grace:?} grace: a client not reading a {} KB page hyper was still \
         writing: {ending:?} after {} bytes; the process exited {exited:.1?} after SIGTERM",
        BIG_BATCH_BYTES * 4 / 3 / 1000,
        got.len(),
    );
    assert_eq!(ending, Ending::Reset, "cut with a reset at the grace's end");
    assert!(
        exited >= grace - Duration::from_millis(200) && exited <= grace + Duration::from_secs(3),
        "the process waited for the request within the grace, then exited: {exited:?}"
    );
}
