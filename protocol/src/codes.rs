//! Every numeric code a protocol response can carry, in one place.
//!
//! Two families share the `code` field:
//! * Celeriant's own write-path codes (2xxx, 9xxx, 10xxx, 11000), passed through unchanged when
//!   the answer came from Celeriant (or from the embedded store, which speaks the same codes).
//! * The gateway's own codes, five digits whose first three are the HTTP status they travel with
//!   (`40007` is a 400, `41300` a 413, `50201` a 502, `50400` a 504). They never collide with
//!   Celeriant's. Only the codes listed in [`gateway`] exist: any other number, even one in
//!   40000–59999, is a code nobody knows (see [`crate::outcome::classify`]). 401xx codes are
//!   about the session (class `unauthorized`: renew the session, resend), 403xx about what an
//!   authenticated client may do (class `rejected`).
//!
//! What a writer does with a code is decided in [`crate::outcome::classify`], not here.

/// Celeriant's write-path codes (from `celeriant_msg::error_codes`, 0.3.0).
pub mod celeriant {
    /// The events list of a write was empty.
    pub const EMPTY_EVENTS_LIST: u32 = 2000;
    /// An event had type (major) 0.
    pub const ZERO_EVENT_TYPE: u32 = 2001;
    /// The write's lowest `client_seq` is at or below the highest already durable for this
    /// (aggregate, client): the sequence already landed. A writer treats it as success.
    pub const CLIENT_IDEMPOTENCY_VIOLATION: u32 = 2002;
    /// `expected_version` did not match the aggregate's version (conditional writes only).
    pub const OPTIMISTIC_CONCURRENCY_VIOLATION: u32 = 2003;
    /// The server could not serialise the events.
    pub const FAILED_TO_SERIALISE_DATABLOCKS: u32 = 2004;
    /// The aggregate does not exist and the write did not allow creating it.
    pub const AGGREGATE_NOT_EXISTS: u32 = 2005;
    /// The aggregate was deleted and may not be recreated.
    pub const AGGREGATE_RECREATE_NOT_ALLOWED: u32 = 2006;
    /// Replication failed; nothing was acknowledged.
    pub const REPLICATION_ERROR: u32 = 2007;
    /// fsync failed; nothing was acknowledged.
    pub const FSYNC_ERROR: u32 = 2008;
    /// Internal cache error (client sequence cache).
    pub const CACHE_AGGREGATE_CLIENT_ERROR: u32 = 2009;
    /// Internal cache error (aggregate existence cache).
    pub const AGGREGATE_EXISTS_CACHE_ERROR: u32 = 2010;
    /// The node is not the leader.
    pub const NOT_LEADER: u32 = 2011;
    /// Replication backpressure: the server is busy.
    pub const REPLICATION_BACKPRESSURE: u32 = 2012;
    /// An identical (client, sequence) write is accepted but not yet durable/replicated.
    /// Not success: hold the sequence, back off, resend.
    pub const INFLIGHT_DUPLICATE: u32 = 2013;
    /// A malformed guard entry.
    pub const MALFORMED_GUARD_ENTRY: u32 = 2014;
    /// The conflict response would be too large.
    pub const CONFLICT_RESPONSE_TOO_LARGE: u32 = 2015;
    /// The event failed its registered schema.
    pub const SCHEMA_VALIDATION_FAILED: u32 = 2022;
    /// A registered schema failed to compile (an operator problem).
    pub const SCHEMA_COMPILATION_FAILED: u32 = 2023;
    /// Schema registration coordination failed.
    pub const REGISTER_SCHEMA_COORDINATION_FAILED: u32 = 2029;
    /// The request named no routable key.
    pub const SHARD_ROUTING_NO_KEY: u32 = 9000;
    /// The request's aggregates live on more than one shard.
    pub const SHARD_ROUTING_MULTIPLE_SHARDS: u32 = 9001;
    /// Incompatible routing filters.
    pub const SHARD_ROUTING_INCOMPATIBLE_FILTERS: u32 = 9002;
    /// First of the identity and authentication codes (10001..=10007).
    pub const IDENTITY_FIRST: u32 = 10001;
    /// Last of the identity and authentication codes.
    pub const IDENTITY_LAST: u32 = 10007;
    /// A shard's inter-shard channel is full.
    pub const SERVER_BUSY: u32 = 11000;
    /// A read asked for versions below what the aggregate still holds (it was trimmed): read
    /// again from the minimum available version (the read answer's `minVersion`).
    pub const BATCH_INDEX_UNAVAILABLE: u32 = 1000;
}

