//! The fake Celeriant node enforces the version guard as the server does, through the published
//! client: the gateway's ownership and members records on the Celeriant backend rely on it
//! (`expected_version: 0` creates only an absent aggregate, `n` appends only at version n), so
//! the tests built on the fake mean something only if the fake refuses what the server refuses,
//! in the server's order: existence, the guard, then idempotency.

mod support;

use std::collections::HashMap;
use std::sync::Arc;

use celeriant_client_tokio::{CeleriantPool, ClientError, PoolOptions, ServerError, WriteError};
use celeriant_msg::request::requests::{SingleAggregateWrite, WriteRequest};
use celeriant_wal::aggregate_key::AggregateKey;
use celeriant_wal::datablocks::datablock_aggregate_event::DatablockAggregateEvent;
use support::fake_celeriant::FakeCeleriant;

fn key(id: u128) -> AggregateKey {
    AggregateKey::new(1, 2, id)
}

fn guarded(writes: &[(u128, bool, Option<u64>)]) -> WriteRequest {
    let writes: HashMap<_, _> = writes
        .iter()
        .map(|&(id, allow_create, expected_version)| {
            let event = DatablockAggregateEvent {
                client_seq: 0,
                event_type_major: 1,
                event_value: Arc::new(b"x".to_vec()),
                ..DatablockAggregateEvent::default()
            };
            (
                key(id),
                SingleAggregateWrite {
                    events: vec![event],
                    allow_create,
                    expected_version,
                    enforce_client_idempotency: false,
                },
            )
        })
        .collect();
    WriteRequest {
        correlation_id: None,
        client_id: 7,
        user_id: None,
        writes,
    }
}

/// The (expected, current) of a 2003, or panics.
fn conflict(result: Result<impl std::fmt::Debug, ClientError>) -> (u64, u64) {
    match result {
        Err(ClientError::Server(ServerError::Write {
            kind:
                WriteError::OptimisticConcurrencyViolation {
                    expected_version: Some(e),
                    current_aggregate_version: Some(c),
                    ..
                },
            ..
        })) => (e, c),
        other => panic!("expected 2003, got {other:?}"),
    }
}

#[tokio::test]
async fn the_fake_commits_a_guarded_write_only_at_exactly_the_expected_version() {
    let fake = FakeCeleriant::start();
    let pool = CeleriantPool::new(PoolOptions::new(fake.address()));
    // expected 0 with allowCreate: only while absent.
    let v = pool.write(guarded(&[(1, true, Some(0))])).await.unwrap();
    assert_eq!(v.max_aggregate_version, Some(1));
    assert_eq!(
        conflict(pool.write(guarded(&[(1, true, Some(0))])).await),
        (0, 1)
    );
    // expected n: only at n; a stale or a future guard is refused with both versions.
    assert_eq!(
        conflict(pool.write(guarded(&[(1, true, Some(5))])).await),
        (5, 1)
    );
    let v = pool.write(guarded(&[(1, false, Some(1))])).await.unwrap();
    assert_eq!(v.max_aggregate_version, Some(2));
    assert_eq!(
        conflict(pool.write(guarded(&[(1, false, Some(1))])).await),
        (1, 2)
    );
    // No guard: no check.
    let v = pool.write(guarded(&[(1, false, None)])).await.unwrap();
    assert_eq!(v.max_aggregate_version, Some(3));
    // Existence comes first: a missing aggregate without allowCreate is 2005, not 2003.
    match pool.write(guarded(&[(9, false, Some(4))])).await {
        Err(ClientError::Server(ServerError::Write {
            kind: WriteError::AggregateNotExists,
            ..
        })) => {}
        other => panic!("expected 2005, got {other:?}"),
    }
    // A multi-aggregate write with one stale guard appends nothing anywhere.
    assert_eq!(
        conflict(
            pool.write(guarded(&[(2, true, Some(0)), (1, false, Some(1))]))
                .await
        ),
        (1, 3)
    );
    let v = pool.write(guarded(&[(2, true, Some(0))])).await.unwrap();
    assert_eq!(
        v.max_aggregate_version,
        Some(1),
        "aggregate 2 was not created"
    );
}

#[tokio::test]
async fn of_many_creators_racing_with_expected_version_zero_exactly_one_wins() {
    let fake = FakeCeleriant::start();
    let pool = Arc::new(CeleriantPool::new(PoolOptions::new(fake.address())));
    let tries = (0..16).map(|_| {
        let pool = pool.clone();
        tokio::spawn(async move { pool.write(guarded(&[(3, true, Some(0))])).await })
    });
    let mut won = 0;
    for t in tries {
        match t.await.unwrap() {
            Ok(_) => won += 1,
            lost => assert_eq!(conflict(lost), (0, 1)),
        }
    }
    assert_eq!(won, 1);
}

#[tokio::test]
async fn the_fake_checks_the_guard_before_idempotency() {
    let fake = FakeCeleriant::start();
    let pool = CeleriantPool::new(PoolOptions::new(fake.address()));
    let idempotent = |expected_version: Option<u64>| {
        let mut request = guarded(&[(4, true, expected_version)]);
        for write in request.writes.values_mut() {
            write.enforce_client_idempotency = true;
            write.events[0].client_seq = 5;
        }
        request
    };
    pool.write(idempotent(Some(0))).await.unwrap();
    // The identical resend of a landed guarded write: its own write moved the version, so the
    // guard answers first (2003), never 2002.
    assert_eq!(conflict(pool.write(idempotent(Some(0))).await), (0, 1));
    // Without a guard, the same sequence is a duplicate (2002) with both sequences.
    match pool.write(idempotent(None)).await {
        Err(ClientError::Server(ServerError::Write {
            kind:
                WriteError::ClientIdempotencyViolation {
                    last_client_seq: Some(5),
                    attempted_client_seq: Some(5),
                },
            ..
        })) => {}
        other => panic!("expected 2002, got {other:?}"),
    }
    // A current guard with a stale sequence: 2002 (the guard passed, idempotency refused).
    match pool.write(idempotent(Some(1))).await {
        Err(ClientError::Server(ServerError::Write {
            kind: WriteError::ClientIdempotencyViolation { .. },
            ..
        })) => {}
        other => panic!("expected 2002, got {other:?}"),
    }
}
