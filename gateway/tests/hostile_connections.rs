//! Idle, slow and too many connections against a real gateway process (issue 15).
//!
//! The findings: ~21,000 idle sockets exhausted the gateway's file descriptors, after which
//! `/healthz` and writes timed out; slow headers and slow bodies were held open for the whole
//! 150 s tried (no header, body or idle timeout, no connection cap). Here, with short timeouts
//! (header 500 ms, body 500 ms, idle 1.5 s) and small caps, each kind of connection is closed
//! on time (the measured times are printed), connections over a cap are answered 429 at once,
//! and `/healthz` keeps answering throughout from another address.

mod support;

use std::io::Write;
use std::net::{Ipv4Addr, TcpStream};
use std::time::{Duration, Instant};

use support::hostile::{
    aggregate, ask, closed_within, connect_from, exchange, healthz, read_all, read_answer,
    write_request,
};
use support::legit::{HEALTHZ, Legit, READ, WRITE};
use support::process::{Process, data_dir};

const CLIENT: &str = "6f1c1c5e-6a4c-4f52-9a37-1e2a8d2f0001";

fn from(last: u8) -> Ipv4Addr {
    Ipv4Addr::new(127, 0, 0, last)
}

fn gateway(dir: &std::path::Path, extra: &[&str]) -> Process {
    let mut args = vec![
        "--auth",
        "none",
        "--header-read-timeout-ms",
        "500",
        "--body-read-timeout-ms",
        "500",
        "--idle-timeout-ms",
        "1500",
        "--request-timeout-ms",
        "1000",
    ];
    args.extend_from_slice(extra);
    Process::start(dir, &args)
}

/// Milliseconds, for the printed figures.
fn ms(d: Duration) -> u128 {
    d.as_millis()
}

fn range(times: &[Duration]) -> String {
    let min = times.iter().min().copied().unwrap_or_default();
    let max = times.iter().max().copied().unwrap_or_default();
    format!("{}..{} ms", ms(min), ms(max))
}

