//! The conformance checks of how an implementation stores events: pruning a large backlog
//! keeps `whenSynced`'s lookups right, and batches, settles, prunes and discards may begin or
//! end inside what it stores together (an append, a group commit's run) without it showing.

use uuid::Uuid;

use super::super::model::{NewEvent, Receipt};
use super::super::outbox::{CutQuery, EventState, Outbox};
use super::{aggregate, all, batch, event, rejected, seqs};

/// `whenSynced`'s lookups stay right when most of a large outbox is pruned at once (the
/// IndexedDB outbox then rebuilds its id records from what is left, a chunk at a time).
pub async fn event_ids_survive_pruning_a_large_backlog(o: &impl Outbox) {
    let many = |base: u128, n: u128| -> Vec<NewEvent> {
        (0..n)
            .map(|i| NewEvent {
                event_id: Uuid::from_u128(base + i),
                ..event(1, 8)
            })
            .collect()
    };
    let landed = o.append(aggregate(1), many(0x1_0000, 6_000)).await.unwrap();
    let pending = o.append(aggregate(2), many(0x2_0000, 4_500)).await.unwrap();
    let b = batch(1, 1, 6_000);
    assert!(o.pin(&b, None).await.unwrap());
    assert!(o.settle(&b, 6_000, None).await.unwrap());
    let p = o.prune(aggregate(1), 10_000, true).await.unwrap();
    assert_eq!((p.removed, p.more), (6_000, false));
    for i in [0, 1_999, 2_000, 2_001, 3_999, 4_000, 4_499] {
        assert_eq!(
            o.event_state(pending[i].event_id).await.unwrap(),
            EventState::Pending {
                aggregate: aggregate(2),
                client_seq: i as u64 + 1
            },
            "pending event {i}"
        );
    }
    for i in [0, 2_999, 5_999] {
        assert_eq!(
            o.event_state(landed[i].event_id).await.unwrap(),
            EventState::Absent,
            "landed event {i}"
        );
    }
    assert_eq!(o.count().await.unwrap(), 4_500);
}

/// What an implementation stores together (the IndexedDB outbox keeps an append's events, and
/// a group commit's events of one aggregate, in one record) never shows: batches, settles,
/// prunes and discards may begin or end inside an append, and each event is still served,
/// counted, looked up and deleted on its own.
pub async fn batches_settles_prunes_and_discards_cut_through_appends(o: &impl Outbox) {
    let tagged = |tags: std::ops::Range<u8>| -> Vec<NewEvent> {
        tags.map(|t| NewEvent {
            event_id: Uuid::from_u128(0xC000 + u128::from(t)),
            ..event(t, 10)
        })
        .collect()
    };
    let first = tagged(0..10);
    let (one, more) = (tagged(10..11), tagged(11..16));
    let r = o.append(aggregate(1), first).await.unwrap();
    let g = o
        .append_group(&[
            (aggregate(1), &one, None),
            (aggregate(2), &one, None),
            (aggregate(1), &more, None),
        ])
        .await
        .unwrap()
        .receipts;
    assert_eq!(seqs_of(&g[2]), [12, 13, 14, 15, 16]);
    assert_eq!(o.count().await.unwrap(), 17);
    let cut = |max_events| CutQuery {
        max_events,
        ..all(None)
    };
    let got = o.next_batch(cut(4)).await.unwrap().unwrap();
    assert_eq!(seqs(&got), [1, 2, 3, 4]);
    assert_eq!(seqs(&o.read(&batch(1, 3, 6)).await.unwrap()), [3, 4, 5, 6]);
    let b = batch(1, 1, 4);
    assert!(o.pin(&b, None).await.unwrap());
    assert!(o.settle(&b, 4, None).await.unwrap());
    assert_eq!(o.count().await.unwrap(), 13);
    assert_eq!(
        o.lowest_pending_of(&[aggregate(1)]).await.unwrap(),
        [Some(5)]
    );
    let got = o.next_batch(cut(7)).await.unwrap().unwrap();
    assert_eq!(seqs(&got), [5, 6, 7, 8, 9, 10, 11], "into the next append");
    let stored: Vec<Uuid> = got.iter().map(|e| e.event_id).collect();
    let mut expected: Vec<Uuid> = r[4..].iter().map(|r| r.event_id).collect();
    expected.push(g[0][0].event_id);
    assert_eq!(stored, expected, "each event with its own id");
    // Park 5..=7 and discard it: 8.. stay, 1..=4 are landed.
    let b = batch(1, 5, 7);
    assert!(o.pin(&b, None).await.unwrap());
    let record = rejected(&batch(1, 5, 7), false);
    o.park(std::slice::from_ref(&record), &b).await.unwrap();
    assert_eq!(o.discard_parked(aggregate(1)).await.unwrap().removed, 3);
    assert_eq!(o.count().await.unwrap(), 10);
    let state = |i: usize| o.event_state(r[i].event_id);
    assert_eq!(state(3).await.unwrap(), EventState::Absent, "landed");
    assert_eq!(state(4).await.unwrap(), EventState::Discarded);
    assert_eq!(state(6).await.unwrap(), EventState::Discarded);
    assert_eq!(
        state(7).await.unwrap(),
        EventState::Pending {
            aggregate: aggregate(1),
            client_seq: 8
        }
    );
    assert_eq!(
        o.lowest_pending_of(&[aggregate(1)]).await.unwrap(),
        [Some(8)]
    );
    let got = o.next_batch(all(None)).await.unwrap().unwrap();
    assert_eq!(seqs(&got), [8, 9, 10, 11, 12, 13, 14, 15, 16]);
    assert_eq!(seqs(&o.read(&batch(1, 5, 9)).await.unwrap()), [8, 9]);
    // Prune 1..=4 in chunks of 3 events.
    let p = o.prune(aggregate(1), 3, true).await.unwrap();
    assert_eq!((p.removed, p.more), (3, true));
    let p = o.prune(aggregate(1), 3, true).await.unwrap();
    assert_eq!((p.removed, p.more), (1, false));
    assert!(o.unpruned().await.unwrap().is_empty());
    assert_eq!(o.count().await.unwrap(), 10);
    assert_eq!(
        state(7).await.unwrap(),
        EventState::Pending {
            aggregate: aggregate(1),
            client_seq: 8
        }
    );
    // Settle 8..=13 (into the group commit's events), prune, and the rest is intact.
    let b = batch(1, 8, 13);
    assert!(o.pin(&b, None).await.unwrap());
    assert!(o.settle(&b, 13, None).await.unwrap());
    let p = o.prune(aggregate(1), 100, true).await.unwrap();
    assert_eq!((p.removed, p.more), (6, false));
    let got = o.next_batch(all(None)).await.unwrap().unwrap();
    assert_eq!(seqs(&got), [14, 15, 16]);
    assert_eq!(
        got.iter().map(|e| e.event_id).collect::<Vec<_>>(),
        g[2][2..].iter().map(|r| r.event_id).collect::<Vec<_>>()
    );
    assert_eq!(
        o.count().await.unwrap(),
        4,
        "14..=16 of aggregate 1, 1 of aggregate 2"
    );
    assert_eq!(state(9).await.unwrap(), EventState::Absent);
}

fn seqs_of(receipts: &[Receipt]) -> Vec<u64> {
    receipts.iter().map(|r| r.client_seq).collect()
}
