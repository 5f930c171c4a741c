//! A change stream's `ready` on the Celeriant backend carries `tips` (each aggregate's version,
//! read after the stream was registered) against the fake node: correct versions in the
//! request's order, no upstream page read to get them, so that a subscription change whose
//! cursors are at the tips leaves only the new aggregate to read; none while no upstream watch
//! is open; and, over a three-node fake cluster, read on the node the upstream watch is open on
//! even when the pool sends its reads to another (a replica that may lag).

mod support;

use std::collections::HashMap;
use std::time::{Duration, Instant};

use celeriant_gateway::backend::celeriant::{CeleriantBackend, CeleriantOptions};
use celeriant_gateway::backend::{AggregateKey, Asker, Backend, Change, TipsAsk};
use celeriant_msg::process_client_requests::ClientRequest;
use fake_celeriant::{FakeCluster, Held};
use serde_json::{Value, json};
use support::fake_celeriant::FakeCeleriant;
use support::process::{Process, data_dir, get, post};
use support::sse;
use support::write::{ORG, TYPE, command, key};
use uuid::Uuid;

const WRITER: &str = "5f0c6b2e-8a3d-4c1e-9b7a-2d4e6f8a0b1c";
const WAIT: Duration = Duration::from_secs(10);

fn type_id() -> String {
    Uuid::from_u128(TYPE).to_string()
}

fn id(n: u128) -> String {
    Uuid::from_u128(n).to_string()
}

fn gateway(nodes: &[String]) -> (Process, tempfile::TempDir) {
    let dir = data_dir();
    let org = Uuid::from_u128(ORG).to_string();
    // The periodic revocations reload (its details and read requests) kept out of the counts.
    let mut args = vec![
        "--backend",
        "celeriant",
        "--org-id",
        &org,
        "--auth",
        "none",
        "--revocation-refresh-secs",
        "3600",
    ];
    args.extend(nodes.iter().flat_map(|n| ["--celeriant-addr", n.as_str()]));
    let gw = Process::start(dir.path(), &args);
    (gw, dir)
}

