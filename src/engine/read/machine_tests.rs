//! Unit tests of the read machine: one path each, exact actions.

use super::*;
use crate::engine::read::streams::POLL_UNWATCHED_MS;
use uuid::Uuid;

fn agg(n: u128) -> AggregateRef {
    AggregateRef {
        type_id: Uuid::from_u128(7),
        id: Uuid::from_u128(n),
    }
}

fn take(r: &mut Reader) -> Vec<Action> {
    std::iter::from_fn(|| r.poll()).collect()
}

fn doing(r: &mut Reader) -> Vec<Action> {
    take(r)
        .into_iter()
        .filter(|a| !matches!(a, Action::Report(_)))
        .collect()
}

/// The id of the first shard's current stream.
fn cur(r: &Reader) -> StreamId {
    r.streams()[0].0
}

/// The end of a catch-up that answers no read.
fn caught_up(aggregate: AggregateRef, ok: bool) -> Action {
    Action::CaughtUp {
        aggregate,
        ok,
        reads: Vec::new(),
    }
}

fn reader() -> Reader {
    Reader::new(Backoff::default())
}

const T: u64 = 1_000_000;

/// A `ready` of the gateway as it is now: its resets say deletions (`deletedResets`).
const READY: Note = Note::Ready {
    deleted_resets: true,
};

/// A catch-up's last page, its log at version 9: at or above whatever these tests notify
/// (`machine_floor_tests.rs` has the pages that end below).
const LAST: PageEnd = PageEnd::Stored {
    more: false,
    version: 9,
};

/// A page with more after it.
const MORE: PageEnd = PageEnd::Stored {
    more: true,
    version: 0,
};

