//! The conformance checks of what follows a cut: the pin persists and settles move it, landed
//! events stay unseen until pruned, parked events are discarded exactly, and each event's state
//! follows it; the client id is created once (rules 2, 4 and 5 of [`super::super::outbox`]).

use uuid::Uuid;

use super::super::model::Batch;
use super::super::outbox::{CutQuery, EventState, Outbox};
use super::{aggregate, all, batch, events, rejected, seqs};

/// Rule 4: the pin persists; settling a prefix re-pins the rest, settling all unpins or pins
/// the next batch; every change is a compare-and-set.
pub async fn pins_persist_and_settle_moves_them(o: &impl Outbox) {
    assert_eq!(o.pinned().await.unwrap(), None);
    o.append(aggregate(1), events(0..6)).await.unwrap();
    let b = batch(1, 1, 5);
    assert!(o.pin(&b, None).await.unwrap());
    assert_eq!(o.pinned().await.unwrap(), Some(b.clone()));
    let rest = batch(1, 3, 5);
    assert!(o.settle(&b, 2, Some(&rest)).await.unwrap(), "a 2002 prefix");
    assert_eq!(
        o.pinned().await.unwrap(),
        Some(rest.clone()),
        "the rest stays pinned"
    );
    assert_eq!(seqs(&o.read(&rest).await.unwrap()), [3, 4, 5]);
    assert_eq!(seqs(&o.read(&b).await.unwrap()), [3, 4, 5], "1, 2 landed");
    let next = batch(1, 6, 6);
    assert!(o.settle(&rest, 5, Some(&next)).await.unwrap());
    assert_eq!(
        o.pinned().await.unwrap(),
        Some(next.clone()),
        "the next batch, read ahead"
    );
    assert_eq!(
        o.lowest_pending_of(&[aggregate(1)]).await.unwrap(),
        [Some(6)]
    );
    let stale = Batch {
        last_seq: 7,
        ..next.clone()
    };
    assert!(
        !o.pin(&stale, None).await.unwrap(),
        "compare-and-set: a pin exists"
    );
    assert!(
        !o.pin(&stale, Some(&b)).await.unwrap(),
        "compare-and-set: not that pin"
    );
    assert!(
        !o.settle(&b, 5, None).await.unwrap(),
        "compare-and-set: settling a batch that is not pinned"
    );
    assert_eq!(o.pinned().await.unwrap(), Some(next.clone()));
    assert!(
        o.pin(&stale, Some(&next)).await.unwrap(),
        "replaces the expected pin"
    );
    assert_eq!(o.pinned().await.unwrap(), Some(stale.clone()));
    assert!(o.settle(&stale, 6, None).await.unwrap());
    assert_eq!(o.pinned().await.unwrap(), None, "all landed: unpinned");
}