fn until(what: &str, done: impl Fn() -> bool) {
    let deadline = Instant::now() + WAIT;
    while !done() {
        assert!(Instant::now() < deadline, "{what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Writes `batches` batches to aggregate `n`, one write each.
fn write(base: &str, n: u128, batches: std::ops::RangeInclusive<u64>) {
    for seq in batches {
        let r = post(
            base,
            "/v1/write",
            None,
            &support::app::write_by(WRITER, &type_id(), &id(n), &[seq]),
        );
        assert_eq!(r.json["outcome"], "landed", "{:?}", r.json);
    }
}

/// Opens a stream on aggregates `ns` and returns it with its `ready`'s data.
fn open(addr: &str, ns: &[u128]) -> (sse::Stream, Value) {
    let aggregates: Vec<Value> = ns
        .iter()
        .map(|n| json!({"typeId": type_id(), "id": id(*n)}))
        .collect();
    let body = json!({ "aggregates": aggregates });
    let mut s = sse::open(addr, "POST", "/v1/watch", None, Some(&body));
    assert_eq!(s.status, 200, "{}", s.body);
    let ready = s.expect(WAIT);
    assert_eq!(ready.event, "ready");
    (s, ready.data)
}

/// The upstream requests of kind `is` the fake received from index `from` on.
fn count(fake: &FakeCeleriant, from: usize, is: fn(&ClientRequest) -> bool) -> usize {
    fake.requests()[from..].iter().filter(|r| is(r)).count()
}

fn is_read(r: &ClientRequest) -> bool {
    matches!(r, ClientRequest::Read(_))
}

fn is_details(r: &ClientRequest) -> bool {
    matches!(r, ClientRequest::AggregateDetails(_))
}

#[test]
fn ready_gives_tips_and_a_subscription_change_leaves_only_the_new_aggregate_to_read() {
    let fake = FakeCeleriant::start();
    let (gw, _dir) = gateway(&[fake.address()]);
    until("no upstream watch", || fake.watches() == 1);
    write(&gw.base, 1, 1..=3);
    write(&gw.base, 2, 1..=1);
    // The start-up's requests (the revocations reload after the watch's first resync) are over.
    std::thread::sleep(Duration::from_millis(300));

    let before = fake.requests().len();
    // 3 does not exist; 1 is named twice.
    let (first, ready) = open(&gw.addr, &[1, 2, 3, 1]);
    assert_eq!(ready["tips"], json!([3, 1, 0, 3]), "{ready}");
    assert_eq!(count(&fake, before, is_read), 0, "no page is read for tips");
    assert_eq!(
        count(&fake, before, is_details),
        6,
        "two details per aggregate: on the watch's node and through the main pool"
    );
    // A client reads each aggregate up to its tip (3 needs nothing): its cursors.
    let cursors: HashMap<u128, u64> = [(1, 3), (2, 1), (3, 0)].into();

    // A subscription change: 4 is added, the stream replaced.
    write(&gw.base, 4, 1..=2);
    let before = fake.requests().len();
    let (mut second, ready) = open(&gw.addr, &[1, 2, 3, 4]);
    drop(first);
    assert_eq!(ready["tips"], json!([3, 1, 0, 2]), "{ready}");
    assert_eq!(count(&fake, before, is_read), 0, "no page is read for tips");
    // What the client reads: each aggregate whose cursor is not its tip.
    let tips = ready["tips"].as_array().unwrap();
    let to_read: Vec<u128> = [1, 2, 3, 4]
        .into_iter()
        .zip(tips)
        .filter(|(n, tip)| cursors.get(n).copied() != tip.as_u64())
        .map(|(n, _)| n)
        .collect();
    assert_eq!(to_read, vec![4], "only the new aggregate is read");

    // What lands after the tip is notified.
    write(&gw.base, 1, 4..=4);
    loop {
        let e = second.expect(WAIT);
        if e.event == "resync" {
            continue;
        }
        assert_eq!(e.event, "changed");
        assert_eq!(e.data["id"], id(1));
        assert_eq!(e.data["version"], 4);
        break;
    }
}

/// Client `n`'s ask, due in a second (the route's budget).
fn ask(n: u128) -> TipsAsk {
    TipsAsk {
        asker: Asker::Client(Uuid::from_u128(n)),
        deadline: tokio::time::Instant::now() + Duration::from_secs(1),
    }
}

/// Without an open upstream watch nothing says a change after a tip will be notified: no tips.
#[tokio::test]
async fn no_tips_while_no_upstream_watch_is_open() {
    let fake = FakeCeleriant::start();
    let backend = CeleriantBackend::connect(CeleriantOptions {
        addresses: vec![fake.address()],
        api_key: None,
        request_timeout: Duration::from_secs(5),
    })
    .await
    .unwrap();
    backend.write(command(1, 1)).await.unwrap();
    backend.write(command(1, 2)).await.unwrap();
    assert_eq!(backend.tips(vec![key(1)], ask(1)).await.unwrap(), None);

    let mut changes = backend.changes().unwrap();
    let first = tokio::time::timeout(WAIT, changes.recv()).await.unwrap();
    assert!(matches!(first, Ok(Change::Resync)), "the watch is open");
    assert_eq!(
        backend.tips(vec![key(1), key(2)], ask(1)).await.unwrap(),
        Some(vec![Some(2), Some(0)])
    );
}

/// The pool reads from the leader it learned (node 1) while the upstream watch stays on the
/// node it was opened on (node 0, the first address, before any write taught the pool the
/// leader); tips are read on node 0, whose watch notifies whatever it applies after them, and
/// through the pool (node 1), the tip being the higher answer.
#[test]
fn tips_are_read_on_the_watchs_node_not_where_the_pool_reads() {
    let cluster = FakeCluster::start(3);
    cluster.change_leader(1, Held::Refused, false);
    let (gw, _dir) = gateway(&cluster.addresses());
    until("no upstream watch", || cluster.watches() == 1);
    write(&gw.base, 1, 1..=2);
    std::thread::sleep(Duration::from_millis(300));

    let reads = cluster.reads_per_node();
    let r = get(
        &gw.base,
        &format!("/v1/aggregates/{}/{}/events", type_id(), id(1)),
        None,
    );
    assert_eq!(r.status, 200, "{:?}", r.json);
    let after: Vec<u64> = (cluster.reads_per_node().iter().zip(&reads))
        .map(|(a, b)| a - b)
        .collect();
    assert_eq!(
        after,
        vec![0, 1, 0],
        "the pool reads from the leader, node 1"
    );

    let details = cluster.details_per_node();
    let (_s, ready) = open(&gw.addr, &[1, 2]);
    assert_eq!(ready["tips"], json!([2, 0]), "{ready}");
    let after: Vec<u64> = (cluster.details_per_node().iter().zip(&details))
        .map(|(a, b)| a - b)
        .collect();
    assert_eq!(
        after,
        vec![2, 2, 0],
        "tips are read on the watch's node, node 0, and where the pool reads, node 1"
    );
}

async fn watched_backend(fake: &FakeCeleriant) -> (CeleriantBackend, impl Sized) {
    let backend = CeleriantBackend::connect(CeleriantOptions {
        addresses: vec![fake.address()],
        api_key: None,
        request_timeout: Duration::from_secs(1),
    })
    .await
    .unwrap();
    backend.write(command(1, 1)).await.unwrap();
    backend.write(command(1, 2)).await.unwrap();
    backend.write(command(2, 1)).await.unwrap();
    let mut changes = backend.changes().unwrap();
    let first = tokio::time::timeout(WAIT, changes.recv()).await.unwrap();
    assert!(matches!(first, Ok(Change::Resync)), "the watch is open");
    // The revocations reload that resync starts is over before replies are scripted.
    tokio::time::sleep(Duration::from_millis(500)).await;
    (backend, changes)
}

/// One stream's tips use at most `PER_STREAM` (4) connections to the node, however many
/// aggregates it names, and as many requests at once through the main pool (here the same
/// fake node, so at most 8 new connections: 4 dialled by the tips' node pool, the rest by
/// the main pool when its idle ones are too few).
#[tokio::test]
async fn a_streams_tips_use_a_few_connections() {
    let fake = FakeCeleriant::start();
    let (backend, _changes) = watched_backend(&fake).await;
    let connections = fake.identifies().len();
    let keys: Vec<AggregateKey> = (1..=200).map(key).collect();
    let tips = backend.tips(keys, ask(1)).await.unwrap().unwrap();
    assert_eq!(&tips[..3], &[Some(2), Some(1), Some(0)]);
    assert!(tips.iter().all(Option::is_some));
    let dialled = fake.identifies().len() - connections;
    assert!((4..=8).contains(&dialled), "{dialled} connections dialled");
}

/// A details request refused or not answered within the upstream request timeout leaves its
/// aggregate without a tip (the client reads it); when none is answered, there are no tips.
#[tokio::test]
async fn a_tip_refused_or_late_is_left_out_and_none_answered_is_no_tips() {
    use support::fake_celeriant::Reply;
    let fake = FakeCeleriant::start();
    let (backend, _changes) = watched_backend(&fake).await;
    let refused = || Reply::error(celeriant_msg::error_codes::EXISTS_CACHE_ERROR, "cache");

    fake.script([refused()]);
    let tips = backend
        .tips(vec![key(1), key(1)], ask(1))
        .await
        .unwrap()
        .unwrap();
    let mut sorted = tips.clone();
    sorted.sort();
    assert_eq!(sorted, vec![None, Some(2)], "{tips:?}");

    fake.script([refused()]);
    assert_eq!(backend.tips(vec![key(1)], ask(1)).await.unwrap(), None);

    fake.script([Reply::slow(Duration::from_secs(3), Reply::Store)]);
    let started = Instant::now();
    let tips = backend
        .tips(vec![key(1), key(2)], ask(1))
        .await
        .unwrap()
        .unwrap();
    assert!(
        started.elapsed() < Duration::from_millis(2500),
        "bounded by the timeout"
    );
    assert_eq!(tips.iter().filter(|t| t.is_none()).count(), 1, "{tips:?}");
    assert!(
        tips == vec![None, Some(1)] || tips == vec![Some(2), None],
        "{tips:?}"
    );
}
