//! The Celeriant backend against a fake node speaking the real wire protocol.
//!
//! These tests pin what the gateway tells a browser for each thing Celeriant (or the network) can
//! do to a write: the `BackendError` or `WriteAck`, and the protocol outcome the HTTP layer derives
//! from it with `BackendError::into_outcome`. They also check what actually went over the wire
//! (client id, key, idempotency flag, events, API key), so the conversion is tested end to end.

mod support;

use std::ops::RangeInclusive;
use std::time::{Duration, Instant};

use celeriant_gateway::backend::celeriant::{CeleriantBackend, CeleriantOptions};
use celeriant_gateway::backend::{
    AggregateCommand, AggregateKey, Backend, BackendError, ReadPage, ReadQuery, WriteAck,
    WriteCommand,
};
use celeriant_msg::process_client_requests::ClientRequest;
use celeriant_sync_protocol::codes::{celeriant as c, gateway as g};
use celeriant_sync_protocol::outcome::{
    OPERATOR_RETRY_AFTER_MS, TRANSIENT_RETRY_AFTER_MS, WriteOutcome,
};
use celeriant_sync_protocol::{AggregateRef, Event};
use support::fake_celeriant::{FakeCeleriant, Reply, dead_address};
use uuid::Uuid;

const API_KEY: &str = "Z2F0ZXdheS10ZXN0LWtleS0wMTIzNDU2Nzg5YWJjZGU=";
const ORG: u128 = 0x0a;
const TYPE: u128 = 0x0b;
const CLIENT: u128 = 0xc1;

fn key(id: u128) -> AggregateKey {
    AggregateKey {
        org: Uuid::from_u128(ORG),
        aggregate: AggregateRef {
            type_id: Uuid::from_u128(TYPE),
            id: Uuid::from_u128(id),
        },
    }
}

fn event(seq: u64) -> Event {
    Event {
        client_seq: seq,
        event_id: Some(Uuid::from_u128(0xe000 + u128::from(seq))),
        timestamp: 1_700_000_000_000 + seq,
        event_type: 3,
        minor: 1,
        data: format!("payload {seq}").into_bytes(),
        iv: (seq % 2 == 1).then(|| vec![seq as u8; 12]),
    }
}

/// A write as the HTTP path builds it: unconditional, idempotent, may create.
fn command(id: u128, seqs: RangeInclusive<u64>) -> WriteCommand {
    WriteCommand {
        principal: None,
        policy: None,
        client_id: Uuid::from_u128(CLIENT),
        writes: vec![AggregateCommand {
            key: key(id),
            allow_create: true,
            expected_version: None,
            enforce_client_idempotency: true,
            events: seqs.map(event).collect(),
        }],
    }
}

async fn backend_for(addresses: Vec<String>, request_timeout: Duration) -> CeleriantBackend {
    CeleriantBackend::connect(CeleriantOptions {
        addresses,
        api_key: Some(API_KEY.into()),
        request_timeout,
    })
    .await
    .unwrap()
}

async fn backend(fake: &FakeCeleriant) -> CeleriantBackend {
    backend_for(vec![fake.address()], Duration::from_secs(5)).await
}

/// Sends one write that the fake answers with `reply`; checks it went out exactly once.
async fn failed_write(reply: Reply) -> BackendError {
    let fake = FakeCeleriant::with_api_key(API_KEY);
    fake.script([reply]);
    let err = backend(&fake)
        .await
        .write(command(1, 5..=6))
        .await
        .expect_err("the fake refused the write");
    assert_eq!(fake.writes().len(), 1, "sent exactly once, never resent");
    err
}

/// The outcome's tag, code and retry delay.
fn summary(outcome: &WriteOutcome) -> (&'static str, Option<u32>, Option<u64>) {
    let delay = match outcome {
        WriteOutcome::Retry(f) => f.retry_after_ms,
        _ => None,
    };
    (outcome.tag(), outcome.code(), delay)
}

