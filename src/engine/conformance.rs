//! One conformance suite for every [`Outbox`] implementation.
//!
//! The in-memory outbox runs it under `cargo test`; the IndexedDB outbox runs it in headless
//! Chromium (`tests/browser_outbox.rs`). Each check gets a fresh, empty outbox and panics with
//! a message naming the rule it found broken.

use std::future::Future;

use uuid::Uuid;

use super::model::{AggregateRef, Batch, NewEvent, ParkRecord};
use super::outbox::{EventState, Outbox};

/// Aggregate number `n` of the suite.
pub fn aggregate(n: u128) -> AggregateRef {
    AggregateRef {
        type_id: Uuid::from_u128(0xA11),
        id: Uuid::from_u128(n),
    }
}

/// An event with a recognisable payload of `len` bytes.
pub fn event(tag: u8, len: usize) -> NewEvent {
    NewEvent {
        event_id: Uuid::from_u128(0xE000 + u128::from(tag)),
        timestamp: 1_790_000_000_000 + u64::from(tag),
        event_type: 3,
        minor: u64::from(tag % 3),
        data: vec![tag; len],
        iv: (tag % 2 == 0).then(|| vec![tag; 12]),
    }
}

fn events(tags: std::ops::Range<u8>) -> Vec<NewEvent> {
    tags.map(|t| event(t, 10)).collect()
}

/// Runs every check, each on a fresh outbox from `make`.
pub async fn run_all<O: Outbox, F: Future<Output = O>>(mut make: impl FnMut() -> F) {
    sequences_start_at_one_and_are_per_aggregate(&make().await).await;
    sequences_are_never_reused(&make().await).await;
    events_are_stored_exactly(&make().await).await;
    head_cuts_by_count_and_bytes(&make().await).await;
    aggregates_are_visited_in_key_order(&make().await).await;
    pins_persist_and_settle_moves_them(&make().await).await;
    parking_and_discarding(&make().await).await;
    client_id_is_created_once(&make().await).await;
    event_states_follow_the_event(&make().await).await;
}

/// Rule 1: sequences start at 1, are consecutive per aggregate and independent across them.
pub async fn sequences_start_at_one_and_are_per_aggregate(o: &impl Outbox) {
    let r = o.append(aggregate(1), events(0..3)).await.unwrap();
    assert_eq!(
        r.iter().map(|r| r.client_seq).collect::<Vec<_>>(),
        [1, 2, 3],
        "first append"
    );
    assert_eq!(
        r[1].event_id,
        event(1, 10).event_id,
        "receipts carry the event ids"
    );
    let r = o.append(aggregate(2), events(3..4)).await.unwrap();
    assert_eq!(r[0].client_seq, 1, "another aggregate has its own sequence");
    let r = o.append(aggregate(1), events(4..6)).await.unwrap();
    assert_eq!(
        r.iter().map(|r| r.client_seq).collect::<Vec<_>>(),
        [4, 5],
        "continues"
    );
    assert_eq!(o.last_assigned(aggregate(1)).await.unwrap(), 5);
    assert_eq!(o.last_assigned(aggregate(3)).await.unwrap(), 0);
    assert_eq!(o.count().await.unwrap(), 6);
    assert_eq!(o.lowest_pending(aggregate(1)).await.unwrap(), Some(1));
    assert_eq!(o.lowest_pending(aggregate(3)).await.unwrap(), None);
}

/// Rule 1: settled events' sequences are never handed out again.
pub async fn sequences_are_never_reused(o: &impl Outbox) {
    o.append(aggregate(1), events(0..3)).await.unwrap();
    let batch = Batch {
        aggregate: aggregate(1),
        first_seq: 1,
        last_seq: 3,
        count: 3,
    };
    assert!(o.pin(&batch, None).await.unwrap());
    assert_eq!(o.settle(&batch, 3).await.unwrap(), 3);
    assert_eq!(o.count().await.unwrap(), 0);
    assert_eq!(
        o.next_aggregate(None).await.unwrap(),
        None,
        "nothing pending"
    );
    let r = o.append(aggregate(1), events(3..4)).await.unwrap();
    assert_eq!(r[0].client_seq, 4, "the counter outlives the events");
}

