//! The embedded store's Celeriant semantics, at the backend level: check order (2000/2001,
//! 2005, 2003 before 2013/2002), the in-flight window (2013), gaps, atomic multi-aggregate
//! writes, group commit under concurrency, and durability across a reopen.

use std::sync::Arc;
use std::time::Duration;

use celeriant_gateway::backend::embedded::{EmbeddedOptions, EmbeddedStore};
use celeriant_gateway::backend::{
    AggregateCommand, AggregateKey, Backend, BackendError, ReadQuery, WriteAck, WriteCommand,
};
use celeriant_sync_protocol::{AggregateRef, Event, WriteOutcome};
use uuid::Uuid;

fn key(id: u128) -> AggregateKey {
    AggregateKey {
        org: Uuid::from_u128(1),
        aggregate: AggregateRef {
            type_id: Uuid::from_u128(2),
            id: Uuid::from_u128(id),
        },
    }
}

fn ev(seq: u64) -> Event {
    Event {
        client_seq: seq,
        event_id: Some(Uuid::from_u128(seq as u128 + 1000)),
        timestamp: 1_700_000_000_000,
        event_type: 1,
        minor: 2,
        data: vec![seq as u8; 3],
        iv: None,
    }
}

fn cmd(id: u128, seqs: &[u64]) -> WriteCommand {
    WriteCommand {
        principal: None,
        policy: None,
        client_id: Uuid::from_u128(77),
        writes: vec![AggregateCommand {
            key: key(id),
            allow_create: true,
            expected_version: None,
            enforce_client_idempotency: true,
            events: seqs.iter().copied().map(ev).collect(),
        }],
    }
}

fn code(r: Result<WriteAck, BackendError>) -> u32 {
    match r {
        Err(BackendError::Code { code, .. }) => code,
        Err(BackendError::Conflict { .. }) => 2003,
        other => panic!("expected a code, got {other:?}"),
    }
}

async fn seqs(store: &EmbeddedStore, id: u128) -> Vec<u64> {
    let page = store
        .read(ReadQuery {
            key: key(id),
            from_version: 1,
            max_bytes: usize::MAX,
            max_batches: 10_000,
        })
        .await
        .unwrap();
    page.batches
        .iter()
        .flat_map(|b| b.events.iter().map(|e| e.client_seq))
        .collect()
}

fn open(dir: &std::path::Path) -> EmbeddedStore {
    EmbeddedStore::open(dir, EmbeddedOptions::default()).unwrap()
}

#[tokio::test]
async fn validation_existence_and_version_are_checked_before_idempotency() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());

    let mut empty = cmd(1, &[]);
    assert_eq!(code(store.write(empty.clone()).await), 2000);
    empty.writes[0].events = vec![Event {
        event_type: 0,
        ..ev(1)
    }];
    assert_eq!(code(store.write(empty).await), 2001);

    let mut no_create = cmd(1, &[1]);
    no_create.writes[0].allow_create = false;
    assert_eq!(code(store.write(no_create.clone()).await), 2005);

    assert_eq!(
        store.write(cmd(1, &[1])).await.unwrap().aggregate_version,
        Some(1)
    );
    // Now it exists: allow_create=false is fine for the next sequence.
    no_create.writes[0].events = vec![ev(2)];
    assert_eq!(
        store.write(no_create).await.unwrap().aggregate_version,
        Some(2)
    );

    // The replay trap: resending a landed write with a stale expected version gets 2003, not
    // 2002, because the version guard runs first.
    let mut stale = cmd(1, &[2]);
    stale.writes[0].expected_version = Some(1);
    assert_eq!(code(store.write(stale.clone()).await), 2003);
    stale.writes[0].expected_version = Some(2);
    let dup = store.write(stale).await.unwrap_err();
    assert_eq!(
        dup,
        BackendError::Code {
            code: 2002,
            message: dup.to_string().split_once(": ").unwrap().1.to_owned(),
            last_client_seq: Some(2),
            attempted_client_seq: Some(2),
        }
    );
    assert_eq!(dup.into_outcome(), WriteOutcome::duplicate(2, 2));
    assert_eq!(seqs(&store, 1).await, [1, 2]);
}

