//! Closed connections leave nothing for the kernel to send outside the bounds (issue 26, real
//! process).
//!
//! The finding: one address asked 200 times for a page with `Connection: close` and never read.
//! hyper wrote each page into the socket, closed it, and the page's reservation was given back
//! with the connection; the kernel kept every socket as an orphan (FIN-WAIT-1, no descriptor)
//! holding the page for minutes, outside the read budget and the connection caps, and the
//! address went on being served. Now a connection hyper finished keeps its socket, its place
//! and its pages' reservations until its send queue is empty, and one the gateway cuts with
//! bytes still queued is reset.
//!
//! Orphans are counted from `/proc/net/tcp`: a socket of the gateway's port with no descriptor
//! (inode 0), not in TIME-WAIT, with bytes in its send queue. Other processes' orphans (other
//! ports) do not count.

mod support;

use std::io::{Read, Write};
use std::net::{Ipv4Addr, TcpStream};
use std::time::{Duration, Instant};

use support::hostile::{
    aggregate, ask, exchange, peeked_statuses, small_buffer_from, write_request,
};
use support::process::{Process, data_dir};

const ATTACKERS: usize = 200;
/// `--max-connections-per-ip` in the first test.
const PLACES: usize = 120;
/// A batch whose page fits a connection's capped send buffer whole (hyper finishes it).
const SMALL_BATCH_BYTES: usize = 36 << 10;
/// A batch whose page does not (hyper is still writing it when the connection is cut).
const BIG_BATCH_BYTES: usize = 512 << 10;
/// An address's share of the read budget by default: an eighth of 64 MiB.
const SHARE: usize = 8 << 20;
const WRITER: &str = "6f1c1c5e-6a4c-4f52-9a37-1e2a8d2f0031";
const DEVICE: &str = "6f1c1c5e-6a4c-4f52-9a37-1e2a8d2f0032";

/// Orphaned sockets of `port` holding unsent bytes: how many, and how many bytes.
fn orphans(port: u16) -> (usize, u64) {
    let mut found = (0, 0);
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else {
            continue;
        };
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // sl local rem st tx_queue:rx_queue tr:when retrnsmt uid timeout inode
            let (Some(local), Some(state), Some(queues), Some(inode)) =
                (fields.get(1), fields.get(3), fields.get(4), fields.get(9))
            else {
                continue;
            };
            let local_port = local
                .rsplit(':')
                .next()
                .and_then(|p| u16::from_str_radix(p, 16).ok());
            let tx = queues
                .split(':')
                .next()
                .and_then(|q| u64::from_str_radix(q, 16).ok())
                .unwrap_or(0);
            if local_port == Some(port) && *inode == "0" && *state != "06" && tx > 0 {
                found.0 += 1;
                found.1 += tx;
            }
        }
    }
    found
}

fn port(addr: &str) -> u16 {
    addr.rsplit(':').next().unwrap().parse().unwrap()
}

fn page_request(id: &str, extra: &str) -> String {
    format!(
        "GET /v1/aggregates/{}/{id}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n{extra}\r\n",
        support::app::TYPE
    )
}

fn seed(gateway: &Process, id: &str, bytes: usize, seq: u64) {
    let data = vec![0x31u8; bytes];
    let request = write_request(WRITER, id, &[(seq, &data)], "Connection: close\r\n");
    let answer = exchange(&gateway.addr, &request, Duration::from_secs(30));
    assert_eq!(answer.status, 200, "seeding: {}", answer.head);
}

