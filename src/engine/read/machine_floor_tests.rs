//! Unit tests of the read machine's floors: a catch-up that ends below the version a `changed`
//! notified (its page answered by a replica that lags) is read again, with backoff, its reads
//! still waiting, a bounded number of times; and the floor goes when it no longer means
//! anything (kept apart from `machine_tests.rs`, which holds the streams and paging).

use super::test_support::{READY, T, agg, at, caught_up, changed, last, on, retry, tag, watching};
use super::*;
use crate::engine::read::floors::{BEHIND_RETRIES, GIVE_UP_MS};

#[test]
fn a_catch_up_below_the_notified_version_is_read_again_and_its_reads_wait_for_it() {
    let a = agg(1);
    let mut r = watching(a);
    assert_eq!(changed(&mut r, a, 5), [Action::FetchPage(a)]);
    // A replica that lags answered: the log reaches 3 only. Not caught up: retried.
    assert_eq!(on(&mut r, last(a, 3)), [retry(a, 250)]);
    assert_eq!(on(&mut r, Input::Read(a, tag(1))), [Action::FetchPage(a)]);
    // Still behind (but the cursor moved: the backoff starts again); the read waits. Before
    // the retry comes no other is asked for (it is pending), once it came one is.
    assert_eq!(on(&mut r, last(a, 4)), []);
    assert_eq!(on(&mut r, Input::CatchUp(a)), [Action::FetchPage(a)]);
    assert_eq!(at(&mut r, last(a, 4), T + 250), []);
    assert_eq!(on(&mut r, Input::Retry(a)), [Action::FetchPage(a)]);
    assert_eq!(at(&mut r, last(a, 4), T + 250), [retry(a, 250)]);
    // The stream's `ready` reads it again too, as after a failed page.
    let id = r.streams()[0].0;
    assert_eq!(on(&mut r, Input::Stream(id, READY)), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 5)), [caught_up(a, true, &[tag(1)])]);
    // Reached: the floor is gone, a later catch-up at 5 is caught up whatever it reads.
    assert_eq!(on(&mut r, Input::CatchUp(a)), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 5)), [caught_up(a, true, &[])]);
}

#[test]
fn a_version_never_served_is_retried_with_growing_backoff_then_given_up() {
    let a = agg(1);
    let mut r = watching(a);
    changed(&mut r, a, 5);
    assert_eq!(on(&mut r, Input::Read(a, tag(1))), []);
    // The read queued it again: read on at once (a miss all the same: the page began at 5).
    assert_eq!(on(&mut r, last(a, 3)), [Action::FetchPage(a)]);
    // The backoff of attempt k (the retry timers asked for before) at a draw of 0.5: half of
    // 250 ms · 2^k (at least 250, at most half of the 30 s cap), each retry when the last is
    // due.
    let mut now = T;
    for ms in [250, 250, 500, 1_000, 2_000, 4_000, 8_000, 15_000] {
        assert_eq!(at(&mut r, last(a, 3), now), [retry(a, ms)]);
        now += ms;
        assert_eq!(at(&mut r, Input::Retry(a), now), [Action::FetchPage(a)]);
    }
    assert!(now - T >= GIVE_UP_MS && now - T - 15_000 < GIVE_UP_MS);
    // Below it still, 30 s after the first miss: given up, the read answered `false`.
    assert_eq!(
        at(&mut r, last(a, 3), now),
        [
            caught_up(a, false, &[tag(1)]),
            Action::NeverServed {
                aggregate: a,
                notified: 5,
                reached: 3,
            }
        ]
    );
    // The floor went with it.
    assert_eq!(on(&mut r, Input::CatchUp(a)), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 3)), [caught_up(a, true, &[])]);
}

#[test]
fn a_read_is_answered_by_the_floor_its_page_began_with_though_changes_keep_coming() {
    let a = agg(1);
    let mut r = watching(a);
    assert_eq!(on(&mut r, Input::Read(a, tag(1))), [Action::FetchPage(a)]);
    // Each page ends at the version the floor was when it began, a change arriving during it.
    assert_eq!(changed(&mut r, a, 1), []);
    assert_eq!(
        on(&mut r, last(a, 0)),
        [caught_up(a, true, &[tag(1)]), Action::FetchPage(a)]
    );
    for v in 1..5 {
        assert_eq!(changed(&mut r, a, v + 1), []);
        assert_eq!(
            on(&mut r, last(a, v)),
            [caught_up(a, true, &[]), Action::FetchPage(a)]
        );
    }
    assert_eq!(on(&mut r, last(a, 5)), [caught_up(a, true, &[])]);
}

