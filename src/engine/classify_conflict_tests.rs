//! The 2003-with-version shape in the classifier: carried on `Outcome::Rejected` so the drain can
//! park a conditional write with the aggregate's current version; trusted only on a 2003
//! with a rejecting status; on a conditional batch it asks for a read-back (never a conflict at
//! once, never an isolation), on an unconditional one it is a rejection like any other.

use super::*;
use celeriant_sync_protocol::AggregateRef;
use uuid::Uuid;

const TYPE: &str = "0b6e7f2a-1c3d-4e5f-8a9b-0c1d2e3f4a5b";
const ID: &str = "7d9c2b1a-3e4f-4a5b-9c8d-1e2f3a4b5c6d";

fn http(status: u16, body: &str) -> Reply {
    Reply::Http {
        status,
        retry_after: None,
        body: Ok(body.into()),
    }
}

fn body(code: u32, expected: u64, current: u64) -> String {
    format!(
        r#"{{"outcome":"rejected","code":{code},"message":"stale","aggregateTypeId":"{TYPE}","aggregateId":"{ID}","expectedVersion":{expected},"currentVersion":{current}}}"#
    )
}

fn conflict(expected: u64, current: u64) -> GuardConflict {
    GuardConflict {
        aggregate_type_id: Uuid::parse_str(TYPE).unwrap(),
        aggregate_id: Uuid::parse_str(ID).unwrap(),
        expected_version: expected,
        current_version: current,
    }
}

#[test]
fn a_2003_carries_its_aggregate_and_current_version() {
    let outcome = classify(&http(422, &body(2003, 1, 4)));
    assert_eq!(
        outcome,
        Outcome::Rejected {
            code: 2003,
            message: "stale".into(),
            conflict: Some(conflict(1, 4)),
        }
    );
    let c = outcome.conflict().unwrap();
    assert_eq!(
        c.aggregate(),
        AggregateRef {
            type_id: Uuid::parse_str(TYPE).unwrap(),
            id: Uuid::parse_str(ID).unwrap(),
        }
    );
    assert_eq!((c.expected_version, c.current_version), (1, 4));
    // "Only if it does not exist yet", and the aggregate exists.
    let outcome = classify(&http(422, &body(2003, 0, 1)));
    assert_eq!(outcome.conflict(), Some(&conflict(0, 1)));
}

#[test]
fn a_2003_without_the_fields_is_a_plain_rejection() {
    for json in [
        r#"{"outcome":"rejected","code":2003,"message":"stale"}"#.to_owned(),
        // Only some of the fields: no conflict (as serde's flattened reading).
        r#"{"outcome":"rejected","code":2003,"message":"stale","currentVersion":4}"#.to_owned(),
    ] {
        let outcome = classify(&http(422, &json));
        assert!(
            matches!(
                &outcome,
                Outcome::Rejected {
                    code: 2003,
                    conflict: None,
                    ..
                }
            ),
            "{json}: {outcome:?}"
        );
        assert_eq!(outcome.conflict(), None);
    }
}

#[test]
fn conflict_fields_count_only_on_a_2003_that_the_status_agrees_with() {
    // On another code they are ignored.
    let outcome = classify(&http(422, &body(2022, 1, 4)));
    assert!(
        matches!(
            &outcome,
            Outcome::Rejected {
                code: 2022,
                conflict: None,
                ..
            }
        ),
        "{outcome:?}"
    );
    // A rejection that contradicts its status proves nothing: unknown, no conflict.
    for status in [200, 502, 503] {
        let outcome = classify(&http(status, &body(2003, 1, 4)));
        assert!(
            matches!(
                outcome,
                Outcome::Unknown {
                    code: Some(2003),
                    ..
                }
            ),
            "{status}: {outcome:?}"
        );
        assert_eq!(outcome.conflict(), None);
    }
    // A malformed aggregate id makes it no protocol body at all.
    let bad = body(2003, 1, 4).replace(ID, "not-a-uuid");
    assert!(matches!(
        classify(&http(422, &bad)),
        Outcome::Retry { code: None, .. }
    ));
}

#[test]
fn decide_verifies_a_2003_on_a_conditional_batch_and_never_isolates_one() {
    let aggregate = AggregateRef {
        type_id: Uuid::nil(),
        id: Uuid::nil(),
    };
    let batch = |count: u32| Batch {
        aggregate,
        first_seq: 5,
        last_seq: 4 + u64::from(count),
        count,
        atomic: None,
    };
    let outcome = classify(&http(422, &body(2003, 1, 4)));
    let plain = Outcome::Rejected {
        code: 2003,
        message: "stale".into(),
        conflict: None,
    };
    // Unconditional: any rejection.
    for count in [1, 3] {
        let with = decide(&batch(count), false, outcome.clone(), 0, |_| 0);
        let without = decide(&batch(count), false, plain.clone(), 0, |_| 0);
        assert_eq!(with, without, "{count}");
    }
    assert!(matches!(
        decide(&batch(1), false, outcome.clone(), 0, |_| 0),
        Action::Park { code: 2003, .. }
    ));
    // Conditional: read back first, with the version the body named, whatever the count.
    for count in [1, 3] {
        assert!(
            matches!(
                decide(&batch(count), true, outcome.clone(), 0, |_| 0),
                Action::Verify {
                    current_version: Some(4),
                    ..
                }
            ),
            "{count}"
        );
        assert!(matches!(
            decide(&batch(count), true, plain.clone(), 0, |_| 0),
            Action::Verify {
                current_version: None,
                ..
            }
        ));
        // Another rejection parks the whole conditional batch: never re-cut.
        let schema = Outcome::Rejected {
            code: 2022,
            message: "schema".into(),
            conflict: None,
        };
        assert!(matches!(
            decide(&batch(count), true, schema, 0, |_| 0),
            Action::Park { code: 2022, .. }
        ));
    }
}
