//! Unit tests of the read machine's shards: aggregates split over streams of bounded size and
//! count, a refused stream split or moved, what fits nowhere reported and polled (kept apart
//! from `machine_tests.rs`, which holds the stream's life and paging).

use super::*;
use crate::engine::read::streams::POLL_UNWATCHED_MS;

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
    use crate::engine::read::streams::poll_interval;
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
