//! Unit tests of the read machine's floors across what may look like the aggregate going
//! back: a page or probe that finds it `Gone` (perhaps only a replica behind the cursor: the
//! floor stays, and the re-read answers no read below it); a `changed` below the floor, taken
//! for a recreation only on the stream that raised the floor and only when that stream's
//! `ready` said its resets say deletions; and a recreation after a give-up, which drops the
//! floor and remembers nothing of it: the recreation's `changed` arms a floor whatever its
//! version, at or below the one given up on too (kept apart from `machine_floor_tests.rs`,
//! which holds the retries and give-up).

use super::test_support::{
    T, agg, at, caught_up, changed, last, on, retry, tag, watching, watching_with,
};
use super::*;
use crate::engine::read::floors::{BEHIND_RETRIES, GIVE_UP_MS};

/// Round 5's SF1: a probe after a trim's `reset` answered by a replica at 8, below the cursor
/// at 9, finds the aggregate `Gone`; the floor went with it, and the re-read from that replica,
/// ending at 8, answered a read boarded with 10 fresh at 8. The floor and the read's need now
/// stay: the re-read ending at 8 is a miss, retried, and the read waits for 10.
#[test]
fn a_replica_behind_the_cursor_answers_no_read_below_its_floor() {
    let a = agg(1);
    let mut r = watching(a);
    assert_eq!(changed(&mut r, a, 10), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 9)), [retry(a, 250)]);
    assert_eq!(on(&mut r, Input::Read(a, tag(1))), [Action::FetchPage(a)]);
    let id = r.streams()[0].0;
    let trim = Note::Reset {
        aggregate: a,
        deleted: false,
    };
    assert_eq!(on(&mut r, Input::Stream(id, trim)), []);
    // The page in flight ends at 9: below 10, the read waits; then the probe.
    assert_eq!(on(&mut r, last(a, 9)), [Action::Probe(a)]);
    let gone = Input::Page {
        aggregate: a,
        end: PageEnd::Gone,
    };
    assert_eq!(
        on(&mut r, gone),
        [Action::ResetLog {
            aggregate: a,
            min_version: 1,
            gone: true
        }]
    );
    assert_eq!(on(&mut r, Input::LogReset(a)), [Action::FetchPage(a)]);
    // The re-read from the replica at 8: not fresh for a read that boarded with 10.
    assert_eq!(on(&mut r, last(a, 8)), []);
    assert_eq!(on(&mut r, Input::Retry(a)), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 10)), [caught_up(a, true, &[tag(1)])]);
}

/// Round 5's SF2: a gateway from before `deletedResets` forgets what a stream sent on every
/// `reset`, trims included: `changed(a, 10)`, a read boarding with 10, a trim whose `reset` a
/// `resync` swallowed, and a renewed upstream watch on a node still catching up sends
/// `changed(a, 9)` on the same stream. Taken for a recreation, it replaced the floor and the
/// page ending at 9 answered the read at 9. On such a stream the floor keeps the higher
/// version; on one whose `ready` said `deletedResets`, the lower version replaces it.
#[test]
fn a_lower_change_replaces_the_floor_only_on_a_stream_whose_resets_say_deletions() {
    let a = agg(1);
    for deleted_resets in [false, true] {
        let mut r = watching_with(a, deleted_resets);
        assert_eq!(changed(&mut r, a, 10), [Action::FetchPage(a)]);
        assert_eq!(on(&mut r, last(a, 9)), [retry(a, 250)]);
        assert_eq!(on(&mut r, Input::Read(a, tag(1))), [Action::FetchPage(a)]);
        let id = r.streams()[0].0;
        assert_eq!(on(&mut r, Input::Stream(id, Note::Resync)), []);
        assert_eq!(changed(&mut r, a, 9), []);
        let ends_at_9 = on(&mut r, last(a, 9));
        if deleted_resets {
            // A recreation: the floor is 9 now, reached (read again for the change queued).
            assert_eq!(
                ends_at_9,
                [caught_up(a, true, &[tag(1)]), Action::FetchPage(a)]
            );
            continue;
        }
        // The floor is still 10: the read waits (read again for the change queued, then the
        // retry asked first).
        assert_eq!(ends_at_9, [Action::FetchPage(a)], "9 is below 10");
        assert_eq!(on(&mut r, last(a, 9)), []);
        assert_eq!(on(&mut r, Input::Retry(a)), [Action::FetchPage(a)]);
        assert_eq!(on(&mut r, last(a, 10)), [caught_up(a, true, &[tag(1)])]);
    }
}

