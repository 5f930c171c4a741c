//! One conformance suite for every [`LocalLog`] implementation (the rules of
//! [`super::log`]).
//!
//! The in-memory log runs it under `cargo test`; the IndexedDB log runs it in every browser
//! (`tests/browser_read_log.rs`). Each check gets a fresh, empty store and panics with a message
//! naming the rule it found broken. A [`LogFixture`] says how the suite builds a page for the
//! implementation, reads its batches and pending records back, and plays the device side (the
//! outbox assigning sequences and landing them).

use std::future::Future;

use uuid::Uuid;

use super::super::model::{AggregateRef, ParkRecord};
use super::log::{Cursor, LocalLog};
use super::memory_log::{LogBatch, LogEvent, MemoryLog};

/// What the suite needs besides [`LocalLog`].
pub trait LogFixture: LocalLog {
    /// The implementation's page of these batches.
    fn page(&self, batches: &[LogBatch]) -> Self::Page;
    /// A stored batch, read back.
    fn read_batch(&self, batch: &Self::Batch) -> LogBatch;
    /// The sequences above `above` that these pending records hold, in order.
    fn pending_seqs(&self, pending: &[Self::Pending], above: u64) -> Vec<u64>;
    /// The device stores `n` new events of `aggregate`; returns the last sequence.
    fn assign(&self, aggregate: AggregateRef, n: u64) -> impl Future<Output = u64>;
    /// The drain landed `aggregate`'s events `1..=through` (all assigned, none landed yet).
    fn land(&self, aggregate: AggregateRef, through: u64) -> impl Future<Output = ()>;
    /// The drain parks `record` (its events assigned, none landed or pinned).
    fn park(&self, record: &ParkRecord) -> impl Future<Output = ()>;
}

impl LogFixture for MemoryLog {
    fn page(&self, batches: &[LogBatch]) -> Vec<LogBatch> {
        batches.to_vec()
    }
    fn read_batch(&self, batch: &LogBatch) -> LogBatch {
        batch.clone()
    }
    fn pending_seqs(&self, pending: &[u64], above: u64) -> Vec<u64> {
        pending.iter().copied().filter(|s| *s > above).collect()
    }
    async fn assign(&self, aggregate: AggregateRef, n: u64) -> u64 {
        MemoryLog::assign(self, aggregate, n)
    }
    async fn land(&self, aggregate: AggregateRef, through: u64) {
        MemoryLog::land(self, aggregate, through)
    }
    async fn park(&self, record: &ParkRecord) {
        MemoryLog::park(self, record.aggregate, Some(record.clone()))
    }
}

/// The client id the suite's device writes under.
pub const ME: &str = "me";

/// Aggregate number `n` of the suite.
pub fn aggregate(n: u128) -> AggregateRef {
    AggregateRef {
        type_id: Uuid::from_u128(0x106),
        id: Uuid::from_u128(n),
    }
}

/// Version `version`, written by `writer` with the sequences `seqs` (a recognisable payload).
pub fn batch(version: u64, writer: &str, seqs: &[u64]) -> LogBatch {
    LogBatch {
        version,
        client_id: writer.to_owned(),
        events: seqs
            .iter()
            .map(|&seq| LogEvent {
                client_seq: seq,
                event_type: 3,
                minor: version % 2,
                timestamp: 1_790_000_000_000 + version,
                data: (version % 3 != 0).then(|| "AAEC".repeat(version as usize % 4 + 1)),
            })
            .collect(),
    }
}

/// Versions `from..=to` by another writer.
fn others(from: u64, to: u64) -> Vec<LogBatch> {
    (from..=to).map(|v| batch(v, "other", &[v])).collect()
}

/// Runs every check, each on a fresh store from `make`.
pub async fn run_all<L: LogFixture, F: Future<Output = L>>(mut make: impl FnMut() -> F) {
    a_log_exists_once_it_has_a_cursor(&make().await).await;
    a_page_and_its_cursor_move_together(&make().await).await;
    a_page_is_stored_only_on_the_cursor_it_was_read_from(&make().await).await;
    a_bad_page_stores_nothing(&make().await).await;
    mine_follows_this_devices_confirmed_events(&make().await).await;
    a_trim_drops_only_what_is_below_the_minimum(&make().await).await;
    a_deleted_aggregate_restarts_at_zero(&make().await).await;
    the_snapshot_carries_the_park_record(&make().await).await;
}

async fn versions<L: LogFixture>(log: &L, a: AggregateRef, kept: Option<(u64, u64)>) -> Vec<u64> {
    let snapshot = log.snapshot(a, kept).await.unwrap();
    snapshot
        .batches
        .iter()
        .map(|b| log.read_batch(b).version)
        .collect()
}

async fn store<L: LogFixture>(log: &L, a: AggregateRef, batches: &[LogBatch]) -> Option<Cursor> {
    let expected = log.cursor(a).await.unwrap();
    log.store_page(a, &log.page(batches), ME, expected)
        .await
        .unwrap()
}

