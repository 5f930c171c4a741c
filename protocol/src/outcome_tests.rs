//! The outcome table, the bodies and the hand-written parser against serde.

use super::*;

#[test]
fn the_table_of_shared_celeriant_md() {
    assert_eq!(classify(2002), Class::Landed);
    for code in [2013, 2007, 2008, 2009, 2010, 2011, 2012, 2029, 11000] {
        assert_eq!(classify(code), Class::Retry(RetryKind::Transient), "{code}");
    }
    for code in [
        2000, 2001, 2003, 2004, 2005, 2006, 2014, 2015, 2022, 9000, 9001, 9002,
    ] {
        assert_eq!(classify(code), Class::Rejected, "{code}");
    }
    for code in [2023, 10001, 10004, 10007] {
        assert_eq!(classify(code), Class::Retry(RetryKind::Operator), "{code}");
    }
}

#[test]
fn unknown_codes_are_never_rejected_or_landed() {
    for code in [0, 1, 1000, 2016, 2099, 3000, 12345, 99999, u32::MAX] {
        assert_eq!(classify(code), Class::Retry(RetryKind::Operator), "{code}");
    }
}

#[test]
fn unassigned_codes_in_the_gateway_space_are_operator_retries() {
    for code in [
        40002, 40018, 40099, 40104, 40309, 40401, 41000, 42000, 42101, 42909, 49999, 50000, 50100,
        59999,
    ] {
        assert!(!g::is_gateway_code(code), "{code}");
        assert_eq!(classify(code), Class::Retry(RetryKind::Operator), "{code}");
        let outcome = WriteOutcome::from_code(code, "x");
        assert_eq!(outcome.tag(), "retry", "{code}");
        assert_eq!(outcome.http_status(), 503, "{code}");
        assert!(
            matches!(&outcome, WriteOutcome::Retry(f) if f.retry_after_ms == Some(OPERATOR_RETRY_AFTER_MS)),
            "{code}"
        );
    }
    // Exhaustively: only the listed gateway codes escape the operator retry.
    for code in 40_000..60_000 {
        if !g::is_gateway_code(code) {
            assert_eq!(classify(code), Class::Retry(RetryKind::Operator), "{code}");
        }
    }
}

#[test]
fn every_gateway_code_travels_with_the_status_of_its_first_three_digits() {
    for code in g::ALL {
        let outcome = WriteOutcome::from_code(code, "x");
        assert_eq!(u32::from(outcome.http_status()), code / 100, "{code}");
        let expected = match code / 100 {
            408 | 421 | 429 | 500 | 503 | 507 => "retry",
            502 | 504 => "unknown",
            401 => "unauthorized",
            _ => "rejected",
        };
        assert_eq!(outcome.tag(), expected, "{code}");
    }
}

#[test]
fn gateway_codes_classify_by_their_status() {
    assert_eq!(classify(g::MALFORMED_JSON), Class::Rejected);
    assert_eq!(classify(g::BODY_TOO_LARGE), Class::Rejected);
    assert_eq!(
        classify(g::GATEWAY_BUSY),
        Class::Retry(RetryKind::Transient)
    );
    assert_eq!(
        classify(g::UPSTREAM_UNAVAILABLE),
        Class::Retry(RetryKind::Transient)
    );
    assert_eq!(classify(g::UPSTREAM_OUTCOME_UNKNOWN), Class::Unknown);
    assert_eq!(classify(g::GATEWAY_TIMEOUT), Class::Unknown);
    assert_eq!(classify(g::INTERNAL), Class::Unknown);
    for code in [
        g::SESSION_REQUIRED,
        g::SESSION_INVALID,
        g::SESSION_EXPIRED,
        g::DEVICE_SIGNATURE_INVALID,
        g::NONCE_OUT_OF_WINDOW,
        g::NONCE_REPLAYED,
        g::APP_TOKEN_REQUIRED,
        g::APP_TOKEN_INVALID,
        g::APP_TOKEN_EXPIRED,
        g::FAULTS_SECRET_REQUIRED,
    ] {
        assert_eq!(classify(code), Class::Unauthorized, "{code}");
    }
    assert_eq!(classify(g::DUPLICATE_HOST), Class::Rejected);
    assert_eq!(
        WriteOutcome::from_code(g::DUPLICATE_HOST, "x").http_status(),
        400
    );
    assert_eq!(
        WriteOutcome::from_code(g::FAULTS_SECRET_REQUIRED, "x").http_status(),
        401
    );
    for code in [
        g::CLIENT_ID_MISMATCH,
        g::AGGREGATE_TYPE_FORBIDDEN,
        g::AGGREGATE_FORBIDDEN,
        g::NOT_OWNER,
        g::MEMBERS_NOT_ALLOWED,
    ] {
        assert_eq!(classify(code), Class::Rejected, "{code}");
        assert_eq!(WriteOutcome::from_code(code, "x").http_status(), 403);
    }
    assert_eq!(
        classify(g::SESSION_RATE_LIMITED),
        Class::Retry(RetryKind::Transient)
    );
    assert_eq!(
        classify(g::HOST_NOT_ALLOWED),
        Class::Retry(RetryKind::Operator)
    );
}

