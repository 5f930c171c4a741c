//! Unit tests of the inspector: the bounded ring, what it keeps about the held batch, the
//! per-aggregate counts, and a snapshot over the in-memory outbox.

use super::*;
use crate::engine::memory::MemoryOutbox;
use crate::engine::model::NewEvent;
use futures_executor::block_on;
use uuid::Uuid;

fn agg(n: u128) -> AggregateRef {
    AggregateRef {
        type_id: Uuid::from_u128(7),
        id: Uuid::from_u128(n),
    }
}

fn batch(a: u128, first: u64, last: u64) -> Batch {
    Batch::plain(agg(a), first, last, (last - first + 1) as u32)
}

fn outcome(b: Batch, attempt: u32, kind: OutcomeKind, next: Option<u64>) -> OutcomeRecord {
    OutcomeRecord {
        at: 1_000 + u64::from(attempt),
        batch: b,
        attempt,
        kind,
        code: Some(2013),
        message: "in flight".into(),
        next_attempt_at: next,
    }
}

fn held(b: Batch, failed: u32, in_flight: bool) -> Option<Held> {
    Some(Held {
        batch: b,
        failed_attempts: failed,
        in_flight,
    })
}

fn new_event(n: u8) -> NewEvent {
    NewEvent {
        event_id: Uuid::from_u128(0xE000 + u128::from(n)),
        timestamp: 1,
        event_type: 1,
        minor: 0,
        data: vec![n],
        iv: None,
    }
}

#[test]
fn the_ring_keeps_the_last_outcomes_oldest_first() {
    let inspector = Inspector::new(3);
    for attempt in 1..=5 {
        inspector.record(outcome(batch(1, 1, 2), attempt, OutcomeKind::Retry, None));
    }
    let kept: Vec<u32> = inspector.outcomes().iter().map(|o| o.attempt).collect();
    assert_eq!(kept, [3, 4, 5]);
    assert_eq!(Inspector::default().capacity, OUTCOMES_KEPT);
}

#[test]
fn the_held_batch_carries_its_last_outcome_until_another_batch_is_held() {
    let inspector = Inspector::default();
    let b = batch(1, 1, 3);
    inspector.observe(held(b.clone(), 0, true));
    inspector.record(outcome(b.clone(), 1, OutcomeKind::Retry, Some(5_000)));
    inspector.observe(held(b.clone(), 1, false));
    let info = inspector.held().unwrap();
    assert_eq!(info.held.failed_attempts, 1);
    assert_eq!(info.next_attempt_at, Some(5_000));
    assert_eq!(info.last.as_ref().unwrap().kind, OutcomeKind::Retry);
    // Resent: in flight, no next attempt time, the last outcome stays.
    inspector.observe(held(b.clone(), 1, true));
    let info = inspector.held().unwrap();
    assert_eq!(info.next_attempt_at, None);
    assert_eq!(info.last.as_ref().unwrap().attempt, 1);
    // Isolated: its first event alone is the same batch for the inspector.
    inspector.record(outcome(b.clone(), 2, OutcomeKind::Rejected, None));
    inspector.observe(held(batch(1, 1, 1), 2, false));
    assert_eq!(
        inspector.held().unwrap().last.unwrap().kind,
        OutcomeKind::Rejected
    );
    // Another batch: nothing known of it yet.
    inspector.observe(held(batch(2, 1, 1), 0, false));
    assert_eq!(inspector.held().unwrap().last, None);
    inspector.observe(None);
    assert_eq!(inspector.held(), None);
    assert_eq!(inspector.outcomes().len(), 2);
}

#[test]
fn per_aggregate_counts_split_pending_and_parked() {
    let parked = ParkRecord {
        aggregate: agg(2),
        first_seq: 4,
        last_seq: 4,
        count: 1,
        code: 2022,
        message: "no".into(),
        parked_at: 9,
        may_have_landed: false,
        current_version: None,
        atomic: None,
    };
    let only_parked = ParkRecord {
        aggregate: agg(3),
        first_seq: 1,
        last_seq: 2,
        count: 2,
        ..parked.clone()
    };
    let got = aggregates(
        &[(agg(1), 10), (agg(2), 6)],
        &[Some(8), Some(4)],
        &[parked, only_parked],
    );
    let counts: Vec<(u128, u64, u64, u64, u64)> = got
        .iter()
        .map(|a| {
            (
                a.aggregate.id.as_u128(),
                a.pending,
                a.parked,
                a.first_seq,
                a.last_seq,
            )
        })
        .collect();
    assert_eq!(counts, [(1, 3, 0, 8, 10), (2, 2, 1, 4, 6), (3, 0, 2, 1, 2)]);
}

#[test]
fn a_snapshot_reads_storage_and_adds_what_the_drain_knows() {
    let outbox = MemoryOutbox::new();
    block_on(async {
        outbox
            .append(agg(1), (1..=3).map(new_event).collect())
            .await
            .unwrap();
        outbox
            .append(agg(2), (1..=2).map(new_event).collect())
            .await
            .unwrap();
        let pinned = batch(1, 1, 3);
        assert!(outbox.pin(&pinned, None).await.unwrap());
        let inspector = Inspector::default();
        // Another context drains: storage's pin without attempts.
        let snap = snapshot(&outbox, &inspector).await.unwrap();
        let pin = snap.pinned.clone().unwrap();
        assert_eq!(
            (pin.batch, pin.attempts, pin.last.clone()),
            (pinned.clone(), None, None)
        );
        // This context drains it: one failed attempt, resent at 5000.
        inspector.observe(held(pinned.clone(), 0, true));
        inspector.record(outcome(
            pinned.clone(),
            1,
            OutcomeKind::Unknown,
            Some(5_000),
        ));
        inspector.observe(held(pinned.clone(), 1, false));
        let snap = snapshot(&outbox, &inspector).await.unwrap();
        let pin = snap.pinned.unwrap();
        assert_eq!(pin.attempts, Some(1));
        assert_eq!(pin.next_attempt_at, Some(5_000));
        assert_eq!(pin.last.unwrap().kind, OutcomeKind::Unknown);
        let counts: Vec<(u128, u64)> = snap
            .aggregates
            .iter()
            .map(|a| (a.aggregate.id.as_u128(), a.pending))
            .collect();
        assert_eq!(counts, [(1, 3), (2, 2)]);
        assert!(snap.parked.is_empty());
        assert_eq!(snap.outcomes.len(), 1);
    });
}