async fn a_log_exists_once_it_has_a_cursor<L: LogFixture>(log: &L) {
    let (a, b) = (aggregate(1), aggregate(2));
    assert_eq!(log.cursor(a).await.unwrap(), Cursor::default(), "rule 1");
    assert!(log.logged().await.unwrap().is_empty(), "rule 1: no log yet");
    assert_eq!(log.ensure_cursor(a).await.unwrap(), Cursor::default());
    store(log, a, &others(1, 2)).await.unwrap();
    let moved = log.ensure_cursor(a).await.unwrap();
    assert_eq!(
        moved.version, 2,
        "rule 1: ensure_cursor never moves a cursor"
    );
    assert_eq!(log.cursor(a).await.unwrap().version, 2);
    log.ensure_cursor(b).await.unwrap();
    let mut logged = log.logged().await.unwrap();
    logged.sort();
    assert_eq!(logged, vec![a, b], "rule 1: logged lists every cursor");
}

async fn a_page_and_its_cursor_move_together<L: LogFixture>(log: &L) {
    let a = aggregate(1);
    let page = others(1, 3);
    let after = store(log, a, &page).await.expect("rule 2: stored");
    assert_eq!(after.version, 3, "rule 2: the cursor moves with the page");
    let snapshot = log.snapshot(a, None).await.unwrap();
    assert_eq!(snapshot.cursor, after, "rule 5: the snapshot's cursor");
    let back: Vec<LogBatch> = snapshot.batches.iter().map(|b| log.read_batch(b)).collect();
    assert_eq!(back, page, "rule 2: batches are stored exactly");
    // Pages overlap: what the log holds is skipped, the rest follows it.
    let after = store(log, a, &others(2, 5)).await.unwrap();
    assert_eq!(after.version, 5);
    assert_eq!(versions(log, a, None).await, vec![1, 2, 3, 4, 5]);
    assert_eq!(
        versions(log, a, Some((after.epoch, 3))).await,
        vec![4, 5],
        "rule 5: only what is above a kept view of this epoch"
    );
    assert_eq!(
        log.snapshot(a, Some((after.epoch, 3))).await.unwrap().from,
        3
    );
    assert_eq!(
        versions(log, a, Some((after.epoch, 9))).await,
        vec![1, 2, 3, 4, 5],
        "rule 5: a kept view above the cursor is read again"
    );
    let empty = store(log, a, &others(1, 5)).await.unwrap();
    assert_eq!(empty, after, "a page of nothing new leaves the cursor");
    assert_eq!(versions(log, aggregate(2), None).await, Vec::<u64>::new());
}

async fn a_page_is_stored_only_on_the_cursor_it_was_read_from<L: LogFixture>(log: &L) {
    let a = aggregate(1);
    let read_at = log.cursor(a).await.unwrap();
    store(log, a, &others(1, 2)).await.unwrap();
    let stale = log
        .store_page(a, &log.page(&others(1, 4)), ME, read_at)
        .await
        .unwrap();
    assert_eq!(stale, None, "rule 2: compare-and-set on the cursor");
    assert_eq!(versions(log, a, None).await, vec![1, 2], "nothing stored");
    let before_reset = log.cursor(a).await.unwrap();
    log.reset_log(a, 2, false).await.unwrap();
    let across = log
        .store_page(a, &log.page(&others(3, 3)), ME, before_reset)
        .await
        .unwrap();
    assert_eq!(
        across, None,
        "rule 2: a page read across a reset is not stored"
    );
    assert_eq!(log.cursor(a).await.unwrap().version, 2);
}

async fn a_bad_page_stores_nothing<L: LogFixture>(log: &L) {
    let a = aggregate(1);
    store(log, a, &others(1, 2)).await.unwrap();
    let before = log.cursor(a).await.unwrap();
    let gap = [others(3, 3), others(5, 5)].concat();
    let empty = [others(3, 3), vec![batch(4, "other", &[])]].concat();
    let mut spoiled = others(3, 4);
    spoiled[1].events[0].data = Some("not base64!".into());
    for (page, what) in [(gap, "a gap"), (empty, "no events"), (spoiled, "bad data")] {
        let r = log.store_page(a, &log.page(&page), ME, before).await;
        assert!(r.is_err(), "rule 2: a page with {what} is refused");
        assert_eq!(log.cursor(a).await.unwrap(), before, "rule 2: {what}");
        assert_eq!(versions(log, a, None).await, vec![1, 2], "rule 2: {what}");
    }
}

