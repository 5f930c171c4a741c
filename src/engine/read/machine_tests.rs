//! Unit tests of the read machine: one path each, exact actions. This file holds the stream's
//! life and paging, and the helpers the others share; the shards and the tips have files of
//! their own (`machine_shard_tests.rs`, `machine_tip_tests.rs`).

use super::*;
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

#[path = "machine_shard_tests.rs"]
mod shards;

#[path = "machine_tip_tests.rs"]
mod tips;