/// The gateway's own codes. The first three digits are the HTTP status.
pub mod gateway {
    /// The body is not JSON (syntax error, truncated, not UTF-8).
    pub const MALFORMED_JSON: u32 = 40000;
    /// The body is JSON but a field has the wrong type or value: a bad UUID, bad base64, a number
    /// above 2^53 − 1, a missing or unknown field. The message names the field's path.
    pub const INVALID_FIELD: u32 = 40001;
    /// The request named no writes.
    pub const NO_WRITES: u32 = 40003;
    /// A write had an empty events list (Celeriant would answer 2000).
    pub const EMPTY_EVENTS: u32 = 40004;
    /// An event had `clientSeq` 0 (which would get no deduplication).
    pub const CLIENT_SEQ_ZERO: u32 = 40005;
    /// Sequences within one aggregate's events were not strictly increasing.
    pub const CLIENT_SEQ_NOT_INCREASING: u32 = 40006;
    /// An event had `type` 0 (Celeriant would answer 2001).
    pub const EVENT_TYPE_ZERO: u32 = 40007;
    /// An `iv` was not exactly 12 bytes.
    pub const INVALID_IV: u32 = 40008;
    /// The same aggregate appeared twice in one request.
    pub const DUPLICATE_AGGREGATE: u32 = 40009;
    /// More events in one request than the gateway accepts.
    pub const TOO_MANY_EVENTS: u32 = 40010;
    /// One event's data is larger than the gateway accepts.
    pub const EVENT_TOO_LARGE: u32 = 40011;
    /// The decoded payload of one request is larger than the gateway accepts.
    pub const WRITE_TOO_LARGE: u32 = 40012;
    /// More aggregates in one request than the gateway accepts.
    pub const TOO_MANY_AGGREGATES: u32 = 40013;
    /// A query parameter was invalid.
    pub const INVALID_QUERY: u32 = 40014;
    /// `POST /v1/session`: `publicKey` is not the standard base64 of a DER SubjectPublicKeyInfo
    /// holding an RSA key of exactly 2048 bits (or is over the size bound, or not canonical DER).
    pub const INVALID_PUBLIC_KEY: u32 = 40015;
    /// `POST /v1/session`: `nonce` is not a decimal epoch-milliseconds string (digits only, no
    /// sign, no leading zero, at most 16 digits).
    pub const INVALID_NONCE: u32 = 40016;
    /// `POST /v1/session`: `signature` is not the standard base64 of exactly 256 bytes.
    pub const INVALID_SIGNATURE: u32 = 40017;
    /// `POST /v1/watch`: the stream names more aggregates than `--watch-max-aggregates`.
    pub const WATCH_TOO_MANY_AGGREGATES: u32 = 40020;
    /// More than one `Host` header: the request is ambiguous about whom it is for (and a
    /// proxy may have read another one than the gateway), so it is refused.
    pub const DUPLICATE_HOST: u32 = 40030;
    /// `PUT /v1/aggregates/{typeId}/{id}/members` would give the aggregate more than 256
    /// members (revoke one first).
    pub const TOO_MANY_MEMBERS: u32 = 40021;
    /// `POST /v1/revocations` would keep more revocations than `--max-revocations` (lift one,
    /// or wait until lifted ones age out). Nothing was stored; no revocation is ever evicted.
    pub const TOO_MANY_REVOCATIONS: u32 = 40022;
    /// No session: the request has no `Authorization: Bearer <token>` header (or a malformed
    /// one). Open a session and resend the identical request.
    pub const SESSION_REQUIRED: u32 = 40100;
    /// The session token is not one this gateway issued: forged, corrupted, or signed with a
    /// secret the gateway no longer has (after a rotation). Open a new session and resend.
    pub const SESSION_INVALID: u32 = 40101;
    /// The session token has expired. Open a new session and resend the identical request.
    pub const SESSION_EXPIRED: u32 = 40102;
    /// The operator revoked this session's device, principal or token (`/v1/revocations`): a
    /// token issued before the revocation is refused; while the revocation stands,
    /// `POST /v1/session` refuses the device (or principal) with the same code. The client
    /// keeps its events pending; only an operator lifting the revocation lets it write again.
    pub const SESSION_REVOKED: u32 = 40103;
    /// `POST /v1/session`: the signature does not verify with the public key.
    pub const DEVICE_SIGNATURE_INVALID: u32 = 40110;
    /// `POST /v1/session`: the nonce is more than 2 minutes old or more than 60 s ahead of the
    /// gateway's clock; the body's `serverTime` tells the client how far off its clock is.
    pub const NONCE_OUT_OF_WINDOW: u32 = 40111;
    /// `POST /v1/session`: this (public key, nonce) pair was already accepted. Sign a new nonce.
    pub const NONCE_REPLAYED: u32 = 40112;
    /// `POST /v1/session`: the gateway requires the app's own token in `Authorization: Bearer`.
    pub const APP_TOKEN_REQUIRED: u32 = 40120;
    /// `POST /v1/session`: the app token does not verify (signature, algorithm, issuer,
    /// audience, `nbf`, or a malformed claim).
    pub const APP_TOKEN_INVALID: u32 = 40121;
    /// `POST /v1/session`: the app token has expired (`exp`). Get a fresh one from the app.
    pub const APP_TOKEN_EXPIRED: u32 = 40122;
    /// A write, read, watch or members request carries a session token but no `DPoP` proof
    /// (or more than one, or one over 4 096 bytes). Nothing was read or stored.
    pub const PROOF_REQUIRED: u32 = 40130;
    /// The `DPoP` proof is not a valid proof for this session: malformed, not RS256
    /// `dpop+jwt`, a signature that does not verify, or signed by another key than the one the
    /// session was opened with. Nothing was read or stored.
    pub const PROOF_INVALID: u32 = 40131;
    /// The `DPoP` proof was made for another request: another method, path and query, body
    /// or session token. Nothing was read or stored.
    pub const PROOF_MISMATCH: u32 = 40132;
    /// The `DPoP` proof's `iat` is more than 30 s old or more than 5 s ahead of the gateway's
    /// clock. Nothing was read or stored; open a new session (its `serverTime` corrects the
    /// client's clock) and resend.
    pub const PROOF_STALE: u32 = 40133;
    /// The `DPoP` proof's `jti` was already accepted on this replica within the window: a
    /// replay. Nothing was read or stored.
    pub const PROOF_REPLAYED: u32 = 40134;
    /// `/v1/faults` and `/v1/faults/trim` (only with `--faults`): the request does not carry
    /// the gateway's faults secret in the `celeriant-faults-secret` header; nothing was read or
    /// changed. Not about the session: a client never meets it.
    pub const FAULTS_SECRET_REQUIRED: u32 = 40190;
    /// A write's `clientId` is not the client id of its session token. Only a broken or hostile
    /// client sends this; nothing is written.
    pub const CLIENT_ID_MISMATCH: u32 = 40300;
    /// The session's access list (from the app token's `celeriant_types` claim) does not
    /// include an aggregate type the request writes or reads.
    pub const AGGREGATE_TYPE_FORBIDDEN: u32 = 40301;
    /// The access policy refuses the write: the aggregate exists and belongs to another
    /// principal who has not granted this one write access (a write with `allowCreate: false`
    /// to an aggregate the writer may not even read is answered 2005 instead, as if it did not
    /// exist), or its type is `read-only`, or the operator credential tried to write. In a watch
    /// registration: an aggregate the session may not read. Nothing is written.
    pub const AGGREGATE_FORBIDDEN: u32 = 40302;
    /// Only an aggregate's owner may change its members.
    pub const NOT_OWNER: u32 = 40303;
    /// The policy gives this aggregate type no members (its preset is neither `members` nor
    /// `members-read`), or grants members less than asked (`readWrite` under `members-read`).
    pub const MEMBERS_NOT_ALLOWED: u32 = 40304;
    /// `/v1/revocations` takes only the operator credential (`Authorization: Operator …`); a
    /// session of any device or user is refused, nothing changed.
    pub const OPERATOR_REQUIRED: u32 = 40305;
    /// The client id's stored data would go over the gateway's per-client storage quota
    /// (`--store-quota-bytes`): nothing of the request was written. Permanent until an operator
    /// raises the quota or trims the client's data.
    pub const STORAGE_QUOTA_EXCEEDED: u32 = 40310;
    /// No such route.
    pub const NOT_FOUND: u32 = 40400;
    /// The route exists but not with this method.
    pub const METHOD_NOT_ALLOWED: u32 = 40500;
    /// The request's body did not arrive within the gateway's body-read timeout. Nothing was
    /// applied; resend the identical request.
    pub const REQUEST_TIMEOUT: u32 = 40800;
    /// The body is over the gateway's limit.
    pub const BODY_TOO_LARGE: u32 = 41300;
    /// The request did not declare `Content-Type: application/json`.
    pub const UNSUPPORTED_MEDIA_TYPE: u32 = 41500;
    /// The request's `Host` is not a name this gateway answers to (a DNS-rebinding defence):
    /// a deployment problem, so an operator `retry`, never a rejection of the events.
    pub const HOST_NOT_ALLOWED: u32 = 42100;
    /// The gateway's own admission limit: not applied, resend later.
    pub const GATEWAY_BUSY: u32 = 42900;
    /// `POST /v1/session`: too many session creations from this address (or in total); retry
    /// after `retryAfterMs`.
    pub const SESSION_RATE_LIMITED: u32 = 42901;
    /// `POST /v1/session` with app tokens: the token's subject (user) holds
    /// `--max-devices-per-subject` devices or `--max-sessions-per-subject` live sessions on this
    /// replica; retry after `retryAfterMs` (when the oldest expires).
    pub const SUBJECT_LIMIT: u32 = 42902;
    /// The replica's memory of recently used proofs (`jti`) is full for this device
    /// (`--proof-replay-per-device`), or full in total (`--proof-replay-capacity`) and this device
    /// is over its fair share of it: the request is
    /// refused rather than admitted unremembered; retry after `retryAfterMs`.
    pub const PROOF_REPLAY_FULL: u32 = 42903;
    /// This client id, or this client address, is over its share (requests per second or
    /// requests at once, on writes or on reads): not applied, resend after `retryAfterMs`.
    pub const RATE_LIMITED: u32 = 42910;
    /// `GET /healthz` or a static file: this client address is over its rate for them
    /// (`--static-rate-per-ip`); resend after `retryAfterMs`.
    pub const STATIC_RATE_LIMITED: u32 = 42911;
    /// `POST /v1/watch`: this client id has `--watch-max-streams-per-client` streams open
    /// already (close one, e.g. in another tab); retry after `retryAfterMs`.
    pub const WATCH_STREAMS_PER_CLIENT: u32 = 42920;
    /// `POST /v1/watch`: the gateway has `--watch-max-streams` streams open; retry after
    /// `retryAfterMs`.
    pub const WATCH_STREAMS_FULL: u32 = 42921;
    /// `POST /v1/watch`: this client address has `--watch-max-streams-per-ip` streams open;
    /// retry after `retryAfterMs`.
    pub const WATCH_STREAMS_PER_IP: u32 = 42922;
    /// Stored data failed its checksum (named in the message: aggregate and version). Nothing
    /// of a write was applied, and nothing corrupt is ever served; an operator must restore
    /// the store (`celeriant-gateway verify` lists what is damaged).
    pub const DATA_CORRUPT: u32 = 50001;
    /// The upstream store may or may not have applied the write (connection lost after send,
    /// response timeout, protocol error).
    pub const UPSTREAM_OUTCOME_UNKNOWN: u32 = 50200;
    /// An internal error after the write may have been handed to the store (travels with 502,
    /// like every `unknown` other than a timeout).
    pub const INTERNAL: u32 = 50201;
    /// The upstream store could not be reached; nothing was sent.
    pub const UPSTREAM_UNAVAILABLE: u32 = 50300;
    /// The gateway's own store cannot take writes now (it failed an I/O operation and is
    /// reopening itself): not applied, resend later. `GET /healthz` says why.
    pub const STORE_DEGRADED: u32 = 50301;
    /// The gateway gave up waiting; the write may still land.
    pub const GATEWAY_TIMEOUT: u32 = 50400;
    /// The store's disk has less free space than the gateway keeps in reserve
    /// (`--min-free-bytes`): not applied, resend later (an operator must free space).
    pub const INSUFFICIENT_STORAGE: u32 = 50700;

