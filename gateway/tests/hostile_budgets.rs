//! One client must not hold the whole of a memory budget (security review, real process).
//!
//! Writes: the gateway reserved a write's declared `Content-Length` from `--write-buffer-bytes`
//! before reading the body and held it while the body arrived. Eight requests declaring the
//! largest body plus one for the remainder, each sending one byte, once took the whole 64 MiB,
//! and an ordinary write of another client was refused 429 (42900) for as long as they
//! trickled. Now each address (and each client id) holds at most an eighth of the budget: the
//! second slow body of that address is refused 429 (42910, `Retry-After`), and the other
//! client's write lands. (A write now reserves at most 64 KiB before its bytes arrive and
//! grows as they do, issue 26; so the share is shown here with 64 KiB bodies, which are
//! reserved whole at once, in a 512 KiB budget. The slow body that got in is cut by the
//! minimum body rate: `hostile_bodies.rs`.)

mod support;

use std::io::Write;
use std::net::{Ipv4Addr, TcpStream};
use std::time::Duration;

use support::hostile::{aggregate, connect_from, read_answer, write_request};
use support::process::{Process, data_dir};

const OTHER: &str = "6f1c1c5e-6a4c-4f52-9a37-1e2a8d2f0003";

/// Headers of a write declaring `length` bytes, then the first byte of its body.
fn slow_write(from: Ipv4Addr, addr: &str, length: usize) -> TcpStream {
    let mut stream = connect_from(from, addr);
    let head = format!(
        "POST /v1/write HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {length}\r\n\r\n{{"
    );
    stream.write_all(head.as_bytes()).unwrap();
    stream
}

#[test]
fn slow_bodies_of_one_address_cannot_take_the_whole_write_budget() {
    let dir = data_dir();
    // Bodies of 64 KiB (the first reservation, so reserved whole before a byte arrives).
    let limit: usize = 64 << 10;
    let budget: usize = 8 * limit;
    let gateway = Process::start(
        dir.path(),
        &[
            "--auth",
            "none",
            "--max-body-bytes",
            &limit.to_string(),
            "--write-buffer-bytes",
            &budget.to_string(),
        ],
    );
    let attacker = Ipv4Addr::new(127, 0, 0, 1);
    let lengths = [limit; 9];
    // The first is admitted and takes the address's share; only then the others come (the
    // gateway serves connections concurrently: sent together, any one of them could be first).
    let mut held = vec![slow_write(attacker, &gateway.addr, lengths[0])];
    std::thread::sleep(Duration::from_millis(500));
    held.extend(
        lengths[1..]
            .iter()
            .map(|&n| slow_write(attacker, &gateway.addr, n)),
    );
    std::thread::sleep(Duration::from_millis(500));

    // Another client, from another address, with an ordinary write.
    let mut victim = connect_from(Ipv4Addr::new(127, 0, 0, 2), &gateway.addr);
    victim
        .write_all(&write_request(OTHER, &aggregate(1), &[(1, b"hello")], ""))
        .unwrap();
    let answer = read_answer(&mut victim, Duration::from_secs(10));
    assert_eq!(
        (answer.status, answer.json()["outcome"].as_str()),
        (200, Some("landed")),
        "an ordinary write of another address is refused while one address trickles: {answer:?}"
    );

    // The attacker's address was refused beyond its share, at once, with a wait to retry.
    let mut refused = 0;
    for stream in held.iter_mut().skip(1) {
        let answer = read_answer(stream, Duration::from_secs(2));
        if answer.status == 429 {
            assert_eq!(answer.code(), 42910, "{answer:?}");
            assert_eq!(answer.json()["outcome"], "retry");
            assert_eq!(answer.header("retry-after").as_deref(), Some("1"));
            refused += 1;
        }
    }
    assert_eq!(
        refused, 8,
        "every slow body past the address's share is refused"
    );
    // The body that got in falls behind the minimum rate: released 2 s after its headers.
    let first = read_answer(&mut held[0], Duration::from_secs(5));
    assert_eq!((first.status, first.code()), (408, 40800), "{first:?}");
    drop(held);
}

/// Writes one batch of four 1 MiB events to aggregate `id` (read back as a 5.6 MB page).
fn write_large_batch(addr: &str, id: &str) {
    let mb = vec![0x42u8; 1 << 20];
    let events: Vec<(u64, &[u8])> = (1..=4).map(|s| (s, mb.as_slice())).collect();
    let mut writer = TcpStream::connect(addr).unwrap();
    writer
        .write_all(&write_request(OTHER, id, &events, "Connection: close\r\n"))
        .unwrap();
    let answer = read_answer(&mut writer, Duration::from_secs(30));
    assert_eq!(answer.status, 200, "{}", answer.head);
}

/// A `GET` of aggregate `id` from a socket with a small receive buffer that is not read yet.
fn idle_reader(addr: &str, id: &str) -> TcpStream {
    idle_reader_from(Ipv4Addr::LOCALHOST, addr, id)
}

