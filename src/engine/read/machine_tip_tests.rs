//! Unit tests of the read machine's tips: the versions a `ready` names spare catch-up pages
//! until anything says the aggregate moved, and are dropped with the stream or shard they came
//! from (kept apart from `machine_tests.rs`, which holds the stream's life and paging).

use super::*;

#[test]
fn a_ready_s_tips_spare_pages_until_anything_says_the_aggregate_moved() {
    let mut r = small(10, 1);
    for n in 1..=3 {
        r.handle(Input::Subscribe(agg(n)), T, 0.5);
    }
    read_all(&mut r);
    let id = r.streams()[0].0;
    // A tip of an aggregate of another shard (or none) is not kept.
    r.handle(
        Input::Tips(id, vec![(agg(1), 4), (agg(2), 0), (agg(9), 1)]),
        T,
        0.5,
    );
    r.handle(Input::Stream(id, READY), T, 0.5);
    let first = doing(&mut r);
    assert_eq!(first, [Action::FetchPageUnlessAt(agg(1), 4)], "{first:?}");
    // agg 2 changes before its turn: its tip says nothing any more.
    r.handle(
        Input::Stream(
            id,
            Note::Changed {
                aggregate: agg(2),
                version: 1,
            },
        ),
        T,
        0.5,
    );
    r.handle(
        Input::Page {
            aggregate: agg(1),
            end: LAST,
        },
        T,
        0.5,
    );
    assert_eq!(
        doing(&mut r),
        [caught_up(agg(1), true), Action::FetchPage(agg(2))]
    );
    r.handle(
        Input::Page {
            aggregate: agg(2),
            end: LAST,
        },
        T,
        0.5,
    );
    assert_eq!(
        doing(&mut r),
        [caught_up(agg(2), true), Action::FetchPage(agg(3))],
        "no tip for agg 3"
    );
    // Tips of a stream that is already up (a late duplicate) are not taken.
    r.handle(Input::Tips(id, vec![(agg(3), 7)]), T, 0.5);
    r.handle(Input::CatchUp(agg(1)), T, 0.5);
    r.handle(
        Input::Page {
            aggregate: agg(3),
            end: LAST,
        },
        T,
        0.5,
    );
    assert_eq!(
        doing(&mut r),
        [caught_up(agg(3), true), Action::FetchPage(agg(1))]
    );
}

#[test]
fn a_tip_of_a_replaced_stream_is_not_used_after_the_next_ready() {
    let (mut r, s1) = tipped();
    // A new subscription replaces S1 by S2: agg 3 may move (unnotified) between S1's close
    // and S2's registration.
    r.handle(Input::Subscribe(agg(4)), T, 0.5);
    doing(&mut r);
    let s2 = cur(&r);
    assert_ne!(s1, s2);
    // S2's ready comes without tips (the gateway's tips read failed, or a null for agg 3).
    r.handle(Input::Stream(s2, READY), T, 0.5);
    let asked = pages_after(&mut r, agg(1));
    assert!(
        !asked.contains(&Action::FetchPageUnlessAt(agg(3), 4)),
        "agg 3 is skipped on S1's tip after S2's ready: {asked:?}"
    );
}

#[test]
fn a_tip_of_an_aggregate_moved_out_of_its_shard_is_not_used() {
    let mut r = small(2, 2);
    for n in 1..=4 {
        r.handle(Input::Subscribe(agg(n)), T, 0.5);
    }
    read_all(&mut r);
    let streams = r.streams();
    let (sa, members) = streams[0].clone();
    let sb = streams[1].0;
    let tips = members.iter().map(|a| (*a, 4)).collect();
    r.handle(Input::Tips(sa, tips), T, 0.5);
    r.handle(Input::Stream(sa, READY), T, 0.5);
    let Some(Action::FetchPageUnlessAt(in_flight, _)) = doing(&mut r).first().cloned() else {
        panic!("the ready's first page is asked with its tip")
    };
    // The other stream is refused as too large: everything is split again (per stream 1, so
    // some aggregates move, one to no stream at all); the new streams are ready without tips.
    r.handle(Input::StreamTooLarge(sb), T, 0.5);
    doing(&mut r);
    for (id, _) in r.streams() {
        r.handle(Input::Stream(id, READY), T, 0.5);
    }
    let asked = pages_after(&mut r, in_flight);
    assert!(
        !asked
            .iter()
            .any(|a| matches!(a, Action::FetchPageUnlessAt(..))),
        "{asked:?}"
    );
}

/// Subscribes 1–3 in one shard of one stream, answers its `ready` with tip 4 for each, and
/// returns the stream with agg 1's page (asked with its tip) in flight.
fn tipped() -> (Reader, StreamId) {
    let mut r = small(10, 1);
    for n in 1..=3 {
        r.handle(Input::Subscribe(agg(n)), T, 0.5);
    }
    read_all(&mut r);
    let id = cur(&r);
    r.handle(
        Input::Tips(id, vec![(agg(1), 4), (agg(2), 4), (agg(3), 4)]),
        T,
        0.5,
    );
    r.handle(Input::Stream(id, READY), T, 0.5);
    assert_eq!(doing(&mut r), [Action::FetchPageUnlessAt(agg(1), 4)]);
    (r, id)
}

/// Ends the page of `in_flight`, then reads every page asked for; the pages asked.
fn pages_after(r: &mut Reader, in_flight: AggregateRef) -> Vec<Action> {
    r.handle(
        Input::Page {
            aggregate: in_flight,
            end: LAST,
        },
        T,
        0.5,
    );
    let mut asked = Vec::new();
    loop {
        let next = doing(r).into_iter().find_map(|a| match a {
            Action::FetchPage(x) | Action::FetchPageUnlessAt(x, _) => Some((a, x)),
            _ => None,
        });
        let Some((action, aggregate)) = next else {
            return asked;
        };
        asked.push(action);
        r.handle(
            Input::Page {
                aggregate,
                end: LAST,
            },
            T,
            0.5,
        );
    }
}

#[test]
fn a_read_asked_drops_the_aggregate_s_tip() {
    let (mut r, _) = tipped();
    r.handle(Input::CatchUp(agg(2)), T, 0.5);
    assert_eq!(
        pages_after(&mut r, agg(1)),
        [
            Action::FetchPage(agg(2)),
            Action::FetchPageUnlessAt(agg(3), 4)
        ]
    );
}

#[test]
fn a_resync_drops_every_tip_of_its_stream() {
    let (mut r, id) = tipped();
    r.handle(Input::Stream(id, Note::Resync), T, 0.5);
    assert_eq!(
        pages_after(&mut r, agg(1)),
        [
            Action::FetchPage(agg(2)),
            Action::FetchPage(agg(3)),
            Action::FetchPage(agg(1)),
        ],
        "agg 1 again too: its page in flight was asked before the resync"
    );
}

#[test]
fn a_stream_that_ended_drops_its_tips() {
    let (mut r, id) = tipped();
    r.handle(Input::StreamEnded(id), T, 0.5);
    let asked = pages_after(&mut r, agg(1));
    assert!(
        asked.iter().all(|a| matches!(a, Action::FetchPage(_))),
        "{asked:?}"
    );
    assert_eq!(asked.len(), 2, "{asked:?}");
}