/// Events come back exactly as appended, in sequence order.
pub async fn events_are_stored_exactly(o: &impl Outbox) {
    let input = vec![event(7, 0), event(8, 1000), event(9, 3)];
    o.append(aggregate(5), input.clone()).await.unwrap();
    let head = o.head(aggregate(5), 10, usize::MAX).await.unwrap();
    assert_eq!(head.len(), 3);
    for (i, (stored, original)) in head.iter().zip(&input).enumerate() {
        assert_eq!(stored.client_seq, i as u64 + 1);
        assert_eq!(stored.aggregate, aggregate(5));
        assert_eq!(stored.event_id, original.event_id);
        let wire = stored.decode().expect("stored in the wire encoding");
        assert_eq!(wire.client_seq, stored.client_seq);
        assert_eq!(wire.event_id, Some(original.event_id));
        assert_eq!(wire.timestamp, original.timestamp);
        assert_eq!(
            (wire.event_type, wire.minor),
            (original.event_type, original.minor)
        );
        assert_eq!(wire.data, original.data, "payload bytes");
        assert_eq!(wire.iv, original.iv, "iv");
        assert_eq!(
            stored,
            &super::model::StoredEvent::new(aggregate(5), wire.client_seq, original),
            "exactly the encoding of the appended event"
        );
    }
    let read = o
        .read(&Batch {
            aggregate: aggregate(5),
            first_seq: 2,
            last_seq: 3,
            count: 2,
        })
        .await
        .unwrap();
    assert_eq!(read, head[1..].to_vec(), "read returns the batch's range");
}

/// Rule 2: a head is the lowest pending events, cut by count and bytes, at least one.
pub async fn head_cuts_by_count_and_bytes(o: &impl Outbox) {
    o.append(aggregate(1), (0..20).map(|t| event(t, 100)).collect())
        .await
        .unwrap();
    let seqs =
        |v: Vec<super::model::StoredEvent>| v.iter().map(|e| e.client_seq).collect::<Vec<_>>();
    assert_eq!(
        seqs(o.head(aggregate(1), 5, usize::MAX).await.unwrap()),
        [1, 2, 3, 4, 5]
    );
    let one = event(0, 100);
    let size = super::model::StoredEvent::new(aggregate(1), 1, &one).encoded_len();
    let budget = celeriant_sync_protocol::wire::WRITE_JSON_OVERHEAD + 3 * size;
    assert_eq!(
        seqs(o.head(aggregate(1), 100, budget).await.unwrap()),
        [1, 2, 3],
        "byte budget"
    );
    assert_eq!(
        seqs(o.head(aggregate(1), 100, 1).await.unwrap()),
        [1],
        "at least one"
    );
    assert!(
        o.head(aggregate(2), 10, usize::MAX)
            .await
            .unwrap()
            .is_empty()
    );
}

/// Rule 2: aggregates are visited in key order; empty ones are skipped.
pub async fn aggregates_are_visited_in_key_order(o: &impl Outbox) {
    for n in [30u128, 10, 20] {
        o.append(aggregate(n), events(0..2)).await.unwrap();
    }
    let mut seen = Vec::new();
    let mut after = None;
    while let Some(a) = o.next_aggregate(after).await.unwrap() {
        seen.push(a);
        after = Some(a);
    }
    assert_eq!(seen, [aggregate(10), aggregate(20), aggregate(30)]);
    let all = Batch {
        aggregate: aggregate(20),
        first_seq: 1,
        last_seq: 2,
        count: 2,
    };
    o.settle(&all, 2).await.unwrap();
    assert_eq!(
        o.next_aggregate(Some(aggregate(10))).await.unwrap(),
        Some(aggregate(30)),
        "20 is empty now"
    );
}

/// Rule 3: the pin persists; settling a prefix re-pins the rest, settling all unpins.
pub async fn pins_persist_and_settle_moves_them(o: &impl Outbox) {
    assert_eq!(o.pinned().await.unwrap(), None);
    o.append(aggregate(1), events(0..6)).await.unwrap();
    let batch = Batch {
        aggregate: aggregate(1),
        first_seq: 1,
        last_seq: 5,
        count: 5,
    };
    assert!(o.pin(&batch, None).await.unwrap());
    assert_eq!(o.pinned().await.unwrap(), Some(batch));
    assert_eq!(o.settle(&batch, 2).await.unwrap(), 2, "a 2002 prefix");
    let rest = Batch {
        first_seq: 3,
        count: 3,
        ..batch
    };
    assert_eq!(
        o.pinned().await.unwrap(),
        Some(rest),
        "the rest stays pinned"
    );
    assert_eq!(o.read(&rest).await.unwrap().len(), 3);
    assert_eq!(o.settle(&rest, 5).await.unwrap(), 3);
    assert_eq!(o.pinned().await.unwrap(), None);
    assert_eq!(
        o.lowest_pending(aggregate(1)).await.unwrap(),
        Some(6),
        "6 was never in the batch"
    );
    let other = Batch {
        aggregate: aggregate(1),
        first_seq: 6,
        last_seq: 6,
        count: 1,
    };
    assert!(o.pin(&other, None).await.unwrap());
    let stale = Batch {
        last_seq: 7,
        ..other
    };
    assert!(
        !o.pin(&stale, None).await.unwrap(),
        "compare-and-set: a pin exists"
    );
    assert!(
        !o.pin(&stale, Some(&batch)).await.unwrap(),
        "compare-and-set: not that pin"
    );
    assert_eq!(o.pinned().await.unwrap(), Some(other));
    // Settling a batch that is no longer pinned removes its landed events, not the pin.
    o.append(aggregate(2), events(6..8)).await.unwrap();
    let gone = Batch {
        aggregate: aggregate(2),
        first_seq: 1,
        last_seq: 2,
        count: 2,
    };
    assert_eq!(o.settle(&gone, 1).await.unwrap(), 1);
    assert_eq!(
        o.pinned().await.unwrap(),
        Some(other),
        "another drainer's pin is kept"
    );
    assert!(
        o.pin(&stale, Some(&other)).await.unwrap(),
        "replaces the expected pin"
    );
    assert_eq!(o.pinned().await.unwrap(), Some(stale));
}

