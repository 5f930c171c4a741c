//! Unit tests of the drain machine's start and stop: the three reads a start waits for, a pin
//! found at start resent first, a storage failure waited out, going idle with nothing to send,
//! and stopping when the compare-and-set or the lock is lost (kept apart from
//! `machine_tests.rs`, which holds the send and its replies).

use super::*;
use crate::engine::outbox::Pruned;

#[test]
fn nothing_to_send_recounts_goes_idle_and_prunes_what_landed() {
    let mut d = drain();
    let a = events(1, 1..=3);
    sending(&mut d, &a);
    d.handle(
        Input::ReadAhead {
            in_flight: batch(&a),
            result: Ok(None),
        },
        AT,
    );
    d.handle(Input::Replied(landed()), AT);
    d.handle(Input::Settled(Ok(true)), AT);
    assert_eq!(
        doing(&mut d),
        [
            Action::Settle {
                batch: batch(&a),
                through: 3,
                then: None
            },
            Action::Cut {
                after: Some(agg(1))
            }
        ]
    );
    d.handle(Input::Cut(Ok(None)), AT);
    assert_eq!(doing(&mut d), [Action::Recount]);
    d.handle(Input::Recounted(Ok(())), AT);
    assert_eq!(
        take(&mut d),
        [
            Action::Report(Report::Idle),
            Action::Wait {
                ms: 30_000,
                work: true,
                network: true
            },
            Action::Prune {
                aggregate: agg(1),
                idle: true
            },
        ]
    );
    d.handle(
        Input::Pruned(Ok(Pruned {
            removed: 3,
            more: false,
        })),
        AT,
    );
    assert_eq!(doing(&mut d), [], "nothing more to prune");
    d.handle(Input::Woken, AT);
    assert_eq!(
        doing(&mut d),
        [Action::Cut {
            after: Some(agg(1))
        }]
    );
}

#[test]
fn losing_a_compare_and_set_or_the_lock_stops_the_drain() {
    for stop in [
        Input::Pinned(Ok(false)),
        Input::Settled(Ok(false)),
        Input::MaySend(false),
        Input::Supersede,
    ] {
        let mut d = drain();
        let a = events(1, 1..=2);
        sending(&mut d, &a);
        // Bring the machine to the phase where `stop` is the answer it waits for.
        match &stop {
            Input::Settled(_) => {
                d.handle(Input::Replied(landed()), AT);
                take(&mut d);
            }
            Input::MaySend(_) => {
                d.handle(Input::Replied(Reply::timeout()), AT);
                d.handle(Input::TimerFired, AT);
                take(&mut d);
            }
            Input::Pinned(_) => {
                d.handle(
                    Input::Replied(body(
                        422,
                        r#"{"outcome":"rejected","code":2022,"message":"x"}"#,
                    )),
                    AT,
                );
                take(&mut d);
            }
            _ => {}
        }
        d.handle(stop, AT);
        assert_eq!(doing(&mut d), [Action::Stop(RunEnd::Superseded)]);
        assert!(d.is_stopped());
        d.handle(Input::Replied(landed()), AT);
        assert_eq!(doing(&mut d), [], "nothing after stopping");
    }
}

#[test]
fn a_start_goes_on_only_once_all_three_reads_are_in_whatever_their_order() {
    let a = events(1, 1..=2);
    let mut d = drain();
    d.start();
    take(&mut d);
    d.handle(Input::PinRead(Ok(Some(batch(&a)))), AT);
    assert_eq!(doing(&mut d), [], "the pin alone is not enough");
    d.handle(Input::Recounted(Ok(())), AT);
    assert_eq!(doing(&mut d), []);
    d.handle(Input::Unpruned(Ok(vec![])), AT);
    assert_eq!(
        doing(&mut d),
        [
            Action::Read(batch(&a)),
            // The batch after it is read while it is readied, not only once it is sent.
            Action::ReadAhead {
                in_flight: batch(&a)
            }
        ]
    );

    // A failed search for leftovers: the pin read with it is not trusted; after the wait the
    // pin is read again.
    let mut d = drain();
    d.start();
    take(&mut d);
    d.handle(Input::PinRead(Ok(None)), AT);
    d.handle(Input::Unpruned(Err(StoreError::Closed)), AT);
    d.handle(Input::Recounted(Ok(())), AT);
    assert_eq!(
        doing(&mut d),
        [Action::Wait {
            ms: Policy::default().storage_retry_ms,
            work: false,
            network: false
        }]
    );
    d.handle(Input::TimerFired, AT);
    assert_eq!(doing(&mut d), [Action::ReadPin]);
}

