//! How every failure of the published Celeriant client becomes a [`BackendError`].
//!
//! The browser's outbox acts on nothing but the outcome the gateway derives from this mapping, so
//! it has to say exactly what is known: Celeriant answered with a code (the write was not applied,
//! or for 2002 it already had been), nothing left the gateway (`Unavailable`), or the request went
//! out and no readable answer came back (`OutcomeUnknown`). The last must never turn into a code
//! that classifies as `rejected` or `landed`: the outbox would drop or mark synced a write that may
//! not exist. `celeriant_client_tokio` 0.3.0 has no numeric `code()` accessor, so the codes are
//! recovered here from its typed variants.

use celeriant_client_tokio::{
    AuthError, ClientError, DeleteError, DetailsError, ReadError, SchemaError, ServerError,
    TrimError, WatchError, WriteError,
};
use celeriant_msg::error_codes as ec;
use celeriant_msg::read_wire_data_error::ReadWireDataError;
use celeriant_sync_protocol::codes::gateway as g;
use celeriant_wire::codec::codec_error::CodecError;
use celeriant_wire::network::wire_error::WireError;

use crate::backend::BackendError;

/// The largest request the pool will send. It is the client's default (below the server's
/// 16 MiB frame limit, over which the server closes the connection without a reply) and, being
/// distinct from every response limit, it tells a refusal *before* sending apart from an oversized
/// *response*: both surface as `WireError::MessageTooLarge`.
pub(super) const MAX_REQUEST_BYTES: u64 = 10_000_000;

/// The largest response the pool will read (the client's and the server's default).
pub(super) const MAX_RESPONSE_BYTES: u64 = 64 * 1024 * 1024;

/// The limit `celeriant_wire` reports when a body does not fit a `u32` length: also a refusal
/// before anything was written.
const U32_FRAME_LIMIT: u64 = u32::MAX as u64;

const _: () = assert!(MAX_REQUEST_BYTES != MAX_RESPONSE_BYTES && MAX_REQUEST_BYTES < (16 << 20));

/// Stands in for a code Celeriant sent that falls in the gateway's own code space (40000–59999),
/// where it could be read as one of the gateway's codes (an assigned 4xxxx one as `rejected`).
/// Like every unrecognised code it classifies as `retry` with the operator backoff, so nothing is
/// ever dropped on it.
pub const UNRECOGNISED_UPSTREAM_CODE: u32 = 0;

/// Maps a `celeriant_client_tokio` error to what the gateway knows about the request.
///
/// | `ClientError`                                    | `BackendError`                      |
/// |--------------------------------------------------|-------------------------------------|
/// | `Server(..)`                                     | `Code` with the Celeriant code (2002/2013 with their sequences) |
/// | `NotLeader`                                      | `Code` 2011                         |
/// | `ServerBusy` (2012 and 11000 both)               | `Code` 11000                        |
/// | `IdentityRequired`                               | `Code` 10004                        |
/// | `ConnectionFailed` ending in "Server busy" / "Not leader" (leader walk exhausted) | `Code` 11000 / 2011 |
/// | `ConnectionFailed`, `ConnectionTimeout`, `PoolTimeout`, `IdentityError`, `InvalidShardRange`, `DictUnavailable` | `Unavailable` |
/// | `WireError::MessageTooLarge` refused before sending | `Code` 40012 (`WRITE_TOO_LARGE`) |
/// | `WireError::Codec(Serialization)` (before sending) | `Unavailable`                     |
/// | any other `WireError`, `ReadError`, `ProtocolError`, `CorrelationMismatch`, `ConnectionLostAfterSend`, `RequestTimeout`, a future variant | `OutcomeUnknown` |
pub fn backend_error(error: ClientError) -> BackendError {
    crate::observe::upstream_error(&error);
    let text = error.to_string();
    match error {
        ClientError::Server(server) => server_error(server),
        ClientError::NotLeader { .. } => BackendError::code(ec::WRITE_NOT_LEADER, text),
        // `from_error_response` folds 2012 and 11000 into this one variant.
        ClientError::ServerBusy => BackendError::code(ec::SERVER_BUSY, text),
        ClientError::IdentityRequired => BackendError::code(ec::IDENTIFY_REQUIRED, text),
        ClientError::ConnectionFailed(_) => connection_failed(text),
        ClientError::ConnectionTimeout
        | ClientError::PoolTimeout { .. }
        | ClientError::IdentityError(_)
        | ClientError::InvalidShardRange { .. }
        | ClientError::DictUnavailable { .. } => BackendError::Unavailable(text),
        ClientError::WireError(wire) => wire_error(&wire, text),
        ClientError::ReadError(read) => match read {
            ReadWireDataError::UnknownMessageType(_)
            | ReadWireDataError::ReadHeaderFailure(_)
            | ReadWireDataError::ReadBodyFailure(_) => BackendError::OutcomeUnknown(text),
        },
        ClientError::ProtocolError
        | ClientError::CorrelationMismatch { .. }
        | ClientError::ConnectionLostAfterSend(_)
        | ClientError::RequestTimeout => BackendError::OutcomeUnknown(text),
        // `ClientError` is `#[non_exhaustive]`, so this arm cannot be avoided: a variant added
        // later is assumed to say nothing about whether the write landed.
        _ => BackendError::OutcomeUnknown(text),
    }
}

