//! The Celeriant backend over a three-node fake cluster (`testkit/fake-celeriant`), through a
//! real gateway process given every node as a seed address: `celeriant_client_tokio`'s leader
//! routing (2011 answers naming the leader, followed by the pool) and the gateway's
//! classification across leader changes.
//!
//! The bar, per write: it lands exactly once in the shared store; a write in flight on the old
//! leader when leadership moves is answered as the protocol says — `unknown` when the old leader
//! went silent (whether or not it had committed it), `landed` when it refused it with 2011 and
//! the pool took it to the new leader — never a false `landed` or `rejected`; the identical
//! resend lands (as a duplicate when the silent leader had committed it). Reads and the change
//! stream keep working while the upstream connections of the old leader are dropped. During an
//! election (every node answers 2011 without an address) a write is `retry` (2011), and lands
//! once a leader is elected.

mod support;

use std::thread;
use std::time::{Duration, Instant};

use fake_celeriant::{FakeCluster, Held};
use serde_json::{Value, json};
use support::app::{TYPE, write_by};
use support::device::{Device, fresh_nonce};
use support::process::{Process, data_dir, get, post};
use support::sse;

const ID: &str = "3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e0a01";
const WAIT: Duration = Duration::from_secs(10);

fn session(base: &str, device: &Device) -> String {
    let r = post(
        base,
        "/v1/session",
        None,
        &device.session_body(fresh_nonce()),
    );
    assert_eq!(r.status, 200, "{:?}", r.json);
    r.json["token"].as_str().unwrap().to_owned()
}

/// One write of `seq` to the test's aggregate: (status, body).
fn write(base: &str, token: &str, device: &Device, seq: u64) -> (u16, Value) {
    let r = post(
        base,
        "/v1/write",
        Some(token),
        &write_by(&device.client_id, TYPE, ID, &[seq]),
    );
    (r.status, r.json)
}

/// The client sequences stored in the cluster's shared store, in log order.
fn stored_seqs(cluster: &FakeCluster) -> Vec<u64> {
    cluster
        .dump()
        .into_iter()
        .filter(|(key, _)| uuid::Uuid::from_u128(key.aggregate_id).to_string() == ID)
        .flat_map(|(_, batches)| batches)
        .flat_map(|b| b.events.into_iter().map(|e| e.client_seq))
        .collect()
}

/// The client sequences the gateway reads back.
fn read_seqs(base: &str, token: &str) -> Vec<u64> {
    let r = get(
        base,
        &format!("/v1/aggregates/{TYPE}/{ID}/events"),
        Some(token),
    );
    assert_eq!(r.status, 200, "{:?}", r.json);
    r.json["batches"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|b| b["events"].as_array().unwrap().clone())
        .map(|e| e["clientSeq"].as_u64().unwrap())
        .collect()
}

/// Waits (at most `WAIT`) until the cluster holds `n` writes.
fn until_held(cluster: &FakeCluster, n: usize) {
    let deadline = Instant::now() + WAIT;
    while cluster.held() < n {
        assert!(
            Instant::now() < deadline,
            "the leader never received the write"
        );
        thread::sleep(Duration::from_millis(5));
    }
}

/// Reads the stream until a `changed` at `version` comes (resyncs and heartbeats in between
/// are allowed: the upstream watch may have been dropped), at most `WAIT`.
fn until_changed(stream: &mut sse::Stream, version: u64) -> Vec<String> {
    let deadline = Instant::now() + WAIT;
    let mut seen = Vec::new();
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match stream.next(left) {
            sse::Next::Event(e) if e.event == "changed" && e.data["version"] == version => {
                assert_eq!(e.data["id"], ID);
                return seen;
            }
            sse::Next::Event(e) => seen.push(e.event),
            other => {
                panic!("no change to version {version} on the stream: {other:?} after {seen:?}")
            }
        }
    }
}

