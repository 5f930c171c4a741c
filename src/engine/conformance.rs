//! One conformance suite for every [`Outbox`] implementation.
//!
//! The in-memory outbox runs it under `cargo test`; the IndexedDB outbox runs it in headless
//! Chromium (`tests/browser_outbox.rs`). Each check gets a fresh, empty outbox and panics with
//! a message naming the rule it found broken. The checks of what follows a cut, of how events
//! are stored, of conditional appends and of atomic writes have files of their own
//! (`conformance_settle.rs`, `conformance_records.rs`, `conformance_guards.rs`,
//! `conformance_atomic.rs`).

use std::future::Future;

use uuid::Uuid;

use super::model::{AggregateRef, Batch, NewEvent, ParkRecord, StoredEvent};
use super::outbox::{Begun, CutQuery, Outbox};

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

pub(crate) fn events(tags: std::ops::Range<u8>) -> Vec<NewEvent> {
    tags.map(|t| event(t, 10)).collect()
}

/// Runs every check, each on a fresh outbox from `make`.
pub async fn run_all<O: Outbox, F: Future<Output = O>>(mut make: impl FnMut() -> F) {
    sequences_start_at_one_and_are_per_aggregate(&make().await).await;
    a_group_commit_assigns_in_order(&make().await).await;
    sequences_are_never_reused(&make().await).await;
    events_are_stored_exactly(&make().await).await;
    batches_are_cut_by_count_and_bytes(&make().await).await;
    aggregates_are_visited_round_robin(&make().await).await;
    pins_persist_and_settle_moves_them(&make().await).await;
    landed_events_are_invisible_until_pruned(&make().await).await;
    parking_and_discarding(&make().await).await;
    client_id_is_created_once(&make().await).await;
    event_states_follow_the_event(&make().await).await;
    event_ids_survive_pruning_a_large_backlog(&make().await).await;
    batches_settles_prunes_and_discards_cut_through_appends(&make().await).await;
    counts_see_exactly_the_writes_begun_before_them(&make().await).await;
    guards::a_conditional_append_is_a_batch_of_its_own(&make().await).await;
    guards::guards_survive_settles_prunes_and_discards(&make().await).await;
    atomic::an_atomic_write_is_cut_whole_once_it_heads_every_aggregate(&make().await).await;
    atomic::an_atomic_write_is_parked_and_discarded_whole(&make().await).await;
    atomic::a_discard_follows_the_legs_not_the_records(&make().await).await;
}

#[path = "conformance_settle.rs"]
mod settle;
pub use settle::{
    client_id_is_created_once, event_states_follow_the_event,
    landed_events_are_invisible_until_pruned, parking_and_discarding,
    pins_persist_and_settle_moves_them,
};

#[path = "conformance_records.rs"]
mod records;
pub use records::{
    batches_settles_prunes_and_discards_cut_through_appends,
    event_ids_survive_pruning_a_large_backlog,
};

#[path = "conformance_guards.rs"]
mod guards;

#[path = "conformance_atomic.rs"]
mod atomic;

const NOTHING: &[AggregateRef] = &[];

/// A cut from the start with no limits.
pub(crate) fn all(after: Option<AggregateRef>) -> CutQuery<'static> {
    CutQuery {
        after,
        skip: NOTHING,
        assume_landed: None,
        max_events: 10_000,
        max_bytes: usize::MAX,
    }
}

pub(crate) fn seqs(events: &[StoredEvent]) -> Vec<u64> {
    events.iter().map(|e| e.client_seq).collect()
}

/// The park record of a schema rejection (2022) of `b`.
pub(crate) fn rejected(b: &Batch, may_have_landed: bool) -> ParkRecord {
    ParkRecord {
        aggregate: b.aggregate,
        first_seq: b.first_seq,
        last_seq: b.last_seq,
        count: b.count,
        code: 2022,
        message: "schema".into(),
        parked_at: 1,
        may_have_landed,
        current_version: None,
        atomic: None,
    }
}

pub(crate) fn batch(n: u128, first_seq: u64, last_seq: u64) -> Batch {
    Batch::plain(
        aggregate(n),
        first_seq,
        last_seq,
        (last_seq - first_seq + 1) as u32,
    )
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
    assert_eq!(
        o.lowest_pending_of(&[aggregate(1), aggregate(3), aggregate(2)])
            .await
            .unwrap(),
        [Some(1), None, Some(1)]
    );
    assert_eq!(
        o.pending_aggregates().await.unwrap(),
        [(aggregate(1), 5), (aggregate(2), 1)]
    );
}

