//! Atomic writes (`appendAtomic`) in the IndexedDB outbox: the storage rules of
//! `src/engine/outbox.rs` for them (rule 1: every event carries every leg; rule 3: the write is
//! cut whole, and only once it heads every one of its aggregates; rules 4 and 5: pinned,
//! settled, parked and discarded whole), and how its records are stored.
//!
//! Each scenario is a small `async fn` over `&impl Outbox`, so that it can move into the
//! engine's conformance suite (`src/engine/conformance.rs`) and run against the in-memory
//! outbox as well; the tests at the end run them against IndexedDB, and check what only
//! IndexedDB has (a reopened database, the records as stored, corrupt legs).
#![cfg(target_arch = "wasm32")]

mod browser;

use std::rc::Rc;

use browser::{db_name, get_raw, insert_raw, object};
use celeriant_sync::browser::idb::db::Durability;
use celeriant_sync::browser::idb::outbox::IdbOutbox;
use celeriant_sync::engine::conformance::{aggregate, event};
use celeriant_sync::engine::model::{
    AggregateRef, Batch, Guard, Leg, Legs, NewEvent, ParkRecord, StoredEvent,
};
use celeriant_sync::engine::outbox::{CutQuery, EventState, Outbox, StoreError};
use js_sys::Array;
use wasm_bindgen::{JsCast, JsValue};
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

// ---- Scenarios (any `Outbox`)

fn evs(tags: std::ops::Range<u8>) -> Vec<NewEvent> {
    tags.map(|t| event(t, 10)).collect()
}

/// A cut from `after` with no limits, skipping `skip` (sorted).
fn cut(after: Option<AggregateRef>, skip: &[AggregateRef]) -> CutQuery<'_> {
    CutQuery {
        after,
        skip,
        assume_landed: None,
        max_events: 10_000,
        max_bytes: usize::MAX,
    }
}

fn legs(list: &[(u128, u64, u64)]) -> Legs {
    list.iter()
        .map(|(n, first_seq, last_seq)| Leg {
            aggregate: aggregate(*n),
            first_seq: *first_seq,
            last_seq: *last_seq,
        })
        .collect::<Vec<_>>()
        .into()
}

/// `(aggregate number, sequence)` of each event (aggregates of the suite are `aggregate(n)`).
fn places(events: &[StoredEvent]) -> Vec<(u128, u64)> {
    events
        .iter()
        .map(|e| (e.aggregate.id.as_u128(), e.client_seq))
        .collect()
}

/// Pins `batch` and settles it whole.
async fn land(o: &impl Outbox, batch: &Batch) {
    assert!(o.pin(batch, None).await.unwrap(), "pinned");
    assert!(
        o.settle(batch, batch.last_seq, None).await.unwrap(),
        "settled"
    );
}

fn plain_batch(events: &[StoredEvent]) -> Batch {
    let (first, last) = (&events[0], &events[events.len() - 1]);
    Batch::plain(
        first.aggregate,
        first.client_seq,
        last.client_seq,
        events.len() as u32,
    )
}

/// Aggregate 1 gets events 1–2, aggregate 2 event 1; then the atomic write (aggregate 1: 3–4,
/// aggregate 2: 2, in that order); then aggregate 1 event 5 and aggregate 2 event 3. Returns
/// the write's legs. Event tags: 0–1, 2, write 3–5, after 6 and 7.
async fn write_between(o: &impl Outbox) -> Legs {
    o.append(aggregate(1), evs(0..2)).await.unwrap();
    o.append(aggregate(2), evs(2..3)).await.unwrap();
    let a3 = evs(3..5);
    let a5 = evs(5..6);
    let written = o
        .append_atomic(&[(aggregate(1), &a3, None), (aggregate(2), &a5, None)])
        .await
        .unwrap();
    let seqs: Vec<Vec<u64>> = written
        .receipts
        .iter()
        .map(|r| r.iter().map(|r| r.client_seq).collect())
        .collect();
    assert_eq!(
        seqs,
        [vec![3, 4], vec![2]],
        "each leg its aggregate's next sequences"
    );
    o.append(aggregate(1), evs(6..7)).await.unwrap();
    o.append(aggregate(2), evs(7..8)).await.unwrap();
    legs(&[(1, 3, 4), (2, 2, 2)])
}

/// Lands the plain events before the write (aggregate 1: 1–2, aggregate 2: 1).
async fn land_heads(o: &impl Outbox) {
    land(o, &Batch::plain(aggregate(1), 1, 2, 2)).await;
    land(o, &Batch::plain(aggregate(2), 1, 1, 1)).await;
}

