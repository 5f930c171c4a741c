//! Pages asked for and never read stay inside the read budget in the kernel too (issue 26,
//! real process).
//!
//! The finding: 250 connections from one address, each asking for a 1.9 MB page and never
//! reading it, pinned 844 MB of kernel socket memory. The gateway's read budget gave each
//! page's reservation back once the connection had handed its last byte to the kernel, and the
//! kernel's send buffers grew to hold whole pages, outside every budget. Now every
//! connection's send buffer is capped (64 KiB asked), and a page's reservation is held until
//! its bytes have left the socket (its send queue is empty), so one address holds at most its
//! share of the read budget (an eighth of 64 MiB) anywhere, and its further pages are refused
//! 429 (42910) instead of queued in the kernel.
//!
//! Here an aggregate of ten 256 KB batches (a 1.8 MB page) is read by 250 connections from
//! 127.0.3.1 that never read, while a device on 127.0.3.2 writes, reads that page, opens a
//! change stream and asks `/healthz`, in turn. The bound: the kernel's TCP memory (`/proc/net/sockstat`, `mem`
//! pages of 4 KiB, for the whole host: both ends of every loopback connection) grows by less
//! than 128 MB; the device keeps at least 90 % of each kind answered normally.
//!
//! Then pages small enough for the kernel to take whole (a 49 KB page fits the capped send
//! buffer): 250 connections from 127.0.3.4, with the smallest receive buffer (so the page
//! stays in the gateway's send queue, unacknowledged), ask for one each and never read. Their
//! reservations stay held, so the address is served at most its share of the read budget
//! (8 MiB: about 170 such pages) and refused the rest; before, every one was served and sat
//! in the kernel.

mod support;

use std::io::Write;
use std::net::{Ipv4Addr, TcpStream};
use std::time::{Duration, Instant};

use support::hostile::{
    PeakSampler, aggregate, ask, connect_from, exchange, peeked_statuses, small_buffer_from,
    write_request,
};
use support::legit::Legit;
use support::process::{Process, data_dir};

const ATTACKERS: usize = 250;
const BATCHES: u64 = 10;
const BATCH_BYTES: usize = 192 << 10;
const BOUND_MB: f64 = 128.0;
/// A batch whose page fits a connection's capped send buffer whole.
const SMALL_BATCH_BYTES: usize = 36 << 10;
/// An address's share of the read budget by default: an eighth of 64 MiB.
const SHARE: usize = 8 << 20;
const WRITER: &str = "6f1c1c5e-6a4c-4f52-9a37-1e2a8d2f0026";
const DEVICE: &str = "6f1c1c5e-6a4c-4f52-9a37-1e2a8d2f0027";

/// The host's TCP memory now, in bytes (`/proc/net/sockstat`: `TCP: … mem N`, in pages).
fn tcp_memory() -> u64 {
    let sockstat = std::fs::read_to_string("/proc/net/sockstat").unwrap();
    let line = sockstat.lines().find(|l| l.starts_with("TCP:")).unwrap();
    let mut words = line.split_whitespace();
    while let Some(word) = words.next() {
        if word == "mem" {
            return words.next().unwrap().parse::<u64>().unwrap() * 4096;
        }
    }
    panic!("no TCP mem in /proc/net/sockstat: {line}")
}

fn mb(bytes: u64) -> f64 {
    bytes as f64 / 1e6
}

fn page_request(id: &str) -> String {
    format!(
        "GET /v1/aggregates/{}/{id}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        support::app::TYPE
    )
}