/// Rule 1: a group commit gives each append its own run, in the order given.
pub async fn a_group_commit_assigns_in_order(o: &impl Outbox) {
    let (a, b, c) = (events(0..2), events(2..3), events(3..6));
    let receipts = o
        .append_group(&[
            (aggregate(1), &a, None),
            (aggregate(2), &b, None),
            (aggregate(1), &c, None),
        ])
        .await
        .unwrap()
        .receipts;
    let got: Vec<Vec<u64>> = receipts
        .iter()
        .map(|r| r.iter().map(|r| r.client_seq).collect())
        .collect();
    assert_eq!(got, [vec![1, 2], vec![1], vec![3, 4, 5]]);
    assert_eq!(o.last_assigned(aggregate(1)).await.unwrap(), 5);
    assert_eq!(o.count().await.unwrap(), 6);
}

/// Rule 1: settled events' sequences are never handed out again, also once pruned.
pub async fn sequences_are_never_reused(o: &impl Outbox) {
    o.append(aggregate(1), events(0..3)).await.unwrap();
    let b = batch(1, 1, 3);
    assert!(o.pin(&b, None).await.unwrap());
    assert!(o.settle(&b, 3, None).await.unwrap());
    assert_eq!(o.count().await.unwrap(), 0);
    assert_eq!(
        o.next_batch(all(None)).await.unwrap(),
        None,
        "nothing pending"
    );
    let pruned = o.prune(aggregate(1), 100, true).await.unwrap();
    assert_eq!((pruned.removed, pruned.more), (3, false));
    let r = o.append(aggregate(1), events(3..4)).await.unwrap();
    assert_eq!(r[0].client_seq, 4, "the counter outlives the events");
}

/// Events come back exactly as appended, in sequence order.
pub async fn events_are_stored_exactly(o: &impl Outbox) {
    let input = vec![event(7, 0), event(8, 1000), event(9, 3)];
    o.append(aggregate(5), input.clone()).await.unwrap();
    let head = o.next_batch(all(None)).await.unwrap().unwrap();
    assert_eq!(head.len(), 3);
    for (i, (stored, original)) in head.iter().zip(&input).enumerate() {
        assert_eq!(stored.client_seq, i as u64 + 1);
        assert_eq!(stored.aggregate, aggregate(5));
        assert_eq!(stored.event_id, original.event_id);
        assert_eq!(
            stored,
            &StoredEvent::new(aggregate(5), stored.client_seq, original),
            "exactly the encoding of the appended event"
        );
        #[cfg(not(target_arch = "wasm32"))]
        {
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
        }
    }
    let read = o.read(&batch(5, 2, 3)).await.unwrap();
    assert_eq!(read, head[1..].to_vec(), "read returns the batch's range");
}

/// Rule 3: a batch is the lowest pending events, cut by count and bytes, at least one.
pub async fn batches_are_cut_by_count_and_bytes(o: &impl Outbox) {
    o.append(aggregate(1), (0..20).map(|t| event(t, 100)).collect())
        .await
        .unwrap();
    let cut = |max_events, max_bytes| CutQuery {
        max_events,
        max_bytes,
        ..all(None)
    };
    let got = o.next_batch(cut(5, usize::MAX)).await.unwrap().unwrap();
    assert_eq!(seqs(&got), [1, 2, 3, 4, 5]);
    let one = event(0, 100);
    let size = StoredEvent::new(aggregate(1), 1, &one).encoded_len();
    let budget = celeriant_sync_protocol::wire::WRITE_JSON_OVERHEAD + 3 * size;
    let got = o.next_batch(cut(100, budget)).await.unwrap().unwrap();
    assert_eq!(seqs(&got), [1, 2, 3], "byte budget");
    let got = o.next_batch(cut(100, 1)).await.unwrap().unwrap();
    assert_eq!(seqs(&got), [1], "at least one");
    let ahead = CutQuery {
        assume_landed: Some((aggregate(1), 17)),
        ..cut(100, usize::MAX)
    };
    let got = o.next_batch(ahead).await.unwrap().unwrap();
    assert_eq!(
        seqs(&got),
        [18, 19, 20],
        "read ahead past the batch in flight"
    );
    let past = CutQuery {
        assume_landed: Some((aggregate(1), 20)),
        ..cut(100, usize::MAX)
    };
    assert_eq!(o.next_batch(past).await.unwrap(), None);
}