/// Checks that `events` are exactly the write of [`write_between`], every event with its legs.
fn is_the_write(events: &[StoredEvent], legs: &Legs, what: &str) {
    assert_eq!(
        places(events),
        [(1, 3), (1, 4), (2, 2)],
        "{what}: the write whole, leg order"
    );
    for e in events {
        assert_eq!(
            e.atomic.as_ref(),
            Some(legs),
            "{what}: every event carries every leg"
        );
        assert_eq!(e.guard, None, "{what}: no guard");
    }
    assert_eq!(
        events.iter().map(|e| e.event_id).collect::<Vec<_>>(),
        evs(3..6).iter().map(|e| e.event_id).collect::<Vec<_>>(),
        "{what}: the write's events"
    );
}

/// Rules 1 and 3: plain heads first (cut before the write); the write whole, whatever the
/// limits and from either of its aggregates, only once it heads both; never while one of them
/// is skipped or still has earlier pending events.
pub async fn an_atomic_write_is_cut_whole_only_at_every_head(o: &impl Outbox) {
    let legs = write_between(o).await;
    let first = o.next_batch(cut(None, &[])).await.unwrap().unwrap();
    assert_eq!(
        places(&first),
        [(1, 1), (1, 2)],
        "the plain head, cut before the write"
    );
    assert!(first.iter().all(|e| e.atomic.is_none()));
    let second = o
        .next_batch(cut(Some(aggregate(1)), &[]))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        places(&second),
        [(2, 1)],
        "round robin: aggregate 2's plain head"
    );
    // Aggregate 1's head is the write once 1–2 are taken as landed, but aggregate 2 still has
    // event 1 ahead of its leg: aggregate 1 is passed over.
    let ahead = CutQuery {
        assume_landed: Some((aggregate(1), 2)),
        ..cut(None, &[])
    };
    let found = o.next_batch(ahead).await.unwrap().unwrap();
    assert_eq!(
        places(&found),
        [(2, 1)],
        "not ready on aggregate 2: passed over"
    );
    land_heads(o).await;
    let whole = o.next_batch(cut(None, &[])).await.unwrap().unwrap();
    is_the_write(&whole, &legs, "cut from aggregate 1");
    let tiny = CutQuery {
        max_events: 1,
        max_bytes: 1,
        ..cut(None, &[])
    };
    is_the_write(&o.next_batch(tiny).await.unwrap().unwrap(), &legs, "limits");
    let from_2 = o
        .next_batch(cut(Some(aggregate(1)), &[]))
        .await
        .unwrap()
        .unwrap();
    is_the_write(&from_2, &legs, "cut from aggregate 2");
    for skip in [[aggregate(1)], [aggregate(2)]] {
        assert_eq!(
            o.next_batch(cut(None, &skip)).await.unwrap(),
            None,
            "a skipped (parked) leg blocks the whole write, and what follows it"
        );
    }
}

/// Rules 2, 4 and 5: an atomic batch is pinned, read back in leg order, and settled whole
/// (both watermarks); then only what followed it is pending, and its events are pruned.
pub async fn an_atomic_batch_reads_and_settles_every_leg(o: &impl Outbox) {
    let legs = write_between(o).await;
    land_heads(o).await;
    let batch = Batch::of_atomic(&legs).unwrap();
    assert!(o.pin(&batch, None).await.unwrap());
    assert_eq!(
        o.pinned().await.unwrap(),
        Some(batch.clone()),
        "the pin keeps its legs"
    );
    is_the_write(&o.read(&batch).await.unwrap(), &legs, "read");
    assert_eq!(o.count().await.unwrap(), 5);
    assert!(o.settle(&batch, batch.last_seq, None).await.unwrap());
    assert_eq!(o.pinned().await.unwrap(), None);
    assert!(
        !o.settle(&batch, batch.last_seq, None).await.unwrap(),
        "compare-and-set"
    );
    assert_eq!(
        o.lowest_pending_of(&[aggregate(1), aggregate(2)])
            .await
            .unwrap(),
        [Some(5), Some(3)],
        "both watermarks raised to their leg's last sequence"
    );
    assert_eq!(o.read(&batch).await.unwrap(), [], "landed: nothing to read");
    assert_eq!(o.count().await.unwrap(), 2);
    let next = o.next_batch(cut(None, &[])).await.unwrap().unwrap();
    assert_eq!(places(&next), [(1, 5)]);
    assert!(next[0].atomic.is_none(), "what follows a write is plain");
    assert_eq!(o.prune(aggregate(1), 100, true).await.unwrap().removed, 4);
    assert_eq!(o.prune(aggregate(2), 100, true).await.unwrap().removed, 2);
    assert_eq!(
        o.count().await.unwrap(),
        2,
        "pruning drops only landed events"
    );
    assert_eq!(
        o.event_state(event(4, 10).event_id).await.unwrap(),
        EventState::Absent,
        "landed"
    );
}