/// Asks from `from` until a page is served, for up to 3 s: a page's reservation is given back
/// once its bytes are acknowledged, seen by the connection's next look at its send queue
/// (every 25 ms), so a request sent the instant the last byte was read may still be refused.
fn served_again_from(from: Ipv4Addr, addr: &str, id: &str) -> Duration {
    let started = std::time::Instant::now();
    loop {
        let mut again = idle_reader_from(from, addr, id);
        let answer = read_answer(&mut again, Duration::from_secs(30));
        if answer.status == 200 {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < Duration::from_secs(3),
            "the reservation was not given back: {}",
            answer.head
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// [`idle_reader`] from the loopback address `from`.
fn idle_reader_from(from: Ipv4Addr, addr: &str, id: &str) -> TcpStream {
    let target: std::net::SocketAddr = addr.parse().unwrap();
    let socket = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    socket.set_recv_buffer_size(4096).unwrap();
    socket
        .bind(&std::net::SocketAddr::from((from, 0)).into())
        .unwrap();
    socket.connect(&target.into()).unwrap();
    let mut stream: TcpStream = socket.into();
    let request = format!(
        "GET /v1/aggregates/{}/{id}/events HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        support::app::TYPE
    );
    stream.write_all(request.as_bytes()).unwrap();
    stream
}

/// Reads: a page's bytes are reserved from `--read-buffer-bytes` until the connection has
/// taken them. The page used to go out as one frame: hyper took it, saw the end of the body
/// and dropped it (giving the reservation back) while the whole page still sat in its write
/// buffer for a reader that did not read, so any number of such readers held pages beyond the
/// budget. Now the page goes out in 64 KiB frames and the reservation is held until the last
/// is taken: past the budget the readers are refused 429 (42900).
#[test]
fn pages_held_for_readers_that_do_not_read_stay_within_the_read_budget() {
    let dir = data_dir();
    // Room for one page of the 5.6 MB batch below (the smallest budget the flags allow).
    let budget = celeriant_sync_protocol::body_size::max_write_body_bytes(
        &celeriant_sync_protocol::Limits::default(),
    );
    let gateway = Process::start(
        dir.path(),
        &["--auth", "none", "--read-buffer-bytes", &budget.to_string()],
    );
    let id = aggregate(2);
    write_large_batch(&gateway.addr, &id);

    const READERS: usize = 6;
    // One after the other, each once the one before is answered (and not read).
    let mut readers: Vec<TcpStream> = (0..READERS)
        .map(|_| {
            let reader = idle_reader(&gateway.addr, &id);
            std::thread::sleep(Duration::from_millis(400));
            reader
        })
        .collect();
    let answers: Vec<_> = readers
        .iter_mut()
        .map(|r| read_answer(r, Duration::from_secs(30)))
        .collect();
    let served = answers.iter().filter(|a| a.status == 200).count();
    let refused = answers
        .iter()
        .filter(|a| a.status == 429 && a.code() == 42900)
        .count();
    println!("{READERS} readers that do not read: {served} served, {refused} refused 429 (42900)");
    assert_eq!(
        (served, refused),
        (1, READERS - 1),
        "one page fits the read budget; the others must be refused while it is unread"
    );
    assert!(
        answers
            .iter()
            .filter(|a| a.status == 200)
            .all(|a| a.body.len() > 5_000_000),
        "the page is served whole"
    );

    // Once taken, the reservation is given back.
    let back = served_again_from(Ipv4Addr::LOCALHOST, &gateway.addr, &id);
    println!("the page taken, a reader was served again within {back:.1?}");
}

/// Reads, per address: with the default 64 MiB read budget, pages that an address asks for
/// and does not read used to be held for it up to the whole budget (eleven 5.6 MB pages), so
/// one address that stopped reading refused every other reader 429 (42900) until its
/// connections idled out. Now an address (and a client id) holds at most an eighth of the
/// budget unsent: its second such page is refused 429 (42910, `Retry-After: 1`), another
/// address is served meanwhile, and the share comes back once the page was taken.
#[test]
fn pages_one_address_does_not_read_hold_at_most_its_share_of_the_read_budget() {
    let dir = data_dir();
    let gateway = Process::start(dir.path(), &["--auth", "none"]);
    let id = aggregate(3);
    write_large_batch(&gateway.addr, &id);

    let hoarder = Ipv4Addr::new(127, 0, 0, 1);
    let mut first = idle_reader_from(hoarder, &gateway.addr, &id);
    std::thread::sleep(Duration::from_millis(400));
    let mut second = idle_reader_from(hoarder, &gateway.addr, &id);
    let refused = read_answer(&mut second, Duration::from_secs(30));
    assert_eq!(
        (refused.status, refused.code()),
        (429, 42910),
        "a second unread page of one address is past its share: {}",
        refused.head
    );
    assert_eq!(refused.json()["outcome"], "retry");
    assert_eq!(refused.header("retry-after").as_deref(), Some("1"));

    let mut other = idle_reader_from(Ipv4Addr::new(127, 0, 0, 2), &gateway.addr, &id);
    let served = read_answer(&mut other, Duration::from_secs(30));
    assert_eq!(
        served.status, 200,
        "another address is served: {}",
        served.head
    );
    assert!(served.body.len() > 5_000_000, "the page is served whole");

    // The first page, read at last, gives the address its share back.
    let page = read_answer(&mut first, Duration::from_secs(30));
    assert_eq!(page.status, 200, "{}", page.head);
    served_again_from(hoarder, &gateway.addr, &id);
    println!(
        "read budget per address: 1 unread 5.6 MB page held, the 2nd refused 429 (42910), another address served"
    );
}
