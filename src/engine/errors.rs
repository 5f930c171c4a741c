//! The stable codes of everything the client rejects or throws with, as one enum.
//!
//! JavaScript sees each as the `code` of a `CeleriantSyncError` (a string, [`ErrorCode::as_str`])
//! and TypeScript as the `SyncErrorCode` union, which a test checks against [`ErrorCode::ALL`]
//! (`tests/error_codes.rs`). The engine's own errors map to codes here, so the mapping is tested
//! natively.

use celeriant_sync_protocol::validate::ValidationError;

use super::append::AppendError;
use super::drain::FlushError;
use super::outbox::StoreError;

macro_rules! codes {
    ($($(#[$doc:meta])* $name:ident = $text:literal,)*) => {
        /// A stable error code.
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum ErrorCode {
            $($(#[$doc])* $name,)*
        }

        impl ErrorCode {
            /// Every code, in declaration order.
            pub const ALL: &'static [ErrorCode] = &[$(ErrorCode::$name,)*];

            /// The code as JavaScript sees it.
            pub fn as_str(self) -> &'static str {
                match self {
                    $(ErrorCode::$name => $text,)*
                }
            }
        }
    };
}

codes! {
    /// A bad or unknown option.
    InvalidOptions = "INVALID_OPTIONS",
    /// The aggregate is not `{ typeId, id }` with UUID strings.
    InvalidAggregate = "INVALID_AGGREGATE",
    /// `appendAtomic`'s writes are not an array of 2 to 16 `{ aggregate, events,
    /// expectedVersion? }` naming each aggregate at most once.
    InvalidWrites = "INVALID_WRITES",
    /// `events` is not an array.
    InvalidEvents = "INVALID_EVENTS",
    /// `events` is empty.
    EmptyEvents = "EMPTY_EVENTS",
    /// More events than one append may carry.
    TooManyEvents = "TOO_MANY_EVENTS",
    /// An event is not an object, or has an unknown field.
    InvalidEvent = "INVALID_EVENT",
    /// An event's `type` is not an integer ≥ 1.
    InvalidEventType = "INVALID_EVENT_TYPE",
    /// An event's `minor` is not an integer ≥ 0.
    InvalidMinor = "INVALID_MINOR",
    /// An event id is not a UUID.
    InvalidEventId = "INVALID_EVENT_ID",
    /// An `iv` is not 12 bytes.
    InvalidIv = "INVALID_IV",
    /// `data` is missing or has no JSON encoding.
    DataNotSerializable = "DATA_NOT_SERIALIZABLE",
    /// `data` is over the per-event limit.
    EventTooLarge = "EVENT_TOO_LARGE",
    /// `append`/`appendAtomic`/`decide`: the module's appends not stored yet hold 256 MiB, or
    /// `append` was called from inside another append's arguments (a getter, `toJSON`);
    /// nothing was stored — await them, then try again.
    Busy = "BUSY",
    /// The browser refused to store more.
    QuotaExceeded = "QUOTA_EXCEEDED",
    /// Any other storage failure.
    StorageFailed = "STORAGE_FAILED",
    /// The database was deleted or evicted under the running client: what was pending is
    /// lost (`client.storage.lost` says what), and the client never recreates it.
    StorageLost = "STORAGE_LOST",
    /// An aggregate the call waits for is parked.
    Parked = "PARKED",
    /// The event was parked and then discarded.
    Discarded = "DISCARDED",
    /// The client is closed.
    Closed = "CLOSED",
    /// The environment lacks what the client needs.
    Unsupported = "UNSUPPORTED",
    /// `signOut` without `discardPending` while events are pending or parked.
    PendingEvents = "PENDING_EVENTS",
    /// The database belongs to another user than `open`'s `user` option; or (`share`,
    /// `unshare`, `members`) the gateway opened a session for another user than this
    /// database's.
    WrongUser = "WRONG_USER",
    /// `share`, `unshare`, `members`: the client is offline (`setOffline(true)` or the
    /// device); nothing was sent.
    Offline = "OFFLINE",
    /// `share`, `unshare`, `members`: no such aggregate, or one this user may not read.
    NotFound = "NOT_FOUND",
    /// `share`, `unshare`: only the aggregate's owner changes its members.
    NotOwner = "NOT_OWNER",
    /// `share`: the gateway's policy gives this aggregate type no members (or only readers).
    MembersNotAllowed = "MEMBERS_NOT_ALLOWED",
    /// `share`: the aggregate has the most members allowed (256).
    TooManyMembers = "TOO_MANY_MEMBERS",
    /// `share`, `unshare`: the principal is not `user:<subject>` or `device:<clientId>`, or is
    /// the owner.
    InvalidPrincipal = "INVALID_PRINCIPAL",
    /// `share`: `access` is not `"read"` or `"readWrite"`.
    InvalidAccess = "INVALID_ACCESS",
    /// `share`, `unshare`, `members`: this user's app token does not allow the aggregate's
    /// type (its `celeriant_types`).
    TypeForbidden = "TYPE_FORBIDDEN",
    /// `share`, `unshare`, `members`: no session could be opened, or the gateway refused it
    /// (e.g. revoked, `serverCode` 40103).
    Unauthorized = "UNAUTHORIZED",
    /// `share`, `unshare`, `members`: the request failed (network, timeout, a busy or failing
    /// gateway); nothing is known to have changed — try again.
    RequestFailed = "REQUEST_FAILED",
    /// A projection's `apply` threw (the thrown value is the error's `cause`); the projection
    /// keeps its last good state and folds again at the next change.
    ProjectionFailed = "PROJECTION_FAILED",
    /// `append` with `encryption`: the key function threw or gave something that is not an
    /// AES-GCM `CryptoKey`, or WebCrypto refused to encrypt; nothing was stored.
    EncryptionFailed = "ENCRYPTION_FAILED",
    /// `append` with `encryption`: an event the encryption applies to came with its own `iv`
    /// (the client makes the nonce; nothing was stored).
    IvNotAllowed = "IV_NOT_ALLOWED",
    /// A view or parked event's `decryptError`: WebCrypto could not decrypt it (another key, or
    /// the bytes were changed); its `data` is left as stored.
    DecryptFailed = "DECRYPT_FAILED",
    /// A view or parked event's `decryptError`: the event is encrypted and no key was had for
    /// it (the key function gave null, threw, or gave something that is not a key).
    KeyUnavailable = "KEY_UNAVAILABLE",
    /// A view or parked event's `decryptError`: its type is encrypted and its aggregate has a
    /// key, but it arrived without an `iv` (stored in the clear: before encryption was turned
    /// on, by a context without it, or forged by a writer); its `data` is as stored and
    /// unauthenticated.
    NotEncrypted = "NOT_ENCRYPTED",
    /// `decide`: the aggregate changed under every attempt (`maxAttempts` conflicts, 2003):
    /// contention, surfaced; nothing of the attempts was written.
    Contention = "CONTENTION",
}

impl From<&StoreError> for ErrorCode {
    fn from(e: &StoreError) -> Self {
        match e {
            StoreError::QuotaExceeded(..) => ErrorCode::QuotaExceeded,
            StoreError::Closed => ErrorCode::Closed,
            StoreError::Failed { .. } | StoreError::Corrupt(_) => ErrorCode::StorageFailed,
        }
    }
}

impl From<&AppendError> for ErrorCode {
    fn from(e: &AppendError) -> Self {
        match e {
            AppendError::Empty => ErrorCode::EmptyEvents,
            AppendError::TooMany { .. } => ErrorCode::TooManyEvents,
            AppendError::Invalid { error, .. } => match error {
                ValidationError::EventTypeZero { .. } => ErrorCode::InvalidEventType,
                ValidationError::InvalidIv { .. } => ErrorCode::InvalidIv,
                ValidationError::EventTooLarge { .. } => ErrorCode::EventTooLarge,
                _ => ErrorCode::InvalidEvent,
            },
        }
    }
}

impl From<&FlushError> for ErrorCode {
    fn from(e: &FlushError) -> Self {
        match e {
            FlushError::Parked { .. } => ErrorCode::Parked,
            FlushError::Discarded(_) => ErrorCode::Discarded,
            FlushError::Closed => ErrorCode::Closed,
            FlushError::Store(e) => e.into(),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_are_distinct_screaming_snake_case() {
        let mut seen = std::collections::HashSet::new();
        for code in ErrorCode::ALL {
            let text = code.as_str();
            assert!(seen.insert(text), "{text} twice");
            assert!(
                text.bytes().all(|b| b.is_ascii_uppercase() || b == b'_'),
                "{text}"
            );
        }
    }

    #[test]
    fn engine_errors_map_to_their_codes() {
        use super::super::outbox::Cause;
        assert_eq!(
            ErrorCode::from(&StoreError::QuotaExceeded(String::new(), Cause::NONE)),
            ErrorCode::QuotaExceeded
        );
        assert_eq!(ErrorCode::from(&StoreError::Closed), ErrorCode::Closed);
        assert_eq!(
            ErrorCode::from(&FlushError::Store(StoreError::Corrupt("x".into()))),
            ErrorCode::StorageFailed
        );
        let zero = AppendError::Invalid {
            index: 0,
            error: ValidationError::EventTypeZero { at: "e".into() },
        };
        assert_eq!(ErrorCode::from(&zero), ErrorCode::InvalidEventType);
        assert_eq!(ErrorCode::from(&AppendError::Empty), ErrorCode::EmptyEvents);
    }
}