#[test]
fn a_gateway_notifying_faster_than_a_page_still_counts_misses_and_is_given_up() {
    let a = agg(1);
    let mut r = watching(a);
    changed(&mut r, a, 5);
    let mut gave_up = None;
    for i in 0..40u64 {
        let now = T + i * 1_000;
        at(&mut r, Input::CatchUp(a), now);
        assert!(changed(&mut r, a, 6 + i).is_empty());
        let ends = at(&mut r, last(a, 3), now);
        if ends.iter().any(|e| matches!(e, Action::NeverServed { .. })) {
            gave_up = Some(i);
            break;
        }
    }
    assert_eq!(gave_up, Some(GIVE_UP_MS / 1_000));
}

#[test]
fn catch_ups_not_driven_by_the_retry_timer_neither_give_up_nor_ask_more_retries() {
    let a = agg(1);
    let mut r = watching(a);
    changed(&mut r, a, 5);
    assert_eq!(on(&mut r, last(a, 3)), [retry(a, 250)]);
    // Reads, landed batches, `ready`s: many catch-ups in the retry's 250 ms, none a give-up,
    // none another retry (the one asked for is pending).
    for n in 0..20u64 {
        assert_eq!(
            at(&mut r, Input::Read(a, tag(n)), T + n),
            [Action::FetchPage(a)]
        );
        assert_eq!(at(&mut r, last(a, 3), T + n), []);
    }
    // The retry came: the next miss asks for one more, backing off as the second retry (the
    // misses between counted no attempt).
    assert_eq!(on(&mut r, Input::Retry(a)), [Action::FetchPage(a)]);
    assert_eq!(at(&mut r, last(a, 3), T + 250), [retry(a, 250)]);
    assert_eq!(on(&mut r, Input::Retry(a)), [Action::FetchPage(a)]);
    assert_eq!(at(&mut r, last(a, 3), T + 500), [retry(a, 500)]);
}

/// Nothing given up on is remembered (round 8's M1: the version given up on, notified again,
/// may be a recreation's): notified again, it arms a floor and a new bounded cycle of retries,
/// the backoff from its start. (This test asserted it armed none before.)
#[test]
fn a_version_given_up_on_arms_a_floor_again_when_notified_again() {
    let a = agg(1);
    let mut r = watching(a);
    changed(&mut r, a, 5);
    // Misses enough, the last 30 s after the first: given up.
    for _ in 0..BEHIND_RETRIES {
        on(&mut r, Input::CatchUp(a));
        on(&mut r, last(a, 3));
    }
    at(&mut r, Input::CatchUp(a), T + GIVE_UP_MS);
    let ends = at(&mut r, last(a, 3), T + GIVE_UP_MS);
    assert!(matches!(ends[1], Action::NeverServed { .. }), "{ends:?}");
    assert_eq!(on(&mut r, last(a, 3)), [caught_up(a, true, &[])]);
    // Notified again: a floor, the page ending at 3 retried after the first backoff.
    assert_eq!(changed(&mut r, a, 5), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 3)), [retry(a, 250)]);
}

#[test]
fn a_change_during_the_page_reads_again_at_once_without_a_miss() {
    let a = agg(1);
    let mut r = watching(a);
    assert_eq!(changed(&mut r, a, 5), [Action::FetchPage(a)]);
    assert_eq!(changed(&mut r, a, 7), []);
    // At the 5 its page began with (caught up for what it was asked), but below 7, queued
    // again by that change: read on at once, no retry timer.
    assert_eq!(
        on(&mut r, last(a, 5)),
        [caught_up(a, true, &[]), Action::FetchPage(a)]
    );
    assert_eq!(on(&mut r, last(a, 7)), [caught_up(a, true, &[])]);
}

