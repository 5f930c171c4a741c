//! Sessions: what the drain needs to write under the device's proven identity.
//!
//! Every write carries a session token the gateway issued after the device signed a fresh
//! nonce with its key (`POST /v1/session`). The drain opens a session before its first send,
//! again whenever the gateway answers `unauthorized` (missing, expired, forged — e.g. after the
//! gateway's secret was rotated), and a little before the token expires. Opening one is the
//! [`Authenticator`]'s business (WebCrypto and `fetch` in a browser); deciding when is the
//! drain's ([`super::drain::Drain`]). Nothing about a session ever parks, drops or renumbers an
//! event: a batch refused for want of a session is resent, byte for byte, once one is open.

use std::future::Future;

/// An open session.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The bearer token for writes (and reads).
    pub token: String,
    /// When the gateway stops accepting it (Unix ms, this device's clock).
    pub expires_at: u64,
}

/// Why a session could not be opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AuthFailure {
    /// The gateway's code, when it answered with one.
    pub code: Option<u32>,
    /// What happened.
    pub message: String,
    /// How long the gateway asked to wait (a rate limit), if it did.
    pub retry_after_ms: Option<u64>,
    /// The gateway opened a session, but for another principal (user) than the one this
    /// outbox is bound to: the session is dropped unused and the drain reports
    /// [`super::status::SyncState::WrongUser`] until the app signs the right user in again.
    pub wrong_user: bool,
}

/// Opens sessions for this device.
pub trait Authenticator {
    /// Signs a fresh nonce and asks the gateway for a session.
    fn open_session(&self) -> impl Future<Output = Result<Session, AuthFailure>>;
}

/// Renew this long before a session expires, so a batch never leaves with a token about to die.
pub const RENEW_BEFORE_MS: u64 = 60_000;