#[test]
fn pages_nobody_reads_stay_inside_the_budget_in_the_kernel_too() {
    let dir = data_dir();
    let gateway = Process::start(dir.path(), &["--auth", "none"]);
    let id = aggregate(26);
    let data = vec![0x26u8; BATCH_BYTES];
    for seq in 1..=BATCHES {
        let request = write_request(WRITER, &id, &[(seq, &data)], "Connection: close\r\n");
        let answer = exchange(&gateway.addr, &request, Duration::from_secs(30));
        assert_eq!(answer.status, 200, "seeding: {}", answer.head);
    }
    let probe = ask(
        Ipv4Addr::new(127, 0, 3, 3),
        &gateway.addr,
        page_request(&id)
            .replace("\r\n\r\n", "\r\nConnection: close\r\n\r\n")
            .as_bytes(),
        Duration::from_secs(10),
    );
    assert_eq!(probe.status, 200, "{}", probe.head);
    let page_bytes = probe.body.len();
    assert!(page_bytes > 1_500_000, "a large page: {page_bytes} bytes");

    // The host's figure moves with every other socket on it: the least of a few samples.
    let before = (0..10)
        .map(|_| {
            std::thread::sleep(Duration::from_millis(100));
            tcp_memory()
        })
        .min()
        .unwrap();

    // The attack: connections that ask for the page and never read.
    let attacker = Ipv4Addr::new(127, 0, 3, 1);
    let started = Instant::now();
    let mut attack: Vec<TcpStream> = Vec::with_capacity(ATTACKERS);
    for _ in 0..ATTACKERS {
        let mut stream = connect_from(attacker, &gateway.addr);
        stream.write_all(page_request(&id).as_bytes()).unwrap();
        attack.push(stream);
    }

    let sampler = PeakSampler::start(Duration::from_millis(50), tcp_memory);

    // The device, meanwhile: a write, a read of the page (all of it), a change stream on its
    // own aggregate and a health check in turn, one every 150 ms (12 of each).
    let device = Ipv4Addr::new(127, 0, 3, 2);
    let mut legit = Legit::new(device, &gateway.addr, &aggregate(27), DEVICE);
    legit.read = Some((id.clone(), page_bytes));
    legit.wait = Duration::from_secs(5);
    let mut slowest = Duration::ZERO;
    for _ in 0..48 {
        let tick = Instant::now();
        slowest = slowest.max(legit.round().elapsed);
        std::thread::sleep(Duration::from_millis(150).saturating_sub(tick.elapsed()));
    }
    let during = sampler.stop();
    let attack_time = started.elapsed();

    // What the attackers got: a page on a few connections (their share), 429 on the rest.
    let (pages, refused) = peeked_statuses(&attack);
    let other = attack.len() - pages - refused;
    let growth = during.saturating_sub(before);
    println!(
        "socket memory: {ATTACKERS} connections from {attacker} asking for a {:.2} MB page and \
         never reading, for {attack_time:.1?}: host TCP memory {:.1} MB before, {:.1} MB peak \
         during (growth {:.1} MB, bound {BOUND_MB} MB); attackers: {pages} answered 200, \
         {refused} answered 429, {other} no answer yet; device on {device}: slowest request \
         {slowest:.1?}",
        page_bytes as f64 / 1e6,
        mb(before),
        mb(during),
        mb(growth),
    );
    legit
        .tally
        .print("250 connections not reading 1.8 MB pages from one address");
    assert!(
        mb(growth) < BOUND_MB,
        "kernel TCP memory grew by {:.1} MB for one address, over the {BOUND_MB} MB bound",
        mb(growth)
    );
    legit.tally.assert_each_kind(8);
    drop(attack);

    // Pages small enough for the kernel to take whole into the capped send buffer, for clients
    // whose receive buffer is as small as can be (so the page stays in the gateway's send
    // queue rather than in theirs): the reservations are held until the client reads, so the
    // address holds at most its share of them, and the rest are refused.
    let small = aggregate(29);
    let data = vec![0x29u8; SMALL_BATCH_BYTES];
    let request = write_request(
        WRITER,
        &small,
        &[(BATCHES + 1, &data)],
        "Connection: close\r\n",
    );
    let answer = exchange(&gateway.addr, &request, Duration::from_secs(30));
    assert_eq!(answer.status, 200, "seeding: {}", answer.head);
    let hoarder = Ipv4Addr::new(127, 0, 3, 4);
    let mut hoard: Vec<TcpStream> = Vec::with_capacity(ATTACKERS);
    for _ in 0..ATTACKERS {
        let mut stream = small_buffer_from(hoarder, &gateway.addr);
        stream.write_all(page_request(&small).as_bytes()).unwrap();
        hoard.push(stream);
        // One at a time, so each is served (or refused) before the next asks.
        std::thread::sleep(Duration::from_millis(4));
    }
    std::thread::sleep(Duration::from_secs(1));
    let (pages, refused) = peeked_statuses(&hoard);
    let small_page = SMALL_BATCH_BYTES * 4 / 3;
    println!(
        "small pages: {ATTACKERS} connections from {hoarder} with the smallest receive buffer \
         asking for a {:.0} KB page (it fits the capped send buffer whole) and never reading: {pages} answered 200 ({:.1} MB \
         unread, the address's share is {:.1} MB), {refused} answered 429",
        small_page as f64 / 1e3,
        (pages * small_page) as f64 / 1e6,
        SHARE as f64 / 1e6,
    );
    assert!(
        pages * small_page <= SHARE + small_page && refused > 0,
        "an address that does not read holds {pages} pages of {small_page} bytes, past its \
         {SHARE}-byte share of the read budget"
    );
    drop(hoard);
}