/// A write's 2003, as the write path answers it: the server's `WriteConflictResponse` lists every
/// stale guard (in its own order); the answer names the first aggregate **in the command's order**
/// that it lists, with that aggregate's expected and current version, so both backends name the
/// same one. `Err` hands the error back when it is not a 2003 naming one of `order` (then
/// [`backend_error`] maps it: a bare 2003).
pub(super) fn write_conflict(
    order: &[crate::backend::AggregateKey],
    error: ClientError,
) -> Result<BackendError, ClientError> {
    if let ClientError::Server(ServerError::Write {
        kind: WriteError::OptimisticConcurrencyViolation { conflicts, .. },
        ..
    }) = &error
    {
        for key in order {
            let wanted = super::convert::aggregate_key(key);
            if let Some(c) = conflicts.iter().find(|c| c.key == wanted) {
                crate::observe::upstream_error(&error);
                return Ok(BackendError::conflict(crate::backend::VersionConflict {
                    aggregate: key.aggregate,
                    expected: c.expected,
                    current: c.current,
                }));
            }
        }
    }
    Err(error)
}

/// `ConnectionFailed` is raised before anything is sent, and is also what the pool's leader walk
/// returns when it runs out of nodes; the text then ends with the last node's answer.
fn connection_failed(text: String) -> BackendError {
    if text.ends_with(&ClientError::ServerBusy.to_string()) {
        BackendError::code(ec::SERVER_BUSY, text)
    } else if text.contains("failed: Not leader,") {
        BackendError::code(ec::WRITE_NOT_LEADER, text)
    } else {
        BackendError::Unavailable(text)
    }
}

/// Only two wire errors are known to happen before the frame is written: a request over a
/// request limit, and a failure to serialise it. Every other one (and `MessageTooLarge` against
/// a response limit) comes from reading the answer.
fn wire_error(wire: &WireError, text: String) -> BackendError {
    match wire {
        WireError::MessageTooLarge { max_size_bytes, .. }
            if *max_size_bytes == MAX_REQUEST_BYTES || *max_size_bytes == U32_FRAME_LIMIT =>
        {
            BackendError::code(g::WRITE_TOO_LARGE, text)
        }
        WireError::Codec(CodecError::Serialization(_)) => BackendError::Unavailable(text),
        WireError::MessageTooLarge { .. }
        | WireError::NetworkError(_)
        | WireError::UnsupportedProtocol(_)
        | WireError::Codec(CodecError::Deserialization(_) | CodecError::Compression(_))
        | WireError::MalformedFrame(_) => BackendError::OutcomeUnknown(text),
    }
}