/// Writes `seq` while the leader holds it, moves leadership to `to` settling it as `held`, and
/// returns the gateway's answer to the held write.
fn write_across_a_change(
    cluster: &FakeCluster,
    gw: &Process,
    token: &str,
    seq: u64,
    to: usize,
    held: Held,
    drop_connections: bool,
) -> (u16, Value) {
    cluster.hold_writes();
    let (base, token) = (gw.base.clone(), token.to_owned());
    let writer = thread::spawn(move || write(&base, &token, &Device::a(), seq));
    until_held(cluster, 1);
    cluster.change_leader(to, held, drop_connections);
    writer.join().unwrap()
}

#[test]
fn writes_follow_the_leader_and_land_exactly_once_across_leader_changes() {
    let cluster = FakeCluster::start(3);
    let nodes = cluster.addresses();
    // Node 1 leads before the gateway's first request: the first seed (node 0) redirects.
    cluster.change_leader(1, Held::Refused, false);
    let dir = data_dir();
    let mut args = vec!["--backend", "celeriant", "--session-rate-per-minute", "0"];
    args.extend(nodes.iter().flat_map(|n| ["--celeriant-addr", n.as_str()]));
    args.extend(["--request-timeout-ms", "5000"]);
    let gw = Process::start(dir.path(), &args);
    let device = Device::a();
    let token = session(&gw.base, &device);

    let body = json!({"aggregates": [{"typeId": TYPE, "id": ID}]});
    let mut stream = sse::open(&gw.addr, "POST", "/v1/watch", Some(&token), Some(&body));
    assert_eq!(stream.status, 200, "{}", stream.body);
    assert_eq!(stream.expect(WAIT).event, "ready");

    // The first write goes to node 0, is refused with 2011 naming node 1, and lands there.
    let (status, r) = write(&gw.base, &token, &device, 1);
    assert_eq!(
        (status, &r["outcome"], &r["duplicate"]),
        (200, &json!("landed"), &json!(false))
    );
    assert_eq!(cluster.not_leader_per_node()[0], 1, "node 0 redirected");
    assert!(cluster.writes_per_node()[1] >= 1, "node 1 took the write");
    until_changed(&mut stream, 1);

    // A plain leader change, the old leader dropping every connection it had (the gateway's
    // pooled ones and its upstream watch): the next write is redirected and lands.
    cluster.change_leader(2, Held::Refused, true);
    thread::sleep(Duration::from_millis(100));
    let (status, r) = write(&gw.base, &token, &device, 2);
    assert_eq!(
        (status, &r["outcome"], &r["aggregateVersion"]),
        (200, &json!("landed"), &json!(2))
    );
    until_changed(&mut stream, 2);

    // In flight on the old leader, committed, never answered (its connections drop): unknown,
    // never landed or rejected. The identical resend reaches the new leader through a 2011
    // and is a duplicate of the committed write.
    let (status, r) = write_across_a_change(&cluster, &gw, &token, 3, 0, Held::Applied, true);
    assert_eq!(
        (status, &r["outcome"], &r["code"]),
        (502, &json!("unknown"), &json!(50200)),
        "{r}"
    );
    assert_eq!(stored_seqs(&cluster), [1, 2, 3]);
    let (status, r) = write(&gw.base, &token, &device, 3);
    assert_eq!(
        (status, &r["outcome"], &r["duplicate"]),
        (200, &json!("landed"), &json!(true)),
        "{r}"
    );
    assert_eq!(r["code"], 2002);
    until_changed(&mut stream, 3);

    // In flight, lost (never committed, never answered): unknown; the resend lands for real.
    let (status, r) = write_across_a_change(&cluster, &gw, &token, 4, 1, Held::Lost, false);
    assert_eq!(
        (status, &r["outcome"], &r["code"]),
        (502, &json!("unknown"), &json!(50200)),
        "{r}"
    );
    assert_eq!(stored_seqs(&cluster), [1, 2, 3]);
    let (status, r) = write(&gw.base, &token, &device, 4);
    assert_eq!(
        (status, &r["outcome"], &r["duplicate"]),
        (200, &json!("landed"), &json!(false)),
        "{r}"
    );
    assert_eq!(r["aggregateVersion"], 4);
    until_changed(&mut stream, 4);

    // In flight, refused by the stepping-down leader with 2011 naming the new one: nothing was
    // applied, so the pool takes it there within the same request, and it lands once.
    let before = cluster.not_leader_per_node()[1];
    let (status, r) = write_across_a_change(&cluster, &gw, &token, 5, 2, Held::Refused, false);
    assert_eq!(
        (status, &r["outcome"], &r["duplicate"]),
        (200, &json!("landed"), &json!(false)),
        "{r}"
    );
    assert_eq!(r["aggregateVersion"], 5);
    assert_eq!(cluster.not_leader_per_node()[1], before + 1);
    until_changed(&mut stream, 5);

    // Exactly once each, in order, in the store and read back through the gateway.
    assert_eq!(stored_seqs(&cluster), [1, 2, 3, 4, 5]);
    assert_eq!(read_seqs(&gw.base, &token), [1, 2, 3, 4, 5]);
    assert_eq!(cluster.changes(), 5);
    assert!(
        cluster.watches() >= 1,
        "the gateway's upstream watch is open again"
    );
}