/// Rule 4: parking unpins and records; discarding drops exactly the parked events.
pub async fn parking_and_discarding(o: &impl Outbox) {
    o.append(aggregate(1), events(0..5)).await.unwrap();
    let batch = Batch {
        aggregate: aggregate(1),
        first_seq: 2,
        last_seq: 3,
        count: 2,
    };
    assert!(o.pin(&batch, None).await.unwrap());
    let record = ParkRecord {
        aggregate: aggregate(1),
        first_seq: 2,
        last_seq: 3,
        count: 2,
        code: 2022,
        message: "schema".into(),
        parked_at: 1,
        may_have_landed: true,
    };
    o.park(&record, &batch).await.unwrap();
    assert_eq!(o.pinned().await.unwrap(), None, "park unpins");
    assert_eq!(o.parked().await.unwrap(), vec![record.clone()]);
    assert_eq!(o.count().await.unwrap(), 5, "parked events are kept");
    assert_eq!(
        o.discard_parked(aggregate(2)).await.unwrap(),
        0,
        "not parked: nothing"
    );
    assert_eq!(o.discard_parked(aggregate(1)).await.unwrap(), 2);
    assert!(o.parked().await.unwrap().is_empty());
    let left: Vec<u64> = o
        .head(aggregate(1), 10, usize::MAX)
        .await
        .unwrap()
        .iter()
        .map(|e| e.client_seq)
        .collect();
    assert_eq!(left, [1, 4, 5], "only the parked range went");
}

/// The client id is stored once and returned ever after.
pub async fn client_id_is_created_once(o: &impl Outbox) {
    let first = o.client_id(Uuid::from_u128(1)).await.unwrap();
    assert_eq!(first, Uuid::from_u128(1));
    assert_eq!(o.client_id(Uuid::from_u128(2)).await.unwrap(), first);
}

/// An event is pending until it is settled (then absent) or discarded.
pub async fn event_states_follow_the_event(o: &impl Outbox) {
    let r = o.append(aggregate(1), events(0..3)).await.unwrap();
    let pending = o.event_state(r[1].event_id).await.unwrap();
    assert_eq!(
        pending,
        EventState::Pending {
            aggregate: aggregate(1),
            client_seq: 2
        }
    );
    assert_eq!(
        o.event_state(Uuid::from_u128(0xDEAD)).await.unwrap(),
        EventState::Absent
    );
    let batch = Batch {
        aggregate: aggregate(1),
        first_seq: 1,
        last_seq: 1,
        count: 1,
    };
    o.settle(&batch, 1).await.unwrap();
    assert_eq!(
        o.event_state(r[0].event_id).await.unwrap(),
        EventState::Absent,
        "landed"
    );
    let record = ParkRecord {
        aggregate: aggregate(1),
        first_seq: 2,
        last_seq: 2,
        count: 1,
        code: 2022,
        message: "schema".into(),
        parked_at: 1,
        may_have_landed: false,
    };
    let parked = Batch {
        aggregate: aggregate(1),
        first_seq: 2,
        last_seq: 2,
        count: 1,
    };
    o.park(&record, &parked).await.unwrap();
    assert!(
        matches!(
            o.event_state(r[1].event_id).await.unwrap(),
            EventState::Pending { .. }
        ),
        "parked is still pending"
    );
    o.discard_parked(aggregate(1)).await.unwrap();
    assert_eq!(
        o.event_state(r[1].event_id).await.unwrap(),
        EventState::Discarded
    );
    assert!(matches!(
        o.event_state(r[2].event_id).await.unwrap(),
        EventState::Pending { client_seq: 3, .. }
    ));
}