/// Rule 4 across a restart: `again` is the same storage reopened. The pinned atomic batch
/// reads back equal (legs included), its events too, and the pin's compare-and-set holds.
pub async fn a_pinned_atomic_write_survives_a_reopen(o: &impl Outbox, again: &impl Outbox) {
    let legs = write_between(o).await;
    land_heads(o).await;
    let batch = Batch::of_atomic(&legs).unwrap();
    assert!(o.pin(&batch, None).await.unwrap());
    assert_eq!(
        again.pinned().await.unwrap(),
        Some(batch.clone()),
        "identical after a reload"
    );
    is_the_write(
        &again.read(&batch).await.unwrap(),
        &legs,
        "read after a reload",
    );
    is_the_write(
        &again.next_batch(cut(None, &[])).await.unwrap().unwrap(),
        &legs,
        "cut after a reload",
    );
    assert!(
        again.settle(&batch, batch.last_seq, None).await.unwrap(),
        "the stored pin is equal"
    );
}

fn parked(b: &Legs, n: usize) -> ParkRecord {
    let leg = b[n];
    ParkRecord {
        aggregate: leg.aggregate,
        first_seq: leg.first_seq,
        last_seq: leg.last_seq,
        count: (leg.last_seq - leg.first_seq + 1) as u32,
        code: 2022,
        message: "schema".into(),
        parked_at: 1,
        may_have_landed: false,
        current_version: None,
        atomic: Some(b.clone()),
    }
}

/// Rule 5: an atomic write is parked with one record per leg, and discarding either leg
/// discards the whole write: both records, every event (recorded as discarded), nothing else.
pub async fn discarding_a_parked_leg_discards_the_whole_write(o: &impl Outbox) {
    let legs = write_between(o).await;
    land_heads(o).await;
    let batch = Batch::of_atomic(&legs).unwrap();
    assert!(o.pin(&batch, None).await.unwrap());
    let records = [parked(&legs, 0), parked(&legs, 1)];
    o.park(&records, &batch).await.unwrap();
    assert_eq!(o.pinned().await.unwrap(), None, "parking unpins");
    assert_eq!(
        o.parked().await.unwrap(),
        records,
        "both records, with their legs"
    );
    let counted = o.counts().await.unwrap();
    assert_eq!((counted.events, counted.parked.len()), (5, 2));
    let both = [aggregate(1), aggregate(2)];
    assert_eq!(o.next_batch(cut(None, &both)).await.unwrap(), None);
    let gone = o.discard_parked(aggregate(2)).await.unwrap();
    assert_eq!(gone.removed, 3, "every leg's events");
    assert_eq!(o.parked().await.unwrap(), [], "every leg's record");
    for tag in 3..6 {
        assert_eq!(
            o.event_state(event(tag, 10).event_id).await.unwrap(),
            EventState::Discarded,
            "event {tag} of the write"
        );
    }
    assert_eq!(
        o.event_state(event(6, 10).event_id).await.unwrap(),
        EventState::Pending {
            aggregate: aggregate(1),
            client_seq: 5
        }
    );
    assert_eq!(o.count().await.unwrap(), 2);
    assert_eq!(
        o.discard_parked(aggregate(1)).await.unwrap().removed,
        0,
        "already gone"
    );
    let next = o.next_batch(cut(None, &[])).await.unwrap().unwrap();
    assert_eq!(places(&next), [(1, 5)]);
    let next = o
        .next_batch(cut(Some(aggregate(1)), &[]))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(places(&next), [(2, 3)]);
}

