//! The `ClientError` → `BackendError` → protocol outcome table, one row per variant.
//!
//! A wrong row here loses events (a "may have landed" reported as rejected is dropped by the
//! outbox; a definite refusal reported as landed is marked synced), so every variant of
//! `celeriant_client_tokio` 0.3.0 is listed, together with every code `celeriant_msg` defines.

use std::io;

use celeriant_client_tokio::{ClientError, ServerError};
use celeriant_crypto::CryptoError;
use celeriant_msg::error_codes as ec;
use celeriant_msg::read_wire_data_error::ReadWireDataError;
use celeriant_msg::response::responses::{
    AggregateConflict, DeleteConflictResponse, ErrorResponse, WriteConflictResponse,
};
use celeriant_sync_protocol::codes::gateway as g;
use celeriant_sync_protocol::outcome::WriteOutcome;
use celeriant_wal::aggregate_key::AggregateKey;
use celeriant_wire::codec::codec_error::CodecError;
use celeriant_wire::network::wire_error::WireError;

use super::backend_error;
use super::errors::{MAX_REQUEST_BYTES, MAX_RESPONSE_BYTES, UNRECOGNISED_UPSTREAM_CODE};
use crate::backend::BackendError;

/// What a row expects, ignoring the message text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Want {
    Code(u32),
    Seqs(u32, Option<u64>, Option<u64>),
    Unavailable,
    Unknown,
}

fn shape(error: &BackendError) -> Want {
    match error {
        BackendError::Code {
            code,
            last_client_seq: None,
            attempted_client_seq: None,
            ..
        } => Want::Code(*code),
        BackendError::Code {
            code,
            last_client_seq,
            attempted_client_seq,
            ..
        } => Want::Seqs(*code, *last_client_seq, *attempted_client_seq),
        BackendError::Unavailable(_) => Want::Unavailable,
        BackendError::OutcomeUnknown(_) => Want::Unknown,
        // Only `read` makes it (from a 1000 with its minimum), never `backend_error`.
        BackendError::Trimmed { .. } => unreachable!("backend_error never answers Trimmed"),
        // Only the write path makes it, knowing the command's order (`super::conflict`).
        BackendError::Conflict { .. } => unreachable!("backend_error never answers Conflict"),
    }
}

fn io_error(kind: io::ErrorKind, text: &str) -> io::Error {
    io::Error::new(kind, text.to_owned())
}

fn server(code: u32, message: &str) -> ClientError {
    ClientError::Server(ServerError::from(ErrorResponse {
        correlation_id: Some(1),
        error_code: code,
        error_message: message.to_owned(),
    }))
}

fn conflict() -> Vec<AggregateConflict> {
    vec![AggregateConflict {
        key: AggregateKey::new(1, 2, 3),
        expected: 4,
        current: 5,
    }]
}

fn too_large(max_size_bytes: u64) -> ClientError {
    ClientError::WireError(WireError::MessageTooLarge {
        message_length: max_size_bytes + 1,
        max_size_bytes,
    })
}

