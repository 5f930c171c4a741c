//! Rot: a flipped byte in a stored payload is detected on read and by `verify` (issue 15,
//! real process).
//!
//! The finding: three base64 characters changed inside the store file were served back as
//! valid data. Now every stored batch carries a checksum: here one byte of one payload is
//! flipped in the file of a stopped gateway; `celeriant-gateway verify` names the batch and
//! exits 1; the restarted gateway answers a read of that aggregate 500 (50001, naming the
//! aggregate and version) instead of the data, counts the failure in `/healthz` (still 200:
//! the rest of the store is sound; the count only, the aggregate is named in the log) and in
//! `/metrics`, serves every other aggregate, and keeps taking writes.

mod support;

use std::path::Path;
use std::time::Duration;

use support::hostile::{aggregate, exchange, healthz, read_all, write_request};
use support::process::{Process, data_dir};

const CLIENT: &str = "6f1c1c5e-6a4c-4f52-9a37-1e2a8d2f0001";

fn verify(data: &Path) -> (i32, String) {
    let out = support::process::command(&["verify", "--data-dir"])
        .arg(data)
        .output()
        .unwrap();
    (
        out.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr),
    )
}

fn write(addr: &str, id: u64, seq: u64, payload: &[u8]) -> u16 {
    exchange(
        addr,
        &write_request(
            CLIENT,
            &aggregate(id),
            &[(seq, payload)],
            "Connection: close\r\n",
        ),
        Duration::from_secs(10),
    )
    .status
}

#[test]
fn a_flipped_byte_is_detected_on_read_and_by_verify() {
    let dir = data_dir();
    let db = dir.path().join("db");
    let mut gw = Process::start(dir.path(), &["--auth", "none"]);
    let rotting = b"this payload will rot on disk";
    assert_eq!(write(&gw.addr, 1, 1, b"sound before"), 200);
    assert_eq!(write(&gw.addr, 1, 2, rotting), 200);
    assert_eq!(write(&gw.addr, 2, 1, b"a sound neighbour"), 200);
    gw.stop();
    let (status, report) = verify(&db);
    assert_eq!(status, 0, "{report}");
    assert!(
        report.starts_with("ok: 3 batches, 2 aggregates"),
        "{report}"
    );

    // Flip one bit in the middle of the payload's base64, in every copy redb left in the file.
    let file = db.join("celeriant-gateway.redb");
    let mut bytes = std::fs::read(&file).unwrap();
    let needle = celeriant_sync_protocol::encoding::encode_base64(rotting);
    let needle = needle.as_bytes();
    let mut flipped = 0;
    let mut at = 0;
    while let Some(found) = bytes[at..].windows(needle.len()).position(|w| w == needle) {
        bytes[at + found + needle.len() / 2] ^= 0x01;
        flipped += 1;
        at += found + needle.len();
    }
    assert!(flipped > 0, "the payload is in the file");
    std::fs::write(&file, bytes).unwrap();

    let (status, report) = verify(&db);
    assert_eq!(status, 1, "{report}");
    let expected = format!(
        "DAMAGED batch 2 of aggregate {}/{} (org 00000000-0000-0000-0000-000000000001) fails its checksum",
        support::app::TYPE,
        aggregate(1)
    );
    assert!(report.contains(&expected), "{report}");
    assert!(
        report.contains("damaged: 3 batches, 2 aggregates"),
        "{report}"
    );

    let metrics = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string();
    let gw = Process::start(
        dir.path(),
        &["--auth", "none", "--metrics-listen", &metrics],
    );
    let request = format!(
        "GET /v1/aggregates/{}/{}/events HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
        support::app::TYPE,
        aggregate(1)
    );
    let read = exchange(&gw.addr, request.as_bytes(), Duration::from_secs(5));
    assert_eq!((read.status, read.code()), (500, 50001), "{read:?}");
    let message = read.json()["message"].as_str().unwrap().to_owned();
    assert!(
        message.contains(&format!(
            "batch 2 of aggregate {}/{}",
            support::app::TYPE,
            aggregate(1)
        )),
        "{message}"
    );
    assert!(
        !String::from_utf8_lossy(&read.body).contains("dGhpcyBwYXlsb2Fk"),
        "no part of the payload is served"
    );
    assert_eq!(read.json()["outcome"], "retry");
    let health = healthz(&gw.addr);
    assert_eq!(health.status, 200, "{health:?}");
    let store = &health.json()["store"];
    assert_eq!(store["checksumFailures"], 1, "{store}");
    // Only the count: which aggregate is damaged is for the operator's log, and `/healthz`
    // answers anyone.
    assert!(store.get("lastChecksumFailure").is_none(), "{store}");
    // And in /metrics, for an alert.
    let scrape = support::process::raw(
        &metrics,
        "GET /metrics HTTP/1.1\r\nHost: 127.0.0.1\r\nConnection: close\r\n\r\n",
    );
    assert!(
        scrape.contains("\nceleriant_gateway_store_checksum_failures_total 1\n"),
        "{scrape}"
    );
    assert!(
        !health.json().to_string().contains(&aggregate(1)),
        "no aggregate named in /healthz: {store}"
    );
    assert_eq!(read_all(&gw.addr, &aggregate(2), "").len(), 1);
    assert_eq!(write(&gw.addr, 1, 3, b"still writable"), 200);
    assert_eq!(write(&gw.addr, 3, 1, b"new aggregate"), 200);
    println!(
        "rot: one bit flipped in {flipped} cop{} of a payload in the store file: verify exited \
         1 naming it; a read of its aggregate answered 500 (50001): {message}; /healthz \
         counted {} checksum failure and stayed 200; writes went on",
        if flipped == 1 { "y" } else { "ies" },
        store["checksumFailures"]
    );
}

/// A trimmed aggregate is sound (security review): `verify` expects its batches from the trim
/// mark on, not from 1 (it used to report every trimmed aggregate as damaged), and the trim
/// gives the bytes removed back to the writer's quota (it used to keep counting them: a client
/// whose batches were trimmed stayed over its quota for good, and `verify` then reported its
/// usage as wrong too).
#[test]
fn a_trim_is_sound_to_verify_and_frees_the_writers_quota() {
    let dir = data_dir();
    let db = dir.path().join("db");
    // Room for three of the ~13.7 KB batches below, not four.
    let mut gw = Process::start(
        dir.path(),
        &["--auth", "none", "--faults", "--store-quota-bytes", "45000"],
    );
    let payload = vec![0x33u8; 10_000];
    for seq in 1..=3 {
        assert_eq!(write(&gw.addr, 7, seq, &payload), 200);
    }
    assert_eq!(write(&gw.addr, 7, 4, &payload), 403, "over the quota");
    let trimmed = gw.faults_post(
        "/v1/faults/trim",
        &serde_json::json!({"typeId": support::app::TYPE, "id": aggregate(7), "before": 3}),
    );
    assert_eq!(trimmed.json["minVersion"], 3, "{:?}", trimmed.json);
    assert_eq!(
        write(&gw.addr, 7, 4, &payload),
        200,
        "the two batches trimmed no longer count against the quota"
    );
    gw.stop();
    let (status, report) = verify(&db);
    assert_eq!(status, 0, "{report}");
    assert!(
        report.starts_with("ok: 2 batches, 1 aggregates, 1 trim marks"),
        "{report}"
    );
}