#[test]
fn closing_answers_nobody_reads_stay_inside_the_bounds() {
    let dir = data_dir();
    // Fewer places per address than the attack has connections.
    let gateway = Process::start(
        dir.path(),
        &[
            "--auth",
            "none",
            "--max-connections-per-ip",
            &PLACES.to_string(),
        ],
    );
    let port = port(&gateway.addr);
    let small = aggregate(31);
    seed(&gateway, &small, SMALL_BATCH_BYTES, 1);
    let closing = page_request(&small, "Connection: close\r\n");
    let page_bytes = SMALL_BATCH_BYTES * 4 / 3;

    // A client on a slow link: it asks with `Connection: close` and reads only after a while.
    // The answer is kept for it, whole, after hyper has closed the connection.
    let mut slow = small_buffer_from(Ipv4Addr::new(127, 0, 4, 3), &gateway.addr);
    slow.write_all(closing.as_bytes()).unwrap();
    std::thread::sleep(Duration::from_millis(1500));
    let mut answer = Vec::new();
    slow.set_read_timeout(Some(Duration::from_secs(10)))
        .unwrap();
    slow.read_to_end(&mut answer)
        .expect("the answer arrives whole, then a normal close");
    assert!(answer.starts_with(b"HTTP/1.1 200"), "{:?}", &answer[..40]);
    assert!(
        answer.len() > page_bytes,
        "{} bytes of a {page_bytes}-byte page",
        answer.len()
    );

    // The attack: one address asks for the page with `Connection: close`, never reads, and
    // keeps its sockets open (closing them with unread data would reset them).
    let attacker = Ipv4Addr::new(127, 0, 4, 1);
    let started = Instant::now();
    let mut attack = Vec::with_capacity(ATTACKERS);
    for _ in 0..ATTACKERS {
        let mut stream = small_buffer_from(attacker, &gateway.addr);
        stream.write_all(closing.as_bytes()).unwrap();
        attack.push(stream);
        std::thread::sleep(Duration::from_millis(4));
    }

    // A device on its own address meanwhile: a write, a read of the page, a health check.
    let device = Ipv4Addr::new(127, 0, 4, 2);
    let own = aggregate(32);
    let (mut asked, mut answered, mut failures) = (0, 0, Vec::new());
    for seq in 1..=10u64 {
        let write = write_request(DEVICE, &own, &[(seq, b"ok")], "Connection: close\r\n");
        let health = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n";
        for (what, request) in [
            ("write", write),
            ("read", closing.clone().into_bytes()),
            ("healthz", health.to_vec()),
        ] {
            let answer = ask(device, &gateway.addr, &request, Duration::from_secs(5));
            asked += 1;
            let normal = answer.status == 200
                && (what != "read" || answer.body.len() >= SMALL_BATCH_BYTES)
                && (what != "write" || answer.json()["outcome"] == "landed");
            if normal {
                answered += 1;
            } else {
                failures.push(format!("{what}: {} {}", answer.status, answer.code()));
            }
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    let (orphaned, orphan_bytes) = orphans(port);
    let (pages, refused) = peeked_statuses(&attack);
    println!(
        "closing answers: {ATTACKERS} connections from {attacker} asking for a {:.0} KB page with \
         Connection: close and never reading, over {:.1?}: {pages} answered 200 ({:.1} MB unread; \
         the address's share is {:.1} MB), {refused} answered 429; orphaned sockets of the \
         gateway holding bytes: {orphaned} ({orphan_bytes} bytes); device on {device}: \
         {answered}/{asked} answered normally ({:.0} %); not normal: {failures:?}",
        page_bytes as f64 / 1e3,
        started.elapsed(),
        (pages * page_bytes) as f64 / 1e6,
        SHARE as f64 / 1e6,
        100.0 * answered as f64 / asked as f64,
    );
    assert_eq!(
        (orphaned, orphan_bytes),
        (0, 0),
        "closed sockets left to the kernel with bytes nobody read"
    );
    assert!(
        pages <= PLACES && refused > 0,
        "an address that does not read was served {pages} pages on closed connections, past \
         its {PLACES} connection places"
    );
    assert!(
        answered * 10 >= asked * 9,
        "the device got {answered}/{asked} answered normally: {failures:?}"
    );

    // The attacker goes away: its kernel resets every connection (unread data). The gateway
    // sees each socket closed (not a queue that never drains) and gives its share back at once.
    for stream in &attack {
        socket2::SockRef::from(stream)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
    }
    drop(attack);
    let gone = Instant::now();
    let back = loop {
        let answer = ask(
            attacker,
            &gateway.addr,
            closing.as_bytes(),
            Duration::from_secs(5),
        );
        if answer.status == 200 {
            break gone.elapsed();
        }
        assert!(
            gone.elapsed() < Duration::from_secs(10),
            "the address's share still held {:?} after its connections were reset: {} {}",
            gone.elapsed(),
            answer.status,
            answer.code()
        );
        std::thread::sleep(Duration::from_millis(100));
    };
    println!("after the attacker's resets, its address was served again within {back:.1?}");
}

#[test]
fn a_connection_cut_with_bytes_queued_is_reset() {
    let dir = data_dir();
    let gateway = Process::start(
        dir.path(),
        &[
            "--auth",
            "none",
            "--idle-timeout-ms",
            "1500",
            "--request-timeout-ms",
            "1000",
            // Only the idle timeout cuts here.
            "--min-page-rate-bytes-per-sec",
            "0",
        ],
    );
    let port = port(&gateway.addr);
    let big = aggregate(33);
    seed(&gateway, &big, BIG_BATCH_BYTES, 1);

    // Clients that ask for a page larger than a send buffer and never read: hyper is still
    // writing when the idle timeout cuts each connection, and bytes are queued in the kernel.
    let source = Ipv4Addr::new(127, 0, 4, 4);
    let mut idle: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut stream = small_buffer_from(source, &gateway.addr);
            stream.write_all(page_request(&big, "").as_bytes()).unwrap();
            stream
        })
        .collect();
    std::thread::sleep(Duration::from_millis(3500));
    let (orphaned, orphan_bytes) = orphans(port);
    // Each client's answer: a page (its bytes queued when the cut came: reset expected), or a
    // 429 past the address's share of the read budget (small, all sent: a normal close).
    let (mut pages, mut reset, mut refused) = (0, 0, 0);
    for stream in &mut idle {
        stream
            .set_read_timeout(Some(Duration::from_millis(200)))
            .unwrap();
        let mut sink = vec![0u8; 256 << 10];
        let mut head = Vec::new();
        loop {
            match stream.read(&mut sink) {
                Ok(0) => break,
                Ok(n) => {
                    if head.len() < 12 {
                        head.extend_from_slice(&sink[..n.min(12)]);
                    }
                }
                Err(e) if e.kind() == std::io::ErrorKind::ConnectionReset => {
                    reset += 1;
                    break;
                }
                Err(_) => break,
            }
        }
        match head.get(9..12) {
            Some(b"200") => pages += 1,
            Some(b"429") => refused += 1,
            _ => {}
        }
    }
    println!(
        "idle cuts: 20 connections from {source} not reading a {} KB page, after the 1.5 s idle \
         timeout: {pages} were being sent a page, {refused} answered 429; {orphaned} orphaned \
         sockets holding {orphan_bytes} bytes; {reset} clients saw a reset",
        BIG_BATCH_BYTES * 4 / 3 / 1000
    );
    assert_eq!(
        (orphaned, orphan_bytes),
        (0, 0),
        "cut sockets left to the kernel"
    );
    assert!(pages > 0, "some pages were being sent");
    assert_eq!(
        (reset, pages + refused),
        (pages, 20),
        "every cut connection with bytes queued is reset, and only those"
    );
}
