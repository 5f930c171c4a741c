//! Unit tests of the drain machine's sessions: a refused session renewed and the batch resent
//! identically, one that cannot be opened, another user's, and one about to expire (kept apart
//! from `machine_tests.rs`, which holds the send and its replies).

use super::*;
use crate::engine::auth::AuthFailure;

#[test]
fn a_refused_session_is_renewed_and_the_batch_resent_identically() {
    let mut d = drain();
    let a = events(1, 1..=3);
    sending(&mut d, &a);
    d.handle(
        Input::Replied(body(
            401,
            r#"{"outcome":"unauthorized","code":40102,"message":"expired"}"#,
        )),
        AT,
    );
    let after = take(&mut d);
    assert!(matches!(
        after[0],
        Action::Report(Report::Error {
            code: Some(40102),
            ..
        })
    ));
    assert_eq!(after[1..], [Action::OpenSession], "renewed at once");
    let renewed = Session {
        token: "t2".into(),
        expires_at: AT.ms + 3_600_000,
    };
    d.handle(Input::SessionOpened(Ok(renewed)), AT);
    assert_eq!(doing(&mut d), [Action::CheckLock]);
    d.handle(Input::MaySend(true), AT);
    assert_eq!(
        doing(&mut d),
        [Action::Send {
            body: encode(Uuid::from_u128(0xC1), agg(1), &a),
            token: "t2".into()
        }],
        "the same bytes, the new token"
    );
    // Refused twice in a row: now with a backoff, still never parked.
    d.handle(
        Input::Replied(body(
            401,
            r#"{"outcome":"unauthorized","code":40101,"message":"forged"}"#,
        )),
        AT,
    );
    let after = take(&mut d);
    assert!(after.contains(&Action::Report(Report::State(SyncState::Unauthorized))));
    assert!(
        after
            .iter()
            .any(|a| matches!(a, Action::Wait { network: true, .. }))
    );
    assert!(!after.iter().any(|a| matches!(a, Action::Park { .. })));
}

#[test]
fn a_session_that_cannot_be_opened_leaves_the_events_waiting() {
    let mut d = drain();
    d.start();
    d.handle(Input::Recounted(Ok(())), AT);
    d.handle(Input::Unpruned(Ok(vec![])), AT);
    d.handle(Input::PinRead(Ok(None)), AT);
    let a = events(1, 1..=2);
    d.handle(Input::Cut(Ok(Some(a.clone()))), AT);
    d.handle(Input::Pinned(Ok(true)), AT);
    take(&mut d);
    for attempt in 0..3 {
        d.handle(
            Input::SessionOpened(Err(AuthFailure {
                code: Some(40121),
                message: "the app token was refused".into(),
                retry_after_ms: Some(5_000),
                wrong_user: false,
            })),
            AT,
        );
        let after = take(&mut d);
        assert_eq!(
            after[1],
            Action::Report(Report::State(SyncState::Unauthorized)),
            "attempt {attempt}"
        );
        assert!(matches!(after[2], Action::Wait { ms, .. } if ms >= 5_000));
        d.handle(Input::TimerFired, AT);
        assert_eq!(doing(&mut d), [Action::OpenSession]);
    }
    d.handle(Input::SessionOpened(Ok(session())), AT);
    assert_eq!(doing(&mut d), [Action::CheckLock]);
}

#[test]
fn another_users_session_sends_nothing_and_reports_wrong_user_until_the_right_one_returns() {
    let mut d = drain();
    d.start();
    d.handle(Input::Recounted(Ok(())), AT);
    d.handle(Input::Unpruned(Ok(vec![])), AT);
    d.handle(Input::PinRead(Ok(None)), AT);
    d.handle(Input::Cut(Ok(Some(events(1, 1..=2)))), AT);
    d.handle(Input::Pinned(Ok(true)), AT);
    take(&mut d);
    for attempt in 0..3 {
        d.handle(
            Input::SessionOpened(Err(AuthFailure {
                code: None,
                message: "the session is user:bob's but this database belongs to user:alice".into(),
                retry_after_ms: None,
                wrong_user: true,
            })),
            AT,
        );
        let after = take(&mut d);
        assert_eq!(
            after[1],
            Action::Report(Report::State(SyncState::WrongUser)),
            "attempt {attempt}"
        );
        assert!(
            !after
                .iter()
                .any(|a| matches!(a, Action::Send { .. } | Action::Park { .. })),
            "{after:?}"
        );
        d.handle(Input::TimerFired, AT);
        assert_eq!(doing(&mut d), [Action::OpenSession]);
    }
    d.handle(Input::SessionOpened(Ok(session())), AT);
    assert_eq!(doing(&mut d), [Action::CheckLock]);
}

#[test]
fn a_session_about_to_expire_is_renewed_before_the_next_send() {
    let mut d = drain();
    let (a, b) = (events(1, 1..=2), events(2, 1..=2));
    sending_with_read_ahead(&mut d, &a, &b);
    d.handle(Input::Replied(landed()), AT);
    take(&mut d);
    let late = Now {
        ms: session().expires_at - 30_000,
        ..AT
    };
    d.handle(Input::Settled(Ok(true)), late);
    assert_eq!(doing(&mut d), [Action::OpenSession]);
}