/// The capability is the current stream's: a stream replaced by one whose `ready` does not
/// say it (another gateway of a fleet, an older one) takes no lower version for a recreation,
/// though the floor was raised on it.
#[test]
fn a_stream_reopened_without_deleted_resets_keeps_the_higher_floor() {
    let a = agg(1);
    let mut r = watching(a);
    assert_eq!(changed(&mut r, a, 10), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 9)), [retry(a, 250)]);
    assert_eq!(on(&mut r, Input::Read(a, tag(1))), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 9)), []);
    // Its stream is reopened (the same shard, a new id) and is ready without the field.
    let s1 = r.streams()[0].0;
    on(&mut r, Input::StreamEnded(s1));
    r.handle(Input::TimerFired, T + 60_000, 0.5);
    while r.poll().is_some() {}
    let s2 = r.streams()[0].0;
    assert_ne!(s1, s2);
    let ready = Note::Ready {
        deleted_resets: false,
    };
    assert_eq!(on(&mut r, Input::Stream(s2, ready)), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 9)), []);
    // The new stream raises the floor to 11, then notifies 9: no recreation on it either.
    let on_s2 = |r: &mut Reader, version| {
        on(
            r,
            Input::Stream(
                s2,
                Note::Changed {
                    aggregate: a,
                    version,
                },
            ),
        )
    };
    assert_eq!(on_s2(&mut r, 11), [Action::FetchPage(a)]);
    assert_eq!(on_s2(&mut r, 9), []);
    // The page ends at 9, below 11: read again for the change, then the retry asked first.
    assert_eq!(on(&mut r, last(a, 9)), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 9)), []);
    assert_eq!(on(&mut r, Input::Retry(a)), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 11)), [caught_up(a, true, &[tag(1)])]);
}

/// A page finding the aggregate `Gone`, and its log reset: read again from scratch.
fn gone(r: &mut Reader, a: AggregateRef) {
    let gone = Input::Page {
        aggregate: a,
        end: PageEnd::Gone,
    };
    assert_eq!(
        on(r, gone),
        [Action::ResetLog {
            aggregate: a,
            min_version: 1,
            gone: true
        }]
    );
    assert_eq!(on(r, Input::LogReset(a)), [Action::FetchPage(a)]);
}

/// Pages ending at `version` (a catch-up asked for whenever none is in flight), time passing,
/// until the floor is given up on; what the last page did.
fn miss_until(r: &mut Reader, a: AggregateRef, mut fetching: bool, version: u64) -> Vec<Action> {
    for i in 0..u64::from(BEHIND_RETRIES) * 2 {
        let now = T + GIVE_UP_MS * i / u64::from(BEHIND_RETRIES);
        if !fetching {
            assert_eq!(at(r, Input::CatchUp(a), now), [Action::FetchPage(a)]);
        }
        let ends = at(r, last(a, version), now);
        if ends.iter().any(|e| matches!(e, Action::NeverServed { .. })) {
            return ends;
        }
        fetching = ends.contains(&Action::FetchPage(a));
    }
    panic!("never given up on");
}

/// [`miss_until`] with pages ending at 3.
fn miss_until_given_up(r: &mut Reader, a: AggregateRef, fetching: bool) -> Vec<Action> {
    miss_until(r, a, fetching, 3)
}

/// Round 6's S1: a floor kept through `Gone` (the aggregate deleted and recreated, found only
/// by the page) and then given up on recorded what it gave up on, so the new incarnation's
/// `changed(a, 5)` armed no floor and a lagging page at 4 answered a read asked after it fresh
/// at 4. Nothing given up on is remembered now (round 9): 5 arms a floor.
#[test]
fn a_floor_kept_through_gone_and_given_up_on_silences_no_recreated_version() {
    let a = agg(1);
    let mut r = watching(a);
    assert_eq!(changed(&mut r, a, 10), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 9)), [retry(a, 250)]);
    assert_eq!(on(&mut r, Input::Read(a, tag(1))), [Action::FetchPage(a)]);
    gone(&mut r, a);
    // The re-read of the recreated aggregate ends at 3, below 10, until given up on.
    let ends = miss_until_given_up(&mut r, a, true);
    assert!(
        ends.iter()
            .any(|e| matches!(e, Action::NeverServed { notified: 10, .. })),
        "{ends:?}"
    );
    assert!(ends.contains(&caught_up(a, false, &[tag(1)])), "{ends:?}");
    // The new incarnation reaches 5: a floor, so a page ending at 4 is retried (not caught
    // up), and a read asked now waits for 5.
    assert_eq!(changed(&mut r, a, 5), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 4)), [retry(a, 250)]);
    assert_eq!(on(&mut r, Input::Read(a, tag(2))), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 4)), []);
    assert_eq!(on(&mut r, Input::Retry(a)), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 5)), [caught_up(a, true, &[tag(2)])]);
}