#[test]
fn a_pin_found_at_start_is_resent_first_and_may_have_landed() {
    let mut d = drain();
    d.start();
    d.handle(Input::Recounted(Ok(())), AT);
    d.handle(Input::Unpruned(Ok(vec![agg(9)])), AT);
    let a = events(1, 4..=6);
    d.handle(Input::PinRead(Ok(Some(batch(&a)))), AT);
    assert_eq!(
        doing(&mut d),
        [
            Action::Recount,
            Action::FindUnpruned,
            Action::ReadPin,
            Action::Read(batch(&a)),
            Action::ReadAhead {
                in_flight: batch(&a)
            }
        ]
    );
    d.handle(Input::Read(Ok(a.clone())), AT);
    d.handle(Input::SessionOpened(Ok(session())), AT);
    d.handle(Input::MaySend(true), AT);
    let sent = doing(&mut d);
    assert!(
        sent.contains(&Action::Prune {
            aggregate: agg(9),
            idle: false
        }),
        "leftovers are pruned soon: {sent:?}"
    );
    d.handle(
        Input::Replied(body(
            422,
            r#"{"outcome":"rejected","code":2006,"message":"gone"}"#,
        )),
        AT,
    );
    d.handle(Input::Pinned(Ok(true)), AT);
    d.handle(Input::MaySend(true), AT);
    d.handle(
        Input::Replied(body(
            422,
            r#"{"outcome":"rejected","code":2006,"message":"gone"}"#,
        )),
        AT,
    );
    let parked = doing(&mut d);
    assert!(
        matches!(parked.last(), Some(Action::Park { records, .. }) if records[0].may_have_landed),
        "{parked:?}"
    );
}

#[test]
fn the_batch_after_a_pin_found_at_start_is_read_while_the_pin_is_readied() {
    let mut d = drain();
    d.start();
    d.handle(Input::Recounted(Ok(())), AT);
    d.handle(Input::Unpruned(Ok(vec![])), AT);
    let (a, b) = (events(1, 1..=2), events(2, 1..=3));
    d.handle(Input::PinRead(Ok(Some(batch(&a)))), AT);
    take(&mut d);
    // The read ahead answers before the pinned batch is even read back.
    d.handle(
        Input::ReadAhead {
            in_flight: batch(&a),
            result: Ok(Some(b.clone())),
        },
        AT,
    );
    d.handle(Input::Read(Ok(a.clone())), AT);
    d.handle(Input::SessionOpened(Ok(session())), AT);
    d.handle(Input::MaySend(true), AT);
    let sent = doing(&mut d);
    assert!(sent.contains(&send_of(1, &a)), "{sent:?}");
    assert!(
        !sent.iter().any(|x| matches!(x, Action::ReadAhead { .. })),
        "read ahead once: {sent:?}"
    );
    d.handle(Input::Replied(landed()), AT);
    assert_eq!(
        doing(&mut d),
        [
            Action::Settle {
                batch: batch(&a),
                through: 2,
                then: Some(batch(&b))
            },
            Action::CheckLock
        ],
        "the next batch is the one read ahead: no cut"
    );
}

#[test]
fn a_storage_failure_waits_then_reads_the_pin_back() {
    let mut d = drain();
    let a = events(1, 1..=2);
    sending(&mut d, &a);
    d.handle(Input::Replied(landed()), AT);
    take(&mut d);
    d.handle(Input::Settled(Err(StoreError::Corrupt("disk".into()))), AT);
    let after = take(&mut d);
    assert!(matches!(
        after[0],
        Action::Report(Report::Error { code: None, .. })
    ));
    assert_eq!(
        after[1],
        Action::Wait {
            ms: 1_000,
            work: false,
            network: false
        }
    );
    d.handle(Input::TimerFired, AT);
    assert_eq!(doing(&mut d), [Action::ReadPin]);
}