/// Rule 2: landed events stay stored until pruned, and nothing that serves the drain, `flush`
/// or `whenSynced` sees them.
pub async fn landed_events_are_invisible_until_pruned(o: &impl Outbox) {
    let r = o.append(aggregate(1), events(0..6)).await.unwrap();
    o.append(aggregate(2), events(6..8)).await.unwrap();
    // A cut before the settle too: what an implementation keeps of the watermarks from one cut
    // (the IndexedDB outbox does, for its drainer) must follow the settles and prunes after it.
    let before = o.next_batch(all(None)).await.unwrap().unwrap();
    assert_eq!(seqs(&before), [1, 2, 3, 4, 5, 6]);
    let b = batch(1, 1, 4);
    assert!(o.pin(&b, None).await.unwrap());
    assert!(o.settle(&b, 4, None).await.unwrap());
    assert_eq!(
        o.count().await.unwrap(),
        4,
        "2 of aggregate 1, 2 of aggregate 2"
    );
    let got = o.next_batch(all(None)).await.unwrap().unwrap();
    assert_eq!(seqs(&got), [5, 6]);
    assert_eq!(seqs(&o.read(&batch(1, 1, 6)).await.unwrap()), [5, 6]);
    assert_eq!(
        o.lowest_pending_of(&[aggregate(1)]).await.unwrap(),
        [Some(5)]
    );
    assert_eq!(
        o.event_state(r[0].event_id).await.unwrap(),
        EventState::Absent
    );
    assert_eq!(o.unpruned().await.unwrap(), [aggregate(1)]);
    let p = o.prune(aggregate(1), 3, true).await.unwrap();
    assert_eq!((p.removed, p.more), (3, true), "in chunks");
    let p = o.prune(aggregate(1), 3, true).await.unwrap();
    assert_eq!((p.removed, p.more), (1, false));
    assert_eq!(
        seqs(&o.next_batch(all(None)).await.unwrap().unwrap()),
        [5, 6],
        "the watermark went with the last landed event: the same cut"
    );
    assert!(o.unpruned().await.unwrap().is_empty());
    assert_eq!(
        o.count().await.unwrap(),
        4,
        "pruning removes nothing pending"
    );
    assert_eq!(seqs(&o.read(&batch(1, 1, 6)).await.unwrap()), [5, 6]);
    let b = batch(1, 5, 6);
    assert!(o.pin(&b, None).await.unwrap());
    assert!(o.settle(&b, 6, None).await.unwrap());
    let next = o.next_batch(all(None)).await.unwrap().unwrap();
    assert_eq!(
        (next[0].aggregate, seqs(&next)),
        (aggregate(2), vec![1, 2]),
        "aggregate 1 has nothing pending"
    );
    assert_eq!(
        o.pending_aggregates().await.unwrap(),
        [(aggregate(2), 2)],
        "aggregate 1 has nothing pending"
    );
    assert_eq!(o.lowest_pending_of(&[aggregate(1)]).await.unwrap(), [None]);
}

/// Rule 5: parking unpins and records; discarding drops exactly the parked events.
pub async fn parking_and_discarding(o: &impl Outbox) {
    o.append(aggregate(1), events(0..5)).await.unwrap();
    let b = batch(1, 1, 1);
    assert!(o.pin(&b, None).await.unwrap());
    assert!(o.settle(&b, 1, None).await.unwrap());
    let b = batch(1, 2, 3);
    assert!(o.pin(&b, None).await.unwrap());
    let record = rejected(&batch(1, 2, 3), true);
    o.park(std::slice::from_ref(&record), &b).await.unwrap();
    assert_eq!(o.pinned().await.unwrap(), None, "park unpins");
    assert_eq!(o.parked().await.unwrap(), vec![record.clone()]);
    assert_eq!(o.count().await.unwrap(), 4, "parked events are kept");
    let skip = [aggregate(1)];
    let skipping = CutQuery {
        skip: &skip,
        ..all(None)
    };
    assert_eq!(
        o.next_batch(skipping).await.unwrap(),
        None,
        "parked: skipped"
    );
    assert_eq!(
        o.discard_parked(aggregate(2)).await.unwrap().removed,
        0,
        "not parked: nothing"
    );
    assert_eq!(o.discard_parked(aggregate(1)).await.unwrap().removed, 2);
    assert!(o.parked().await.unwrap().is_empty());
    let left = o.next_batch(all(None)).await.unwrap().unwrap();
    assert_eq!(seqs(&left), [4, 5], "only the parked range went");
    assert_eq!(o.count().await.unwrap(), 2);
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
    let b = batch(1, 1, 1);
    assert!(o.pin(&b, None).await.unwrap());
    assert!(o.settle(&b, 1, None).await.unwrap());
    assert_eq!(
        o.event_state(r[0].event_id).await.unwrap(),
        EventState::Absent,
        "landed"
    );
    let record = rejected(&batch(1, 2, 2), false);
    o.park(std::slice::from_ref(&record), &batch(1, 2, 2))
        .await
        .unwrap();
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