/// The aggregate of the batch `q` finds.
async fn first(o: &impl Outbox, q: CutQuery<'_>) -> Option<AggregateRef> {
    o.next_batch(q).await.unwrap().map(|e| e[0].aggregate)
}

/// Rule 3: aggregates are visited round robin in key order; skipped and empty ones are passed.
pub async fn aggregates_are_visited_round_robin(o: &impl Outbox) {
    for n in [30u128, 10, 20] {
        o.append(aggregate(n), events(0..2)).await.unwrap();
    }
    assert_eq!(first(o, all(None)).await, Some(aggregate(10)));
    assert_eq!(
        first(o, all(Some(aggregate(10)))).await,
        Some(aggregate(20))
    );
    assert_eq!(
        first(o, all(Some(aggregate(25)))).await,
        Some(aggregate(30))
    );
    assert_eq!(
        first(o, all(Some(aggregate(30)))).await,
        Some(aggregate(10)),
        "wraps around"
    );
    let skip = [aggregate(10), aggregate(20)];
    let skipping = |after| CutQuery {
        skip: &skip,
        ..all(after)
    };
    assert_eq!(first(o, skipping(None)).await, Some(aggregate(30)));
    assert_eq!(
        first(o, skipping(Some(aggregate(30)))).await,
        Some(aggregate(30)),
        "the aggregate after which we start comes last"
    );
    let b = batch(20, 1, 2);
    assert!(o.pin(&b, None).await.unwrap());
    assert!(o.settle(&b, 2, None).await.unwrap());
    assert_eq!(
        first(o, all(Some(aggregate(10)))).await,
        Some(aggregate(30)),
        "20 has nothing pending now"
    );
    let landed_ahead = CutQuery {
        assume_landed: Some((aggregate(30), 2)),
        ..all(Some(aggregate(10)))
    };
    assert_eq!(first(o, landed_ahead).await, Some(aggregate(10)));
}

/// Rule 6: `counts` reads the events and the parked records together, and sees exactly the
/// writes of this context that began before it — also when they overlap (both orders).
pub async fn counts_see_exactly_the_writes_begun_before_them(o: &impl Outbox) {
    let first = o
        .append_group(&[(aggregate(1), &events(0..3), None)])
        .await
        .unwrap();
    let counted = o.counts().await.unwrap();
    assert_eq!((counted.events, counted.parked.len()), (3, 0));
    assert!(first.begun < counted.before, "{first:?} {counted:?}");

    // The append begins first: the count, begun while it is out, sees it. (In IndexedDB the
    // append's transaction begins on its first poll because the early-commit probe's answer
    // is cached by the first append above; uncached, the probe would go first.)
    let (two, one) = (events(3..5), events(5..6));
    let (group, later) = (
        [(aggregate(2), &two[..], None)],
        [(aggregate(1), &one[..], None)],
    );
    let (appended, counted) = futures_util::join!(o.append_group(&group), o.counts());
    let (appended, counted) = (appended.unwrap(), counted.unwrap());
    assert_eq!(
        counted.events, 5,
        "the count began after the append: it sees it"
    );
    assert!(appended.begun < counted.before);

    // The count begins first: an append begun while it is out is not in it.
    let (counted, appended) = futures_util::join!(o.counts(), o.append_group(&later));
    let (counted, appended) = (counted.unwrap(), appended.unwrap());
    assert_eq!(
        counted.events, 5,
        "the append began after the count: unseen"
    );
    assert!(counted.before <= appended.begun);
    assert_eq!(o.count().await.unwrap(), 6);

    // A discard is a counted write too; the parked records come with the count.
    let b = batch(1, 1, 4);
    assert!(o.pin(&b, None).await.unwrap());
    let record = rejected(&batch(1, 1, 4), false);
    o.park(std::slice::from_ref(&record), &b).await.unwrap();
    let counted = o.counts().await.unwrap();
    assert_eq!((counted.events, counted.parked), (6, vec![record]));
    let (counted, discarded) = futures_util::join!(o.counts(), o.discard_parked(aggregate(1)));
    let (counted, discarded) = (counted.unwrap(), discarded.unwrap());
    assert_eq!((counted.events, counted.parked.len()), (6, 1), "unseen");
    assert_eq!(discarded.removed, 4);
    assert!(counted.before <= discarded.begun);
    let counted = o.counts().await.unwrap();
    assert_eq!((counted.events, counted.parked.len()), (2, 0));
    assert!(discarded.begun < counted.before);
    assert!(counted.before > Begun(0));
}
