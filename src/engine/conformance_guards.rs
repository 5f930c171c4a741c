//! The conformance checks of conditional appends (`append(…, { expectedVersion })`): their
//! events carry the guard through storage, and a batch never mixes them with other events
//! (rules 1 and 3 of [`super::super::outbox`]).

use super::super::batch::{batch_of, encode};
use super::super::model::{Guard, StoredEvent};
use super::super::outbox::{CutQuery, Outbox};
use super::{aggregate, all, batch, events, rejected, seqs};

fn guards(events: &[StoredEvent]) -> Vec<Option<Guard>> {
    events.iter().map(|e| e.guard).collect()
}

/// Rule 3: a conditional append is exactly one batch, whatever the limits; the unconditional
/// events before it are cut stopping before it, those after it come in a later batch.
pub(super) async fn a_conditional_append_is_a_batch_of_its_own(o: &impl Outbox) {
    let (before, guarded, after, again) = (events(0..3), events(3..6), events(6..8), events(8..9));
    // One group, so a store that keeps runs of one aggregate together must split them here.
    let g = o
        .append_group(&[
            (aggregate(1), &before, None),
            (aggregate(1), &guarded, Some(5)),
            (aggregate(1), &after, None),
            (aggregate(1), &again, Some(0)),
        ])
        .await
        .unwrap();
    assert_eq!(g.receipts[1][0].client_seq, 4);
    let guard = Guard {
        expected_version: 5,
        first_seq: 4,
        last_seq: 6,
    };
    let got = o.next_batch(all(None)).await.unwrap().unwrap();
    assert_eq!(seqs(&got), [1, 2, 3], "stops before the conditional append");
    assert_eq!(guards(&got), [None; 3]);
    let small = CutQuery {
        max_events: 1,
        max_bytes: 1,
        ..all(None)
    };
    let got = o.next_batch(small).await.unwrap().unwrap();
    assert_eq!(seqs(&got), [1], "the limits still cut unconditional events");
    // The batch after 1..=3 (read ahead): the conditional append, whole, despite the limits.
    let ahead = CutQuery {
        assume_landed: Some((aggregate(1), 3)),
        ..small
    };
    let got = o.next_batch(ahead).await.unwrap().unwrap();
    assert_eq!(seqs(&got), [4, 5, 6], "never split by the limits");
    assert_eq!(
        guards(&got),
        [Some(guard); 3],
        "each event carries its guard"
    );
    let b = batch(1, 1, 3);
    assert!(o.pin(&b, None).await.unwrap());
    let c = batch_of(&got).unwrap();
    assert!(o.settle(&b, 3, Some(&c)).await.unwrap());
    let read = o.read(&c).await.unwrap();
    assert_eq!(
        read, got,
        "a pinned conditional batch reads back with its guard"
    );
    let body = encode(uuid::Uuid::nil(), aggregate(1), &read);
    assert!(
        body.contains(r#""allowCreate":true,"expectedVersion":5,"events":["#),
        "{body}"
    );
    assert!(o.settle(&c, 6, None).await.unwrap());
    let got = o.next_batch(all(None)).await.unwrap().unwrap();
    assert_eq!(
        seqs(&got),
        [7, 8],
        "the events after it are a batch of their own"
    );
    assert_eq!(guards(&got), [None; 2]);
    let body = encode(uuid::Uuid::nil(), aggregate(1), &got);
    assert!(!body.contains("expectedVersion"), "{body}");
    let d = batch(1, 7, 8);
    assert!(o.pin(&d, None).await.unwrap());
    assert!(o.settle(&d, 8, None).await.unwrap());
    let got = o.next_batch(all(None)).await.unwrap().unwrap();
    assert_eq!(seqs(&got), [9]);
    assert_eq!(
        guards(&got),
        [Some(Guard {
            expected_version: 0,
            first_seq: 9,
            last_seq: 9
        })],
        "expectedVersion 0 is a guard"
    );
}

/// Rules 2 and 5: a prefix settle, a prune that cuts through the append and a park keep the
/// guard on what is left; a discard drops it with its events.
pub(super) async fn guards_survive_settles_prunes_and_discards(o: &impl Outbox) {
    o.append_group(&[(aggregate(2), &events(0..4), Some(7))])
        .await
        .unwrap();
    let guard = Some(Guard {
        expected_version: 7,
        first_seq: 1,
        last_seq: 4,
    });
    let b = batch(2, 1, 4);
    assert!(o.pin(&b, None).await.unwrap());
    let rest = batch(2, 3, 4);
    assert!(o.settle(&b, 2, Some(&rest)).await.unwrap());
    let pruned = o.prune(aggregate(2), 100, true).await.unwrap();
    assert_eq!(pruned.removed, 2);
    let read = o.read(&rest).await.unwrap();
    assert_eq!(seqs(&read), [3, 4]);
    assert_eq!(guards(&read), [guard; 2], "kept through a partial prune");
    let got = o.next_batch(all(None)).await.unwrap().unwrap();
    assert_eq!(seqs(&got), [3, 4]);
    let mut record = rejected(&rest, false);
    record.code = 2003;
    record.current_version = Some(9);
    o.park(std::slice::from_ref(&record), &rest).await.unwrap();
    assert_eq!(
        o.parked().await.unwrap(),
        [record],
        "the current version is kept"
    );
    assert_eq!(o.discard_parked(aggregate(2)).await.unwrap().removed, 2);
    o.append(aggregate(2), events(4..5)).await.unwrap();
    let got = o.next_batch(all(None)).await.unwrap().unwrap();
    assert_eq!(
        (seqs(&got), guards(&got)),
        (vec![5], vec![None]),
        "unconditional after the discard"
    );
}