#[test]
fn the_stream_opens_first_and_every_watched_aggregate_is_caught_up_once_it_is_ready() {
    let mut r = reader();
    r.handle(Input::Subscribe(agg(1)), T, 0.5);
    assert_eq!(
        take(&mut r),
        [
            Action::OpenStream {
                id: 1,
                aggregates: vec![agg(1)]
            },
            Action::FetchPage(agg(1)),
            Action::Report(ReadState::CatchingUp),
        ]
    );
    r.handle(Input::Subscribe(agg(2)), T, 0.5);
    assert_eq!(
        doing(&mut r),
        [
            Action::CloseStream(1),
            Action::OpenStream {
                id: 2,
                aggregates: vec![agg(1), agg(2)]
            }
        ],
        "one shard: its stream is replaced"
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
    r.handle(Input::Stream(cur(&r), READY), T, 0.5);
    r.handle(
        Input::Page {
            aggregate: agg(2),
            end: MORE,
        },
        T,
        0.5,
    );
    assert_eq!(
        doing(&mut r),
        [Action::FetchPage(agg(2))],
        "the next page first"
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
        [caught_up(agg(2), true), Action::FetchPage(agg(1))],
        "ready: everything watched is caught up again (nothing between the two is missed)"
    );
    r.handle(
        Input::Page {
            aggregate: agg(1),
            end: LAST,
        },
        T,
        0.5,
    );
    let after = take(&mut r);
    assert!(
        after.contains(&Action::Report(ReadState::Connected)),
        "{after:?}"
    );
    r.handle(
        Input::Stream(
            cur(&r),
            Note::Changed {
                aggregate: agg(1),
                version: 9,
            },
        ),
        T,
        0.5,
    );
    assert_eq!(
        take(&mut r),
        [
            Action::FetchPage(agg(1)),
            Action::Report(ReadState::CatchingUp)
        ]
    );
}

#[test]
fn notifications_coalesce_into_one_catch_up_per_aggregate() {
    let mut r = reader();
    r.handle(Input::Subscribe(agg(1)), T, 0.5);
    r.handle(Input::Subscribe(agg(2)), T, 0.5);
    take(&mut r);
    for version in 1..5 {
        r.handle(
            Input::Stream(
                cur(&r),
                Note::Changed {
                    aggregate: agg(2),
                    version,
                },
            ),
            T,
            0.5,
        );
    }
    r.handle(
        Input::Stream(
            cur(&r),
            Note::Changed {
                aggregate: agg(9),
                version: 1,
            },
        ),
        T,
        0.5,
    );
    assert_eq!(
        doing(&mut r),
        [],
        "agg 2 is queued once; agg 9 is not watched"
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
}

#[test]
fn a_trimmed_aggregate_is_read_again_from_its_minimum_version() {
    let mut r = reader();
    r.handle(Input::CatchUp(agg(3)), T, 0.5);
    assert_eq!(doing(&mut r), [Action::FetchPage(agg(3))]);
    r.handle(
        Input::Page {
            aggregate: agg(3),
            end: PageEnd::Trimmed { min_version: 40 },
        },
        T,
        0.5,
    );
    assert_eq!(
        doing(&mut r),
        [Action::ResetLog {
            aggregate: agg(3),
            min_version: 40,
            gone: false
        }]
    );
    r.handle(Input::LogReset(agg(3)), T, 0.5);
    assert_eq!(doing(&mut r), [Action::FetchPage(agg(3))]);
}

#[test]
fn reset_and_resync_notes() {
    let mut r = reader();
    r.handle(Input::Subscribe(agg(1)), T, 0.5);
    r.handle(Input::Subscribe(agg(2)), T, 0.5);
    r.handle(
        Input::Page {
            aggregate: agg(1),
            end: LAST,
        },
        T,
        0.5,
    );
    r.handle(
        Input::Page {
            aggregate: agg(2),
            end: LAST,
        },
        T,
        0.5,
    );
    take(&mut r);
    r.handle(
        Input::Stream(
            cur(&r),
            Note::Reset {
                aggregate: agg(2),
                deleted: true,
            },
        ),
        T,
        0.5,
    );
    assert_eq!(
        doing(&mut r),
        [Action::Probe(agg(2))],
        "a reset is probed first: nothing is dropped before the server says what is left"
    );
    r.handle(
        Input::Page {
            aggregate: agg(2),
            end: PageEnd::Gone,
        },
        T,
        0.5,
    );
    assert_eq!(
        doing(&mut r),
        [Action::ResetLog {
            aggregate: agg(2),
            min_version: 1,
            gone: true
        }]
    );
    r.handle(Input::LogReset(agg(2)), T, 0.5);
    assert_eq!(doing(&mut r), [Action::FetchPage(agg(2))]);
    r.handle(Input::Stream(cur(&r), Note::Resync), T, 0.5);
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
        [caught_up(agg(2), true), Action::FetchPage(agg(1))],
        "resync: everything watched again"
    );
}

#[test]
fn a_failing_stream_backs_off_and_reopens_with_the_set_as_it_is_then() {
    let mut r = reader();
    r.handle(Input::Subscribe(agg(1)), T, 0.5);
    take(&mut r);
    r.handle(Input::StreamEnded(cur(&r)), T, 0.5);
    let after = doing(&mut r);
    let Action::Wait(ms) = after[0] else {
        panic!("{after:?}")
    };
    assert!(ms >= 250);
    r.handle(Input::Subscribe(agg(2)), T + 1, 0.5);
    assert_eq!(
        doing(&mut r),
        [],
        "backing off: no stream yet (agg 2's catch-up waits behind agg 1's page)"
    );
    r.handle(Input::TimerFired, T + ms, 0.5);
    assert_eq!(
        doing(&mut r),
        [Action::OpenStream {
            id: cur(&r),
            aggregates: vec![agg(1), agg(2)]
        }]
    );
    r.handle(Input::StreamEnded(cur(&r)), T + ms, 0.9);
    let Action::Wait(second) = doing(&mut r)[0] else {
        panic!()
    };
    r.handle(Input::Woken, T + ms + 1, 0.5);
    assert_eq!(
        doing(&mut r),
        [Action::OpenStream {
            id: cur(&r),
            aggregates: vec![agg(1), agg(2)]
        }],
        "the network coming back ends the wait ({second} ms)"
    );
}

#[test]
fn unwatching_the_last_aggregate_closes_the_stream() {
    let mut r = reader();
    r.handle(Input::Subscribe(agg(1)), T, 0.5);
    r.handle(Input::Subscribe(agg(1)), T, 0.5);
    take(&mut r);
    r.handle(Input::Unsubscribe(agg(1)), T, 0.5);
    assert_eq!(doing(&mut r), [], "one subscriber is left");
    r.handle(Input::Unsubscribe(agg(1)), T, 0.5);
    assert_eq!(doing(&mut r), [Action::CloseStream(1)]);
    assert!(r.watched().is_empty());
}

#[test]
fn a_failed_page_is_reported_and_tried_again_when_the_stream_is_ready() {
    let mut r = reader();
    r.handle(Input::Subscribe(agg(1)), T, 0.5);
    take(&mut r);
    r.handle(
        Input::Page {
            aggregate: agg(1),
            end: PageEnd::Failed {
                message: "offline".into(),
            },
        },
        T,
        0.5,
    );
    let after = doing(&mut r);
    assert_eq!(after[0], caught_up(agg(1), false));
    let Action::RetryLater { aggregate, ms } = after[1] else {
        panic!("{after:?}")
    };
    assert_eq!(aggregate, agg(1));
    assert!(
        ms >= 250,
        "retried after a backoff even if the stream stays up"
    );
    r.handle(Input::Stream(cur(&r), READY), T, 0.5);
    assert_eq!(doing(&mut r), [Action::FetchPage(agg(1))]);
}

#[test]
fn a_reset_during_a_page_of_the_same_aggregate_is_probed_after_it() {
    let mut r = reader();
    r.handle(Input::Subscribe(agg(1)), T, 0.5);
    take(&mut r);
    // agg 1's first page is in flight.
    r.handle(
        Input::Stream(
            cur(&r),
            Note::Reset {
                aggregate: agg(1),
                deleted: false,
            },
        ),
        T,
        0.5,
    );
    assert_eq!(doing(&mut r), [], "one request at a time");
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
        [caught_up(agg(1), true), Action::Probe(agg(1))],
        "the reset is not lost"
    );
    r.handle(
        Input::Page {
            aggregate: agg(1),
            end: PageEnd::Trimmed { min_version: 7 },
        },
        T,
        0.5,
    );
    assert_eq!(
        doing(&mut r),
        [Action::ResetLog {
            aggregate: agg(1),
            min_version: 7,
            gone: false
        }]
    );
}

