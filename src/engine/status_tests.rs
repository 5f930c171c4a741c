//! The hub's counts while this context's writes and a recount overlap: every order in which
//! they can finish gives the counts storage holds.

use super::*;
use crate::engine::conformance::aggregate;

struct Quiet;

impl Observer for Quiet {
    fn status(&self, _: &Status) {}
    fn synced(&self, _: &SyncedNotice) {}
    fn parked(&self, _: &ParkRecord) {}
}

fn hub() -> Hub {
    let hub = Hub::new(Box::new(Quiet));
    // Open: the outbox was empty, and the read began as transaction 0.
    hub.reset_counts(counted(0, vec![], 0));
    hub
}

fn counted(events: u64, parked: Vec<ParkRecord>, before: u64) -> Counted {
    Counted {
        events,
        parked,
        before: Begun(before),
    }
}

fn park(count: u32) -> ParkRecord {
    ParkRecord {
        aggregate: aggregate(1),
        first_seq: 1,
        last_seq: u64::from(count),
        count,
        code: 2022,
        message: "schema".into(),
        parked_at: 1,
        may_have_landed: false,
        current_version: None,
        atomic: None,
    }
}

fn counts(hub: &Hub) -> (u64, u64) {
    let status = hub.status();
    (status.pending, status.parked)
}

#[test]
fn an_append_the_recount_saw_is_not_counted_again_when_it_reports_late() {
    let hub = hub();
    // Transaction numbers: the append's is 1, the count's 2 (`before`: 2 = what began before
    // it). The count saw the 1000 events; the append's completion is handled only after the
    // count's answer.
    hub.recount_begins();
    hub.reset_counts(counted(1000, vec![], 2));
    hub.appended(1000, Some(Begun(1)));
    assert_eq!(counts(&hub), (1000, 0));
    // A later append counts.
    hub.appended(5, Some(Begun(3)));
    assert_eq!(counts(&hub), (1005, 0));
}

#[test]
fn an_append_the_recount_missed_is_applied_again_when_it_reported_first() {
    let hub = hub();
    // The count (1) began first and did not see the append (2), which reported in before the
    // count's answer replaced the counts.
    hub.recount_begins();
    hub.appended(10, Some(Begun(2)));
    assert_eq!(counts(&hub), (10, 0));
    hub.reset_counts(counted(0, vec![], 1));
    assert_eq!(counts(&hub), (10, 0));
    // One it did see, reported before it, is not applied twice.
    hub.recount_begins();
    hub.appended(7, Some(Begun(3)));
    hub.reset_counts(counted(17, vec![], 4));
    assert_eq!(counts(&hub), (17, 0));
}

#[test]
fn a_discard_the_recount_missed_does_not_come_back() {
    let hub = hub();
    hub.reset_counts(counted(6, vec![park(4)], 1));
    assert_eq!(counts(&hub), (2, 4));
    // The count (2) read the park record; the discard (3) dropped it and reported first.
    hub.recount_begins();
    hub.discarded(&aggregate(1), 4, Some(Begun(3)));
    assert_eq!(counts(&hub), (2, 0));
    hub.reset_counts(counted(6, vec![park(4)], 2));
    assert_eq!(counts(&hub), (2, 0), "the park record stays gone");
    // One the recount saw, reported late, removes nothing twice.
    hub.reset_counts(counted(6, vec![park(4)], 5));
    hub.recount_begins();
    hub.reset_counts(counted(2, vec![], 7));
    hub.discarded(&aggregate(1), 4, Some(Begun(6)));
    assert_eq!(counts(&hub), (2, 0));
}

#[test]
fn another_contexts_appends_always_count_and_a_failed_recount_forgets_nothing() {
    let hub = hub();
    hub.recount_begins();
    hub.appended(3, None);
    hub.recount_failed();
    hub.appended(4, Some(Begun(9)));
    assert_eq!(counts(&hub), (7, 0));
    // No recount is out: nothing is remembered, however many appends report in.
    for i in 10..1_000 {
        hub.appended(1, Some(Begun(i)));
    }
    assert!(hub.counts.borrow().recounting.is_none());
    assert_eq!(counts(&hub), (997, 0));
}