/// Celeriant answered: its code, recovered from the typed variant.
fn server_error(error: ServerError) -> BackendError {
    let message = error.to_string();
    let (code, last_client_seq, attempted_client_seq) = match error {
        ServerError::Write {
            kind:
                WriteError::ClientIdempotencyViolation {
                    last_client_seq,
                    attempted_client_seq,
                },
            ..
        } => (
            ec::WRITE_CLIENT_IDEMPOTENCY_VIOLATION,
            last_client_seq,
            attempted_client_seq,
        ),
        ServerError::Write {
            kind:
                WriteError::InflightDuplicateWrite {
                    last_client_seq,
                    attempted_client_seq,
                },
            ..
        } => (
            ec::WRITE_INFLIGHT_DUPLICATE,
            last_client_seq,
            attempted_client_seq,
        ),
        ServerError::Write { kind, .. } => (write_code(&kind), None, None),
        ServerError::Read { kind, .. } => (read_code(&kind), None, None),
        ServerError::Schema { kind, .. } => (schema_code(&kind), None, None),
        ServerError::Delete { kind, .. } => (delete_code(&kind), None, None),
        ServerError::Trim { kind, .. } => (trim_code(&kind), None, None),
        ServerError::Watch { kind, .. } => (watch_code(&kind), None, None),
        ServerError::Details { kind, .. } => (details_code(&kind), None, None),
        ServerError::Auth { kind, .. } => (auth_code(&kind), None, None),
        ServerError::List { error_code, .. }
        | ServerError::Replication { error_code, .. }
        | ServerError::ShardRouting { error_code, .. }
        | ServerError::Unknown { error_code, .. } => (error_code, None, None),
    };
    if (40_000..60_000).contains(&code) {
        return BackendError::code(
            UNRECOGNISED_UPSTREAM_CODE,
            format!("celeriant answered unrecognised code {code}: {message}"),
        );
    }
    BackendError::Code {
        code,
        message,
        last_client_seq,
        attempted_client_seq,
    }
}

fn write_code(kind: &WriteError) -> u32 {
    match kind {
        WriteError::EmptyEventsList => ec::WRITE_EMPTY_EVENTS_LIST,
        WriteError::ZeroEventType => ec::WRITE_ZERO_EVENT_TYPE,
        WriteError::ClientIdempotencyViolation { .. } => ec::WRITE_CLIENT_IDEMPOTENCY_VIOLATION,
        WriteError::OptimisticConcurrencyViolation { .. } => {
            ec::WRITE_OPTIMISTIC_CONCURRENCY_VIOLATION
        }
        WriteError::FailedToSerialiseDatablocks => ec::WRITE_FAILED_TO_SERIALISE_DATABLOCKS,
        WriteError::AggregateNotExists => ec::WRITE_AGGREGATE_NOT_EXISTS,
        WriteError::AggregateRecreateNotAllowed => ec::WRITE_AGGREGATE_RECREATE_NOT_ALLOWED,
        WriteError::ReplicationError => ec::WRITE_REPLICATION_ERROR,
        WriteError::FsyncError => ec::WRITE_FSYNC_ERROR,
        WriteError::CacheAggregateClientError => ec::WRITE_CACHE_AGGREGATE_CLIENT_ERROR,
        WriteError::AggregateExistsCacheError => ec::WRITE_AGGREGATE_EXISTS_CACHE_ERROR,
        WriteError::InflightDuplicateWrite { .. } => ec::WRITE_INFLIGHT_DUPLICATE,
        WriteError::ReplicationBackpressure => ec::WRITE_REPLICATION_BACKPRESSURE,
        WriteError::MalformedGuardEntry => ec::WRITE_MALFORMED_GUARD_ENTRY,
        WriteError::ConflictResponseCapacityExceeded => ec::WRITE_CONFLICT_RESPONSE_TOO_LARGE,
    }
}

fn read_code(kind: &ReadError) -> u32 {
    match kind {
        ReadError::UnavailableBatchIndex { .. } => ec::READ_UNAVAILABLE_VERSION,
        ReadError::AggregateNotExists => ec::READ_AGGREGATE_NOT_EXISTS,
        ReadError::CacheLoadLockTimeout => ec::READ_CACHE_LOAD_LOCK_TIMEOUT,
        ReadError::CacheLoadFileScan => ec::READ_CACHE_LOAD_FILE_SCAN,
        ReadError::FetchDatablocks => ec::READ_FETCH_DATABLOCKS,
        ReadError::FetchMetablocks => ec::READ_FETCH_METABLOCKS,
    }
}