#[test]
fn unauthorized_bodies_carry_their_server_time_and_parse_back() {
    let mut outcome = WriteOutcome::from_code(g::NONCE_OUT_OF_WINDOW, "nonce is stale");
    outcome.failure_mut().unwrap().server_time = Some(1_764_450_000_000);
    assert_eq!(outcome.http_status(), 401);
    let json = serde_json::to_string(&outcome).unwrap();
    assert_eq!(
        json,
        r#"{"outcome":"unauthorized","code":40111,"message":"nonce is stale","serverTime":1764450000000}"#
    );
    assert_eq!(WriteOutcome::parse(&json), Some(outcome));
    let session = WriteOutcome::from_code(g::SESSION_EXPIRED, "expired");
    assert_eq!(session.tag(), "unauthorized");
    assert_eq!(
        serde_json::to_string(&session).unwrap(),
        r#"{"outcome":"unauthorized","code":40102,"message":"expired"}"#
    );
    // An unauthorized body without a code is not a protocol body.
    assert_eq!(WriteOutcome::parse(r#"{"outcome":"unauthorized"}"#), None);
}

#[test]
fn parse_agrees_with_the_derived_deserializer() {
    let bodies = [
        WriteOutcome::landed(Some(4)),
        WriteOutcome::landed(None),
        WriteOutcome::duplicate(7, 5),
        WriteOutcome::from_code(2013, "in flight"),
        WriteOutcome::Retry(Failure {
            last_client_seq: Some(3),
            attempted_client_seq: Some(1),
            ..Failure::new(2013, "x")
        }),
        WriteOutcome::from_code(g::GATEWAY_TIMEOUT, "late"),
        WriteOutcome::from_code(2022, "schema"),
        WriteOutcome::from_code(g::SESSION_INVALID, "forged"),
        WriteOutcome::from_code(g::CLIENT_ID_MISMATCH, "not yours"),
        WriteOutcome::from_code(g::SESSION_RATE_LIMITED, "slow down"),
        WriteOutcome::conflict("stale", aggregate(), 3, 5),
        WriteOutcome::conflict("exists", aggregate(), 0, 1),
    ];
    for outcome in bodies {
        let json = serde_json::to_string(&outcome).unwrap();
        assert_eq!(WriteOutcome::parse(&json), Some(outcome.clone()), "{json}");
        assert_eq!(
            serde_json::from_str::<WriteOutcome>(&json).unwrap(),
            outcome
        );
    }
    assert_eq!(
        WriteOutcome::parse(r#"{"outcome":"retry","message":"no code"}"#),
        None
    );
    assert_eq!(WriteOutcome::parse(r#"{"outcome":"maybe","code":1}"#), None);
    assert_eq!(WriteOutcome::parse("<html>"), None);
    let newer = r#"{"outcome":"landed","duplicate":false,"aggregateVersion":2,"shard":7}"#;
    assert_eq!(
        WriteOutcome::parse(newer),
        Some(WriteOutcome::landed(Some(2))),
        "lenient"
    );
}

/// The serde reading `parse` must agree with: every field, flat, unknown ones ignored.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct FlatOutcome {
    outcome: String,
    #[serde(default)]
    duplicate: bool,
    aggregate_version: Option<u64>,
    code: Option<u32>,
    message: Option<String>,
    retry_after_ms: Option<u64>,
    last_client_seq: Option<u64>,
    attempted_client_seq: Option<u64>,
    server_time: Option<u64>,
    aggregate_type_id: Option<Uuid>,
    aggregate_id: Option<Uuid>,
    expected_version: Option<u64>,
    current_version: Option<u64>,
}

fn reference(json: &str) -> Option<WriteOutcome> {
    // Objects only: serde would also read a positional array, which no gateway sends.
    if !json.trim_start().starts_with('{') {
        return None;
    }
    let f: FlatOutcome = serde_json::from_str(json).ok()?;
    let failure = || {
        Some(Failure {
            code: f.code?,
            message: f.message.clone().unwrap_or_default(),
            retry_after_ms: f.retry_after_ms,
            last_client_seq: f.last_client_seq,
            attempted_client_seq: f.attempted_client_seq,
            server_time: f.server_time,
            conflict: match (
                f.aggregate_type_id,
                f.aggregate_id,
                f.expected_version,
                f.current_version,
            ) {
                (Some(t), Some(i), Some(e), Some(c)) => Some(Box::new(GuardConflict {
                    aggregate_type_id: t,
                    aggregate_id: i,
                    expected_version: e,
                    current_version: c,
                })),
                _ => None,
            },
        })
    };
    Some(match f.outcome.as_str() {
        "landed" => WriteOutcome::Landed(Landed {
            duplicate: f.duplicate,
            aggregate_version: f.aggregate_version,
            code: f.code,
            last_client_seq: f.last_client_seq,
            attempted_client_seq: f.attempted_client_seq,
        }),
        "retry" => WriteOutcome::Retry(failure()?),
        "unknown" => WriteOutcome::Unknown(failure()?),
        "unauthorized" => WriteOutcome::Unauthorized(failure()?),
        "rejected" => WriteOutcome::Rejected(failure()?),
        _ => return None,
    })
}

#[test]
fn parse_agrees_with_serde_on_generated_bodies() {
    let names = [
        "outcome",
        "duplicate",
        "aggregateVersion",
        "code",
        "message",
        "retryAfterMs",
        "lastClientSeq",
        "attemptedClientSeq",
        "serverTime",
        "aggregateTypeId",
        "aggregateId",
        "expectedVersion",
        "currentVersion",
        "extra",
    ];
    let values = [
        "\"landed\"",
        "\"retry\"",
        "\"unknown\"",
        "\"rejected\"",
        "\"unauthorized\"",
        "\"maybe\"",
        "true",
        "false",
        "null",
        "0",
        "2002",
        "4294967296",
        "9007199254740993",
        "-1",
        "-0",
        "1.0",
        "1e2",
        "\"text \\u00e9\"",
        "[1,{\"a\":null}]",
        "{}",
        "\"00000000-0000-0000-0000-00000000002a\"",
        "\"0000000000000000000000000000002A\"",
        "\"not-a-uuid\"",
    ];
    let mut seed = 7u64;
    let mut next = move || {
        seed ^= seed << 13;
        seed ^= seed >> 7;
        seed ^= seed << 17;
        seed
    };
    let mut parsed = 0;
    for _ in 0..100_000 {
        let n = next() % 7;
        let body: Vec<String> = (0..n)
            .map(|i| {
                let name = if i == 0 && next() % 4 != 0 {
                    "outcome"
                } else {
                    names[(next() % names.len() as u64) as usize]
                };
                let value = values[(next() % values.len() as u64) as usize];
                format!("\"{name}\":{value}")
            })
            .collect();
        let json = format!("{{{}}}", body.join(","));
        let ours = WriteOutcome::parse(&json);
        assert_eq!(ours, reference(&json), "{json}");
        parsed += usize::from(ours.is_some());
    }
    assert!(parsed > 500, "{parsed}");
}

#[test]
fn bodies_match_the_documented_examples() {
    let landed = serde_json::to_string(&WriteOutcome::landed(Some(4))).unwrap();
    assert_eq!(
        landed,
        r#"{"outcome":"landed","duplicate":false,"aggregateVersion":4}"#
    );
    let dup = serde_json::to_string(&WriteOutcome::duplicate(7, 5)).unwrap();
    assert_eq!(
        dup,
        r#"{"outcome":"landed","duplicate":true,"code":2002,"lastClientSeq":7,"attemptedClientSeq":5}"#
    );
    let retry = WriteOutcome::from_code(2013, "in flight");
    assert_eq!(retry.http_status(), 503);
    assert_eq!(
        serde_json::to_string(&retry).unwrap(),
        r#"{"outcome":"retry","code":2013,"message":"in flight","retryAfterMs":1000}"#
    );
    assert_eq!(WriteOutcome::from_code(2005, "x").http_status(), 422);
    assert_eq!(
        WriteOutcome::from_code(g::BODY_TOO_LARGE, "x").http_status(),
        413
    );
    assert_eq!(
        WriteOutcome::from_code(g::GATEWAY_BUSY, "x").http_status(),
        429
    );
    assert_eq!(
        WriteOutcome::from_code(g::GATEWAY_TIMEOUT, "x").http_status(),
        504
    );
    assert_eq!(
        WriteOutcome::from_code(g::UPSTREAM_OUTCOME_UNKNOWN, "x").http_status(),
        502
    );
}

fn aggregate() -> AggregateRef {
    AggregateRef {
        type_id: Uuid::from_u128(2),
        id: Uuid::from_u128(3),
    }
}

#[test]
fn a_conflict_names_its_aggregate_and_both_versions() {
    let outcome = WriteOutcome::conflict("stale guard", aggregate(), 3, 5);
    assert_eq!(outcome.tag(), "rejected");
    assert_eq!(outcome.http_status(), 422);
    assert_eq!(outcome.code(), Some(2003));
    let json = serde_json::to_string(&outcome).unwrap();
    assert_eq!(
        json,
        concat!(
            r#"{"outcome":"rejected","code":2003,"message":"stale guard","#,
            r#""aggregateTypeId":"00000000-0000-0000-0000-000000000002","#,
            r#""aggregateId":"00000000-0000-0000-0000-000000000003","#,
            r#""expectedVersion":3,"currentVersion":5}"#
        )
    );
    let parsed = WriteOutcome::parse(&json).unwrap();
    assert_eq!(parsed, outcome);
    let conflict = parsed.failure().unwrap().conflict.as_deref().unwrap();
    assert_eq!(conflict.aggregate(), aggregate());
    assert_eq!(
        (conflict.expected_version, conflict.current_version),
        (3, 5)
    );
    // A 2003 without the details (an older gateway), or with only some, still parses; it names
    // no aggregate.
    for json in [
        r#"{"outcome":"rejected","code":2003,"message":"x"}"#,
        r#"{"outcome":"rejected","code":2003,"message":"x","currentVersion":4}"#,
    ] {
        let bare = WriteOutcome::parse(json).unwrap();
        assert_eq!(bare.failure().unwrap().conflict, None, "{json}");
    }
    // A malformed aggregate id is not a protocol body (as any known field of the wrong type).
    assert_eq!(
        WriteOutcome::parse(r#"{"outcome":"rejected","code":2003,"aggregateId":"nope"}"#),
        None
    );
}

#[test]
fn every_outcome_stays_small() {
    // `ApiError` wraps one and travels in `Result`s everywhere in the gateway.
    assert!(
        std::mem::size_of::<WriteOutcome>() <= 128,
        "{}",
        std::mem::size_of::<WriteOutcome>()
    );
}
