//! After a burst of large pages the gateway gives its memory back (issue 26, real process).
//!
//! The finding: 200 reads of a 5.6 MB single-batch page raised the gateway's resident memory
//! from 25 to 206 MB, and it stayed there: glibc's malloc kept the freed page buffers. The
//! gateway binary now allocates with jemalloc, which returns freed pages to the system about a
//! second after they were freed, with a background thread so it happens while the gateway is
//! idle too.
//!
//! Here 20 addresses read that page 10 times each (200 pages, each read whole; a page refused
//! 429 for the read budget is asked again), while a device on its own address writes, reads,
//! watches and checks `/healthz` and must keep 90 % of each answered normally. The bound: the
//! resident memory (`VmRSS`) some seconds after the burst is at most twice what it was before
//! it.

mod support;

use std::net::Ipv4Addr;
use std::time::{Duration, Instant};

use support::hostile::{PeakSampler, aggregate, ask, exchange, memory_kib, write_request};
use support::legit::Legit;
use support::process::{Process, data_dir};

const READERS: u8 = 20;
const PAGES_EACH: usize = 10;
const SETTLE: Duration = Duration::from_secs(20);
const WRITER: &str = "6f1c1c5e-6a4c-4f52-9a37-1e2a8d2f0028";
const DEVICE: &str = "6f1c1c5e-6a4c-4f52-9a37-1e2a8d2f0029";

#[test]
fn memory_taken_by_a_burst_of_large_pages_is_given_back() {
    let dir = data_dir();
    let gateway = Process::start(dir.path(), &["--auth", "none"]);
    let pid = gateway.pid();
    let id = aggregate(28);
    let mb = vec![0x28u8; 1 << 20];
    let events: Vec<(u64, &[u8])> = (1..=4).map(|s| (s, mb.as_slice())).collect();
    let request = write_request(WRITER, &id, &events, "Connection: close\r\n");
    let answer = exchange(&gateway.addr, &request, Duration::from_secs(30));
    assert_eq!(answer.status, 200, "seeding: {}", answer.head);
    std::thread::sleep(Duration::from_secs(3));
    let before = memory_kib(pid, "VmRSS");

    let sampler = PeakSampler::start(Duration::from_millis(20), move || memory_kib(pid, "VmRSS"));
    // A device on its own address writes, reads, watches and checks `/healthz` in turn, one
    // every 60 ms, for as long as the burst lasts (and at least 8 of each: the rounds done
    // after the burst are printed).
    let device = Legit::new(
        Ipv4Addr::new(127, 0, 4, 100),
        &gateway.addr,
        &aggregate(29),
        DEVICE,
    )
    .spawn(Duration::from_millis(60), 32);
    let started = Instant::now();
    let readers: Vec<_> = (1..=READERS)
        .map(|n| {
            let (addr, id) = (gateway.addr.clone(), id.clone());
            std::thread::spawn(move || {
                let from = Ipv4Addr::new(127, 0, 4, n);
                let request = format!(
                    "GET /v1/aggregates/{}/{id}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                     Connection: close\r\n\r\n",
                    support::app::TYPE
                );
                let (mut pages, mut bytes, mut refused) = (0, 0, 0);
                let deadline = Instant::now() + Duration::from_secs(120);
                while pages < PAGES_EACH && Instant::now() < deadline {
                    let page = ask(from, &addr, request.as_bytes(), Duration::from_secs(30));
                    if page.status == 200 {
                        pages += 1;
                        bytes += page.body.len();
                    } else {
                        refused += 1;
                        std::thread::sleep(Duration::from_millis(20));
                    }
                }
                (pages, bytes, refused)
            })
        })
        .collect();
    let (mut pages, mut bytes, mut refused) = (0, 0, 0);
    for reader in readers {
        let (p, b, r) = reader.join().unwrap();
        pages += p;
        bytes += b;
        refused += r;
    }
    let burst = started.elapsed();
    // Given back within a bounded wait from the burst's end (the device may still be doing
    // its last rounds).
    let ended = Instant::now();
    let in_burst = device.rounds_done();
    let device = device.stop();
    let during = sampler.stop();
    let mut after = memory_kib(pid, "VmRSS");
    while after > 2 * before && ended.elapsed() < SETTLE {
        std::thread::sleep(Duration::from_millis(250));
        after = memory_kib(pid, "VmRSS");
    }
    let settled = ended.elapsed();
    println!(
        "memory returned: {pages} pages ({:.1} MB each, {:.0} MB in all) read in {burst:.1?} \
         from {READERS} addresses ({refused} asked again after a 429): resident {} MiB before, \
         {} MiB peak during, {} MiB after {settled:.1?} (bound: 2 × before, within {SETTLE:?})",
        bytes as f64 / pages.max(1) as f64 / 1e6,
        bytes as f64 / 1e6,
        before / 1024,
        during / 1024,
        after / 1024,
    );
    println!(
        "device: {in_burst} of its {} rounds done while the burst lasted",
        device.tally.total().1
    );
    device
        .tally
        .print("200 reads of a 5.6 MB page from 20 addresses");
    assert_eq!(pages, READERS as usize * PAGES_EACH, "every page was read");
    device.tally.assert_each_kind(8);
    assert!(
        during > 2 * before,
        "the burst must take memory for the test to show anything ({} MiB before, {} MiB peak)",
        before / 1024,
        during / 1024
    );
    assert!(
        after <= 2 * before,
        "resident memory {} MiB after the burst is over twice the {} MiB before",
        after / 1024,
        before / 1024
    );
}