#[test]
fn a_leader_hint_outside_the_seed_list_is_followed() {
    // A gateway told of one node only (a follower): the 2011 it answers names the leader, which
    // the pool dials although no flag named it.
    let cluster = FakeCluster::start(2);
    let nodes = cluster.addresses();
    let dir = data_dir();
    let gw = Process::start(
        dir.path(),
        &[
            "--backend",
            "celeriant",
            "--session-rate-per-minute",
            "0",
            "--celeriant-addr",
            &nodes[1],
        ],
    );
    let device = Device::a();
    let token = session(&gw.base, &device);
    let (status, r) = write(&gw.base, &token, &device, 1);
    assert_eq!((status, &r["outcome"]), (200, &json!("landed")), "{r}");
    assert_eq!(cluster.not_leader_per_node(), [0, 1]);
    assert_eq!(stored_seqs(&cluster), [1]);
}

#[test]
fn during_an_election_a_write_is_a_retry_and_lands_once_a_leader_is_elected() {
    // No node leads: each answers 2011 without an address, the pool tries every seed, and its
    // walk ends. Nothing was applied anywhere, so the gateway says `retry` (2011), never
    // `rejected`; once a leader is elected the identical resend lands, once.
    let cluster = FakeCluster::start(3);
    let nodes = cluster.addresses();
    let dir = data_dir();
    let mut args = vec!["--backend", "celeriant", "--session-rate-per-minute", "0"];
    args.extend(nodes.iter().flat_map(|n| ["--celeriant-addr", n.as_str()]));
    let gw = Process::start(dir.path(), &args);
    let device = Device::a();
    let token = session(&gw.base, &device);
    cluster.start_election();
    let (status, r) = write(&gw.base, &token, &device, 1);
    assert_eq!(
        (status, &r["outcome"], &r["code"]),
        (503, &json!("retry"), &json!(2011)),
        "{r}"
    );
    assert!(r["retryAfterMs"].as_u64().is_some(), "{r}");
    assert!(stored_seqs(&cluster).is_empty());
    assert_eq!(
        cluster.not_leader_per_node(),
        [1, 1, 1],
        "each node was asked once"
    );
    cluster.change_leader(2, Held::Refused, false);
    let (status, r) = write(&gw.base, &token, &device, 1);
    assert_eq!(
        (status, &r["outcome"], &r["duplicate"]),
        (200, &json!("landed"), &json!(false)),
        "{r}"
    );
    assert_eq!(stored_seqs(&cluster), [1]);
}
