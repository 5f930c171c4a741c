//! A flood of valid sessions from many addresses must not lock new devices out (issue 26,
//! real process).
//!
//! Every accepted `POST /v1/session` is remembered (key, nonce) for the nonce window, in a
//! cache of `--session-replay-capacity` entries. 105,000 sessions from 3,500 addresses (the
//! /64s of one IPv6 /52) filled it, and a brand-new device was refused 429 (42901) for about
//! two minutes. Scaled down here (capacity 60; 20 loopback addresses × 4 sessions, each a fresh
//! nonce of one valid key), the new device on an address of its own still opens its session,
//! while the flooding addresses are refused once over their share.

mod support;

use std::net::Ipv4Addr;
use std::time::Duration;

use support::device::{Device, fresh_nonce};
use support::hostile::{Raw, ask};
use support::process::{Process, data_dir};

fn session_from(from: Ipv4Addr, addr: &str, device: &Device) -> Raw {
    let body = device.session_body(fresh_nonce()).to_string();
    let request = format!(
        "POST /v1/session HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n\
         Content-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    ask(from, addr, request.as_bytes(), Duration::from_secs(5))
}

#[test]
fn a_flood_of_sessions_from_many_addresses_leaves_room_for_a_new_device() {
    let dir = data_dir();
    let gw = Process::start(
        dir.path(),
        &[
            "--session-replay-capacity",
            "60",
            "--session-burst",
            "10",
            "--session-rate-per-minute",
            "600",
        ],
    );
    let flooder = Device::a();
    let (mut opened, mut refused) = (0, 0);
    for a in 0..20u8 {
        for _ in 0..4 {
            let r = session_from(Ipv4Addr::new(127, 0, 1, 10 + a), &gw.addr, &flooder);
            match (r.status, r.code()) {
                (200, _) => opened += 1,
                (429, 42901) => refused += 1,
                other => panic!("unexpected answer {other:?}: {r:?}"),
            }
        }
    }
    // The cache is full: 60 at once, then each address up to its share (60 / 20 = 3).
    println!("flood: {opened} sessions opened, {refused} refused 429 (42901)");
    assert!(
        opened >= 60 && refused > 0,
        "{opened} opened, {refused} refused"
    );
    // Still over its share: the flooding address is refused.
    let again = session_from(Ipv4Addr::new(127, 0, 1, 10), &gw.addr, &flooder);
    assert_eq!((again.status, again.code()), (429, 42901), "{again:?}");
    // A brand-new device on its own address gets its session (before: 429 for 2 minutes).
    let new = session_from(Ipv4Addr::new(127, 0, 1, 99), &gw.addr, &Device::b());
    assert_eq!(new.status, 200, "{new:?}");
    assert!(new.json()["token"].as_str().is_some());
}