/// Given up on 10, then deleted and recreated (found only by `Gone`): the new incarnation's
/// `changed(a, 5)` arms a floor (up to round 8 because `Gone` cleared what was given up on,
/// since round 9 because nothing given up on is remembered).
#[test]
fn a_recreation_found_by_gone_after_a_give_up_arms_a_floor() {
    let a = agg(1);
    let mut r = watching(a);
    assert_eq!(changed(&mut r, a, 10), [Action::FetchPage(a)]);
    let ends = miss_until_given_up(&mut r, a, true);
    assert!(
        ends.iter()
            .any(|e| matches!(e, Action::NeverServed { notified: 10, .. })),
        "{ends:?}"
    );
    if !ends.contains(&Action::FetchPage(a)) {
        assert_eq!(on(&mut r, Input::CatchUp(a)), [Action::FetchPage(a)]);
    }
    gone(&mut r, a);
    assert_eq!(on(&mut r, last(a, 3)), [caught_up(a, true, &[])]);
    assert_eq!(changed(&mut r, a, 5), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 4)), [retry(a, 250)]);
}

/// The capability is told anew by each stream's `ready`: a reopened stream has none until
/// then. `changed(a, 10)` and then `changed(a, 9)` on the new stream before its `ready`
/// (the floor raised on it, then a lower version there) keep the floor at 10, though the old
/// stream's `ready` said `deletedResets`.
#[test]
fn a_reopened_stream_takes_no_lower_change_for_a_recreation_before_its_ready() {
    let a = agg(1);
    let mut r = watching(a);
    assert_eq!(changed(&mut r, a, 10), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 9)), [retry(a, 250)]);
    assert_eq!(on(&mut r, Input::Read(a, tag(1))), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 9)), []);
    let s1 = r.streams()[0].0;
    on(&mut r, Input::StreamEnded(s1));
    r.handle(Input::TimerFired, T + 60_000, 0.5);
    while r.poll().is_some() {}
    let s2 = r.streams()[0].0;
    assert_ne!(s1, s2);
    // Before its `ready`: the floor is raised (to the same version) on it, then goes lower.
    assert_eq!(changed(&mut r, a, 10), [Action::FetchPage(a)]);
    assert_eq!(changed(&mut r, a, 9), []);
    // The page ends at 9, below 10: the read waits (read again for the change queued, then
    // the retry asked first).
    assert_eq!(
        on(&mut r, last(a, 9)),
        [Action::FetchPage(a)],
        "9 is below 10"
    );
    assert_eq!(on(&mut r, last(a, 9)), []);
    assert_eq!(on(&mut r, Input::Retry(a)), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 10)), [caught_up(a, true, &[tag(1)])]);
}

/// Given up on 10 with the cursor at `cursor`, and nothing left in flight.
fn given_up_on_10(r: &mut Reader, a: AggregateRef, cursor: u64) {
    assert_eq!(changed(r, a, 10), [Action::FetchPage(a)]);
    let ends = miss_until(r, a, true, cursor);
    assert!(
        ends.iter()
            .any(|e| matches!(e, Action::NeverServed { notified: 10, .. })),
        "{ends:?}"
    );
    if ends.contains(&Action::FetchPage(a)) {
        assert_eq!(on(r, last(a, cursor)), [caught_up(a, true, &[])]);
    }
}

