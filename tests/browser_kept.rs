//! The pages kept for the view (`src/browser/idb/kept.rs`), driven directly: which versions a
//! run covers when a chain of pages breaks, when the budget evicts its oldest pages, when its
//! catch-up ends (one view, or the linger time, then gone) and when the reader stops while a
//! page store is in flight (nothing kept from it). What the snapshot does with a run is tested
//! against IndexedDB in `browser_read_log.rs` and against the gateway in `browser_read_kept.rs`.
#![cfg(target_arch = "wasm32")]

use celeriant_sync::browser::idb::kept::{BUDGET, Cover, Kept, Ticket};
use celeriant_sync::engine::model::AggregateRef;
use celeriant_sync::engine::read::log::Cursor;
use gloo_timers::future::TimeoutFuture;
use js_sys::{Array, Object};
use wasm_bindgen::JsValue;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

fn aggregate(n: u128) -> AggregateRef {
    AggregateRef {
        type_id: uuid::Uuid::from_u128(0x107),
        id: uuid::Uuid::from_u128(n),
    }
}

fn at(epoch: u64, version: u64) -> Cursor {
    Cursor {
        version,
        mine: 0,
        epoch,
    }
}

/// Batches for versions `from..=to` (just their versions: Kept never looks inside).
fn batches(from: u64, to: u64) -> Array {
    (from..=to)
        .map(|v| {
            let o = Object::new();
            js_sys::Reflect::set(&o, &"version".into(), &(v as f64).into()).unwrap();
            JsValue::from(o)
        })
        .collect()
}

fn versions(cover: &Cover, after: u64) -> Vec<u64> {
    cover
        .above(after)
        .map(|b| {
            js_sys::Reflect::get(&b, &"version".into())
                .unwrap()
                .as_f64()
                .unwrap() as u64
        })
        .collect()
}

/// Stores versions `from + 1..=to` of `epoch` over a record that carried `previous`; returns
/// the tag written.
fn store(kept: &Kept, a: AggregateRef, epoch: u64, from: u64, to: u64, previous: f64) -> f64 {
    store_sized(kept, a, (epoch, from, to, previous), 10)
}

fn store_sized(
    kept: &Kept,
    a: AggregateRef,
    (epoch, from, to, previous): (u64, u64, u64, f64),
    size: u64,
) -> f64 {
    let ticket: Ticket = kept.ticket();
    kept.stored(
        ticket,
        a,
        (at(epoch, from), previous),
        at(epoch, to),
        batches(from + 1, to),
        size,
    );
    ticket.tag
}

#[wasm_bindgen_test]
fn pages_stored_in_a_chain_make_one_run_and_a_broken_chain_starts_anew() {
    let kept = Kept::default();
    let a = aggregate(1);
    let t1 = store(&kept, a, 1, 3, 5, 0.0);
    let t2 = store(&kept, a, 1, 5, 8, t1);
    let cover = kept.cover(a).expect("a run");
    assert_eq!(cover.start, 3, "from where the first page began");
    assert_eq!(versions(&cover, 3), [4, 5, 6, 7, 8]);
    assert_eq!(versions(&cover, 6), [7, 8], "only above a kept view");
    assert!(cover.holds(at(1, 8), t2), "the record the last page wrote");
    assert!(!cover.holds(at(1, 8), t1), "an older tag");
    assert!(!cover.holds(at(2, 8), t2), "another epoch");
    assert!(!cover.holds(at(1, 9), t2), "another version");
    assert!(!cover.holds(at(1, 8), 0.0), "no tag");
    assert_ne!(t1, t2, "each page a fresh tag");

    // The record the next page replaced was not the run's last (another writer came between):
    // a new run, from that page on.
    let t3 = store(&kept, a, 1, 8, 10, 12345.0);
    let cover = kept.cover(a).unwrap();
    assert_eq!((cover.start, versions(&cover, 0)), (8, vec![9, 10]));
    assert!(cover.holds(at(1, 10), t3));

    // Not following the run's end, or across an epoch: anew too.
    let t4 = store(&kept, a, 1, 11, 12, t3);
    assert_eq!(kept.cover(a).unwrap().start, 11, "a gap");
    let t5 = store(&kept, a, 1, 12, 13, -t4);
    assert_eq!(
        kept.cover(a).unwrap().start,
        12,
        "a tag that was not written"
    );
    store(&kept, a, 2, 13, 14, t5);
    let cover = kept.cover(a).unwrap();
    assert_eq!(cover.start, 13, "a new epoch");
    assert!(!cover.holds(at(1, 14), 0.0));
}