    /// Every gateway code, in numeric order. A number not in this list is not a gateway code.
    pub const ALL: [u32; 66] = [
        MALFORMED_JSON,
        INVALID_FIELD,
        NO_WRITES,
        EMPTY_EVENTS,
        CLIENT_SEQ_ZERO,
        CLIENT_SEQ_NOT_INCREASING,
        EVENT_TYPE_ZERO,
        INVALID_IV,
        DUPLICATE_AGGREGATE,
        TOO_MANY_EVENTS,
        EVENT_TOO_LARGE,
        WRITE_TOO_LARGE,
        TOO_MANY_AGGREGATES,
        INVALID_QUERY,
        INVALID_PUBLIC_KEY,
        INVALID_NONCE,
        INVALID_SIGNATURE,
        WATCH_TOO_MANY_AGGREGATES,
        TOO_MANY_MEMBERS,
        TOO_MANY_REVOCATIONS,
        DUPLICATE_HOST,
        SESSION_REQUIRED,
        SESSION_INVALID,
        SESSION_EXPIRED,
        SESSION_REVOKED,
        DEVICE_SIGNATURE_INVALID,
        NONCE_OUT_OF_WINDOW,
        NONCE_REPLAYED,
        APP_TOKEN_REQUIRED,
        APP_TOKEN_INVALID,
        APP_TOKEN_EXPIRED,
        PROOF_REQUIRED,
        PROOF_INVALID,
        PROOF_MISMATCH,
        PROOF_STALE,
        PROOF_REPLAYED,
        FAULTS_SECRET_REQUIRED,
        CLIENT_ID_MISMATCH,
        AGGREGATE_TYPE_FORBIDDEN,
        AGGREGATE_FORBIDDEN,
        NOT_OWNER,
        MEMBERS_NOT_ALLOWED,
        OPERATOR_REQUIRED,
        STORAGE_QUOTA_EXCEEDED,
        NOT_FOUND,
        METHOD_NOT_ALLOWED,
        REQUEST_TIMEOUT,
        BODY_TOO_LARGE,
        UNSUPPORTED_MEDIA_TYPE,
        HOST_NOT_ALLOWED,
        GATEWAY_BUSY,
        SESSION_RATE_LIMITED,
        SUBJECT_LIMIT,
        PROOF_REPLAY_FULL,
        RATE_LIMITED,
        STATIC_RATE_LIMITED,
        WATCH_STREAMS_PER_CLIENT,
        WATCH_STREAMS_FULL,
        WATCH_STREAMS_PER_IP,
        DATA_CORRUPT,
        UPSTREAM_OUTCOME_UNKNOWN,
        INTERNAL,
        UPSTREAM_UNAVAILABLE,
        STORE_DEGRADED,
        GATEWAY_TIMEOUT,
        INSUFFICIENT_STORAGE,
    ];