#[test]
fn idle_and_slow_connections_are_closed_on_time_and_healthz_keeps_answering() {
    let dir = data_dir();
    let gw = gateway(dir.path(), &["--max-connections-per-ip", "64"]);
    let started = Instant::now();
    // 64 connections that send nothing (127.0.0.2), 20 that send half a request line
    // (127.0.0.3), 20 whose body stalls after 10 of 100 bytes (127.0.0.4).
    let mut idle: Vec<TcpStream> = (0..64).map(|_| connect_from(from(2), &gw.addr)).collect();
    let mut partial: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut s = connect_from(from(3), &gw.addr);
            s.write_all(b"POST /v1/write HTTP/1.1\r\nHost: 127.0")
                .unwrap();
            s
        })
        .collect();
    let mut slow: Vec<TcpStream> = (0..20)
        .map(|_| {
            let mut s = connect_from(from(4), &gw.addr);
            s.write_all(
                b"POST /v1/write HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
                  Content-Length: 100\r\n\r\n{\"clientId\"",
            )
            .unwrap();
            s
        })
        .collect();
    // One more from the idle address is over its cap: answered at once, typed.
    let mut over = connect_from(from(2), &gw.addr);
    let refused = read_answer(&mut over, Duration::from_secs(2));
    assert_eq!(
        (refused.status, refused.code()),
        (429, 42900),
        "{refused:?}"
    );
    assert_eq!(refused.header("retry-after").as_deref(), Some("1"));
    // /healthz answers meanwhile, from another address.
    let health = healthz(&gw.addr);
    assert_eq!(health.status, 200);
    assert!(health.elapsed < Duration::from_millis(500), "{health:?}");

    // When each was seen closed (or answered), counted from when they were all open: the
    // first of each kind is exact, the others at most that late.
    let seen = |closed: Option<Duration>, what: &str| {
        closed.unwrap_or_else(|| panic!("{what} left open"));
        started.elapsed()
    };
    let idle_closed: Vec<Duration> = idle
        .iter_mut()
        .map(|s| {
            seen(
                closed_within(s, Duration::from_secs(3)),
                "an idle connection",
            )
        })
        .collect();
    let partial_closed: Vec<Duration> = partial
        .iter_mut()
        .map(|s| seen(closed_within(s, Duration::from_secs(3)), "slow headers"))
        .collect();
    let slow_answered: Vec<Duration> = slow
        .iter_mut()
        .map(|s| {
            let answer = read_answer(s, Duration::from_secs(3));
            assert_eq!((answer.status, answer.code()), (408, 40800), "{answer:?}");
            started.elapsed()
        })
        .collect();
    let all: Vec<&Duration> = idle_closed
        .iter()
        .chain(&partial_closed)
        .chain(&slow_answered)
        .collect();
    assert!(
        all.iter()
            .all(|d| **d >= Duration::from_millis(450) && **d < Duration::from_millis(2_000)),
        "idle {} / slow headers {} / slow bodies {}",
        range(&idle_closed),
        range(&partial_closed),
        range(&slow_answered)
    );
    println!(
        "timeouts (header 500 ms, body 500 ms), from when the connections were open: 64 idle \
         connections closed by {}, 20 with slow headers by {}, 20 slow bodies answered 408 \
         (40800) by {}; the 65th connection from one address answered 429 (42900) in {} ms; \
         /healthz answered 200 in {} ms meanwhile",
        range(&idle_closed),
        range(&partial_closed),
        range(&slow_answered),
        ms(refused.elapsed),
        ms(health.elapsed),
    );

    // A keep-alive connection left idle after its answer is closed by the header timeout.
    let mut kept = TcpStream::connect(&gw.addr).unwrap();
    kept.write_all(b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        .unwrap();
    assert_eq!(read_answer(&mut kept, Duration::from_secs(2)).status, 200);
    let kept_closed =
        closed_within(&mut kept, Duration::from_secs(3)).expect("keep-alive left open");
    assert!(kept_closed >= Duration::from_millis(400), "{kept_closed:?}");

    // A client that asks for a large page and stops reading is cut off by the idle timeout.
    let big = vec![0x42u8; 1 << 20];
    let stored = exchange(
        &gw.addr,
        &write_request(
            CLIENT,
            &aggregate(7),
            &[(1, &big), (2, &big), (3, &big)],
            "Connection: close\r\n",
        ),
        Duration::from_secs(30),
    );
    // A debug build may take longer than the 1 s deadline over 4 MB: a 504 means "may still
    // land", so wait for it.
    assert!(matches!(stored.status, 200 | 504), "{stored:?}");
    let deadline = Instant::now() + Duration::from_secs(30);
    while read_all(&gw.addr, &aggregate(7), "").len() < 3 {
        assert!(Instant::now() < deadline, "the large write never landed");
        std::thread::sleep(Duration::from_millis(100));
    }
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket
        .connect(&gw.addr.parse::<std::net::SocketAddr>().unwrap().into())
        .unwrap();
    let mut stalled: TcpStream = socket.into();
    let asked = Instant::now();
    write!(
        stalled,
        "GET /v1/aggregates/{}/{}/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        support::app::TYPE,
        aggregate(7)
    )
    .unwrap();
    std::thread::sleep(Duration::from_millis(2_500));
    let mut received = Vec::new();
    let _ = std::io::Read::read_to_end(&mut stalled, &mut received);
    let page = 3 * big.len() * 4 / 3;
    assert!(
        received.len() < page,
        "the whole page arrived ({} bytes): the connection was not cut",
        received.len()
    );
    println!(
        "idle timeout (1.5 s): a reader that stopped after {} of {} bytes was cut off (looked \
         at {} ms after asking); a keep-alive connection idle after its answer closed after {} ms",
        received.len(),
        page,
        ms(asked.elapsed()),
        ms(kept_closed)
    );
    assert_eq!(healthz(&gw.addr).status, 200);
}

#[test]
fn a_full_pool_makes_the_heaviest_address_give_way_and_refuses_only_when_none_is_heavier() {
    let dir = data_dir();
    // Headers may take 3 s here, so the idle connections outlive the checks below.
    let gw = Process::start(
        dir.path(),
        &[
            "--auth",
            "none",
            "--header-read-timeout-ms",
            "3000",
            "--max-connections",
            "40",
            "--max-connections-per-ip",
            "30",
        ],
    );
    // 20 + 20 idle connections fill the pool.
    let mut a: Vec<TcpStream> = (0..20).map(|_| connect_from(from(5), &gw.addr)).collect();
    let mut b: Vec<TcpStream> = (0..20).map(|_| connect_from(from(6), &gw.addr)).collect();
    // The cap is counted when a connection is accepted: wait until all 40 are.
    std::thread::sleep(Duration::from_millis(100));
    // A 21st from either would make it the heaviest: refused at once, nothing evicted.
    let refused = ask(
        from(6),
        &gw.addr,
        b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        Duration::from_secs(2),
    );
    assert_eq!(
        (refused.status, refused.code()),
        (429, 42900),
        "{refused:?}"
    );
    assert!(refused.json()["retryAfterMs"].as_u64().is_some());
    // A newcomer from a third address takes the place of the oldest idle one of the heaviest.
    let health = healthz(&gw.addr);
    assert_eq!(health.status, 200, "{health:?}");
    let evicted: Vec<usize> = a
        .iter_mut()
        .chain(b.iter_mut())
        .enumerate()
        .filter_map(|(i, s)| closed_within(s, Duration::from_millis(20)).map(|_| i))
        .collect();
    assert!(
        evicted.len() == 1 && (evicted[0] == 0 || evicted[0] == 20),
        "exactly one connection, the oldest of one of the two heaviest, gave way: {evicted:?}"
    );
    // The held connections send nothing: the header timeout closes them, and places come back.
    for s in a.iter_mut().chain(b.iter_mut()) {
        closed_within(s, Duration::from_secs(5)).expect("closed by the header timeout");
    }
    assert_eq!(healthz(&gw.addr).status, 200);
}

/// Issue 26: 8 addresses holding 256 keep-alive connections each took all 2,048 places, and a
/// legitimate client got 0 of 75 requests answered. Scaled down (64 places, 4 attacking
/// addresses × 16 keep-alives that re-open whatever is closed), the legitimate client on its
/// own address is answered every time, and the attackers never hold more than the pool.
#[test]
fn keep_alives_from_a_few_addresses_cannot_hold_the_pool() {
    attack_the_pool(false);
}

/// The same with every attacking connection in the middle of a request: a `POST /v1/watch`
/// whose body arrives at 2 KB/s (above the minimum rate). A request still receiving its body
/// has applied nothing, so its connection may give way (hostile review: when every request in
/// progress was protected, this kept the pool held as before).
#[test]
fn bodies_in_progress_from_a_few_addresses_cannot_hold_the_pool() {
    attack_the_pool(true);
}

fn attack_the_pool(trickle: bool) {
    use std::sync::Arc;
    use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

    let dir = data_dir();
    let gw = Process::start(
        dir.path(),
        &[
            "--auth",
            "none",
            "--max-connections",
            "64",
            "--max-connections-per-ip",
            "16",
            // The device's watches close after `ready`: their connections are freed at the
            // next heartbeat at the latest, so they cannot pile up against its per-address cap.
            "--watch-heartbeat-secs",
            "1",
        ],
    );
    let stop = Arc::new(AtomicBool::new(false));
    let reopened = Arc::new(AtomicUsize::new(0));
    let attackers: Vec<_> = (0..4u8)
        .map(|n| {
            let (addr, stop, reopened) = (gw.addr.clone(), stop.clone(), reopened.clone());
            std::thread::spawn(move || {
                let keep_alive = b"GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n";
                let slow_watch = b"POST /v1/watch HTTP/1.1\r\nHost: 127.0.0.1\r\n\
                    Content-Type: application/json\r\nContent-Length: 20000\r\n\r\n";
                let open = || {
                    let mut s = connect_from(from(11 + n), &addr);
                    if trickle {
                        let _ = s.write_all(slow_watch);
                    } else {
                        let _ = s.write_all(keep_alive);
                        let _ = read_answer(&mut s, Duration::from_secs(2));
                    }
                    s
                };
                let mut held: Vec<TcpStream> = (0..16).map(|_| open()).collect();
                while !stop.load(Ordering::Relaxed) {
                    for s in held.iter_mut() {
                        if closed_within(s, Duration::from_millis(1)).is_some() {
                            *s = open();
                            reopened.fetch_add(1, Ordering::Relaxed);
                        } else if trickle {
                            // 40 bytes every ~20 ms: about 2 KB/s.
                            let _ = s.write_all(&[b' '; 40]);
                        }
                    }
                    std::thread::sleep(Duration::from_millis(20));
                }
            })
        })
        .collect();
    std::thread::sleep(Duration::from_millis(500));
    // The pool is full of the attackers' keep-alives: measured before the fix, the client
    // below got 429 42900 on every connection. It writes, reads, watches and checks
    // `/healthz` in turn (15 of each).
    let mut device = Legit::new(from(20), &gw.addr, &aggregate(20), CLIENT);
    device.rounds(60, Duration::from_millis(100));
    stop.store(true, Ordering::Relaxed);
    for a in attackers {
        a.join().unwrap();
    }
    println!(
        "attackers re-opened {} connections",
        reopened.load(Ordering::Relaxed)
    );
    let tally = &device.tally;
    tally.print(if trickle {
        "4 addresses holding the pool with bodies in progress"
    } else {
        "4 addresses holding the pool with keep-alives"
    });
    tally.assert_each_kind(8);
    // Writes, reads and health checks were all answered before the watches were measured:
    // they still are.
    for kind in [WRITE, READ, HEALTHZ] {
        assert_eq!(tally.ok[kind], tally.asked[kind], "{tally:?}");
    }
}