/// Feeds every page asked for as stored and complete, until nothing is asked; the aggregates
/// read, in order.
fn read_all(r: &mut Reader) -> Vec<AggregateRef> {
    drive(r).0
}

/// [`read_all`], with every other action seen meanwhile.
fn drive(r: &mut Reader) -> (Vec<AggregateRef>, Vec<Action>) {
    let mut read = Vec::new();
    let mut seen = Vec::new();
    loop {
        let actions = doing(r);
        seen.extend(
            actions
                .iter()
                .filter(|a| !matches!(a, Action::FetchPage(_)))
                .cloned(),
        );
        let pages: Vec<AggregateRef> = actions
            .into_iter()
            .filter_map(|a| match a {
                Action::FetchPage(a) => Some(a),
                _ => None,
            })
            .collect();
        if pages.is_empty() {
            return (read, seen);
        }
        for aggregate in pages {
            read.push(aggregate);
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
}

fn small(per_stream: usize, streams: usize) -> Reader {
    Reader::with_limits(
        Backoff::default(),
        Limits {
            per_stream,
            streams,
        },
    )
}

fn ready_all(r: &mut Reader) {
    for (id, _) in r.streams() {
        r.handle(Input::Stream(id, READY), T, 0.5);
    }
}

#[test]
fn more_than_one_stream_s_worth_is_split_and_what_fits_nowhere_is_reported_unwatched() {
    let mut r = small(2, 2);
    for n in 1..=5 {
        r.handle(Input::Subscribe(agg(n)), T, 0.5);
    }
    let sets: Vec<Vec<AggregateRef>> = r.streams().into_iter().map(|(_, s)| s).collect();
    assert_eq!(sets, [vec![agg(1), agg(2)], vec![agg(3), agg(4)]]);
    assert_eq!(r.unwatched(), [agg(5)]);
    let (_, actions) = drive(&mut r);
    assert!(
        actions.contains(&Action::Unwatched(vec![agg(5)])),
        "{actions:?}"
    );
    ready_all(&mut r);
    let mut again = read_all(&mut r);
    again.sort();
    assert_eq!(
        again,
        (1..=5).map(agg).collect::<Vec<_>>(),
        "each ready stream's aggregates, and the unwatched one, are caught up"
    );
    // A change notified on the second stream is read; the first stream's notes of another
    // shard's aggregate are not its business.
    let second = r.streams()[1].0;
    r.handle(
        Input::Stream(
            second,
            Note::Changed {
                aggregate: agg(4),
                version: 3,
            },
        ),
        T,
        0.5,
    );
    assert_eq!(read_all(&mut r), [agg(4)]);
    // Unwatching agg 1 makes room: agg 5 moves into the first shard, whose stream alone is
    // replaced, once.
    let first = r.streams()[0].0;
    r.handle(Input::Unsubscribe(agg(1)), T, 0.5);
    let actions = take(&mut r);
    let opened: Vec<&Action> = actions
        .iter()
        .filter(|a| matches!(a, Action::OpenStream { .. } | Action::CloseStream(_)))
        .collect();
    assert_eq!(
        opened,
        [
            &Action::CloseStream(first),
            &Action::OpenStream {
                id: r.streams()[0].0,
                aggregates: vec![agg(2), agg(5)]
            }
        ]
    );
    assert!(actions.contains(&Action::Unwatched(vec![])), "{actions:?}");
    assert!(r.unwatched().is_empty());
}

#[test]
fn a_new_subscription_re_reads_only_the_shard_it_joins() {
    let mut r = small(2, 3);
    for n in 1..=3 {
        r.handle(Input::Subscribe(agg(n)), T, 0.5);
    }
    read_all(&mut r);
    ready_all(&mut r);
    read_all(&mut r);
    r.handle(Input::Subscribe(agg(4)), T, 0.5);
    assert_eq!(r.streams()[1].1, [agg(3), agg(4)], "the shard with room");
    assert_eq!(read_all(&mut r), [agg(4)], "the new one at once");
    let id = r.streams()[1].0;
    r.handle(Input::Stream(id, READY), T, 0.5);
    assert_eq!(
        read_all(&mut r),
        [agg(3), agg(4)],
        "its shard once its stream is ready; agg 1 and 2 are not read again"
    );
    let after = take(&mut r);
    assert!(after.is_empty(), "{after:?}");
}

#[test]
fn notes_of_a_replaced_stream_are_ignored() {
    let mut r = small(10, 1);
    r.handle(Input::Subscribe(agg(1)), T, 0.5);
    let old = r.streams()[0].0;
    r.handle(Input::Subscribe(agg(2)), T, 0.5);
    read_all(&mut r);
    r.handle(Input::Stream(old, READY), T, 0.5);
    r.handle(Input::StreamEnded(old), T, 0.5);
    assert_eq!(
        doing(&mut r),
        [],
        "the old stream's ready and end change nothing"
    );
    assert_eq!(r.streams()[0].0, old + 1);
}

#[test]
fn a_stream_refused_as_too_large_is_split_in_halves() {
    let mut r = small(4, 3);
    for n in 1..=3 {
        r.handle(Input::Subscribe(agg(n)), T, 0.5);
    }
    read_all(&mut r);
    let id = r.streams()[0].0;
    r.handle(Input::StreamTooLarge(id), T, 0.5);
    let actions: Vec<Action> = doing(&mut r)
        .into_iter()
        .filter(|a| !matches!(a, Action::Unwatched(_)))
        .collect();
    assert!(
        !actions.contains(&Action::CloseStream(id)),
        "the refused stream ended: nothing to close"
    );
    let opened: Vec<Vec<AggregateRef>> = actions
        .iter()
        .filter_map(|a| match a {
            Action::OpenStream { aggregates, .. } => Some(aggregates.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(opened.len(), 2, "{actions:?}");
    assert!(opened.iter().all(|s| s.len() <= 2));
    assert!(r.unwatched().is_empty());
    let mut all: Vec<AggregateRef> = opened.concat();
    all.sort();
    assert_eq!(all, [agg(1), agg(2), agg(3)]);
    // Down to one aggregate per stream; refused again, it backs off like any failure.
    let id = r.streams()[0].0;
    r.handle(Input::StreamTooLarge(id), T, 0.5);
    take(&mut r);
    assert!(r.streams().iter().all(|(_, s)| s.len() == 1));
    let id = r.streams()[0].0;
    r.handle(Input::StreamTooLarge(id), T, 0.5);
    assert!(matches!(doing(&mut r)[..], [Action::Wait(_)]));
}

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

#[test]
fn a_stream_refused_for_the_client_s_stream_count_uses_one_stream_less() {
    let mut r = small(2, 3);
    for n in 1..=6 {
        r.handle(Input::Subscribe(agg(n)), T, 0.5);
    }
    read_all(&mut r);
    assert_eq!(r.streams().len(), 3);
    // The third stream is refused (429, 42920): two streams from now on; its members fit in
    // neither of the full others, so they are unwatched, and nothing else is reopened.
    let third = r.streams()[2].0;
    r.handle(Input::StreamTooMany(third), T, 0.5);
    let actions = doing(&mut r);
    assert_eq!(r.max_streams(), 2);
    assert_eq!(r.streams().len(), 2);
    assert!(
        actions.contains(&Action::Unwatched(vec![agg(5), agg(6)])),
        "{actions:?}"
    );
    assert!(
        !actions
            .iter()
            .any(|a| matches!(a, Action::OpenStream { .. } | Action::CloseStream(_))),
        "the refused stream ended and the others are full: {actions:?}"
    );
    // The first stream refused in turn: one stream; its members join the unwatched.
    let first = r.streams()[0].0;
    r.handle(Input::StreamTooMany(first), T, 0.5);
    doing(&mut r);
    assert_eq!(r.max_streams(), 1);
    assert_eq!(r.streams(), vec![(r.streams()[0].0, vec![agg(3), agg(4)])]);
    assert_eq!(r.unwatched(), [agg(1), agg(2), agg(5), agg(6)]);
    // A single stream refused too: it backs off like any failure, still one stream.
    let last = cur(&r);
    r.handle(Input::StreamTooMany(last), T, 0.5);
    assert!(matches!(doing(&mut r)[..], [Action::Wait(_)]));
    assert_eq!(r.max_streams(), 1);
}

#[test]
fn a_refused_stream_s_members_move_to_a_shard_with_room() {
    let mut r = small(4, 2);
    for n in 1..=5 {
        r.handle(Input::Subscribe(agg(n)), T, 0.5);
    }
    // The first shard has room again.
    r.handle(Input::Unsubscribe(agg(1)), T, 0.5);
    read_all(&mut r);
    let [(kept, _), (refused, _)] = r.streams()[..] else {
        panic!("two shards: {:?}", r.streams())
    };
    r.handle(Input::StreamTooMany(refused), T, 0.5);
    let actions = doing(&mut r);
    // Its one member joins the kept shard, whose stream is replaced.
    assert!(actions.contains(&Action::CloseStream(kept)), "{actions:?}");
    assert_eq!(r.streams().len(), 1);
    assert_eq!(r.streams()[0].1, [agg(2), agg(3), agg(4), agg(5)]);
    assert!(r.unwatched().is_empty());
}

#[test]
fn the_poll_asks_for_at_most_ten_pages_a_second() {
    use super::super::streams::poll_interval;
    assert_eq!(poll_interval(1), POLL_UNWATCHED_MS);
    assert_eq!(poll_interval(300), POLL_UNWATCHED_MS);
    assert_eq!(poll_interval(7_000), 700_000);
}

#[test]
fn unwatched_aggregates_are_polled_while_there_are_any() {
    let mut r = small(1, 1);
    r.handle(Input::Subscribe(agg(1)), T, 0.5);
    r.handle(Input::Subscribe(agg(2)), T, 0.5);
    let (_, seen) = drive(&mut r);
    assert!(
        seen.contains(&Action::Wait(POLL_UNWATCHED_MS)),
        "a poll is due: {seen:?}"
    );
    ready_all(&mut r);
    read_all(&mut r);
    assert_eq!(r.poll_due_at(), Some(T + POLL_UNWATCHED_MS));
    // Nothing before the poll is due.
    r.handle(Input::TimerFired, T + 1_000, 0.5);
    assert!(
        !doing(&mut r)
            .iter()
            .any(|a| matches!(a, Action::FetchPage(_))),
        "polled early"
    );
    let at = T + POLL_UNWATCHED_MS;
    r.handle(Input::TimerFired, at, 0.5);
    let actions = doing(&mut r);
    assert!(actions.contains(&Action::FetchPage(agg(2))), "{actions:?}");
    assert!(
        actions.contains(&Action::Wait(POLL_UNWATCHED_MS)),
        "the next poll: {actions:?}"
    );
    // None unwatched any more: no poll.
    r.handle(Input::Unsubscribe(agg(2)), at, 0.5);
    assert_eq!(r.poll_due_at(), None);
}