#[test]
fn a_deletion_or_the_last_unsubscribe_drops_the_floor_and_a_trim_or_gone_keeps_it() {
    let a = agg(1);
    // A deletion's `reset` (versions restart; also a `reset` that does not say which).
    let mut r = watching(a);
    changed(&mut r, a, 5);
    let id = r.streams()[0].0;
    let deleted = Note::Reset {
        aggregate: a,
        deleted: true,
    };
    assert_eq!(on(&mut r, Input::Stream(id, deleted)), []);
    assert_eq!(
        on(&mut r, last(a, 3)),
        [caught_up(a, true, &[]), Action::Probe(a)]
    );
    // A page that finds it gone (deleted while no `reset` reached the device, or a replica
    // behind the cursor).
    let mut r = watching(a);
    changed(&mut r, a, 5);
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
    // (A `Gone` keeps the floor: perhaps only a replica behind the cursor answered. A real
    // deletion's recreated versions stay below it until a `reset`, a lower `changed` or the
    // give-up ends it: `machine_floor_reset_tests.rs`.)
    assert_eq!(on(&mut r, last(a, 0)), [retry(a, 250)]);
    // The last subscriber gone: a new subscription starts without it.
    let mut r = watching(a);
    changed(&mut r, a, 5);
    on(&mut r, Input::Unsubscribe(a));
    on(&mut r, Input::Subscribe(a));
    // (Its catch-up on subscribing is queued: with the floor kept, this page would only
    // make way for it, as a change during the page does.)
    assert_eq!(
        on(&mut r, last(a, 3)),
        [caught_up(a, true, &[]), Action::FetchPage(a)]
    );
    // A trim keeps the tip: the floor stays.
    let mut r = watching(a);
    changed(&mut r, a, 5);
    let trimmed = Input::Page {
        aggregate: a,
        end: PageEnd::Trimmed { min_version: 3 },
    };
    assert_eq!(
        on(&mut r, trimmed),
        [Action::ResetLog {
            aggregate: a,
            min_version: 3,
            gone: false
        }]
    );
    assert_eq!(on(&mut r, Input::LogReset(a)), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 4)), [retry(a, 250)]);
}

#[test]
fn a_change_of_an_aggregate_not_in_the_stream_sets_no_floor() {
    let a = agg(1);
    let mut r = watching(a);
    assert_eq!(changed(&mut r, agg(2), 5), []);
    on(&mut r, Input::Subscribe(agg(2)));
    // Its first catch-up (on subscribing) ends where the log is: nothing was notified.
    let ends: Vec<Action> = on(&mut r, last(agg(2), 0));
    assert!(ends.contains(&caught_up(agg(2), true, &[])), "{ends:?}");
}

#[test]
fn a_read_is_answered_once_the_floor_it_first_boarded_with_is_reached_though_each_page_misses() {
    let a = agg(1);
    let mut r = watching(a);
    changed(&mut r, a, 8);
    assert_eq!(on(&mut r, last(a, 8)), [caught_up(a, true, &[])]);
    // Notified 10, a lagging replica answers 9: retried.
    assert_eq!(changed(&mut r, a, 10), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 9)), [retry(a, 250)]);
    // R boards with the floor at 10; a change during each page raises it, each page ends one
    // below the floor it began with (the cursor moving: nothing gives up).
    assert_eq!(on(&mut r, Input::Read(a, tag(1))), [Action::FetchPage(a)]);
    assert_eq!(changed(&mut r, a, 11), []);
    assert_eq!(on(&mut r, last(a, 9)), [Action::FetchPage(a)]);
    assert_eq!(changed(&mut r, a, 12), []);
    // Ended at 10: R's floor reached, R answered (the page's own floor, 11, was not).
    assert_eq!(
        on(&mut r, last(a, 10)),
        [caught_up(a, true, &[tag(1)]), Action::FetchPage(a)]
    );
    // A read asked during that page boards the next, the floor at 13 by then: not answered
    // at 12, answered at 13 (the floor at 14 by then, the retry asked first still pending).
    assert_eq!(on(&mut r, Input::Read(a, tag(2))), []);
    assert_eq!(changed(&mut r, a, 13), []);
    assert_eq!(on(&mut r, last(a, 11)), [Action::FetchPage(a)]);
    assert_eq!(changed(&mut r, a, 14), []);
    assert_eq!(on(&mut r, last(a, 12)), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 13)), [caught_up(a, true, &[tag(2)])]);
    assert_eq!(on(&mut r, Input::Retry(a)), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 14)), [caught_up(a, true, &[])]);
}

