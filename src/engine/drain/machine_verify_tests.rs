//! Unit tests of a conditional batch's 2003 (`machine/verify.rs`): the aggregate is read back at
//! the guard's version + 1 before anything is decided, and only what the read finds settles or
//! parks the batch.

use super::*;
use crate::engine::env::{ReadBack, WrittenBatch};
use crate::engine::model::Guard;

/// A conditional append of `seqs` on aggregate 1, expecting version 4.
fn guarded(seqs: std::ops::RangeInclusive<u64>) -> Vec<StoredEvent> {
    let guard = Guard {
        expected_version: 4,
        first_seq: *seqs.start(),
        last_seq: *seqs.end(),
    };
    events(1, seqs)
        .into_iter()
        .map(|e| e.guarded(Some(guard)))
        .collect()
}

fn conflict() -> Reply {
    conflict_naming("00000000-0000-0000-0000-000000000001", 4, 6)
}

/// A 2003 naming aggregate `id` (of type 7), `expected` and `current` versions.
fn conflict_naming(id: &str, expected: u64, current: u64) -> Reply {
    body(
        422,
        &format!(
            r#"{{"outcome":"rejected","code":2003,"message":"stale","aggregateTypeId":"00000000-0000-0000-0000-000000000007","aggregateId":"{id}","expectedVersion":{expected},"currentVersion":{current}}}"#
        ),
    )
}

fn written(version: u64, client: u128, seqs: &[u64]) -> ReadBack {
    ReadBack::Found(Some(WrittenBatch {
        version,
        client_id: Uuid::from_u128(client),
        client_seqs: seqs.to_vec(),
    }))
}

/// Sends `a` (conditional), answers 2003, and checks the read-back it asks for.
fn conflicted(d: &mut Drain, a: &[StoredEvent]) {
    sending(d, a);
    d.handle(Input::Replied(conflict()), AT);
    assert_eq!(
        doing(d),
        [Action::ReadBack {
            aggregate: agg(1),
            version: 5,
            token: "t1".into()
        }],
        "a 2003 on a conditional batch is read back first, never parked at once"
    );
}

