//! Unit tests of the classifier: what each reply means, and what the drain does about it.

use super::*;
use uuid::Uuid;

fn http(status: u16, body: &str) -> Reply {
    Reply::Http {
        status,
        retry_after: None,
        body: Ok(body.into()),
    }
}

fn batch(first: u64, last: u64, count: u32) -> Batch {
    let aggregate = celeriant_sync_protocol::AggregateRef {
        type_id: Uuid::nil(),
        id: Uuid::nil(),
    };
    Batch::plain(aggregate, first, last, count)
}

#[test]
fn protocol_bodies() {
    assert_eq!(
        classify(&http(
            200,
            r#"{"outcome":"landed","duplicate":false,"aggregateVersion":3}"#
        )),
        Outcome::Landed {
            duplicate: false,
            last_client_seq: None
        }
    );
    assert_eq!(
        classify(&http(
            200,
            r#"{"outcome":"landed","duplicate":true,"code":2002,"lastClientSeq":7,"attemptedClientSeq":5}"#
        )),
        Outcome::Landed {
            duplicate: true,
            last_client_seq: Some(7)
        }
    );
    let retry = Reply::Http {
        status: 503,
        retry_after: Some("3".into()),
        body: Ok(r#"{"outcome":"retry","code":2013,"message":"m"}"#.into()),
    };
    assert_eq!(
        classify(&retry),
        Outcome::Retry {
            code: Some(2013),
            message: "m".into(),
            retry_after_ms: Some(3000)
        }
    );
    assert_eq!(
        classify(&http(
            422,
            r#"{"outcome":"rejected","code":2022,"message":"schema"}"#
        )),
        Outcome::Rejected {
            code: 2022,
            message: "schema".into(),
            conflict: None,
        }
    );
    assert!(matches!(
        classify(&http(
            504,
            r#"{"outcome":"unknown","code":50400,"message":"t"}"#
        )),
        Outcome::Unknown {
            code: Some(50400),
            ..
        }
    ));
}

#[test]
fn nothing_unproven_is_landed_or_rejected() {
    for reply in [
        http(200, ""),
        http(200, "<html>ok</html>"),
        http(500, "Internal Server Error"),
        http(502, ""),
        http(504, "Gateway Timeout"),
        http(500, r#"{"outcome":"landed","duplicate":false}"#),
        http(502, r#"{"outcome":"rejected","code":2022,"message":"x"}"#),
        Reply::Http {
            status: 200,
            retry_after: None,
            body: Err("reset".into()),
        },
        Reply::network("TypeError: Failed to fetch"),
        Reply::timeout(),
    ] {
        assert!(
            matches!(classify(&reply), Outcome::Unknown { .. }),
            "{reply:?}"
        );
    }
    for reply in [
        http(401, ""),
        http(403, "forbidden"),
        http(404, "nope"),
        http(301, ""),
    ] {
        assert!(
            matches!(classify(&reply), Outcome::Retry { .. }),
            "{reply:?}"
        );
    }
    assert!(matches!(
        classify(&Reply::Http {
            status: 429,
            retry_after: Some("2".into()),
            body: Ok(String::new())
        }),
        Outcome::Retry {
            retry_after_ms: Some(2000),
            ..
        }
    ));
    assert!(matches!(
        classify(&http(413, "too big")),
        Outcome::Rejected { code: 41300, .. }
    ));
}

#[test]
fn decisions() {
    let d = |b: &Batch, o: Outcome| decide(b, false, o, 0, |ra| ra.unwrap_or(100));
    let b = batch(5, 10, 6);
    let landed = |dup, last| Outcome::Landed {
        duplicate: dup,
        last_client_seq: last,
    };
    assert_eq!(
        d(&b, landed(false, None)),
        Action::Settle {
            through: 10,
            duplicate: false
        }
    );
    assert_eq!(
        d(&b, landed(true, Some(10))),
        Action::Settle {
            through: 10,
            duplicate: true
        }
    );
    assert_eq!(
        d(&b, landed(true, Some(12))),
        Action::Settle {
            through: 10,
            duplicate: true
        }
    );
    assert_eq!(
        d(&b, landed(true, Some(7))),
        Action::Settle {
            through: 7,
            duplicate: true
        }
    );
    assert_eq!(
        d(&b, landed(true, Some(5))),
        Action::Settle {
            through: 5,
            duplicate: true
        }
    );
    assert_eq!(
        d(&b, landed(true, None)),
        Action::Settle {
            through: 5,
            duplicate: true
        }
    );
    assert!(matches!(
        d(&b, landed(true, Some(4))),
        Action::Park {
            code: PROTOCOL_VIOLATION,
            ..
        }
    ));
    let retry = Outcome::Retry {
        code: Some(2013),
        message: "m".into(),
        retry_after_ms: Some(900),
    };
    assert!(matches!(
        d(&b, retry),
        Action::Resend {
            delay_ms: 900,
            network: false,
            ..
        }
    ));
    let net = classify(&Reply::network("Failed to fetch"));
    assert!(matches!(
        d(&b, net),
        Action::Resend {
            delay_ms: 100,
            network: true,
            ..
        }
    ));
    assert!(matches!(
        d(&b, classify(&Reply::timeout())),
        Action::Resend { network: false, .. }
    ));
    // A message that merely reads like a network error is not one.
    assert!(matches!(
        d(
            &b,
            Outcome::Unknown {
                code: None,
                message: "network error: made up".into(),
                cause: None,
            }
        ),
        Action::Resend { network: false, .. }
    ));
    let rejected = Outcome::Rejected {
        code: 2022,
        message: "bad".into(),
        conflict: None,
    };
    assert!(matches!(
        d(&b, rejected.clone()),
        Action::Isolate { code: 2022, .. }
    ));
    assert!(matches!(
        d(&batch(5, 5, 1), rejected),
        Action::Park { code: 2022, .. }
    ));
    // A refused session is never a rejection of the events.
    let unauthorized = classify(&http(
        401,
        r#"{"outcome":"unauthorized","code":40102,"message":"expired"}"#,
    ));
    assert_eq!(
        d(&b, unauthorized.clone()),
        Action::Reauthenticate {
            delay_ms: 0,
            code: 40102,
            message: "expired".into()
        },
        "renewed at once the first time"
    );
    assert!(matches!(
        decide(&b, false, unauthorized, 3, |_| 700),
        Action::Reauthenticate { delay_ms: 700, .. }
    ));
    assert!(matches!(
        classify(&http(
            401,
            r#"{"outcome":"unauthorized","code":40100,"message":"x"}"#
        )),
        Outcome::Unauthorized { code: 40100, .. }
    ));
    assert!(
        matches!(
            classify(&http(
                200,
                r#"{"outcome":"unauthorized","code":40100,"message":"x"}"#
            )),
            Outcome::Unknown { .. }
        ),
        "an unauthorized body on another status proves nothing"
    );
}