#[test]
fn a_retry_timer_that_fires_asks_for_the_next_whatever_the_wall_clock_says() {
    let a = agg(1);
    let mut r = watching(a);
    changed(&mut r, a, 5);
    assert_eq!(at(&mut r, last(a, 3), T), [retry(a, 250)]);
    // The wall clock stepped back 10 s before the retry's timer ran out: its miss asks for
    // the next retry all the same (else nothing would ever read the aggregate again).
    assert_eq!(
        at(&mut r, Input::Retry(a), T - 10_000),
        [Action::FetchPage(a)]
    );
    assert_eq!(at(&mut r, last(a, 3), T - 10_000), [retry(a, 250)]);
    // A coarse clock (no time passed by it): likewise.
    assert_eq!(
        at(&mut r, Input::Retry(a), T - 10_000),
        [Action::FetchPage(a)]
    );
    assert_eq!(at(&mut r, last(a, 3), T - 10_000), [retry(a, 500)]);
    // Before it comes, a miss asks for none, however late the clock says it is.
    assert_eq!(
        at(&mut r, Input::CatchUp(a), T + 60_000),
        [Action::FetchPage(a)]
    );
    assert_eq!(at(&mut r, last(a, 3), T + 60_000), []);
}

#[test]
fn a_change_below_the_floor_replaces_it_as_the_aggregate_was_recreated() {
    let a = agg(1);
    let mut r = watching(a);
    assert_eq!(changed(&mut r, a, 10), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 3)), [retry(a, 250)]);
    assert_eq!(on(&mut r, Input::Read(a, tag(1))), [Action::FetchPage(a)]);
    // Deleted, its `reset` lost, recreated and written up to 4: its changes go below the
    // floor. The page (from the cursor at 3) ends at 4: caught up, the read answered (read
    // again for the change, which queued it).
    assert_eq!(changed(&mut r, a, 4), []);
    assert_eq!(
        on(&mut r, last(a, 4)),
        [caught_up(a, true, &[tag(1)]), Action::FetchPage(a)]
    );
    assert_eq!(on(&mut r, last(a, 4)), [caught_up(a, true, &[])]);
    // The new floor is armed from there: a change above it is waited for.
    assert_eq!(changed(&mut r, a, 6), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 5)), [retry(a, 250)]);
}

#[test]
fn a_change_below_the_floor_on_another_stream_keeps_the_floor() {
    let a = agg(1);
    let mut r = watching(a);
    // S1 notifies 10, a lagging page ends at 9; R boards with the floor at 10.
    assert_eq!(changed(&mut r, a, 10), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 9)), [retry(a, 250)]);
    assert_eq!(on(&mut r, Input::Read(a, tag(1))), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 9)), []);
    // S1 drops; the client reconnects (another gateway, a node still catching up), whose
    // stream notifies 9: versions advance on one stream only, this is no recreation.
    let s1 = r.streams()[0].0;
    r.handle(Input::StreamEnded(s1), T, 0.5);
    let reopened = at(&mut r, Input::TimerFired, T + 60_000);
    let s2 = r.streams()[0].0;
    assert_ne!(s1, s2);
    assert!(
        reopened
            .iter()
            .any(|a| matches!(a, Action::OpenStream { id, .. } if *id == s2)),
        "{reopened:?}"
    );
    assert_eq!(on(&mut r, Input::Stream(s2, READY)), [Action::FetchPage(a)]);
    assert_eq!(changed(&mut r, a, 9), []);
    // The page ends at 9: R (boarded at 10) still waits, the floor still 10 (read again for
    // the change, then waiting for the retry asked first).
    assert_eq!(on(&mut r, last(a, 9)), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 9)), []);
    assert_eq!(on(&mut r, Input::Retry(a)), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 10)), [caught_up(a, true, &[tag(1)])]);
}

#[test]
fn the_last_unsubscription_keeps_the_floor_while_reads_wait_for_it() {
    let a = agg(1);
    let mut r = watching(a);
    // Floor 10, R boards with it, the page misses at 9.
    assert_eq!(changed(&mut r, a, 10), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, Input::Read(a, tag(1))), []);
    assert_eq!(on(&mut r, last(a, 9)), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 9)), [retry(a, 250)]);
    // The last subscriber goes: R still waits, so the floor stays (its retry still comes).
    on(&mut r, Input::Unsubscribe(a));
    assert_eq!(on(&mut r, Input::Retry(a)), [Action::FetchPage(a)]);
    // Ends at 9: R (boarded at 10) is not answered, another retry is asked for.
    assert_eq!(on(&mut r, last(a, 9)), [retry(a, 250)]);
    assert_eq!(on(&mut r, Input::Retry(a)), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 10)), [caught_up(a, true, &[tag(1)])]);
}

