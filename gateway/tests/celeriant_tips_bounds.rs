//! The Celeriant backend's tips, what bounds them and where they go (review of issue 28's
//! tips): on the watch's node when that is not the first configured address; none from the
//! moment the watch is lost or renewed until the new one is acknowledged; `ready` within the
//! tips' budget, without tips, when the node is slow; one client saturating its share leaves
//! the other clients theirs; connections to the node reused, not dialled per stream; a
//! node the tips cannot reach, or that never answers, left alone for a while; and a tip never
//! below the main pool's answer when the watch's node lags.

mod support;

use std::time::{Duration, Instant};

use celeriant_gateway::backend::celeriant::{CeleriantBackend, CeleriantOptions};
use celeriant_gateway::backend::{Asker, Backend, Change, TipsAsk};
use fake_celeriant::{FakeCluster, Held};
use serde_json::json;
use support::fake_celeriant::FakeCeleriant;
use support::process::{Process, data_dir, post};
use support::sse;
use support::write::{ORG, TYPE, command, key};
use tokio::sync::broadcast;
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(10);

fn celeriant_key(n: u128) -> celeriant_wal::aggregate_key::AggregateKey {
    celeriant_wal::aggregate_key::AggregateKey::new(ORG, TYPE, n)
}

/// Client `n`'s ask, due in `within`.
fn ask(n: u128, within: Duration) -> TipsAsk {
    TipsAsk {
        asker: Asker::Client(Uuid::from_u128(n)),
        deadline: tokio::time::Instant::now() + within,
    }
}

async fn backend(addresses: Vec<String>, renew: Duration) -> CeleriantBackend {
    CeleriantBackend::connect(CeleriantOptions {
        addresses,
        api_key: None,
        request_timeout: Duration::from_secs(5),
    })
    .await
    .unwrap()
    .with_watch(None, renew)
}

/// Waits for the next resync on `changes` (a watch opened, or one left).
async fn resync(changes: &mut broadcast::Receiver<Change>) {
    loop {
        match tokio::time::timeout(WAIT, changes.recv()).await {
            Ok(Ok(Change::Resync)) => return,
            Ok(Ok(_)) => {}
            other => panic!("no resync: {other:?}"),
        }
    }
}

/// Aggregate 1 at version 2, 2 at version 1; the watch open (and the revocations reload its
/// first resync starts over).
async fn watched(fake: &FakeCeleriant) -> (CeleriantBackend, broadcast::Receiver<Change>) {
    let backend = backend(vec![fake.address()], Duration::from_secs(300)).await;
    backend.write(command(1, 1)).await.unwrap();
    backend.write(command(1, 2)).await.unwrap();
    backend.write(command(2, 1)).await.unwrap();
    let mut changes = backend.changes().unwrap();
    resync(&mut changes).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    (backend, changes)
}

fn delta(after: Vec<u64>, before: &[u64]) -> Vec<u64> {
    after.iter().zip(before).map(|(a, b)| a - b).collect()
}

/// The pool learnt that node 1 leads before the watch opened, so the watch is on node 1, not
/// on the first configured address (node 0): the tips are read on node 1, over connections to
/// node 1 only (where the main pool reads too: two details per aggregate).
#[tokio::test]
async fn tips_go_to_the_watchs_node_when_it_is_not_the_first_address() {
    let cluster = FakeCluster::start(3);
    cluster.change_leader(1, Held::Refused, false);
    let backend = backend(cluster.addresses(), Duration::from_secs(300)).await;
    backend.write(command(1, 1)).await.unwrap();
    let mut changes = backend.changes().unwrap();
    resync(&mut changes).await;
    tokio::time::sleep(Duration::from_millis(500)).await;

    let (details, dials) = (cluster.details_per_node(), cluster.connections_per_node());
    let tips = backend.tips(vec![key(1), key(2)], ask(1, WAIT)).await;
    assert_eq!(tips.unwrap(), Some(vec![Some(1), Some(0)]));
    assert_eq!(delta(cluster.details_per_node(), &details), vec![0, 4, 0]);
    let dials = delta(cluster.connections_per_node(), &dials);
    assert_eq!(
        (dials[0], dials[2]),
        (0, 0),
        "only node 1 dialled: {dials:?}"
    );
}