fn schema_code(kind: &SchemaError) -> u32 {
    match kind {
        SchemaError::AlreadyExists => ec::REGISTER_SCHEMA_ALREADY_EXISTS,
        SchemaError::Invalid => ec::REGISTER_SCHEMA_INVALID,
        SchemaError::ValidationFailed => ec::WRITE_SCHEMA_VALIDATION_FAILED,
        SchemaError::CompilationFailed => ec::WRITE_SCHEMA_COMPILATION_FAILED,
        SchemaError::UnsupportedType => ec::REGISTER_SCHEMA_UNSUPPORTED_TYPE,
        SchemaError::CacheLoadError => ec::REGISTER_SCHEMA_CACHE_LOAD_ERROR,
        SchemaError::FsyncError => ec::REGISTER_SCHEMA_FSYNC_ERROR,
        SchemaError::CannotAcceptWrites => ec::REGISTER_SCHEMA_CANNOT_ACCEPT_WRITES,
        SchemaError::ReplicationError => ec::REGISTER_SCHEMA_REPLICATION_ERROR,
        SchemaError::CoordinationFailed => ec::REGISTER_SCHEMA_COORDINATION_FAILED,
    }
}

fn delete_code(kind: &DeleteError) -> u32 {
    match kind {
        DeleteError::AggregateNotExists => ec::DELETE_AGGREGATE_NOT_EXISTS,
        DeleteError::EmptyDeleteList => ec::DELETE_EMPTY_DELETE_LIST,
        DeleteError::ConflictResponseCapacityExceeded => ec::DELETE_CONFLICT_RESPONSE_TOO_LARGE,
        DeleteError::OptimisticConcurrencyViolation { .. } => {
            ec::DELETE_OPTIMISTIC_CONCURRENCY_VIOLATION
        }
        DeleteError::CacheError => ec::DELETE_CACHE_ERROR,
        DeleteError::ReplicationError => ec::DELETE_REPLICATION_ERROR,
        DeleteError::FsyncError => ec::DELETE_FSYNC_ERROR,
        DeleteError::ReplicationBackpressure => ec::DELETE_REPLICATION_BACKPRESSURE,
    }
}

fn trim_code(kind: &TrimError) -> u32 {
    match kind {
        TrimError::AggregateNotExists => ec::TRIM_AGGREGATE_NOT_EXISTS,
        TrimError::CacheError => ec::TRIM_CACHE_ERROR,
        TrimError::ReplicationError => ec::TRIM_REPLICATION_ERROR,
        TrimError::FsyncError => ec::TRIM_FSYNC_ERROR,
        TrimError::IndexOutOfRange => ec::TRIM_INDEX_OUT_OF_RANGE,
        TrimError::ReplicationBackpressure => ec::TRIM_REPLICATION_BACKPRESSURE,
    }
}

fn watch_code(kind: &WatchError) -> u32 {
    match kind {
        WatchError::RequestInvalid => ec::WATCH_REQUEST_INVALID,
        WatchError::LatencyTooHigh => ec::WATCH_LATENCY_TOO_HIGH,
        WatchError::TooManySubscribers { .. } => ec::WATCH_TOO_MANY_SUBSCRIBERS,
        WatchError::ReadIo => ec::WATCH_READ_IO,
        WatchError::ReadSerialization => ec::WATCH_READ_SERIALIZATION,
        WatchError::ReadOther => ec::WATCH_READ_OTHER,
    }
}

fn details_code(kind: &DetailsError) -> u32 {
    match kind {
        DetailsError::CacheError => ec::EXISTS_CACHE_ERROR,
        DetailsError::AggregateNotExists => ec::EXISTS_AGGREGATE_NOT_EXISTS,
        DetailsError::MetablockReadError => ec::EXISTS_METABLOCK_READ_ERROR,
    }
}

fn auth_code(kind: &AuthError) -> u32 {
    match kind {
        AuthError::InvalidNonce => ec::IDENTIFY_INVALID_NONCE,
        AuthError::InvalidSignature => ec::IDENTIFY_INVALID_SIGNATURE,
        AuthError::Mismatch => ec::IDENTIFY_MISMATCH,
        AuthError::Required => ec::IDENTIFY_REQUIRED,
        AuthError::AuthRequired => ec::AUTH_REQUIRED,
        AuthError::InvalidKey => ec::AUTH_INVALID_KEY,
        AuthError::InsufficientPermissions => ec::AUTH_INSUFFICIENT_PERMISSIONS,
    }
}