async fn mine_follows_this_devices_confirmed_events<L: LogFixture>(log: &L) {
    let a = aggregate(1);
    log.ensure_cursor(a).await.unwrap();
    assert_eq!(log.assign(a, 4).await, 4);
    let pending = |s: &super::log::Snapshot<L::Batch, L::Pending>| {
        log.pending_seqs(&s.pending, s.cursor.mine)
    };
    let s = log.snapshot(a, None).await.unwrap();
    assert_eq!(pending(&s), vec![1, 2, 3, 4], "rule 3: all pending");
    let page = [
        vec![batch(1, ME, &[1, 2])],
        others(2, 2),
        vec![batch(3, "someone", &[3])],
    ]
    .concat();
    let after = store(log, a, &page).await.unwrap();
    assert_eq!(after.mine, 2, "rule 3: only this device's sequences count");
    let s = log.snapshot(a, None).await.unwrap();
    assert_eq!(
        pending(&s),
        vec![3, 4],
        "rule 3: confirmed events are not pending"
    );
    // A page claiming a sequence this device never assigned.
    let after = store(log, a, &[batch(4, ME, &[9])]).await.unwrap();
    assert_eq!(after.mine, 4, "rule 3: mine never passes what was assigned");
    let s = log.snapshot(a, None).await.unwrap();
    assert_eq!(pending(&s), Vec::<u64>::new());
    assert_eq!(log.assign(a, 1).await, 5);
    let s = log.snapshot(a, None).await.unwrap();
    assert_eq!(pending(&s), vec![5], "rule 3: a new event is pending");
}

async fn a_trim_drops_only_what_is_below_the_minimum<L: LogFixture>(log: &L) {
    let a = aggregate(1);
    log.ensure_cursor(a).await.unwrap();
    log.assign(a, 3).await;
    store(log, a, &[others(1, 4), vec![batch(5, ME, &[1])]].concat())
        .await
        .unwrap();
    let old = log.cursor(a).await.unwrap();
    log.land(a, 2).await;
    log.reset_log(a, 4, false).await.unwrap();
    let c = log.cursor(a).await.unwrap();
    assert_eq!(
        (c.version, c.epoch),
        (5, old.epoch + 1),
        "rule 4: a trim below the cursor keeps it, epoch + 1"
    );
    assert_eq!(c.mine, 2, "rule 4: mine rises to the landed watermark");
    assert_eq!(
        versions(log, a, None).await,
        vec![4, 5],
        "rule 4: kept above"
    );
    assert_eq!(
        versions(log, a, Some((old.epoch, 5))).await,
        vec![4, 5],
        "rule 5: a view of the old epoch is read again"
    );
    let s = log.snapshot(a, None).await.unwrap();
    assert_eq!(log.pending_seqs(&s.pending, s.cursor.mine), vec![3]);
    // Trimmed above the cursor: it moves to just below the minimum.
    log.reset_log(a, 9, false).await.unwrap();
    let c = log.cursor(a).await.unwrap();
    assert_eq!((c.version, c.epoch), (8, old.epoch + 2), "rule 4");
    assert_eq!(versions(log, a, None).await, Vec::<u64>::new());
    let after = store(log, a, &others(9, 10)).await.unwrap();
    assert_eq!(after.version, 10, "the log goes on from the minimum");
    assert_eq!(versions(log, a, None).await, vec![9, 10]);
}

async fn a_deleted_aggregate_restarts_at_zero<L: LogFixture>(log: &L) {
    let (a, b) = (aggregate(1), aggregate(2));
    store(log, a, &others(1, 3)).await.unwrap();
    store(log, b, &others(1, 2)).await.unwrap();
    log.reset_log(a, 1, true).await.unwrap();
    let c = log.cursor(a).await.unwrap();
    assert_eq!((c.version, c.epoch), (0, 1), "rule 4: gone restarts at 0");
    assert_eq!(versions(log, a, None).await, Vec::<u64>::new(), "rule 4");
    assert_eq!(
        versions(log, b, None).await,
        vec![1, 2],
        "another aggregate stays"
    );
    let after = store(log, a, &others(1, 1)).await.unwrap();
    assert_eq!(after.version, 1, "read again from the start");
}

async fn the_snapshot_carries_the_park_record<L: LogFixture>(log: &L) {
    let (a, b) = (aggregate(1), aggregate(2));
    log.ensure_cursor(a).await.unwrap();
    log.assign(a, 2).await;
    assert_eq!(log.snapshot(a, None).await.unwrap().parked, None, "rule 5");
    let record = ParkRecord {
        aggregate: a,
        first_seq: 1,
        last_seq: 2,
        count: 2,
        code: 2022,
        message: "rejected".into(),
        parked_at: 1_790_000_000_000,
        may_have_landed: false,
        current_version: None,
        atomic: None,
    };
    log.park(&record).await;
    let s = log.snapshot(a, None).await.unwrap();
    assert_eq!(
        s.parked,
        Some(record),
        "rule 5: the park record, read with the log"
    );
    assert_eq!(log.snapshot(b, None).await.unwrap().parked, None);
}
