//! Unit tests of the drain machine: each drives it by hand through one path and checks the
//! exact actions it asks for. This file holds the send and its replies, and the helpers the
//! others share; the start and stop, the sessions, a conditional batch's read-back and atomic
//! writes have files of their own.

use super::*;
use crate::engine::batch::{batch_of, encode};
use crate::engine::env::Reply;
use crate::engine::inspect::OutcomeKind;
use crate::engine::model::NewEvent;

fn agg(n: u128) -> AggregateRef {
    AggregateRef {
        type_id: Uuid::from_u128(7),
        id: Uuid::from_u128(n),
    }
}

fn events(a: u128, seqs: std::ops::RangeInclusive<u64>) -> Vec<StoredEvent> {
    seqs.map(|s| {
        let e = NewEvent {
            event_id: Uuid::from_u128(u128::from(s) + (a << 32)),
            timestamp: 1,
            event_type: 1,
            minor: 0,
            data: vec![s as u8],
            iv: None,
        };
        StoredEvent::new(agg(a), s, &e)
    })
    .collect()
}

fn batch(evs: &[StoredEvent]) -> Batch {
    batch_of(evs).unwrap()
}

const AT: Now = Now {
    ms: 1_000_000,
    online: true,
    random: 0.5,
};

fn drain() -> Drain {
    Drain::new(Policy::default(), Uuid::from_u128(0xC1))
}

fn take(d: &mut Drain) -> Vec<Action> {
    std::iter::from_fn(|| d.poll()).collect()
}

/// Only the actions that are not reports.
fn doing(d: &mut Drain) -> Vec<Action> {
    take(d)
        .into_iter()
        .filter(|a| !matches!(a, Action::Report(_)))
        .collect()
}

/// The send of `events`' batch under the test session.
fn send_of(a: u128, events: &[StoredEvent]) -> Action {
    Action::Send {
        body: encode(Uuid::from_u128(0xC1), agg(a), events),
        token: "t1".into(),
    }
}

fn session() -> Session {
    Session {
        token: "t1".into(),
        expires_at: AT.ms + 3_600_000,
    }
}