/// Waits until `fake` has asked for a watch since `asked` watch requests (held unacknowledged).
async fn asked_again(fake: &FakeCeleriant, asked: usize) {
    let deadline = Instant::now() + WAIT;
    while fake.watch_requests() == asked {
        assert!(Instant::now() < deadline, "no new watch asked");
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

/// No tips while the next watch is held unacknowledged (nothing asked upstream either); then,
/// once it is acknowledged, tips again (`version` for aggregate 1).
async fn none_until_acknowledged(
    fake: &FakeCeleriant,
    backend: &CeleriantBackend,
    changes: &mut broadcast::Receiver<Change>,
    version: u64,
) {
    let requests = fake.requests().len();
    assert_eq!(
        backend.tips(vec![key(1)], ask(1, WAIT)).await.unwrap(),
        None,
        "the next watch not acknowledged"
    );
    assert_eq!(fake.requests().len(), requests, "nothing asked upstream");
    // The loss's resync is behind; the next is the new watch's.
    while changes.try_recv().is_ok() {}
    fake.hold_watch_acks(false);
    resync(changes).await;
    let tips = backend.tips(vec![key(1)], ask(1, WAIT)).await.unwrap();
    assert_eq!(tips, Some(vec![Some(version)]), "acknowledged");
}

/// From the moment the watch is lost until the node acknowledges the next one, nothing says a
/// change after a tip would be notified: no tips, and nothing asked upstream.
#[tokio::test]
async fn no_tips_from_a_watch_lost_until_the_next_is_acknowledged() {
    let fake = FakeCeleriant::start();
    let (backend, mut changes) = watched(&fake).await;
    assert!(
        backend
            .tips(vec![key(1)], ask(1, WAIT))
            .await
            .unwrap()
            .is_some()
    );
    let asked = fake.watch_requests();
    fake.hold_watch_acks(true);
    fake.end_watches();
    asked_again(&fake, asked).await;
    none_until_acknowledged(&fake, &backend, &mut changes, 2).await;
}

/// The same across a renewal (every second here): the old watch is left before the new one is
/// asked for, and no tips are read in between.
#[tokio::test]
async fn no_tips_from_a_watch_renewed_until_the_next_is_acknowledged() {
    let fake = FakeCeleriant::start();
    let backend = backend(vec![fake.address()], Duration::from_secs(1)).await;
    backend.write(command(1, 1)).await.unwrap();
    let mut changes = backend.changes().unwrap();
    resync(&mut changes).await;
    assert!(
        backend
            .tips(vec![key(1)], ask(1, WAIT))
            .await
            .unwrap()
            .is_some()
    );
    let asked = fake.watch_requests();
    fake.hold_watch_acks(true);
    asked_again(&fake, asked).await;
    none_until_acknowledged(&fake, &backend, &mut changes, 1).await;
}

/// A node that answers details slowly does not hold `ready`: it comes within the tips' budget
/// (one second), without tips, on a gateway whose request timeout is far longer.
#[test]
fn a_slow_node_gives_ready_within_the_budget_without_tips() {
    let fake = FakeCeleriant::start();
    let dir = data_dir();
    let org = Uuid::from_u128(ORG).to_string();
    let args = [
        "--backend",
        "celeriant",
        "--org-id",
        &org,
        "--auth",
        "none",
        "--revocation-refresh-secs",
        "3600",
        "--celeriant-addr",
        &fake.address(),
    ];
    let gw = Process::start(dir.path(), &args);
    let deadline = Instant::now() + WAIT;
    while fake.watches() != 1 {
        assert!(Instant::now() < deadline, "no upstream watch");
        std::thread::sleep(Duration::from_millis(10));
    }
    let (type_id, id) = (Uuid::from_u128(TYPE).to_string(), Uuid::from_u128(1));
    let write = support::app::write_by(
        "5f0c6b2e-8a3d-4c1e-9b7a-2d4e6f8a0b1c",
        &type_id,
        &id.to_string(),
        &[1],
    );
    assert_eq!(
        post(&gw.base, "/v1/write", None, &write).json["outcome"],
        "landed"
    );
    std::thread::sleep(Duration::from_millis(300));
    fake.slow_details(celeriant_key(1), Duration::from_secs(20));

    let body = json!({"aggregates": [{"typeId": type_id, "id": id.to_string()}]});
    let started = Instant::now();
    let mut s = sse::open(&gw.addr, "POST", "/v1/watch", None, Some(&body));
    assert_eq!(s.status, 200, "{}", s.body);
    let ready = s.expect(WAIT);
    let took = started.elapsed();
    assert_eq!(ready.event, "ready");
    assert!(ready.data.get("tips").is_none(), "{}", ready.data);
    assert!(took < Duration::from_millis(1_800), "ready after {took:?}");
}

/// Client 7 opens four streams at once on aggregates the node answers slowly: it holds its
/// share of the process's connections (4 of 16), not all of them, so client 8's stream still
/// gets its tips.
#[tokio::test]
async fn one_client_saturating_its_share_leaves_the_others_theirs() {
    let fake = FakeCeleriant::start();
    let (backend, _changes) = watched(&fake).await;
    for n in 100..116 {
        backend.write(command(n, 1)).await.unwrap();
        fake.slow_details(celeriant_key(n), Duration::from_secs(3));
    }
    let backend = std::sync::Arc::new(backend);
    let greedy: Vec<_> = (0..4u128)
        .map(|s| {
            let backend = backend.clone();
            let keys = (100 + 4 * s..104 + 4 * s).map(key).collect();
            tokio::spawn(async move { backend.tips(keys, ask(7, Duration::from_secs(2))).await })
        })
        .collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let other = backend
        .tips(vec![key(1)], ask(8, Duration::from_secs(1)))
        .await;
    assert_eq!(
        other.unwrap(),
        Some(vec![Some(2)]),
        "client 8 gets its tips"
    );
    for g in greedy {
        let tips = g.await.unwrap().unwrap();
        assert!(tips.is_none(), "slow, or over its share: {tips:?}");
    }
}

/// Streams opened one after the other reuse the connections to the node: a stream's tips
/// dial at most 4, and ten streams no more than that together (plus at most 4 of the main
/// pool's, whose requests go to the same lone fake).
#[tokio::test]
async fn connections_to_the_node_are_reused_not_dialled_per_stream() {
    let fake = FakeCeleriant::start();
    let (backend, _changes) = watched(&fake).await;
    let dials = fake.connections();
    for _ in 0..10 {
        let keys = vec![key(1), key(2), key(3), key(1)];
        let tips = backend.tips(keys, ask(1, WAIT)).await.unwrap();
        assert_eq!(tips, Some(vec![Some(2), Some(1), Some(0), Some(2)]));
    }
    let dialled = fake.connections() - dials;
    assert!(
        dialled <= 8,
        "{dialled} connections dialled for ten streams"
    );
}

/// A node the tips cannot get a connection to is left alone for a while (5 s): the streams of
/// that time get no tips at once, and nothing is dialled for them, past the pool's own
/// breaker (2 s) too.
#[tokio::test]
async fn after_a_failed_dial_no_tips_and_no_dial_for_a_while() {
    let fake = FakeCeleriant::start();
    let (backend, _changes) = watched(&fake).await;
    fake.refuse_connections(true);
    let failed = Instant::now();
    assert_eq!(
        backend.tips(vec![key(1)], ask(1, WAIT)).await.unwrap(),
        None
    );
    let dials = fake.connections();
    assert!(dials > 0);
    tokio::time::sleep(Duration::from_millis(2_500)).await;
    let started = Instant::now();
    assert_eq!(
        backend.tips(vec![key(1)], ask(1, WAIT)).await.unwrap(),
        None
    );
    assert!(started.elapsed() < Duration::from_millis(100), "at once");
    assert_eq!(fake.connections(), dials, "nothing dialled");
    fake.refuse_connections(false);
    tokio::time::sleep(
        Duration::from_secs(5).saturating_sub(failed.elapsed()) + Duration::from_millis(200),
    )
    .await;
    let tips = backend.tips(vec![key(1)], ask(1, WAIT)).await.unwrap();
    assert_eq!(tips, Some(vec![Some(2)]), "tips again after a while");
}

/// Each client has tips read for so many aggregates per second (here 10, in a burst of 10):
/// past it, no tips (nothing asked upstream), while another client still gets its own.
#[tokio::test]
async fn a_client_past_its_aggregates_per_second_gets_no_tips() {
    let fake = FakeCeleriant::start();
    let backend = backend(vec![fake.address()], Duration::from_secs(300))
        .await
        .with_tips_rate(10, 10);
    backend.write(command(1, 1)).await.unwrap();
    let mut changes = backend.changes().unwrap();
    resync(&mut changes).await;
    tokio::time::sleep(Duration::from_millis(500)).await;
    let keys = || vec![key(1); 8];
    assert!(backend.tips(keys(), ask(1, WAIT)).await.unwrap().is_some());
    let requests = fake.requests().len();
    assert_eq!(backend.tips(keys(), ask(1, WAIT)).await.unwrap(), None);
    assert_eq!(fake.requests().len(), requests, "nothing asked upstream");
    assert!(backend.tips(keys(), ask(2, WAIT)).await.unwrap().is_some());
}

/// The watch is open on node 0 (the first address, before any write taught the pool the
/// leader); then node 1 leads and the main pool reads there. Node 0 answers aggregate 1 at
/// version 1 while 3 is committed (cut off from the cluster, or a restarted node catching up):
/// the tip is the main pool's 3, never the watch's node's lower answer, so a client whose
/// cursor is 1 still reads 2 and 3.
#[tokio::test]
async fn a_tip_is_never_below_the_main_pools_answer() {
    let cluster = FakeCluster::start(3);
    let backend = backend(cluster.addresses(), Duration::from_secs(300)).await;
    let mut changes = backend.changes().unwrap();
    resync(&mut changes).await;
    cluster.change_leader(1, Held::Refused, false);
    for seq in 1..=3 {
        backend.write(command(1, seq)).await.unwrap();
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    cluster.lag_details(0, celeriant_key(1), 1);

    let details = cluster.details_per_node();
    let tips = backend.tips(vec![key(1), key(2)], ask(1, WAIT)).await;
    assert_eq!(tips.unwrap(), Some(vec![Some(3), Some(0)]));
    assert_eq!(
        delta(cluster.details_per_node(), &details),
        vec![2, 2, 0],
        "asked on the watch's node (0) and where the main pool reads (1)"
    );
}

/// A node that accepts and never answers: its details request times out well within the
/// one-second budget, which leaves the node alone for a while (5 s), so the next stream gets
/// no tips at once, with nothing asked or dialled, instead of waiting out its budget again.
#[tokio::test]
async fn a_node_that_never_answers_is_left_alone_for_a_while() {
    let fake = FakeCeleriant::start();
    let (backend, _changes) = watched(&fake).await;
    fake.slow_details(celeriant_key(1), Duration::from_secs(30));
    let started = Instant::now();
    let tips = backend
        .tips(vec![key(1)], ask(1, Duration::from_secs(1)))
        .await;
    assert_eq!(tips.unwrap(), None);
    let took = started.elapsed();
    assert!(
        took < Duration::from_millis(800),
        "timed out after {took:?}"
    );

    let (requests, dials) = (fake.requests().len(), fake.connections());
    let started = Instant::now();
    let tips = backend
        .tips(vec![key(2)], ask(1, Duration::from_secs(1)))
        .await;
    assert_eq!(tips.unwrap(), None, "no tips while the node is left alone");
    assert!(started.elapsed() < Duration::from_millis(100), "at once");
    assert_eq!(fake.requests().len(), requests, "nothing asked");
    assert_eq!(fake.connections(), dials, "nothing dialled");
}
