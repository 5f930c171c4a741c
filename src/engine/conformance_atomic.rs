//! The conformance checks of atomic writes (`appendAtomic`): every event carries the write's
//! legs through storage; the write is cut whole, and only once it heads every one of its
//! aggregates; it is settled, parked and discarded whole (rules 1, 3 and 5 of
//! [`super::super::outbox`]).

use super::super::batch::{batch_of, encode_atomic};
use super::super::model::{Batch, Leg, Legs, ParkRecord};
use super::super::outbox::{CutQuery, EventState, Outbox};
use super::{aggregate, all, batch, events, rejected, seqs};

/// The legs of a write of `spans` (aggregate number, first, last).
fn legs(spans: &[(u128, u64, u64)]) -> Legs {
    spans
        .iter()
        .map(|&(n, first_seq, last_seq)| Leg {
            aggregate: aggregate(n),
            first_seq,
            last_seq,
        })
        .collect::<Vec<_>>()
        .into()
}

/// Rules 1 and 3: an atomic write gets each aggregate's next sequences, its events carry every
/// leg (and a guarded leg its guard), and it is one batch, whole, only once it heads each of its
/// aggregates; what came before it on each aggregate goes first, what came after it waits.
pub(super) async fn an_atomic_write_is_cut_whole_once_it_heads_every_aggregate(o: &impl Outbox) {
    let (a_before, b_before) = (events(0..2), events(2..3));
    o.append(aggregate(1), a_before).await.unwrap();
    o.append(aggregate(2), b_before).await.unwrap();
    let (a_leg, b_leg) = (events(3..5), events(5..8));
    let written = o
        .append_atomic(&[
            (aggregate(2), &b_leg, Some(4)),
            (aggregate(1), &a_leg, None),
        ])
        .await
        .unwrap();
    assert_eq!(
        written
            .receipts
            .iter()
            .map(|r| r.iter().map(|r| r.client_seq).collect::<Vec<_>>())
            .collect::<Vec<_>>(),
        [vec![2, 3, 4], vec![3, 4]],
        "rule 1: each aggregate's next sequences, per write, in order"
    );
    let (a_after, b_after) = (events(8..9), events(9..10));
    o.append(aggregate(1), a_after).await.unwrap();
    o.append(aggregate(2), b_after).await.unwrap();
    let the_write = legs(&[(2, 2, 4), (1, 3, 4)]);

    // Aggregate 1 first: its plain head, stopping before the write.
    let first = o.next_batch(all(None)).await.unwrap().unwrap();
    assert_eq!(
        (first[0].aggregate, seqs(&first)),
        (aggregate(1), vec![1, 2])
    );
    // While aggregate 2's event 1 is pending, the write does not head aggregate 2: passed over
    // on aggregate 1 (which has nothing else before it) — aggregate 2's plain head comes.
    let past_1 = CutQuery {
        assume_landed: Some((aggregate(1), 2)),
        ..all(None)
    };
    let got = o.next_batch(past_1).await.unwrap().unwrap();
    assert_eq!(
        (got[0].aggregate, seqs(&got)),
        (aggregate(2), vec![1]),
        "rule 3: the write waits for aggregate 2's earlier event"
    );
    let b1 = batch(1, 1, 2);
    assert!(o.pin(&b1, None).await.unwrap());
    assert!(o.settle(&b1, 2, None).await.unwrap());
    let only_2 = CutQuery {
        after: Some(aggregate(2)),
        ..all(None)
    };
    let waiting = o.next_batch(only_2).await.unwrap().unwrap();
    assert_eq!(
        (waiting[0].aggregate, seqs(&waiting)),
        (aggregate(2), vec![1]),
        "rule 3: still behind aggregate 2's event 1, whichever aggregate is looked at first"
    );
    let b2 = batch(2, 1, 1);
    assert!(o.pin(&b2, None).await.unwrap());
    assert!(o.settle(&b2, 1, None).await.unwrap());

    // Now it heads both: the whole write, whatever the limits, in the order of its legs.
    let tiny = CutQuery {
        max_events: 1,
        max_bytes: 1,
        ..all(None)
    };
    let write = o.next_batch(tiny).await.unwrap().unwrap();
    assert_eq!(
        write
            .iter()
            .map(|e| (e.aggregate, e.client_seq))
            .collect::<Vec<_>>(),
        [
            (aggregate(2), 2),
            (aggregate(2), 3),
            (aggregate(2), 4),
            (aggregate(1), 3),
            (aggregate(1), 4)
        ],
        "rule 3: whole, leg by leg"
    );
    assert!(
        write.iter().all(|e| e.atomic.as_ref() == Some(&the_write)),
        "rule 1: every event carries the write's legs"
    );
    let guards: Vec<_> = write
        .iter()
        .map(|e| e.guard.map(|g| g.expected_version))
        .collect();
    assert_eq!(
        guards,
        [Some(4), Some(4), Some(4), None, None],
        "a leg's guard"
    );
    let skipping_1 = CutQuery {
        skip: &[aggregate(1)],
        ..all(None)
    };
    assert_eq!(
        o.next_batch(skipping_1).await.unwrap(),
        None,
        "rule 3: a skipped (parked) leg holds the whole write, and what follows it"
    );
    let whole = batch_of(&write).unwrap();
    assert_eq!(whole, Batch::of_atomic(&the_write).unwrap());
    assert!(encode_atomic(uuid::Uuid::nil(), &write).is_some());
    assert!(
        encode_atomic(uuid::Uuid::nil(), &write[..4]).is_none(),
        "a part of the write is never encoded"
    );

    // Pinned, read back, settled: every leg lands.
    assert!(o.pin(&whole, None).await.unwrap());
    assert_eq!(
        o.pinned().await.unwrap(),
        Some(whole.clone()),
        "the pin keeps its legs"
    );
    assert_eq!(o.read(&whole).await.unwrap(), write, "read back whole");
    assert!(o.settle(&whole, whole.last_seq, None).await.unwrap());
    assert_eq!(
        o.lowest_pending_of(&[aggregate(1), aggregate(2)])
            .await
            .unwrap(),
        [Some(5), Some(5)],
        "rule 5: both legs landed with it"
    );
    assert!(o.read(&whole).await.unwrap().is_empty());
    let rest = o.next_batch(all(None)).await.unwrap().unwrap();
    assert_eq!((rest[0].aggregate, seqs(&rest)), (aggregate(1), vec![5]));
    assert_eq!(rest[0].atomic, None);
    assert_eq!(o.count().await.unwrap(), 2);
}

