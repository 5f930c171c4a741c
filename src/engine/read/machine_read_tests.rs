//! Unit tests of the read machine's answers to `read`s: a catch-up names only the reads asked
//! before one of its page requests began (kept apart from `machine_tests.rs`, which holds the
//! streams and paging).

use super::test_support::{READY, agg, caught_up, last, on, tag};
use super::*;

fn page(aggregate: AggregateRef, end: PageEnd) -> Input {
    Input::Page { aggregate, end }
}

fn reader() -> Reader {
    Reader::new(Backoff::default())
}

#[test]
fn a_read_asked_while_the_last_page_is_in_flight_waits_for_the_next_catch_up() {
    let mut r = reader();
    assert_eq!(
        on(&mut r, Input::Read(agg(1), tag(1))),
        [Action::FetchPage(agg(1))]
    );
    // Asked once that page was on its way: the server may have had more by then.
    assert_eq!(on(&mut r, Input::Read(agg(1), tag(2))), []);
    assert_eq!(
        on(&mut r, last(agg(1), 0)),
        [
            caught_up(agg(1), true, &[tag(1)]),
            Action::FetchPage(agg(1))
        ]
    );
    assert_eq!(
        on(
            &mut r,
            page(
                agg(1),
                PageEnd::Stored {
                    more: true,
                    version: 0
                }
            )
        ),
        [Action::FetchPage(agg(1))]
    );
    // Asked during a catch-up that reads on: answered by the catch-up after it.
    assert_eq!(on(&mut r, Input::Read(agg(1), tag(3))), []);
    assert_eq!(
        on(&mut r, last(agg(1), 0)),
        [
            caught_up(agg(1), true, &[tag(2)]),
            Action::FetchPage(agg(1))
        ]
    );
    assert_eq!(
        on(&mut r, last(agg(1), 0)),
        [caught_up(agg(1), true, &[tag(3)])]
    );
}

#[test]
fn a_catch_up_asked_by_no_read_answers_none() {
    let mut r = reader();
    assert_eq!(
        on(&mut r, Input::CatchUp(agg(1))),
        [Action::FetchPage(agg(1))]
    );
    assert_eq!(on(&mut r, Input::Read(agg(1), tag(1))), []);
    assert_eq!(
        on(&mut r, last(agg(1), 0)),
        [caught_up(agg(1), true, &[]), Action::FetchPage(agg(1))],
        "a landed batch's catch-up, under way when the read asked"
    );
    assert_eq!(
        on(&mut r, last(agg(1), 0)),
        [caught_up(agg(1), true, &[tag(1)])]
    );
}

#[test]
fn a_read_queued_behind_another_aggregate_boards_its_own_page() {
    let mut r = reader();
    on(&mut r, Input::Read(agg(1), tag(1)));
    assert_eq!(on(&mut r, Input::Read(agg(2), tag(2))), []);
    assert_eq!(
        on(&mut r, last(agg(1), 0)),
        [
            caught_up(agg(1), true, &[tag(1)]),
            Action::FetchPage(agg(2))
        ]
    );
    assert_eq!(
        on(&mut r, last(agg(2), 0)),
        [caught_up(agg(2), true, &[tag(2)])]
    );
}

#[test]
fn a_failed_page_answers_its_reads_false_and_a_later_read_gets_a_page_of_its_own() {
    let mut r = reader();
    on(&mut r, Input::Read(agg(1), tag(1)));
    on(&mut r, Input::Read(agg(1), tag(2)));
    let failed = PageEnd::Failed {
        message: "down".into(),
    };
    let after = on(&mut r, page(agg(1), failed));
    assert_eq!(after[0], caught_up(agg(1), false, &[tag(1)]));
    assert!(matches!(after[1], Action::RetryLater { .. }), "{after:?}");
    assert_eq!(after[2..], [Action::FetchPage(agg(1))]);
    assert_eq!(
        on(&mut r, last(agg(1), 0)),
        [caught_up(agg(1), true, &[tag(2)])]
    );
}

#[test]
fn reads_stay_aboard_across_a_reset_and_one_asked_during_it_boards_the_page_after() {
    let mut r = reader();
    on(&mut r, Input::Read(agg(1), tag(1)));
    assert_eq!(
        on(&mut r, page(agg(1), PageEnd::Trimmed { min_version: 4 })),
        [Action::ResetLog {
            aggregate: agg(1),
            min_version: 4,
            gone: false
        }]
    );
    assert_eq!(on(&mut r, Input::Read(agg(1), tag(2))), []);
    assert_eq!(
        on(&mut r, Input::LogReset(agg(1))),
        [Action::FetchPage(agg(1))]
    );
    assert_eq!(
        on(&mut r, last(agg(1), 0)),
        [caught_up(agg(1), true, &[tag(1), tag(2)])]
    );
}

#[test]
fn a_read_asked_again_is_named_once() {
    let mut r = reader();
    on(&mut r, Input::Read(agg(1), tag(1)));
    on(&mut r, Input::Read(agg(1), tag(1)));
    on(&mut r, Input::Read(agg(1), tag(1)));
    let mut all = on(&mut r, last(agg(1), 0));
    all.extend(on(&mut r, last(agg(1), 0)));
    assert_eq!(
        all,
        [
            caught_up(agg(1), true, &[tag(1)]),
            Action::FetchPage(agg(1)),
            caught_up(agg(1), true, &[]),
        ]
    );
}

#[test]
fn a_ready_s_tip_is_not_used_for_a_page_with_a_read_aboard() {
    let mut r = reader();
    assert_eq!(
        on(&mut r, Input::Subscribe(agg(1))),
        [
            Action::OpenStream {
                id: 1,
                aggregates: vec![agg(1)]
            },
            Action::FetchPage(agg(1)),
        ]
    );
    // The read asks; then the stream's `ready` comes, with a tip the gateway may have read
    // before the read asked (a change since is notified, but perhaps after the page).
    on(&mut r, Input::Read(agg(1), tag(1)));
    on(&mut r, Input::Tips(1, vec![(agg(1), 4)]));
    assert_eq!(on(&mut r, Input::Stream(1, READY)), []);
    assert_eq!(
        on(&mut r, last(agg(1), 0)),
        [caught_up(agg(1), true, &[]), Action::FetchPage(agg(1))],
        "asked, not answered from the tip"
    );
    assert_eq!(
        on(&mut r, last(agg(1), 0)),
        [caught_up(agg(1), true, &[tag(1)])]
    );
    // Without a read, the next `ready`'s tip spares the request.
    on(&mut r, Input::StreamEnded(1));
    on(&mut r, Input::Woken);
    let id = r.streams()[0].0;
    on(&mut r, Input::Tips(id, vec![(agg(1), 4)]));
    assert_eq!(
        on(&mut r, Input::Stream(id, READY)),
        [Action::FetchPageUnlessAt(agg(1), 4)]
    );
}