/// Rules 1 and 3: a guarded leg keeps its guard (the others none), the write is still cut
/// whole, and a conditional append after it is a batch of its own again.
pub async fn a_guarded_leg_keeps_its_guard(o: &impl Outbox) {
    o.append(aggregate(1), evs(10..11)).await.unwrap();
    let (g, p) = (evs(11..13), evs(13..14));
    o.append_atomic(&[(aggregate(1), &g, Some(7)), (aggregate(2), &p, None)])
        .await
        .unwrap();
    let after = evs(14..15);
    o.append_group(&[(aggregate(1), &after, Some(9))])
        .await
        .unwrap();
    let legs = legs(&[(1, 2, 3), (2, 1, 1)]);
    let head = o.next_batch(cut(None, &[])).await.unwrap().unwrap();
    assert_eq!(places(&head), [(1, 1)]);
    land(o, &plain_batch(&head)).await;
    let whole = o.next_batch(cut(None, &[])).await.unwrap().unwrap();
    assert_eq!(places(&whole), [(1, 2), (1, 3), (2, 1)]);
    let guard = Guard {
        expected_version: 7,
        first_seq: 2,
        last_seq: 3,
    };
    assert_eq!(
        whole.iter().map(|e| e.guard).collect::<Vec<_>>(),
        [Some(guard), Some(guard), None],
        "the guarded leg's events carry its guard"
    );
    assert!(whole.iter().all(|e| e.atomic.as_ref() == Some(&legs)));
    let batch = Batch::of_atomic(&legs).unwrap();
    assert_eq!(o.read(&batch).await.unwrap(), whole, "read back equal");
    land(o, &batch).await;
    let last = o.next_batch(cut(None, &[])).await.unwrap().unwrap();
    assert_eq!(places(&last), [(1, 4)]);
    assert_eq!(
        (
            last[0].guard.map(|g| g.expected_version),
            last[0].atomic.is_none()
        ),
        (Some(9), true)
    );
}

// ---- In IndexedDB

async fn open(db: &str) -> IdbOutbox {
    IdbOutbox::open(db, Durability::Strict).await.unwrap()
}

#[wasm_bindgen_test]
async fn an_atomic_write_is_cut_whole_only_at_every_head_in_indexeddb() {
    an_atomic_write_is_cut_whole_only_at_every_head(&open(&db_name("atomic-cut")).await).await;
}

#[wasm_bindgen_test]
async fn an_atomic_batch_reads_and_settles_every_leg_in_indexeddb() {
    an_atomic_batch_reads_and_settles_every_leg(&open(&db_name("atomic-settle")).await).await;
}

/// As the drain does when it holds the Web Lock: with its copy of the watermarks, which an
/// atomic settle raises for every leg.
#[wasm_bindgen_test]
async fn an_atomic_batch_settles_every_leg_as_the_sole_drainer() {
    let o = open(&db_name("atomic-sole")).await;
    o.sole_drainer(true);
    an_atomic_write_is_cut_whole_only_at_every_head(&o).await;
    let o = open(&db_name("atomic-sole-settle")).await;
    o.sole_drainer(true);
    an_atomic_batch_reads_and_settles_every_leg(&o).await;
}

#[wasm_bindgen_test]
async fn a_pinned_atomic_write_survives_a_reopen_in_indexeddb() {
    let db = db_name("atomic-reopen");
    let first = open(&db).await;
    let again = open(&db).await;
    a_pinned_atomic_write_survives_a_reopen(&first, &again).await;
    first.close();
    again.close();
}

#[wasm_bindgen_test]
async fn discarding_a_parked_leg_discards_the_whole_write_in_indexeddb() {
    discarding_a_parked_leg_discards_the_whole_write(&open(&db_name("atomic-discard")).await).await;
}

#[wasm_bindgen_test]
async fn a_guarded_leg_keeps_its_guard_in_indexeddb() {
    a_guarded_leg_keeps_its_guard(&open(&db_name("atomic-guard")).await).await;
}

/// `[t, a, …rest]` of aggregate `n` of the suite, as the stores key it.
fn key(n: u128, rest: &[f64]) -> JsValue {
    let a = aggregate(n);
    let parts = Array::of2(
        &a.type_id.hyphenated().to_string().into(),
        &a.id.hyphenated().to_string().into(),
    );
    for r in rest {
        parts.push(&JsValue::from_f64(*r));
    }
    parts.into()
}

fn field(v: &JsValue, name: &str) -> JsValue {
    js_sys::Reflect::get(v, &name.into()).unwrap()
}