fn landed() -> Reply {
    Reply::Http {
        status: 200,
        retry_after: None,
        body: Ok(r#"{"outcome":"landed","duplicate":false,"aggregateVersion":1}"#.into()),
    }
}

fn body(status: u16, json: &str) -> Reply {
    Reply::Http {
        status,
        retry_after: None,
        body: Ok(json.into()),
    }
}

/// Starts a machine and brings it to sending `first` (cut fresh, nothing pinned).
fn sending(d: &mut Drain, first: &[StoredEvent]) {
    d.start();
    assert_eq!(
        doing(d),
        [Action::Recount, Action::FindUnpruned, Action::ReadPin],
        "the three reads of a start go out together"
    );
    d.handle(Input::Recounted(Ok(())), AT);
    d.handle(Input::Unpruned(Ok(vec![])), AT);
    d.handle(Input::PinRead(Ok(None)), AT);
    assert_eq!(doing(d), [Action::Cut { after: None }]);
    d.handle(Input::Cut(Ok(Some(first.to_vec()))), AT);
    assert_eq!(
        doing(d),
        [Action::Pin {
            batch: batch(first),
            replacing: None
        }]
    );
    d.handle(Input::Pinned(Ok(true)), AT);
    assert_eq!(
        doing(d),
        [Action::OpenSession],
        "a session before the first write"
    );
    d.handle(Input::SessionOpened(Ok(session())), AT);
    assert_eq!(doing(d), [Action::CheckLock]);
    d.handle(Input::MaySend(true), AT);
    assert_eq!(
        take(d),
        [
            Action::Report(Report::State(SyncState::Syncing)),
            Action::ReadAhead {
                in_flight: batch(first)
            },
            send_of(first[0].aggregate.id.as_u128(), first),
        ]
    );
}

/// [`sending`] `first`, with `next` read ahead meanwhile.
fn sending_with_read_ahead(d: &mut Drain, first: &[StoredEvent], next: &[StoredEvent]) {
    sending(d, first);
    d.handle(
        Input::ReadAhead {
            in_flight: batch(first),
            result: Ok(Some(next.to_vec())),
        },
        AT,
    );
}

#[test]
fn a_whole_landing_settles_and_pins_the_batch_read_ahead_in_one_step() {
    let mut d = drain();
    let (a, b) = (events(1, 1..=3), events(2, 1..=2));
    sending_with_read_ahead(&mut d, &a, &b);
    assert_eq!(doing(&mut d), []);
    d.handle(Input::Replied(landed()), AT);
    assert_eq!(
        doing(&mut d),
        [
            Action::Settle {
                batch: batch(&a),
                through: 3,
                then: Some(batch(&b))
            },
            Action::CheckLock
        ],
        "the lock is checked while the settle commits"
    );
    d.handle(Input::Settled(Ok(true)), AT);
    let after = take(&mut d);
    assert!(
        matches!(&after[0], Action::Report(Report::Synced { notice, removed: 3 })
            if notice.event_ids == a.iter().map(|e| e.event_id).collect::<Vec<_>>()),
        "{after:?}"
    );
    assert_eq!(
        after[1..],
        [],
        "no cut, no separate pin, no second lock check"
    );
    d.handle(Input::MaySend(true), AT);
    let sent = doing(&mut d);
    assert_eq!(sent[1], send_of(2, &b));
}

#[test]
fn a_lock_check_answered_during_the_settle_decides_at_once() {
    for may in [true, false] {
        let mut d = drain();
        let (a, b) = (events(1, 1..=3), events(2, 1..=2));
        sending_with_read_ahead(&mut d, &a, &b);
        d.handle(Input::Replied(landed()), AT);
        assert_eq!(doing(&mut d).len(), 2, "settle and lock check");
        d.handle(Input::MaySend(may), AT);
        assert_eq!(doing(&mut d), [], "nothing before the settle committed");
        d.handle(Input::Settled(Ok(true)), AT);
        let next = doing(&mut d);
        if may {
            assert_eq!(next[1], send_of(2, &b), "sent without a second check");
        } else {
            assert_eq!(next, [Action::Stop(RunEnd::Superseded)]);
        }
    }
}

#[test]
fn a_lock_check_from_a_settle_that_failed_is_not_reused() {
    let mut d = drain();
    let (a, b) = (events(1, 1..=3), events(2, 1..=2));
    sending_with_read_ahead(&mut d, &a, &b);
    d.handle(Input::Replied(landed()), AT);
    let _ = doing(&mut d);
    d.handle(Input::MaySend(true), AT);
    d.handle(Input::Settled(Ok(false)), AT);
    assert_eq!(
        doing(&mut d),
        [Action::Stop(RunEnd::Superseded)],
        "another drainer moved the pin: no send on the strength of the check"
    );
}

#[test]
fn a_read_ahead_still_in_progress_is_awaited_instead_of_cut_again() {
    let mut d = drain();
    let (a, b) = (events(1, 1..=3), events(2, 1..=2));
    sending(&mut d, &a);
    d.handle(Input::Replied(landed()), AT);
    assert_eq!(
        doing(&mut d),
        [Action::Settle {
            batch: batch(&a),
            through: 3,
            then: None
        }]
    );
    d.handle(Input::Settled(Ok(true)), AT);
    assert_eq!(doing(&mut d), [], "waits for the read in progress");
    d.handle(
        Input::ReadAhead {
            in_flight: batch(&a),
            result: Ok(Some(b.clone())),
        },
        AT,
    );
    assert_eq!(
        doing(&mut d),
        [Action::Pin {
            batch: batch(&b),
            replacing: None
        }]
    );
}

#[test]
fn a_2002_prefix_settles_it_and_re_pins_the_rest_without_reading() {
    let mut d = drain();
    let a = events(1, 1..=5);
    sending(&mut d, &a);
    d.handle(
        Input::Replied(body(
            200,
            r#"{"outcome":"landed","duplicate":true,"code":2002,"lastClientSeq":2,"attemptedClientSeq":1}"#,
        )),
        AT,
    );
    let rest = events(1, 3..=5);
    assert_eq!(
        doing(&mut d),
        [
            Action::Settle {
                batch: batch(&a),
                through: 2,
                then: Some(batch(&rest))
            },
            Action::CheckLock
        ]
    );
    d.handle(Input::Settled(Ok(true)), AT);
    assert_eq!(doing(&mut d), []);
    d.handle(Input::MaySend(true), AT);
    let sent = doing(&mut d);
    assert!(sent.contains(&send_of(1, &rest)));
}

#[test]
fn a_retry_waits_and_resends_the_identical_body() {
    let mut d = drain();
    let a = events(1, 1..=3);
    sending(&mut d, &a);
    let first_send = send_of(1, &a);
    let mut reply = body(
        503,
        r#"{"outcome":"retry","code":2013,"message":"in flight"}"#,
    );
    if let Reply::Http { retry_after, .. } = &mut reply {
        *retry_after = Some("2".into());
    }
    d.handle(Input::Replied(reply), AT);
    let after = take(&mut d);
    assert!(matches!(
        after[0],
        Action::Report(Report::Error {
            code: Some(2013),
            ..
        })
    ));
    assert_eq!(after[1], Action::Report(Report::State(SyncState::Backoff)));
    assert_eq!(
        after[2],
        Action::Wait {
            ms: 2_000,
            work: false,
            network: true
        },
        "Retry-After is a floor"
    );
    d.handle(Input::TimerFired, AT);
    assert_eq!(doing(&mut d), [Action::CheckLock]);
    d.handle(Input::MaySend(true), AT);
    assert_eq!(
        doing(&mut d),
        [first_send],
        "identical, and the read-ahead is not repeated"
    );
    // Neither a network error nor a timeout gives up the batch either.
    d.handle(Input::Replied(Reply::timeout()), AT);
    assert!(
        doing(&mut d)
            .iter()
            .any(|a| matches!(a, Action::Wait { network: true, .. }))
    );
}

#[test]
fn a_network_error_while_offline_waits_for_the_network_or_the_probe() {
    let mut d = drain();
    let a = events(1, 1..=2);
    sending(&mut d, &a);
    let offline = Now {
        online: false,
        ..AT
    };
    d.handle(Input::Replied(Reply::network("Failed to fetch")), offline);
    let after = take(&mut d);
    assert!(after.contains(&Action::Report(Report::State(SyncState::Offline))));
    assert!(after.contains(&Action::Wait {
        ms: 15_000,
        work: false,
        network: true
    }));
    // Woken early (still offline): wait for the rest of the probe interval.
    d.handle(
        Input::Woken,
        Now {
            ms: AT.ms + 1_000,
            ..offline
        },
    );
    assert!(doing(&mut d).contains(&Action::Wait {
        ms: 14_000,
        work: false,
        network: true
    }));
    // The probe is due: one ordinary send.
    d.handle(
        Input::TimerFired,
        Now {
            ms: AT.ms + 15_000,
            ..offline
        },
    );
    assert_eq!(doing(&mut d), [Action::CheckLock]);
}

#[test]
fn a_rejection_isolates_the_offending_event_then_parks_it() {
    let mut d = drain();
    let a = events(1, 1..=3);
    sending(&mut d, &a);
    let rejected = body(
        422,
        r#"{"outcome":"rejected","code":2022,"message":"schema"}"#,
    );
    d.handle(Input::Replied(rejected.clone()), AT);
    let head = events(1, 1..=1);
    assert_eq!(
        doing(&mut d),
        [Action::Pin {
            batch: batch(&head),
            replacing: Some(batch(&a))
        }]
    );
    d.handle(Input::Pinned(Ok(true)), AT);
    assert_eq!(doing(&mut d), [Action::CheckLock]);
    d.handle(Input::MaySend(true), AT);
    let sent = doing(&mut d);
    assert!(sent.contains(&send_of(1, &head)));
    // A stale read-ahead answer (it assumed the whole batch would land) is ignored.
    d.handle(
        Input::ReadAhead {
            in_flight: batch(&a),
            result: Ok(Some(events(1, 4..=6))),
        },
        AT,
    );
    d.handle(Input::Replied(rejected), AT);
    let parked = doing(&mut d);
    assert!(
        matches!(&parked[..], [Action::Park { records, batch: b }]
            if records.len() == 1 && *b == batch(&head) && records[0].first_seq == 1 && records[0].last_seq == 1 && records[0].code == 2022),
        "{parked:?}"
    );
    d.handle(Input::Parked(Ok(())), AT);
    let after = take(&mut d);
    assert!(matches!(after[0], Action::Report(Report::Parked(_))));
    assert_eq!(
        after[1],
        Action::Cut {
            after: Some(agg(1))
        }
    );
}

#[test]
fn each_reply_leaves_an_outcome_for_the_inspector_and_the_held_batch_is_visible() {
    let mut d = drain();
    let a = events(1, 1..=3);
    sending(&mut d, &a);
    let held = d.held().unwrap();
    assert_eq!(
        (held.batch, held.failed_attempts, held.in_flight),
        (batch(&a), 0, true)
    );
    let mut reply = body(
        503,
        r#"{"outcome":"retry","code":2013,"message":"in flight"}"#,
    );
    if let Reply::Http { retry_after, .. } = &mut reply {
        *retry_after = Some("2".into());
    }
    d.handle(Input::Replied(reply), AT);
    take(&mut d);
    let outcome = d.take_outcome().unwrap();
    assert_eq!(outcome.batch, batch(&a));
    assert_eq!(outcome.attempt, 1);
    assert_eq!(outcome.kind, OutcomeKind::Retry);
    assert_eq!(outcome.code, Some(2013));
    assert_eq!(outcome.next_attempt_at, Some(AT.ms + 2_000));
    assert_eq!(d.take_outcome(), None, "taken once");
    let held = d.held().unwrap();
    assert_eq!((held.failed_attempts, held.in_flight), (1, false));
    // The resend lands: attempt 2.
    d.handle(Input::TimerFired, AT);
    assert_eq!(doing(&mut d), [Action::CheckLock]);
    d.handle(Input::MaySend(true), AT);
    take(&mut d);
    d.handle(Input::Replied(landed()), AT);
    let outcome = d.take_outcome().unwrap();
    assert_eq!(
        (outcome.attempt, outcome.kind, outcome.next_attempt_at),
        (2, OutcomeKind::Landed, None)
    );
}

#[path = "machine_start_tests.rs"]
mod start;

#[path = "machine_session_tests.rs"]
mod sessions;

#[path = "machine_verify_tests.rs"]
mod verify;

#[path = "machine_atomic_tests.rs"]
mod atomic;