    /// Whether `code` is one of the gateway's own codes.
    pub fn is_gateway_code(code: u32) -> bool {
        ALL.contains(&code)
    }

    /// The HTTP status a gateway code travels with (its first three digits), or `None` when
    /// `code` is not a gateway code.
    pub fn http_status(code: u32) -> Option<u16> {
        is_gateway_code(code).then_some((code / 100) as u16)
    }
}

/// A short stable name for a code, for logs and messages (`"CLIENT_IDEMPOTENCY_VIOLATION"`).
pub fn name(code: u32) -> &'static str {
    use celeriant as c;
    use gateway as g;
    match code {
        c::EMPTY_EVENTS_LIST => "EMPTY_EVENTS_LIST",
        c::ZERO_EVENT_TYPE => "ZERO_EVENT_TYPE",
        c::CLIENT_IDEMPOTENCY_VIOLATION => "CLIENT_IDEMPOTENCY_VIOLATION",
        c::OPTIMISTIC_CONCURRENCY_VIOLATION => "OPTIMISTIC_CONCURRENCY_VIOLATION",
        c::FAILED_TO_SERIALISE_DATABLOCKS => "FAILED_TO_SERIALISE_DATABLOCKS",
        c::AGGREGATE_NOT_EXISTS => "AGGREGATE_NOT_EXISTS",
        c::AGGREGATE_RECREATE_NOT_ALLOWED => "AGGREGATE_RECREATE_NOT_ALLOWED",
        c::REPLICATION_ERROR => "REPLICATION_ERROR",
        c::FSYNC_ERROR => "FSYNC_ERROR",
        c::CACHE_AGGREGATE_CLIENT_ERROR => "CACHE_AGGREGATE_CLIENT_ERROR",
        c::AGGREGATE_EXISTS_CACHE_ERROR => "AGGREGATE_EXISTS_CACHE_ERROR",
        c::NOT_LEADER => "NOT_LEADER",
        c::REPLICATION_BACKPRESSURE => "REPLICATION_BACKPRESSURE",
        c::INFLIGHT_DUPLICATE => "INFLIGHT_DUPLICATE",
        c::MALFORMED_GUARD_ENTRY => "MALFORMED_GUARD_ENTRY",
        c::CONFLICT_RESPONSE_TOO_LARGE => "CONFLICT_RESPONSE_TOO_LARGE",
        c::SCHEMA_VALIDATION_FAILED => "SCHEMA_VALIDATION_FAILED",
        c::SCHEMA_COMPILATION_FAILED => "SCHEMA_COMPILATION_FAILED",
        c::REGISTER_SCHEMA_COORDINATION_FAILED => "REGISTER_SCHEMA_COORDINATION_FAILED",
        c::SHARD_ROUTING_NO_KEY => "SHARD_ROUTING_NO_KEY",
        c::SHARD_ROUTING_MULTIPLE_SHARDS => "SHARD_ROUTING_MULTIPLE_SHARDS",
        c::SHARD_ROUTING_INCOMPATIBLE_FILTERS => "SHARD_ROUTING_INCOMPATIBLE_FILTERS",
        c::IDENTITY_FIRST..=c::IDENTITY_LAST => "IDENTITY_OR_AUTH",
        c::SERVER_BUSY => "SERVER_BUSY",
        c::BATCH_INDEX_UNAVAILABLE => "BATCH_INDEX_UNAVAILABLE",
        g::MALFORMED_JSON => "MALFORMED_JSON",
        g::INVALID_FIELD => "INVALID_FIELD",
        g::NO_WRITES => "NO_WRITES",
        g::EMPTY_EVENTS => "EMPTY_EVENTS",
        g::CLIENT_SEQ_ZERO => "CLIENT_SEQ_ZERO",
        g::CLIENT_SEQ_NOT_INCREASING => "CLIENT_SEQ_NOT_INCREASING",
        g::EVENT_TYPE_ZERO => "EVENT_TYPE_ZERO",
        g::INVALID_IV => "INVALID_IV",
        g::DUPLICATE_AGGREGATE => "DUPLICATE_AGGREGATE",
        g::TOO_MANY_EVENTS => "TOO_MANY_EVENTS",
        g::EVENT_TOO_LARGE => "EVENT_TOO_LARGE",
        g::WRITE_TOO_LARGE => "WRITE_TOO_LARGE",
        g::TOO_MANY_AGGREGATES => "TOO_MANY_AGGREGATES",
        g::INVALID_QUERY => "INVALID_QUERY",
        g::INVALID_PUBLIC_KEY => "INVALID_PUBLIC_KEY",
        g::INVALID_NONCE => "INVALID_NONCE",
        g::INVALID_SIGNATURE => "INVALID_SIGNATURE",
        g::WATCH_TOO_MANY_AGGREGATES => "WATCH_TOO_MANY_AGGREGATES",
        g::DUPLICATE_HOST => "DUPLICATE_HOST",
        g::TOO_MANY_MEMBERS => "TOO_MANY_MEMBERS",
        g::TOO_MANY_REVOCATIONS => "TOO_MANY_REVOCATIONS",
        g::SESSION_REQUIRED => "SESSION_REQUIRED",
        g::SESSION_INVALID => "SESSION_INVALID",
        g::SESSION_EXPIRED => "SESSION_EXPIRED",
        g::SESSION_REVOKED => "SESSION_REVOKED",
        g::DEVICE_SIGNATURE_INVALID => "DEVICE_SIGNATURE_INVALID",
        g::NONCE_OUT_OF_WINDOW => "NONCE_OUT_OF_WINDOW",
        g::NONCE_REPLAYED => "NONCE_REPLAYED",
        g::APP_TOKEN_REQUIRED => "APP_TOKEN_REQUIRED",
        g::APP_TOKEN_INVALID => "APP_TOKEN_INVALID",
        g::APP_TOKEN_EXPIRED => "APP_TOKEN_EXPIRED",
        g::PROOF_REQUIRED => "PROOF_REQUIRED",
        g::PROOF_INVALID => "PROOF_INVALID",
        g::PROOF_MISMATCH => "PROOF_MISMATCH",
        g::PROOF_STALE => "PROOF_STALE",
        g::PROOF_REPLAYED => "PROOF_REPLAYED",
        g::FAULTS_SECRET_REQUIRED => "FAULTS_SECRET_REQUIRED",
        g::CLIENT_ID_MISMATCH => "CLIENT_ID_MISMATCH",
        g::AGGREGATE_TYPE_FORBIDDEN => "AGGREGATE_TYPE_FORBIDDEN",
        g::AGGREGATE_FORBIDDEN => "AGGREGATE_FORBIDDEN",
        g::NOT_OWNER => "NOT_OWNER",
        g::MEMBERS_NOT_ALLOWED => "MEMBERS_NOT_ALLOWED",
        g::OPERATOR_REQUIRED => "OPERATOR_REQUIRED",
        g::STORAGE_QUOTA_EXCEEDED => "STORAGE_QUOTA_EXCEEDED",
        g::NOT_FOUND => "NOT_FOUND",
        g::METHOD_NOT_ALLOWED => "METHOD_NOT_ALLOWED",
        g::REQUEST_TIMEOUT => "REQUEST_TIMEOUT",
        g::BODY_TOO_LARGE => "BODY_TOO_LARGE",
        g::UNSUPPORTED_MEDIA_TYPE => "UNSUPPORTED_MEDIA_TYPE",
        g::HOST_NOT_ALLOWED => "HOST_NOT_ALLOWED",
        g::GATEWAY_BUSY => "GATEWAY_BUSY",
        g::SESSION_RATE_LIMITED => "SESSION_RATE_LIMITED",
        g::SUBJECT_LIMIT => "SUBJECT_LIMIT",
        g::PROOF_REPLAY_FULL => "PROOF_REPLAY_FULL",
        g::RATE_LIMITED => "RATE_LIMITED",
        g::WATCH_STREAMS_PER_CLIENT => "WATCH_STREAMS_PER_CLIENT",
        g::WATCH_STREAMS_FULL => "WATCH_STREAMS_FULL",
        g::WATCH_STREAMS_PER_IP => "WATCH_STREAMS_PER_IP",
        g::STATIC_RATE_LIMITED => "STATIC_RATE_LIMITED",
        g::DATA_CORRUPT => "DATA_CORRUPT",
        g::UPSTREAM_OUTCOME_UNKNOWN => "UPSTREAM_OUTCOME_UNKNOWN",
        g::INTERNAL => "INTERNAL",
        g::UPSTREAM_UNAVAILABLE => "UPSTREAM_UNAVAILABLE",
        g::STORE_DEGRADED => "STORE_DEGRADED",
        g::GATEWAY_TIMEOUT => "GATEWAY_TIMEOUT",
        g::INSUFFICIENT_STORAGE => "INSUFFICIENT_STORAGE",
        _ => "UNKNOWN_CODE",
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn gateway_codes_are_sorted_distinct_named_and_their_first_digits_are_a_status() {
        assert!(gateway::ALL.windows(2).all(|w| w[0] < w[1]));
        for code in gateway::ALL {
            assert_ne!(name(code), "UNKNOWN_CODE", "{code}");
            assert!((40_000..60_000).contains(&code), "{code}");
            assert_eq!(gateway::http_status(code), Some((code / 100) as u16));
        }
        assert_eq!(gateway::http_status(gateway::INTERNAL), Some(502));
        assert_eq!(gateway::http_status(40_002), None);
        assert_eq!(gateway::http_status(celeriant::INFLIGHT_DUPLICATE), None);
    }

    #[test]
    fn every_named_code_in_the_gateway_space_is_listed() {
        for code in 40_000..60_000 {
            assert_eq!(
                name(code) != "UNKNOWN_CODE",
                gateway::is_gateway_code(code),
                "{code}"
            );
        }
    }
}