#[tokio::test]
async fn a_write_is_sent_as_the_command_says_and_acknowledged_with_its_version() {
    let fake = FakeCeleriant::with_api_key(API_KEY);
    let backend = backend(&fake).await;

    let ack = backend.write(command(0x0c, 1..=2)).await.unwrap();
    assert_eq!(
        ack,
        WriteAck {
            aggregate_version: Some(1)
        }
    );
    assert_eq!(
        WriteOutcome::landed(ack.aggregate_version),
        WriteOutcome::landed(Some(1))
    );
    let ack = backend.write(command(0x0c, 3..=3)).await.unwrap();
    assert_eq!(
        ack,
        WriteAck {
            aggregate_version: Some(2)
        }
    );

    let writes = fake.writes();
    assert_eq!(writes.len(), 2);
    let request = &writes[0];
    assert_eq!(request.client_id, CLIENT);
    assert_eq!(request.user_id, None);
    assert!(request.correlation_id.is_some(), "the fake echoed it");
    assert_ne!(request.correlation_id, writes[1].correlation_id);
    assert_eq!(request.writes.len(), 1);
    let (sent_key, write) = request.writes.iter().next().unwrap();
    assert_eq!(
        (
            sent_key.org_id,
            sent_key.aggregate_type_id,
            sent_key.aggregate_id
        ),
        (ORG, TYPE, 0x0c)
    );
    assert!(write.enforce_client_idempotency);
    assert_eq!(write.expected_version, None);
    assert!(write.allow_create);
    assert_eq!(write.events.len(), 2);
    for (sent, seq) in write.events.iter().zip(1..) {
        let want = event(seq);
        assert_eq!(sent.client_seq, seq);
        assert_eq!(sent.event_id, want.event_id.map(|id| id.as_u128()));
        assert_eq!(sent.event_timestamp, want.timestamp);
        assert_eq!(sent.event_type_major, want.event_type);
        assert_eq!(sent.event_type_minor, want.minor);
        assert_eq!(*sent.event_value, want.data);
        assert_eq!(sent.iv.map(|iv| iv.to_vec()), want.iv);
    }

    let identifies = fake.identifies();
    assert!(!identifies.is_empty());
    for identify in identifies {
        assert_eq!(identify.api_key.as_deref(), Some(API_KEY));
        assert_eq!(
            identify.public_key, None,
            "the gateway never uses a keypair"
        );
        assert_eq!(identify.signature, None);
    }
}