/// Round 7's M1, scenario A: given up on 10 (pages ending at 9), then the aggregate deleted
/// and recreated, its `reset` lost, and `changed(a, 5)` on the same stream (whose `ready` said
/// `deletedResets`). At or below 10, it armed no floor: a read asked after it, the page from a
/// replica at 4 finding it `Gone` (tip 4 below the cursor at 9), and the re-read ending at 4
/// answered the read fresh at 4. Nothing given up on is remembered now: 5 arms a floor.
#[test]
fn a_recreation_below_a_version_given_up_on_arms_a_floor() {
    let a = agg(1);
    let mut r = watching(a);
    given_up_on_10(&mut r, a, 9);
    assert_eq!(changed(&mut r, a, 5), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, Input::Read(a, tag(1))), []);
    gone(&mut r, a);
    // The re-read ends at 4, below 5: retried, the read waits.
    let ends_at_4 = on(&mut r, last(a, 4));
    assert!(
        !ends_at_4.contains(&caught_up(a, true, &[tag(1)])),
        "answered at 4, below 5: {ends_at_4:?}"
    );
    assert_eq!(ends_at_4, [retry(a, 250)]);
    assert_eq!(on(&mut r, Input::Retry(a)), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 5)), [caught_up(a, true, &[tag(1)])]);
}

/// Round 7's M1, scenario B: given up on 10, then `changed(a, 12)` arming a floor, the
/// aggregate deleted and recreated (its `reset` lost) and `changed(a, 5)` on the same
/// `deletedResets` stream. At or below 10, it dropped the floor and armed none: a read asked
/// after it was answered fresh by a page ending at 4. It replaces the floor now.
#[test]
fn a_recreation_below_a_version_given_up_on_replaces_a_newer_floor() {
    let a = agg(1);
    let mut r = watching(a);
    given_up_on_10(&mut r, a, 3);
    assert_eq!(changed(&mut r, a, 12), [Action::FetchPage(a)]);
    assert_eq!(changed(&mut r, a, 5), []);
    assert_eq!(on(&mut r, Input::Read(a, tag(1))), []);
    // The page in flight (boarded before the read) and the next (the read aboard) end at 4,
    // below 5: read again for the change queued, then retried; the read waits.
    let pages = [on(&mut r, last(a, 4)), on(&mut r, last(a, 4))];
    for ends_at_4 in &pages {
        assert!(
            !ends_at_4.contains(&caught_up(a, true, &[tag(1)])),
            "answered at 4, below 5: {ends_at_4:?}"
        );
    }
    assert_eq!(pages, [vec![Action::FetchPage(a)], vec![retry(a, 250)]]);
    assert_eq!(on(&mut r, Input::Retry(a)), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 5)), [caught_up(a, true, &[tag(1)])]);
}

/// Round 8's M1, scenario C: given up on 10 (pages ending at 9), then the aggregate deleted,
/// the gateway's slot forgetting what it sent and a `resync` swallowing the `reset` (the
/// catch-up it drives, from the same replica, ends at 9: caught up, no floor); recreated by
/// one append of 10 events, `changed(a, 10)` comes again. Equal to the version given up on,
/// it armed no floor, and a page ending at 9 answered a read asked after it fresh at 9.
/// Nothing given up on is remembered now: 10 arms a floor and the read waits for it.
#[test]
fn the_version_given_up_on_notified_again_arms_a_floor() {
    let a = agg(1);
    let mut r = watching(a);
    given_up_on_10(&mut r, a, 9);
    let id = r.streams()[0].0;
    assert_eq!(
        on(&mut r, Input::Stream(id, Note::Resync)),
        [Action::FetchPage(a)]
    );
    assert_eq!(on(&mut r, last(a, 9)), [caught_up(a, true, &[])]);
    assert_eq!(changed(&mut r, a, 10), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, Input::Read(a, tag(1))), []);
    // The page in flight (boarded before the read) and the next (the read aboard) end at 9,
    // below 10: read again for the read queued, then retried; the read waits.
    let pages = [on(&mut r, last(a, 9)), on(&mut r, last(a, 9))];
    for ends_at_9 in &pages {
        assert!(
            !ends_at_9.contains(&caught_up(a, true, &[tag(1)])),
            "answered at 9, below 10: {ends_at_9:?}"
        );
    }
    assert_eq!(pages, [vec![Action::FetchPage(a)], vec![retry(a, 250)]]);
    assert_eq!(on(&mut r, Input::Retry(a)), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 10)), [caught_up(a, true, &[tag(1)])]);
}