#[test]
fn a_floor_kept_for_reads_past_the_last_unsubscription_goes_once_none_waits() {
    let a = agg(1);
    let mut r = watching(a);
    // R boards with the floor at 10; a change raises it to 12 during the page.
    assert_eq!(changed(&mut r, a, 10), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, Input::Read(a, tag(1))), []);
    assert_eq!(on(&mut r, last(a, 9)), [Action::FetchPage(a)]);
    assert_eq!(changed(&mut r, a, 12), []);
    on(&mut r, Input::Unsubscribe(a));
    // At 10: R answered, no read waits, nobody watches: the floor goes (read again for the
    // change, which queued it: caught up at 10, no retry asked for).
    assert_eq!(
        on(&mut r, last(a, 10)),
        [caught_up(a, true, &[tag(1)]), Action::FetchPage(a)]
    );
    assert_eq!(on(&mut r, last(a, 10)), [caught_up(a, true, &[])]);
}

/// Round 4's S1: a trim's `reset` keeps the floor and the reads' needs (a trim keeps the tip):
/// the page in flight, from a replica that lags, ends below the floor a read boarded with and
/// does not answer it; the re-read that reaches it does. A deletion's `reset` drops them (its
/// versions restart), as every `reset` did before the gateway said which it was.
#[test]
fn a_trim_reset_keeps_the_floor_a_read_boarded_with_a_deletion_drops_it() {
    let a = agg(1);
    for deleted in [false, true] {
        let mut r = watching(a);
        assert_eq!(changed(&mut r, a, 10), [Action::FetchPage(a)]);
        assert!(matches!(
            on(&mut r, last(a, 9))[..],
            [Action::RetryLater { aggregate, .. }] if aggregate == a
        ));
        // The read boards with the floor 10.
        assert_eq!(on(&mut r, Input::Read(a, tag(1))), [Action::FetchPage(a)]);
        let id = r.streams()[0].0;
        let reset = Note::Reset {
            aggregate: a,
            deleted,
        };
        assert_eq!(on(&mut r, Input::Stream(id, reset)), []);
        let ends_at_9 = on(&mut r, last(a, 9));
        if deleted {
            assert_eq!(
                ends_at_9,
                [caught_up(a, true, &[tag(1)]), Action::Probe(a)],
                "deleted: the floor from before means nothing"
            );
            continue;
        }
        assert_eq!(ends_at_9, [Action::Probe(a)], "trimmed: 9 is below 10");
        let trimmed = Input::Page {
            aggregate: a,
            end: PageEnd::Trimmed { min_version: 4 },
        };
        assert_eq!(
            on(&mut r, trimmed),
            [Action::ResetLog {
                aggregate: a,
                min_version: 4,
                gone: false
            }]
        );
        assert_eq!(on(&mut r, Input::LogReset(a)), [Action::FetchPage(a)]);
        assert_eq!(on(&mut r, last(a, 10)), [caught_up(a, true, &[tag(1)])]);
    }
}

/// A floor kept past the last unsubscription (a read waits) is given up on like any other: the
/// read is answered `false` and the give-up logged; watched again, a `changed` of that version
/// arms a floor (round 4 found it given up on for good; nothing given up on is remembered now).
#[test]
fn a_floor_kept_past_the_last_unsubscription_is_given_up_on_and_armed_again() {
    let a = agg(1);
    let mut r = watching(a);
    assert_eq!(changed(&mut r, a, 5), [Action::FetchPage(a)]);
    on(&mut r, Input::Read(a, tag(1)));
    on(&mut r, last(a, 3));
    on(&mut r, Input::Unsubscribe(a));
    for _ in 0..BEHIND_RETRIES {
        on(&mut r, Input::CatchUp(a));
        on(&mut r, last(a, 3));
    }
    at(&mut r, Input::CatchUp(a), T + GIVE_UP_MS);
    let ends = at(&mut r, last(a, 3), T + GIVE_UP_MS);
    assert_eq!(ends[0], caught_up(a, false, &[tag(1)]), "{ends:?}");
    assert!(matches!(ends[1], Action::NeverServed { .. }), "{ends:?}");
    // Watched again: 5 arms a floor, and a page ending at 3 is retried.
    on(&mut r, Input::Subscribe(a));
    // (The page in flight at the give-up, then the subscription's.)
    assert_eq!(
        on(&mut r, last(a, 3)),
        [caught_up(a, true, &[]), Action::FetchPage(a)]
    );
    assert_eq!(on(&mut r, last(a, 3)), [caught_up(a, true, &[])]);
    assert_eq!(changed(&mut r, a, 5), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 3)), [retry(a, 250)]);
}