#[wasm_bindgen_test]
fn the_budget_evicts_other_aggregates_then_the_oldest_pages_raising_start() {
    let kept = Kept::default();
    let (a, b) = (aggregate(2), aggregate(3));
    store_sized(&kept, b, (1, 0, 2, 0.0), BUDGET / 2);
    let t1 = store_sized(&kept, a, (1, 0, 2, 0.0), BUDGET / 2);
    assert!(kept.cover(b).is_some(), "both within the budget");
    // Over the budget: the other aggregate's run goes first.
    let t2 = store_sized(&kept, a, (1, 2, 4, t1), BUDGET / 2);
    assert!(kept.cover(b).is_none(), "the other aggregate gave way");
    assert_eq!(kept.cover(a).unwrap().start, 0, "this run whole");
    // Then this run's oldest page: its versions are read back (`start` moves up).
    let t3 = store_sized(&kept, a, (1, 4, 6, t2), 1);
    let cover = kept.cover(a).unwrap();
    assert_eq!(cover.start, 2);
    assert_eq!(versions(&cover, 0), [3, 4, 5, 6]);
    assert!(cover.holds(at(1, 6), t3), "the run goes on");
    // A page too big alone (a size that could not be measured is u64::MAX): nothing left,
    // and no overflow on the way.
    store_sized(&kept, b, (1, 0, 1, 0.0), BUDGET);
    let t4 = store_sized(&kept, a, (1, 6, 7, t3), u64::MAX);
    assert!(kept.cover(a).is_none(), "nothing kept");
    assert!(kept.cover(b).is_none(), "nor the other");
    // The chain restarts at the next page.
    store(&kept, a, 1, 7, 8, t4);
    assert_eq!(kept.cover(a).unwrap().start, 7);
}

#[wasm_bindgen_test]
async fn an_ended_run_serves_one_view_or_goes_after_the_linger_time() {
    let kept = Kept::new(100);
    let (a, b) = (aggregate(4), aggregate(5));
    let t = store(&kept, a, 1, 0, 3, 0.0);
    // Before the end, a view (a listener's refresh) leaves it for the next.
    let cover = kept.cover(a).unwrap();
    kept.used(a, &cover);
    assert!(kept.cover(a).is_some(), "still catching up");
    kept.caught_up(a);
    // An ended run is not extended: the next page starts a run of its own.
    let cover = kept.cover(a).unwrap();
    kept.used(a, &cover);
    assert!(kept.cover(a).is_none(), "the view after the end took it");
    store(&kept, a, 1, 3, 4, t);
    kept.caught_up(a);
    let late = kept.cover(a).unwrap();
    store(&kept, a, 1, 4, 5, 0.0);
    kept.used(a, &late);
    assert_eq!(kept.cover(a).unwrap().start, 4, "a newer run stays");

    // Nobody builds a view after the end (another tab's read): gone after the linger time.
    store(&kept, b, 1, 0, 2, 0.0);
    kept.caught_up(b);
    TimeoutFuture::new(30).await;
    assert!(kept.cover(b).is_some(), "within the linger time");
    TimeoutFuture::new(200).await;
    assert!(kept.cover(b).is_none(), "after it");
    // Not before its end.
    assert!(kept.cover(a).is_some(), "the run still catching up stays");
}

#[wasm_bindgen_test]
fn a_store_in_flight_when_the_reader_stops_keeps_nothing() {
    let kept = Kept::default();
    let a = aggregate(6);
    store(&kept, a, 1, 0, 2, 0.0);
    let in_flight = kept.ticket();
    kept.clear();
    assert!(kept.cover(a).is_none(), "cleared");
    kept.stored(in_flight, a, (at(1, 2), 0.0), at(1, 4), batches(3, 4), 10);
    assert!(kept.cover(a).is_none(), "begun before the clear");
    // A store begun after it keeps as before.
    store(&kept, a, 1, 4, 5, in_flight.tag);
    assert_eq!(kept.cover(a).unwrap().start, 4);
}