#[test]
fn a_conditional_batch_carries_its_guard_on_the_wire() {
    let a = guarded(1..=2);
    let Action::Send { body, .. } = send_of(1, &a) else {
        unreachable!()
    };
    assert!(body.contains(r#""expectedVersion":4,"#), "{body}");
}

#[test]
fn its_own_write_found_at_the_expected_version_settles_it_as_landed() {
    its_own_write_found_settles_it_as_landed(5);
}

#[test]
fn its_own_write_found_at_another_version_is_landed_too() {
    // Our (client id, first sequence) in the log is our events: landed, wherever they are.
    its_own_write_found_settles_it_as_landed(6);
}

fn its_own_write_found_settles_it_as_landed(version: u64) {
    let mut d = drain();
    let a = guarded(1..=3);
    conflicted(&mut d, &a);
    d.handle(Input::ReadBack(written(version, 0xC1, &[1, 2, 3])), AT);
    assert_eq!(
        doing(&mut d)[0],
        Action::Settle {
            batch: batch(&a),
            through: 3,
            then: None
        }
    );
    d.handle(Input::Settled(Ok(true)), AT);
    let after = take(&mut d);
    assert!(
        after.iter().any(
            |x| matches!(x, Action::Report(Report::Synced { notice, removed: 3 })
            if notice.duplicate && notice.event_ids.len() == 3)
        ),
        "{after:?}"
    );
}

#[test]
fn another_write_at_that_version_or_none_is_a_real_conflict() {
    for found in [
        written(5, 0xBEEF, &[1, 2, 3]),
        written(5, 0xC1, &[7]),
        written(6, 0xBEEF, &[1, 2, 3]),
    ] {
        let mut d = drain();
        let a = guarded(1..=3);
        conflicted(&mut d, &a);
        d.handle(Input::ReadBack(found.clone()), AT);
        let parked = doing(&mut d);
        assert!(
            matches!(&parked[..], [Action::Park { records, batch: b }]
                if records.len() == 1 && *b == batch(&a) && records[0].code == 2003 && records[0].first_seq == 1
                    && records[0].last_seq == 3 && records[0].current_version == Some(6)
                    && !records[0].may_have_landed),
            "{found:?}: {parked:?}"
        );
    }
}

#[test]
fn a_read_back_that_contradicts_the_2003_is_never_a_proven_conflict() {
    // The 2003 reported version 6, the read shows nothing at version 5: it lags (or hides).
    // Resent and read again, as a failed read is; only after MAX_LAGGING_READS in a row is it
    // parked, and then as possibly landed.
    let mut d = drain();
    let a = guarded(1..=2);
    conflicted(&mut d, &a);
    for _ in 1..super::super::verify::MAX_LAGGING_READS {
        d.handle(Input::ReadBack(ReadBack::Found(None)), AT);
        let after = doing(&mut d);
        assert!(
            matches!(after[..], [Action::Wait { network: true, .. }]),
            "a lagging read is read again, never parked at once: {after:?}"
        );
        d.handle(Input::TimerFired, AT);
        assert_eq!(doing(&mut d), [Action::CheckLock]);
        d.handle(Input::MaySend(true), AT);
        assert_eq!(doing(&mut d)[0], send_of(1, &a), "identical");
        d.handle(Input::Replied(conflict()), AT);
        assert!(matches!(
            doing(&mut d)[..],
            [Action::ReadBack { version: 5, .. }]
        ));
    }
    d.handle(Input::ReadBack(ReadBack::Found(None)), AT);
    assert!(matches!(&doing(&mut d)[..], [Action::Park { records, .. }]
            if records.len() == 1 && records[0].may_have_landed && records[0].code == 2003),);
    // A lagging read that catches up settles it as landed.
    let mut d = drain();
    conflicted(&mut d, &a);
    d.handle(Input::ReadBack(ReadBack::Found(None)), AT);
    assert!(matches!(doing(&mut d)[..], [Action::Wait { .. }]));
    d.handle(Input::TimerFired, AT);
    d.handle(Input::MaySend(true), AT);
    take(&mut d);
    d.handle(Input::Replied(conflict()), AT);
    take(&mut d);
    d.handle(Input::ReadBack(written(5, 0xC1, &[1, 2])), AT);
    assert!(matches!(
        doing(&mut d)[0],
        Action::Settle { through: 2, .. }
    ));
}

#[test]
fn a_bare_2003_with_an_empty_read_back_is_never_a_proven_conflict() {
    // No current version (the gateway's answer when Celeriant's conflict list names none of the
    // request's aggregates): the 2003 proves nothing about this aggregate, and an empty read
    // may lag this very write. Read again like a lagging read; then possibly landed.
    let bare = || {
        body(
            422,
            r#"{"outcome":"rejected","code":2003,"message":"stale"}"#,
        )
    };
    let mut d = drain();
    let a = guarded(1..=2);
    sending(&mut d, &a);
    d.handle(Input::Replied(bare()), AT);
    assert!(matches!(
        doing(&mut d)[..],
        [Action::ReadBack { version: 5, .. }]
    ));
    for _ in 1..super::super::verify::MAX_LAGGING_READS {
        d.handle(Input::ReadBack(ReadBack::Found(None)), AT);
        let after = doing(&mut d);
        assert!(
            matches!(after[..], [Action::Wait { network: true, .. }]),
            "an empty read after a bare 2003 is read again, never parked at once: {after:?}"
        );
        d.handle(Input::TimerFired, AT);
        assert_eq!(doing(&mut d), [Action::CheckLock]);
        d.handle(Input::MaySend(true), AT);
        assert_eq!(doing(&mut d)[0], send_of(1, &a), "identical");
        d.handle(Input::Replied(bare()), AT);
        assert!(matches!(
            doing(&mut d)[..],
            [Action::ReadBack { version: 5, .. }]
        ));
    }
    d.handle(Input::ReadBack(ReadBack::Found(None)), AT);
    assert!(matches!(&doing(&mut d)[..], [Action::Park { records, .. }]
            if records.len() == 1 && records[0].may_have_landed && records[0].code == 2003 && records[0].current_version.is_none()),);
    // Another write read at that version after a bare 2003 is still a proven conflict.
    let mut d = drain();
    sending(&mut d, &a);
    d.handle(Input::Replied(bare()), AT);
    take(&mut d);
    d.handle(Input::ReadBack(written(5, 0xBEEF, &[1, 2])), AT);
    assert!(matches!(&doing(&mut d)[..], [Action::Park { records, .. }]
            if !records[0].may_have_landed && records[0].current_version.is_none()),);
}

#[test]
fn a_failed_read_back_resends_the_same_batch_and_reads_again() {
    let mut d = drain();
    let a = guarded(1..=2);
    conflicted(&mut d, &a);
    d.handle(Input::ReadBack(ReadBack::Failed("offline".into())), AT);
    let after = doing(&mut d);
    assert!(
        matches!(after[..], [Action::Wait { network: true, .. }]),
        "{after:?}"
    );
    d.handle(Input::TimerFired, AT);
    assert_eq!(doing(&mut d), [Action::CheckLock]);
    d.handle(Input::MaySend(true), AT);
    assert_eq!(doing(&mut d)[0], send_of(1, &a), "identical");
    d.handle(Input::Replied(conflict()), AT);
    assert!(matches!(
        doing(&mut d)[..],
        [Action::ReadBack { version: 5, .. }]
    ));
    d.handle(Input::ReadBack(ReadBack::Trimmed), AT);
    assert!(
        matches!(&doing(&mut d)[..], [Action::Park { records, .. }] if records.len() == 1 && records[0].may_have_landed),
        "trimmed: cannot tell, so flagged as possibly landed"
    );
}

#[test]
fn a_refused_read_back_parks_as_possibly_landed_instead_of_reading_for_ever() {
    let mut d = drain();
    let a = guarded(1..=2);
    conflicted(&mut d, &a);
    d.handle(Input::ReadBack(ReadBack::Refused("HTTP 403".into())), AT);
    assert!(
        matches!(&doing(&mut d)[..], [Action::Park { records, .. }]
            if records.len() == 1 && records[0].may_have_landed && records[0].code == 2003),
        "a permanent refusal cannot improve: parked, flagged as possibly landed"
    );
}

#[test]
fn a_2003_at_or_below_the_expected_version_is_a_conflict_without_reading() {
    // The write would have made version 5; the aggregate is not past 4: it did not land.
    for current in [0, 3, 4] {
        let mut d = drain();
        let a = guarded(1..=2);
        sending(&mut d, &a);
        d.handle(
            Input::Replied(conflict_naming(
                "00000000-0000-0000-0000-000000000001",
                4,
                current,
            )),
            AT,
        );
        let parked = doing(&mut d);
        assert!(
            matches!(&parked[..], [Action::Park { records, .. }]
                if !records[0].may_have_landed && records[0].current_version == Some(current)),
            "{current}: {parked:?}"
        );
    }
}

#[test]
fn a_2003_naming_another_aggregate_or_version_is_not_trusted() {
    for reply in [
        conflict_naming("00000000-0000-0000-0000-000000000002", 4, 6),
        conflict_naming("00000000-0000-0000-0000-000000000001", 3, 6),
    ] {
        let mut d = drain();
        let a = guarded(1..=2);
        sending(&mut d, &a);
        d.handle(Input::Replied(reply), AT);
        let parked = doing(&mut d);
        assert!(
            matches!(&parked[..], [Action::Park { records, .. }]
                if records.len() == 1 && records[0].may_have_landed && records[0].code == 2003),
            "{parked:?}"
        );
    }
}

#[test]
fn a_rejected_conditional_batch_is_parked_whole_never_isolated() {
    let mut d = drain();
    let a = guarded(1..=3);
    sending(&mut d, &a);
    d.handle(
        Input::Replied(body(
            422,
            r#"{"outcome":"rejected","code":2022,"message":"schema"}"#,
        )),
        AT,
    );
    assert!(matches!(&doing(&mut d)[..], [Action::Park { records, .. }]
            if records.len() == 1 && records[0].first_seq == 1 && records[0].last_seq == 3 && records[0].code == 2022),);
}

#[test]
fn a_batch_breaking_the_guard_rules_is_parked_never_sent() {
    let whole = guarded(1..=3);
    let mut mixed = whole.clone();
    mixed[1].guard = None;
    let mut other = whole.clone();
    other[2].guard = Some(Guard {
        expected_version: 9,
        first_seq: 3,
        last_seq: 3,
    });
    let mut unguarded_first = whole.clone();
    unguarded_first[0].guard = None;
    for a in [
        mixed,
        other,
        unguarded_first,
        whole[..2].to_vec(), // part of its append (guard 1..=3)
        whole[1..].to_vec(),
    ] {
        let mut d = drain();
        d.start();
        d.handle(Input::Recounted(Ok(())), AT);
        d.handle(Input::Unpruned(Ok(vec![])), AT);
        d.handle(Input::PinRead(Ok(None)), AT);
        d.handle(Input::Cut(Ok(Some(a.clone()))), AT);
        d.handle(Input::Pinned(Ok(true)), AT);
        d.handle(Input::SessionOpened(Ok(session())), AT);
        d.handle(Input::MaySend(true), AT);
        let done = doing(&mut d);
        assert!(
            !done.iter().any(|x| matches!(x, Action::Send { .. })),
            "never encoded and sent: {done:?}"
        );
        assert!(
            done.iter().any(|x| matches!(x, Action::Park { records, .. }
                if records.len() == 1 && records[0].code == crate::engine::model::MISGUARDED && records[0].may_have_landed
                    && records[0].first_seq == a[0].client_seq)),
            "{done:?}"
        );
    }
}

#[test]
fn a_2002_short_of_a_conditional_batch_parks_it_whole_as_possibly_landed() {
    // A guarded write lands whole or not at all: a prefix is never settled and the rest re-pinned
    // (resent under the same guard), whether lastClientSeq stops inside it or is missing.
    for answer in [
        r#"{"outcome":"landed","duplicate":true,"code":2002,"lastClientSeq":2,"attemptedClientSeq":1}"#,
        r#"{"outcome":"landed","duplicate":true,"code":2002,"attemptedClientSeq":1}"#,
    ] {
        let mut d = drain();
        let a = guarded(1..=3);
        sending(&mut d, &a);
        d.handle(Input::Replied(body(200, answer)), AT);
        let done = doing(&mut d);
        assert!(
            matches!(&done[..], [Action::Park { records, batch: b }]
                if records.len() == 1 && *b == batch(&a) && records[0].first_seq == 1 && records[0].last_seq == 3
                    && records[0].may_have_landed),
            "{answer}: {done:?}"
        );
    }
    // All of it proven landed: settled.
    let mut d = drain();
    let a = guarded(1..=3);
    sending(&mut d, &a);
    d.handle(
        Input::Replied(body(
            200,
            r#"{"outcome":"landed","duplicate":true,"code":2002,"lastClientSeq":3,"attemptedClientSeq":1}"#,
        )),
        AT,
    );
    assert!(matches!(
        doing(&mut d)[0],
        Action::Settle { through: 3, .. }
    ));
}