/// Every `ClientError` variant (and every nested wire/read variant), with the `BackendError` and
/// the outcome tag it must produce.
#[rustfmt::skip]
fn rows() -> Vec<(&'static str, ClientError, Want, &'static str)> {
    use Want::*;
    let walk = |last: &ClientError| {
        ClientError::ConnectionFailed(io_error(
            io::ErrorKind::NotConnected,
            &format!("no leader found; last attempt to 127.0.0.1:1 failed: {last}"),
        ))
    };
    let not_leader = || ClientError::NotLeader {
        leader_address: Some("10.0.0.2:7000".into()),
        error_message: String::new(),
    };
    vec![
        // Definitely not sent.
        ("refused", ClientError::ConnectionFailed(io::ErrorKind::ConnectionRefused.into()), Unavailable, "retry"),
        ("walk exhausted, last refused", walk(&ClientError::ConnectionFailed(io::ErrorKind::ConnectionRefused.into())), Unavailable, "retry"),
        ("walk exhausted, last busy", walk(&ClientError::ServerBusy), Code(ec::SERVER_BUSY), "retry"),
        ("walk exhausted, last not leader", walk(&not_leader()), Code(ec::WRITE_NOT_LEADER), "retry"),
        ("walk exhausted, leader unknown", walk(&ClientError::NotLeader { leader_address: None, error_message: String::new() }), Code(ec::WRITE_NOT_LEADER), "retry"),
        ("connection timeout", ClientError::ConnectionTimeout, Unavailable, "retry"),
        ("pool timeout", ClientError::PoolTimeout { address: "127.0.0.1:1".into() }, Unavailable, "retry"),
        ("identity error", ClientError::IdentityError(CryptoError::InvalidNonce), Unavailable, "retry"),
        ("invalid shard range", ClientError::InvalidShardRange { start_shard: 4, max_shard_hint: 3 }, Unavailable, "retry"),
        ("dict unavailable", ClientError::DictUnavailable { sha: "abc".into() }, Unavailable, "retry"),
        ("request over the request limit", too_large(MAX_REQUEST_BYTES), Code(g::WRITE_TOO_LARGE), "rejected"),
        ("request over u32", too_large(u32::MAX.into()), Code(g::WRITE_TOO_LARGE), "rejected"),
        ("serialisation", ClientError::WireError(WireError::Codec(CodecError::Serialization("x".into()))), Unavailable, "retry"),
        // The server answered.
        ("not leader", not_leader(), Code(ec::WRITE_NOT_LEADER), "retry"),
        ("server busy", ClientError::ServerBusy, Code(ec::SERVER_BUSY), "retry"),
        ("identity required", ClientError::IdentityRequired, Code(ec::IDENTIFY_REQUIRED), "retry"),
        ("2002", server(2002, r#"{"last_client_seq":7,"attempted_client_seq":5}"#), Seqs(2002, Some(7), Some(5)), "landed"),
        ("2002 unparsable", server(2002, "dup"), Code(2002), "landed"),
        ("2013", server(2013, r#"{"last_client_seq":9,"attempted_client_seq":9}"#), Seqs(2013, Some(9), Some(9)), "retry"),
        ("2003 conflict", ClientError::Server(WriteConflictResponse { correlation_id: None, conflicts: conflict() }.into()), Code(2003), "rejected"),
        ("4002 conflict", ClientError::Server(DeleteConflictResponse { correlation_id: None, conflicts: conflict() }.into()), Code(4002), "retry"),
        ("unrecognised code", server(12_345, "?"), Code(12_345), "retry"),
        ("code in the gateway's 4xx space", server(g::WRITE_TOO_LARGE, "?"), Code(UNRECOGNISED_UPSTREAM_CODE), "retry"),
        ("code in the gateway's 5xx space", server(g::UPSTREAM_UNAVAILABLE, "?"), Code(UNRECOGNISED_UPSTREAM_CODE), "retry"),
        // Sent, no readable answer: may have landed.
        ("response over the response limit", too_large(MAX_RESPONSE_BYTES), Unknown, "unknown"),
        ("fixed response body too large", too_large(1007), Unknown, "unknown"),
        ("wire network error", ClientError::WireError(WireError::NetworkError(io::ErrorKind::BrokenPipe.into())), Unknown, "unknown"),
        ("unsupported protocol", ClientError::WireError(WireError::UnsupportedProtocol(9)), Unknown, "unknown"),
        ("deserialisation", ClientError::WireError(WireError::Codec(CodecError::Deserialization("x".into()))), Unknown, "unknown"),
        ("decompression", ClientError::WireError(WireError::Codec(CodecError::Compression("x".into()))), Unknown, "unknown"),
        ("malformed frame", ClientError::WireError(WireError::MalformedFrame("x".into())), Unknown, "unknown"),
        ("unknown message type", ClientError::ReadError(ReadWireDataError::UnknownMessageType(99)), Unknown, "unknown"),
        ("header read failure", ClientError::ReadError(ReadWireDataError::ReadHeaderFailure(WireError::MalformedFrame("x".into()))), Unknown, "unknown"),
        ("body read failure", ClientError::ReadError(ReadWireDataError::ReadBodyFailure(WireError::NetworkError(io::ErrorKind::UnexpectedEof.into()))), Unknown, "unknown"),
        ("protocol error", ClientError::ProtocolError, Unknown, "unknown"),
        ("correlation mismatch", ClientError::CorrelationMismatch { sent: Some(1), received: Some(2) }, Unknown, "unknown"),
        ("lost after send", ClientError::ConnectionLostAfterSend(io::ErrorKind::UnexpectedEof.into()), Unknown, "unknown"),
        ("request timeout", ClientError::RequestTimeout, Unknown, "unknown"),
    ]
}

#[test]
fn every_client_error_variant_maps_as_the_shared_table_says() {
    for (name, error, want, tag) in rows() {
        let text = error.to_string();
        let mapped = backend_error(error);
        assert_eq!(shape(&mapped), want, "{name}: {mapped:?}");
        let outcome = mapped.clone().into_outcome();
        assert_eq!(outcome.tag(), tag, "{name}: {outcome:?}");
        match &mapped {
            BackendError::Code { message, .. }
            | BackendError::Unavailable(message)
            | BackendError::OutcomeUnknown(message) => {
                assert!(message.contains(&text), "{name}: {message:?} lost {text:?}")
            }
            BackendError::Trimmed { .. } => unreachable!("backend_error never answers Trimmed"),
            BackendError::Conflict { .. } => unreachable!("backend_error never answers Conflict"),
        }
    }
}

#[test]
fn a_duplicate_lands_with_its_sequences_and_an_inflight_duplicate_retries_with_them() {
    let dup = backend_error(server(
        2002,
        r#"{"last_client_seq":7,"attempted_client_seq":5}"#,
    ));
    assert_eq!(dup.into_outcome(), WriteOutcome::duplicate(7, 5));
    let inflight = backend_error(server(
        2013,
        r#"{"last_client_seq":9,"attempted_client_seq":8}"#,
    ));
    match inflight.into_outcome() {
        WriteOutcome::Retry(f) => {
            assert_eq!(
                (f.code, f.last_client_seq, f.attempted_client_seq),
                (2013, Some(9), Some(8))
            )
        }
        other => panic!("2013 must be a retry: {other:?}"),
    }
}

/// Every code `celeriant_msg` 0.3.0 defines, as the server would send it.
#[rustfmt::skip]
const ALL_CODES: &[u32] = &[
    ec::READ_UNAVAILABLE_VERSION, ec::READ_AGGREGATE_NOT_EXISTS, ec::READ_CACHE_LOAD_LOCK_TIMEOUT,
    ec::READ_CACHE_LOAD_FILE_SCAN, ec::READ_FETCH_DATABLOCKS, ec::READ_FETCH_METABLOCKS,
    ec::WRITE_EMPTY_EVENTS_LIST, ec::WRITE_ZERO_EVENT_TYPE, ec::WRITE_CLIENT_IDEMPOTENCY_VIOLATION,
    ec::WRITE_OPTIMISTIC_CONCURRENCY_VIOLATION, ec::WRITE_FAILED_TO_SERIALISE_DATABLOCKS,
    ec::WRITE_AGGREGATE_NOT_EXISTS, ec::WRITE_AGGREGATE_RECREATE_NOT_ALLOWED,
    ec::WRITE_REPLICATION_ERROR, ec::WRITE_FSYNC_ERROR, ec::WRITE_CACHE_AGGREGATE_CLIENT_ERROR,
    ec::WRITE_AGGREGATE_EXISTS_CACHE_ERROR, ec::WRITE_NOT_LEADER, ec::WRITE_REPLICATION_BACKPRESSURE,
    ec::WRITE_INFLIGHT_DUPLICATE, ec::WRITE_MALFORMED_GUARD_ENTRY, ec::WRITE_CONFLICT_RESPONSE_TOO_LARGE,
    ec::REGISTER_SCHEMA_ALREADY_EXISTS, ec::REGISTER_SCHEMA_INVALID, ec::WRITE_SCHEMA_VALIDATION_FAILED,
    ec::WRITE_SCHEMA_COMPILATION_FAILED, ec::REGISTER_SCHEMA_UNSUPPORTED_TYPE,
    ec::REGISTER_SCHEMA_CACHE_LOAD_ERROR, ec::REGISTER_SCHEMA_FSYNC_ERROR,
    ec::REGISTER_SCHEMA_CANNOT_ACCEPT_WRITES, ec::REGISTER_SCHEMA_REPLICATION_ERROR,
    ec::REGISTER_SCHEMA_COORDINATION_FAILED, ec::TRIM_AGGREGATE_NOT_EXISTS, ec::TRIM_CACHE_ERROR,
    ec::TRIM_REPLICATION_ERROR, ec::TRIM_FSYNC_ERROR, ec::TRIM_INDEX_OUT_OF_RANGE, ec::TRIM_NOT_LEADER,
    ec::TRIM_REPLICATION_BACKPRESSURE, ec::DELETE_AGGREGATE_NOT_EXISTS, ec::DELETE_EMPTY_DELETE_LIST,
    ec::DELETE_OPTIMISTIC_CONCURRENCY_VIOLATION, ec::DELETE_CACHE_ERROR, ec::DELETE_REPLICATION_ERROR,
    ec::DELETE_FSYNC_ERROR, ec::DELETE_NOT_LEADER, ec::DELETE_REPLICATION_BACKPRESSURE,
    ec::DELETE_CONFLICT_RESPONSE_TOO_LARGE, ec::LIST_ORGS_DISK_READ, ec::LIST_AGGREGATE_TYPES_DISK_READ,
    ec::LIST_AGGREGATES_DISK_READ, ec::REPLICATION_BATCH_FSYNC, ec::REPLICATION_BATCH_SERIALISE_DATABLOCKS,
    ec::REPLICATION_BATCH_WAL_SEQ_GAP, ec::EXISTS_CACHE_ERROR, ec::EXISTS_AGGREGATE_NOT_EXISTS,
    ec::EXISTS_METABLOCK_READ_ERROR, ec::WATCH_REQUEST_INVALID, ec::WATCH_LATENCY_TOO_HIGH,
    ec::WATCH_READ_IO, ec::WATCH_READ_SERIALIZATION, ec::WATCH_READ_OTHER, ec::WATCH_TOO_MANY_SUBSCRIBERS,
    ec::SHARD_ROUTING_NO_KEY, ec::SHARD_ROUTING_MULTIPLE_SHARDS, ec::SHARD_ROUTING_INCOMPATIBLE_FILTERS,
    ec::SERVER_BUSY, ec::IDENTIFY_INVALID_NONCE, ec::IDENTIFY_INVALID_SIGNATURE, ec::IDENTIFY_MISMATCH,
    ec::IDENTIFY_REQUIRED, ec::AUTH_REQUIRED, ec::AUTH_INVALID_KEY, ec::AUTH_INSUFFICIENT_PERMISSIONS,
];

/// Every typed `ServerError` the client builds from a code maps back to that very code, so the
/// outcome is decided by the shared table on Celeriant's own number.
#[test]
fn every_server_code_survives_the_typed_variants() {
    for &code in ALL_CODES {
        let mapped = backend_error(server(code, "{}"));
        match mapped {
            BackendError::Code { code: got, .. } => assert_eq!(got, code, "{code}"),
            other => panic!("{code} must stay a code: {other:?}"),
        }
    }
}

/// The write path's codes of `shared/celeriant.md`, end to end.
#[test]
fn write_path_codes_reach_the_documented_outcomes() {
    let landed = [2002];
    let retry = [
        2007, 2008, 2009, 2010, 2011, 2012, 2013, 2023, 2029, 10001, 10004, 10006, 10007, 11000,
    ];
    let rejected = [
        2000, 2001, 2003, 2004, 2005, 2006, 2014, 2015, 2022, 9000, 9001, 9002,
    ];
    for (codes, tag) in [
        (&landed[..], "landed"),
        (&retry[..], "retry"),
        (&rejected[..], "rejected"),
    ] {
        for &code in codes {
            let outcome = backend_error(server(code, "{}")).into_outcome();
            assert_eq!(outcome.tag(), tag, "{code}: {outcome:?}");
        }
    }
}