#[tokio::test]
async fn a_2002_is_a_landed_duplicate_with_its_sequences() {
    let err = failed_write(Reply::sequence_error(c::CLIENT_IDEMPOTENCY_VIOLATION, 7, 5)).await;
    assert!(
        matches!(
            err,
            BackendError::Code {
                code: 2002,
                last_client_seq: Some(7),
                attempted_client_seq: Some(5),
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(err.into_outcome(), WriteOutcome::duplicate(7, 5));
}

#[tokio::test]
async fn a_2013_is_a_retry_that_keeps_its_sequences() {
    let err = failed_write(Reply::sequence_error(c::INFLIGHT_DUPLICATE, 6, 5)).await;
    assert!(
        matches!(
            err,
            BackendError::Code {
                code: 2013,
                last_client_seq: Some(6),
                attempted_client_seq: Some(5),
                ..
            }
        ),
        "{err:?}"
    );
    match err.into_outcome() {
        WriteOutcome::Retry(f) => {
            assert_eq!(f.code, 2013);
            assert_eq!(
                (f.last_client_seq, f.attempted_client_seq),
                (Some(6), Some(5))
            );
            assert_eq!(f.retry_after_ms, Some(TRANSIENT_RETRY_AFTER_MS));
        }
        other => panic!("2013 must be retried: {other:?}"),
    }
}

#[tokio::test]
async fn busy_answers_are_transient_retries() {
    // The client folds 2012 and 11000 into one `ServerBusy`, so both come back as 11000.
    for code in [c::REPLICATION_BACKPRESSURE, c::SERVER_BUSY] {
        let err = failed_write(Reply::error(code, "busy")).await;
        assert!(
            matches!(
                err,
                BackendError::Code {
                    code: c::SERVER_BUSY,
                    ..
                }
            ),
            "{code}: {err:?}"
        );
        assert_eq!(
            summary(&err.into_outcome()),
            (
                "retry",
                Some(c::SERVER_BUSY),
                Some(TRANSIENT_RETRY_AFTER_MS)
            ),
            "{code}"
        );
    }
}

#[tokio::test]
async fn a_replication_error_is_a_transient_retry() {
    let err = failed_write(Reply::error(c::REPLICATION_ERROR, "replication failed")).await;
    assert!(
        matches!(err, BackendError::Code { code: 2007, .. }),
        "{err:?}"
    );
    assert_eq!(
        summary(&err.into_outcome()),
        ("retry", Some(2007), Some(TRANSIENT_RETRY_AFTER_MS))
    );
}

#[tokio::test]
async fn a_missing_aggregate_without_allow_create_is_rejected() {
    let err = failed_write(Reply::error(c::AGGREGATE_NOT_EXISTS, "no such aggregate")).await;
    assert!(
        matches!(err, BackendError::Code { code: 2005, .. }),
        "{err:?}"
    );
    assert_eq!(summary(&err.into_outcome()), ("rejected", Some(2005), None));
}

#[tokio::test]
async fn the_fake_store_answers_2005_on_its_own_too() {
    let fake = FakeCeleriant::start();
    let mut write = command(9, 1..=1);
    write.writes[0].allow_create = false;
    let err = backend(&fake).await.write(write).await.unwrap_err();
    assert_eq!(summary(&err.into_outcome()), ("rejected", Some(2005), None));
}

#[tokio::test]
async fn a_connection_closed_after_the_request_is_an_unknown_outcome() {
    let err = failed_write(Reply::Close).await;
    assert!(
        matches!(&err, BackendError::OutcomeUnknown(m) if m.contains("Connection lost after the request was sent")),
        "{err:?}"
    );
    assert_eq!(
        summary(&err.into_outcome()),
        ("unknown", Some(g::UPSTREAM_OUTCOME_UNKNOWN), None)
    );
}

#[tokio::test]
async fn a_reply_slower_than_the_request_timeout_is_an_unknown_outcome() {
    let fake = FakeCeleriant::start();
    fake.script([Reply::slow(Duration::from_secs(2), Reply::Written(1))]);
    let backend = backend_for(vec![fake.address()], Duration::from_millis(300)).await;
    let started = Instant::now();
    let err = backend.write(command(1, 1..=1)).await.unwrap_err();
    assert!(
        started.elapsed() < Duration::from_millis(1500),
        "{:?}",
        started.elapsed()
    );
    assert!(
        matches!(&err, BackendError::OutcomeUnknown(m) if m.contains("Request timeout")),
        "{err:?}"
    );
    assert_eq!(
        summary(&err.into_outcome()),
        ("unknown", Some(g::UPSTREAM_OUTCOME_UNKNOWN), None)
    );
    assert_eq!(fake.writes().len(), 1, "the write went out once");
}

#[tokio::test]
async fn nothing_listening_is_unavailable_and_retried() {
    let backend = backend_for(vec![dead_address()], Duration::from_secs(2)).await;
    let err = backend.write(command(1, 1..=1)).await.unwrap_err();
    assert!(matches!(err, BackendError::Unavailable(_)), "{err:?}");
    assert_eq!(
        summary(&err.into_outcome()),
        (
            "retry",
            Some(g::UPSTREAM_UNAVAILABLE),
            Some(TRANSIENT_RETRY_AFTER_MS)
        )
    );
    let health = backend.health().await.unwrap_err();
    assert!(matches!(health, BackendError::Unavailable(_)), "{health:?}");
}

#[tokio::test]
async fn a_dead_first_seed_fails_over_to_the_next() {
    let fake = FakeCeleriant::start();
    let backend = backend_for(vec![dead_address(), fake.address()], Duration::from_secs(2)).await;
    let ack = backend.write(command(1, 1..=1)).await.unwrap();
    assert_eq!(ack.aggregate_version, Some(1));
    assert_eq!(fake.writes().len(), 1);
}

#[tokio::test]
async fn a_wrong_api_key_is_an_operator_retry_and_sends_nothing() {
    let fake = FakeCeleriant::with_api_key("another key");
    let err = backend(&fake)
        .await
        .write(command(1, 1..=1))
        .await
        .unwrap_err();
    assert!(
        matches!(err, BackendError::Code { code: 10006, .. }),
        "{err:?}"
    );
    assert_eq!(
        summary(&err.into_outcome()),
        ("retry", Some(10006), Some(OPERATOR_RETRY_AFTER_MS))
    );
    assert!(fake.writes().is_empty());
}

#[tokio::test]
async fn a_request_over_the_client_limit_is_rejected_before_sending() {
    let fake = FakeCeleriant::start();
    let mut write = command(1, 1..=1);
    write.writes[0].events[0].data = vec![0x5a; 10_000_001];
    let err = backend(&fake).await.write(write).await.unwrap_err();
    assert!(
        matches!(
            err,
            BackendError::Code {
                code: g::WRITE_TOO_LARGE,
                ..
            }
        ),
        "{err:?}"
    );
    assert_eq!(
        summary(&err.into_outcome()),
        ("rejected", Some(g::WRITE_TOO_LARGE), None)
    );
    assert!(fake.writes().is_empty(), "nothing went out");
}

fn query(id: u128, from_version: u64, max_batches: usize, max_bytes: usize) -> ReadQuery {
    ReadQuery {
        key: key(id),
        from_version,
        max_bytes,
        max_batches,
    }
}

fn versions(page: &ReadPage) -> Vec<u64> {
    page.batches.iter().map(|b| b.version).collect()
}

#[tokio::test]
async fn events_read_back_exactly_as_written() {
    let fake = FakeCeleriant::start();
    let backend = backend(&fake).await;
    backend.write(command(0x0c, 1..=2)).await.unwrap();
    backend.write(command(0x0c, 3..=3)).await.unwrap();

    let page = backend.read(query(0x0c, 1, 100, 1 << 20)).await.unwrap();
    assert_eq!(versions(&page), [1, 2]);
    assert_eq!(page.next, None);
    assert_eq!(page.batches[0].events, [event(1), event(2)]);
    assert_eq!(page.batches[1].events, [event(3)]);
    for batch in &page.batches {
        assert_eq!(batch.client_id, Uuid::from_u128(CLIENT));
        assert!(batch.server_timestamp > 1_700_000_000_000);
    }
    let Some(ClientRequest::Read(read)) = fake.requests().pop() else {
        panic!("the last request was the read");
    };
    assert_eq!(
        (
            read.aggregate_key.org_id,
            read.aggregate_key.aggregate_type_id,
            read.aggregate_key.aggregate_id
        ),
        (ORG, TYPE, 0x0c)
    );
    assert_eq!(read.filters.from_aggregate_version, 1);
    assert_eq!(
        read.filters.to_aggregate_version,
        Some(101),
        "one batch beyond the page"
    );
}

#[tokio::test]
async fn reads_are_paged_by_batches_and_bytes() {
    let fake = FakeCeleriant::start();
    let backend = backend(&fake).await;
    for seq in 1..=3 {
        backend.write(command(7, seq..=seq)).await.unwrap();
    }

    let first = backend.read(query(7, 1, 2, 1 << 20)).await.unwrap();
    assert_eq!((versions(&first), first.next), (vec![1, 2], Some(3)));
    let last = backend.read(query(7, 3, 2, 1 << 20)).await.unwrap();
    assert_eq!((versions(&last), last.next), (vec![3], None));
    let small = backend.read(query(7, 1, 100, 1)).await.unwrap();
    assert_eq!((versions(&small), small.next), (vec![1], Some(2)));
    let past_the_tip = backend.read(query(7, 4, 100, 1 << 20)).await.unwrap();
    assert_eq!((versions(&past_the_tip), past_the_tip.next), (vec![], None));

    // A server page shorter than asked for carries the server's continuation.
    fake.limit_read_pages(1);
    let short = backend.read(query(7, 1, 100, 1 << 20)).await.unwrap();
    assert_eq!((versions(&short), short.next), (vec![1], Some(2)));
}

#[tokio::test]
async fn an_unknown_aggregate_reads_as_empty() {
    let fake = FakeCeleriant::start();
    let page = backend(&fake)
        .await
        .read(query(0xdead, 1, 100, 1 << 20))
        .await
        .unwrap();
    assert_eq!(
        page,
        ReadPage {
            batches: vec![],
            next: None,
            tip: 0,
        }
    );
    assert_eq!(fake.requests().len(), 1, "answered 1001 by the fake");
}

#[tokio::test]
async fn a_read_below_a_trim_is_batch_index_unavailable_with_the_minimum() {
    let fake = FakeCeleriant::start();
    fake.script([Reply::error(
        c::BATCH_INDEX_UNAVAILABLE,
        r#"{"requested":1,"minimum_available":4}"#,
    )]);
    let err = backend(&fake)
        .await
        .read(query(7, 1, 100, 1 << 20))
        .await
        .unwrap_err();
    assert_eq!(err, BackendError::Trimmed { min_version: 4 });
    assert_eq!(
        fake.requests().len(),
        1,
        "not silently re-read from the first batch kept"
    );
}

#[tokio::test]
async fn health_is_a_round_trip_with_the_api_key() {
    let fake = FakeCeleriant::with_api_key(API_KEY);
    backend(&fake).await.health().await.unwrap();
    assert_eq!(fake.requests().len(), 1);
    assert_eq!(fake.identifies()[0].api_key.as_deref(), Some(API_KEY));

    let wrong = FakeCeleriant::with_api_key("another key");
    let err = backend(&wrong).await.health().await.unwrap_err();
    assert!(
        matches!(err, BackendError::Code { code: 10006, .. }),
        "{err:?}"
    );
}

#[tokio::test]
async fn connect_refuses_an_empty_configuration() {
    let options = |addresses: Vec<String>, ms| CeleriantOptions {
        addresses,
        api_key: Some(API_KEY.into()),
        request_timeout: Duration::from_millis(ms),
    };
    assert!(
        CeleriantBackend::connect(options(vec![], 1000))
            .await
            .is_err()
    );
    assert!(
        CeleriantBackend::connect(options(vec![" ".into()], 1000))
            .await
            .is_err()
    );
    assert!(
        CeleriantBackend::connect(options(vec!["127.0.0.1:1".into()], 0))
            .await
            .is_err()
    );
    let debug = format!("{:?}", options(vec!["127.0.0.1:1".into()], 1000));
    assert!(
        !debug.contains(API_KEY),
        "the API key must not reach logs: {debug}"
    );
}
