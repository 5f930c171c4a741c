//! One client must not hold the whole of a memory budget (security review, real process).
//!
//! Writes: the gateway reserves a write's declared `Content-Length` from `--write-buffer-bytes`
//! before reading the body and holds it while the body arrives. Eight requests declaring the
//! largest body plus one for the remainder, each sending one byte, once took the whole 64 MiB,
//! and an ordinary write of another client was refused 429 (42900) for as long as they
//! trickled. Now each address (and each client id) holds at most an eighth of the budget: the
//! second slow body of that address is refused 429 (42910, `Retry-After`), and the other
//! client's write lands.

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
    let gateway = Process::start(dir.path(), &["--auth", "none"]);
    let limit = celeriant_sync_protocol::body_size::max_write_body_bytes(
        &celeriant_sync_protocol::Limits::default(),
    );
    let budget: usize = 64 << 20;
    let attacker = Ipv4Addr::new(127, 0, 0, 1);
    let mut lengths = vec![limit; 8];
    lengths.push(budget - 8 * limit);
    let mut held: Vec<TcpStream> = lengths
        .iter()
        .map(|&n| slow_write(attacker, &gateway.addr, n))
        .collect();
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
    drop(held);
}