/// Each leg's run is a record of its own with the legs in `a` and its wires under `aw`, never
/// `w` or `gw`: a release that knows nothing of atomic writes would otherwise cut one leg as a
/// batch of its own and send it alone (`src/browser/idb/records.rs`).
#[wasm_bindgen_test]
async fn an_atomic_writes_records_carry_its_legs_and_hide_their_wires() {
    let db = db_name("atomic-records");
    let o = open(&db).await;
    write_between(&o).await;
    land_heads(&o).await;
    let whole = o.next_batch(cut(None, &[])).await.unwrap().unwrap();
    let shared = |i: usize, j: usize| {
        Rc::ptr_eq(
            whole[i].atomic.as_ref().unwrap(),
            whole[j].atomic.as_ref().unwrap(),
        )
    };
    assert!(
        shared(0, 1),
        "the events of one record share one list of legs"
    );
    let run = get_raw(&db, "outbox", &key(1, &[4.0, 2.0])).await;
    assert!(
        !run.is_null(),
        "aggregate 1's leg is one run of two: [t, a, 4, 2]"
    );
    let one = get_raw(&db, "outbox", &key(2, &[2.0])).await;
    assert!(!one.is_null(), "aggregate 2's leg is one record: [t, a, 2]");
    for (record, what) in [(&run, "run"), (&one, "one")] {
        assert!(field(record, "w").is_undefined(), "{what}: no w");
        assert!(field(record, "gw").is_undefined(), "{what}: no gw");
        assert!(
            !field(record, "aw").is_undefined(),
            "{what}: wires under aw"
        );
        let legs = Array::from(&field(record, "a"));
        assert_eq!(legs.length(), 2, "{what}: both legs");
        let second = Array::from(&legs.get(1));
        assert_eq!(second.get(1), key(2, &[]).unchecked_into::<Array>().get(1));
        assert_eq!(
            (second.get(2).as_f64(), second.get(3).as_f64()),
            (Some(2.0), Some(2.0))
        );
    }
    assert!(
        get_raw(&db, "outbox", &key(1, &[5.0])).await.is_object(),
        "the event after the write is a record of its own, not merged into the leg's run"
    );
    o.close();
}

/// Legs that do not parse, or that do not hold the record, make the record corrupt (never read
/// as a plain append); a record without `a` (as every release before wrote) is a plain one.
#[wasm_bindgen_test]
async fn bad_legs_are_corrupt_and_records_without_legs_are_plain() {
    let db = db_name("atomic-corrupt");
    let o = open(&db).await;
    let id = |n: u128| JsValue::from(uuid::Uuid::from_u128(0xBAD0 + n).hyphenated().to_string());
    let wire =
        r#"{"clientSeq":1,"eventId":"x","timestamp":1,"type":1,"minor":0,"data":"","iv":null}"#;
    let plain = object(&[("s", 1.into()), ("e", id(1)), ("w", wire.into())]);
    insert_raw(&db, "outbox", &plain, Some(&key(1, &[1.0]))).await;
    let found = o.next_batch(cut(None, &[])).await.unwrap().unwrap();
    assert_eq!(
        (places(&found), found[0].atomic.is_none()),
        (vec![(1, 1)], true)
    );
    let bad_legs: [(u128, JsValue); 3] = [
        (2, JsValue::from("nonsense")),
        (3, Array::of1(&Array::of2(&"x".into(), &"y".into())).into()),
        // Well formed, but aggregate 4's record is not in them.
        (
            4,
            Array::of1(&Array::of4(
                &key(9, &[]).unchecked_into::<Array>().get(0),
                &key(9, &[]).unchecked_into::<Array>().get(1),
                &1.into(),
                &1.into(),
            ))
            .into(),
        ),
    ];
    for (n, legs) in bad_legs {
        let record = object(&[
            ("s", 1.into()),
            ("e", id(n)),
            ("aw", wire.into()),
            ("a", legs),
        ]);
        insert_raw(&db, "outbox", &record, Some(&key(n, &[1.0]))).await;
        let skip: Vec<AggregateRef> = (1..n).map(aggregate).collect();
        let read = o.next_batch(cut(None, &skip)).await;
        assert!(
            matches!(read, Err(StoreError::Corrupt(_))),
            "aggregate {n}: {read:?}"
        );
    }
    let pin = object(&[
        ("t", key(1, &[]).unchecked_into::<Array>().get(0)),
        ("a", key(1, &[]).unchecked_into::<Array>().get(1)),
        ("first", 1.into()),
        ("last", 1.into()),
        ("count", 1.into()),
        ("legs", JsValue::from(7)),
    ]);
    insert_raw(&db, "meta", &pin, Some(&"pin".into())).await;
    assert!(
        matches!(o.pinned().await, Err(StoreError::Corrupt(_))),
        "a pin with bad legs"
    );
    o.close();
}
