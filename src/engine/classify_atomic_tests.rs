//! [`decide`] on an atomic write: it lands whole (a fresh answer or any 2002 that does not
//! contradict itself settles every leg), is never re-cut (every rejection parks it whole), a
//! 2003 with a guarded leg is verified first, and 9001 names the cluster's routing rule.

use super::*;
use crate::engine::model::{Leg, Legs};
use celeriant_sync_protocol::AggregateRef;
use uuid::Uuid;

fn write() -> Batch {
    let agg = |n| AggregateRef {
        type_id: Uuid::nil(),
        id: Uuid::from_u128(n),
    };
    let legs: Legs = [
        Leg {
            aggregate: agg(1),
            first_seq: 7,
            last_seq: 8,
        },
        Leg {
            aggregate: agg(2),
            first_seq: 3,
            last_seq: 5,
        },
    ]
    .to_vec()
    .into();
    Batch::of_atomic(&legs).unwrap()
}

fn landed(duplicate: bool, last_client_seq: Option<u64>) -> Outcome {
    Outcome::Landed {
        duplicate,
        last_client_seq,
    }
}

fn rejected(code: u32) -> Outcome {
    Outcome::Rejected {
        code,
        message: "no".into(),
        conflict: None,
    }
}

#[test]
fn any_landed_answer_settles_the_whole_write() {
    let w = write();
    let whole = |duplicate| Action::Settle {
        through: 8,
        duplicate,
    };
    assert_eq!(
        decide(&w, false, landed(false, None), 0, |_| 0),
        whole(false)
    );
    // A 2002 names no aggregate: whichever leg it is about, only this pinned write can have put
    // that sequence there, so all of it landed — the aggregate it is about holds through its
    // leg's last (5 is the second leg's, below the first leg's span).
    for last in [None, Some(5), Some(8), Some(40)] {
        assert_eq!(
            decide(&w, false, landed(true, last), 0, |_| 0),
            whole(true),
            "{last:?}"
        );
        assert_eq!(decide(&w, true, landed(true, last), 0, |_| 0), whole(true));
    }
    // Short of every leg's last (3 could only be the second leg's, which would hold 3 without
    // 5): it contradicts an atomic landing, never settled.
    for last in [2, 3, 4] {
        assert!(
            matches!(
                decide(&w, false, landed(true, Some(last)), 0, |_| 0),
                Action::Park {
                    code: PROTOCOL_VIOLATION,
                    ..
                }
            ),
            "{last}"
        );
    }
}

#[test]
fn a_rejection_parks_it_whole_and_a_conflict_is_verified_first() {
    let w = write();
    assert!(matches!(
        decide(&w, false, rejected(2022), 0, |_| 0),
        Action::Park { code: 2022, .. }
    ));
    assert!(matches!(
        decide(&w, true, rejected(2022), 0, |_| 0),
        Action::Park { code: 2022, .. }
    ));
    assert!(matches!(
        decide(&w, true, rejected(2003), 0, |_| 0),
        Action::Verify { .. }
    ));
    // Without a guarded leg a 2003 cannot be about it: a rejection, parked whole.
    assert!(matches!(
        decide(&w, false, rejected(2003), 0, |_| 0),
        Action::Park { code: 2003, .. }
    ));
    match decide(&w, false, rejected(9001), 0, |_| 0) {
        Action::Park {
            code: 9001,
            message,
        } => {
            assert!(message.contains("routing_id % num_shards"), "{message}");
            assert!(message.contains("co-locate"), "{message}");
        }
        other => panic!("{other:?}"),
    }
}

#[test]
fn failures_keep_the_identical_write() {
    let w = write();
    let retry = Outcome::Retry {
        code: Some(2013),
        message: "in flight".into(),
        retry_after_ms: Some(500),
    };
    assert!(matches!(
        decide(&w, true, retry, 0, |after| after.unwrap_or(1)),
        Action::Resend { delay_ms: 500, .. }
    ));
    let lost = Outcome::Unknown {
        code: None,
        message: "reset".into(),
        cause: Some(NoAnswer::Network),
    };
    assert!(matches!(
        decide(&w, false, lost, 0, |_| 9),
        Action::Resend {
            delay_ms: 9,
            network: true,
            ..
        }
    ));
}