#[tokio::test]
async fn an_identical_write_racing_one_in_flight_gets_2013_then_2002() {
    let dir = tempfile::tempdir().unwrap();
    // A group stays open 300 ms: the first write is accepted but not durable meanwhile.
    let store = Arc::new(
        EmbeddedStore::open(
            dir.path(),
            EmbeddedOptions {
                linger: Duration::from_millis(300),
                ..EmbeddedOptions::default()
            },
        )
        .unwrap(),
    );
    let first = tokio::spawn({
        let store = store.clone();
        async move { store.write(cmd(1, &[1, 2])).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    let racing = store.write(cmd(1, &[1, 2])).await;
    match racing {
        Err(BackendError::Code {
            code: 2013,
            last_client_seq,
            attempted_client_seq,
            ..
        }) => {
            assert_eq!((last_client_seq, attempted_client_seq), (Some(2), Some(1)));
        }
        other => panic!("expected 2013, got {other:?}"),
    }
    assert_eq!(first.await.unwrap().unwrap().aggregate_version, Some(1));
    // Once durable, the same write is a plain duplicate.
    assert_eq!(code(store.write(cmd(1, &[1, 2])).await), 2002);
    // A later sequence behind an in-flight one is not a duplicate: it queues behind it.
    let a = tokio::spawn({
        let store = store.clone();
        async move { store.write(cmd(1, &[3])).await }
    });
    tokio::time::sleep(Duration::from_millis(50)).await;
    assert_eq!(
        store.write(cmd(1, &[4])).await.unwrap().aggregate_version,
        Some(3)
    );
    assert_eq!(a.await.unwrap().unwrap().aggregate_version, Some(2));
    assert_eq!(seqs(&store, 1).await, [1, 2, 3, 4]);
}

#[tokio::test]
async fn gaps_are_accepted_and_lower_sequences_get_2002() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    store.write(cmd(1, &[1, 2, 3])).await.unwrap();
    store.write(cmd(1, &[5])).await.unwrap();
    assert_eq!(code(store.write(cmd(1, &[4])).await), 2002);
    assert_eq!(
        code(store.write(cmd(1, &[4, 6])).await),
        2002,
        "judged by the lowest"
    );
    assert_eq!(seqs(&store, 1).await, [1, 2, 3, 5]);
}

#[tokio::test]
async fn concurrent_writes_commit_in_groups_and_all_land() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(open(dir.path()));
    let mut tasks = Vec::new();
    for agg in 0..20u128 {
        for seq in 1..=10u64 {
            let store = store.clone();
            tasks.push(tokio::spawn(async move {
                // Each aggregate's writes are sent in order, concurrently with the others.
                tokio::time::sleep(Duration::from_millis(seq * 5)).await;
                store.write(cmd(agg, &[seq])).await
            }));
        }
    }
    for t in tasks {
        t.await.unwrap().unwrap();
    }
    for agg in 0..20u128 {
        let mut got = seqs(&store, agg).await;
        got.sort();
        assert_eq!(got, (1..=10).collect::<Vec<_>>(), "aggregate {agg}");
    }
}

#[tokio::test]
async fn acknowledged_writes_survive_a_reopen() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path());
        store.write(cmd(9, &[1, 2])).await.unwrap();
        store.write(cmd(9, &[3])).await.unwrap();
    }
    let store = open(dir.path());
    assert_eq!(seqs(&store, 9).await, [1, 2, 3]);
    assert_eq!(
        code(store.write(cmd(9, &[3])).await),
        2002,
        "sequences are durable too"
    );
    assert_eq!(
        store.write(cmd(9, &[4])).await.unwrap().aggregate_version,
        Some(3)
    );
    let page = store
        .read(ReadQuery {
            key: key(9),
            from_version: 1,
            max_bytes: 1,
            max_batches: 10,
        })
        .await
        .unwrap();
    assert_eq!(page.batches.len(), 1, "a page holds at least one batch");
    assert_eq!(page.next, Some(2));
    assert_eq!(
        page.batches[0].events[0],
        ev(1),
        "stored exactly as written"
    );
}