/// Rule 5: a parked atomic write is discarded whole, whichever leg the app names, and what
/// followed it on each aggregate goes on.
pub(super) async fn an_atomic_write_is_parked_and_discarded_whole(o: &impl Outbox) {
    let (a_leg, b_leg, a_after) = (events(0..2), events(2..3), events(3..4));
    o.append_atomic(&[(aggregate(1), &a_leg, None), (aggregate(2), &b_leg, None)])
        .await
        .unwrap();
    o.append(aggregate(1), a_after).await.unwrap();
    let write = o.next_batch(all(None)).await.unwrap().unwrap();
    let whole = batch_of(&write).unwrap();
    assert!(o.pin(&whole, None).await.unwrap());
    let the_write = legs(&[(1, 1, 2), (2, 1, 1)]);
    let records: Vec<ParkRecord> = [batch(1, 1, 2), batch(2, 1, 1)]
        .iter()
        .map(|b| ParkRecord {
            atomic: Some(the_write.clone()),
            ..rejected(b, false)
        })
        .collect();
    o.park(&records, &whole).await.unwrap();
    assert_eq!(o.pinned().await.unwrap(), None, "unpinned with it");
    let mut parked = o.parked().await.unwrap();
    parked.sort_by_key(|r| r.aggregate);
    assert_eq!(parked, records, "one record per leg, each naming the write");
    assert_eq!(o.count().await.unwrap(), 4, "parked events still count");
    let discarded = o.discard_parked(aggregate(2)).await.unwrap();
    assert_eq!(discarded.removed, 3, "rule 5: every leg's events");
    assert_eq!(
        discarded.also,
        [aggregate(1)],
        "and says whose parks went with it"
    );
    assert!(o.parked().await.unwrap().is_empty(), "every leg's record");
    for e in write {
        assert_eq!(
            o.event_state(e.event_id).await.unwrap(),
            EventState::Discarded
        );
    }
    let next = o.next_batch(all(None)).await.unwrap().unwrap();
    assert_eq!((next[0].aggregate, seqs(&next)), (aggregate(1), vec![3]));
    assert_eq!(o.count().await.unwrap(), 1);
    assert_eq!(
        o.last_assigned(aggregate(1)).await.unwrap(),
        3,
        "never reused"
    );
}

/// Rule 5, when the records do not match the write: discarding a leg drops every leg's events
/// by the write's legs (also a leg that has no record), and removes another aggregate's record
/// only if it is a record of the same write.
pub(super) async fn a_discard_follows_the_legs_not_the_records(o: &impl Outbox) {
    let (b_first, a_leg, b_leg) = (events(0..1), events(1..3), events(3..4));
    o.append(aggregate(2), b_first).await.unwrap();
    o.append_atomic(&[(aggregate(1), &a_leg, None), (aggregate(2), &b_leg, None)])
        .await
        .unwrap();
    let the_write = legs(&[(1, 1, 2), (2, 2, 2)]);
    let whole = Batch::of_atomic(&the_write).unwrap();
    assert!(o.pin(&whole, None).await.unwrap());
    // Only the first leg's record (a write parked before every leg had one), and an unrelated
    // park of aggregate 2's earlier event.
    let a_record = ParkRecord {
        atomic: Some(the_write.clone()),
        ..rejected(&batch(1, 1, 2), true)
    };
    let unrelated = rejected(&batch(2, 1, 1), false);
    o.park(&[a_record, unrelated.clone()], &whole)
        .await
        .unwrap();
    let discarded = o.discard_parked(aggregate(1)).await.unwrap();
    assert_eq!(discarded.removed, 3, "both legs' events, by the legs");
    assert!(discarded.also.is_empty(), "no other record was the write's");
    assert_eq!(
        o.parked().await.unwrap(),
        [unrelated],
        "the unrelated park stays"
    );
    assert_eq!(
        o.lowest_pending_of(&[aggregate(1), aggregate(2)])
            .await
            .unwrap(),
        [None, Some(1)],
        "only aggregate 2's earlier (parked) event is left"
    );
    assert_eq!(o.count().await.unwrap(), 1);
}
