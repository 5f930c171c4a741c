//! Device identity: who may write and read, proven rather than claimed.
//!
//! A client id is the hash of a device's public key. `POST /v1/session` checks the device's
//! signature over a fresh nonce ([`device`]), refuses replays ([`replay`], with a reserve for
//! devices that have written before, [`established`]) and floods ([`rate`]), optionally checks the app's own token ([`app_token`]) and caps what one app
//! user may hold ([`subjects`]), and issues a stateless
//! token bound to the client id ([`token`], under the secret of [`secret`]). Every write and
//! read then runs under a [`Session`]: no valid token is a 401 (`unauthorized`: the client opens
//! a new session and resends), and a write under another client id, or to an aggregate type the
//! session may not touch, is a 403 (`rejected`); a token the operator revoked ([`revoke`]) is a
//! 401 (40103). Unless `--proofs off`, every such request also carries a `DPoP` proof signed by
//! the device's key ([`proof`]), each used once ([`proof_replay`]): a copied token alone is
//! refused (401). With `--auth none` (loopback only) every
//! request runs under an unrestricted session, as before device identity existed.

pub mod app_token;
pub mod bearer;
pub mod device;
pub mod established;
pub mod faults_secret;
pub mod operator;
pub mod proof;
pub mod proof_replay;
pub mod rate;
pub mod replay;
pub mod revoke;
pub mod secret;
pub mod subjects;
pub mod token;

use axum::extract::FromRequestParts;
use axum::http::request::Parts;
use celeriant_sync_protocol::codes::gateway as g;
use uuid::Uuid;

use self::app_token::AppTokens;
use self::bearer::{Bearer, bearer};
use self::operator::OperatorToken;
use self::proof_replay::{Admit, ProofReplay};
use self::rate::SessionLimiter;
use self::replay::ReplayCache;
use self::revoke::TokenFacts;
use self::subjects::SubjectCaps;
use self::token::SessionKeys;
use crate::access::{Actor, Principal};
use crate::config::{AuthMode, Config, ProofMode};
use crate::error::ApiError;
use crate::limits::notice::Throttle;
use crate::state::AppState;

/// Everything the gateway needs to open and check sessions.
pub struct Auth {
    /// Whether writes and reads need a session.
    pub mode: AuthMode,
    /// Signs and verifies session tokens.
    pub keys: SessionKeys,
    /// A session's lifetime, in seconds.
    pub ttl_secs: u64,
    /// The app-token verifier, when app tokens are required.
    pub app: Option<AppTokens>,
    /// Recently accepted (key, nonce) pairs.
    pub replay: ReplayCache,
    /// Client ids with a landed write: the replay cache keeps a reserve for them.
    pub established: established::Established,
    /// Session creations per address.
    pub limiter: SessionLimiter,
    /// Devices and live sessions per app-token subject.
    pub subjects: SubjectCaps,
    /// The operator credential, when `--operator-token-file` is given.
    pub operator: Option<OperatorToken>,
    /// The revocations every session is checked against (`revoke`).
    pub revocations: std::sync::Arc<revoke::Revocations>,
    /// Whether requests under a session need a `DPoP` proof.
    pub proofs: ProofMode,
    /// Recently accepted request proofs.
    pub proof_replay: ProofReplay,
}

impl Auth {
    /// The auth settings of `config`, loading (or generating) the session secret.
    pub fn from_config(config: &Config) -> Result<Self, String> {
        let (secret, source) = secret::load(config)?;
        tracing::info!(?source, mode = ?config.auth, "session secret loaded");
        Ok(Auth {
            mode: config.auth,
            keys: SessionKeys::new(&secret),
            ttl_secs: config.session_ttl_secs,
            app: AppTokens::from_config(config)?,
            replay: ReplayCache::new(config.session_replay_capacity)
                .bucket_cap(config.session_rate_per_minute > 0),
            established: established::Established::new(config.session_replay_capacity),
            limiter: SessionLimiter::new(config.session_rate_per_minute, config.session_burst),
            subjects: SubjectCaps::new(
                config.max_devices_per_subject,
                config.max_sessions_per_subject,
                config.session_replay_capacity,
            ),
            operator: config
                .operator_token_file
                .as_deref()
                .map(OperatorToken::load)
                .transpose()?,
            revocations: std::sync::Arc::new(revoke::Revocations::new()),
            proofs: config.proofs,
            proof_replay: ProofReplay::new(
                config.proof_replay_per_device,
                config.proof_replay_capacity,
            )
            .bucket_cap(config.limits.rate_per_ip > 0),
        })
    }
}

/// The session a write or read runs under.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Session {
    /// The proven client id; `None` under `--auth none`.
    pub client_id: Option<Uuid>,
    /// The aggregate types allowed; `None`: all.
    pub types: Option<Vec<Uuid>>,
    /// When the session expires, Unix seconds (`None` under `--auth none` and for the
    /// operator): a change stream ends then.
    pub expires_at: Option<u64>,
    /// Who the access policy sees.
    pub actor: Actor,
    /// The token's id and issue time (`None` under `--auth none` and for the operator), so a
    /// long-lived change stream can be checked against revocations made after it opened.
    pub token: Option<TokenId>,
    /// The SHA-256 of the body the request's proof was made for (`None`: no proof required).
    pub body_hash: Option<[u8; 32]>,
}

/// What identifies a session's token for revocation.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TokenId {
    /// The token's `jti`.
    pub jti: Option<Uuid>,
    /// Issued at, Unix seconds.
    pub iat: u64,
}

impl Session {
    /// Whether a revocation now covers this session's token (always false without a token).
    pub fn revoked(&self, revocations: &revoke::Revocations) -> bool {
        match (&self.token, self.client_id, &self.actor) {
            (Some(t), Some(client_id), Actor::Principal(principal)) => revocations
                .check_token(&TokenFacts {
                    client_id,
                    principal,
                    jti: t.jti,
                    iat: t.iat,
                })
                .is_err(),
            _ => false,
        }
    }
}

impl Session {
    /// Refuses (401, `PROOF_MISMATCH`) a body the request's proof was not made for. Every
    /// route that reads a body calls it before parsing it; routes without one are checked
    /// against the empty body when the session is extracted.
    pub fn check_body(&self, body: &[u8]) -> Result<(), ApiError> {
        match &self.body_hash {
            Some(expected) => proof::check_body(expected, body),
            None => Ok(()),
        }
    }

    /// Refuses (403) a write whose body names another client id than the session's.
    pub fn check_client(&self, client_id: Uuid) -> Result<(), ApiError> {
        match self.client_id {
            Some(own) if own != client_id => Err(ApiError::code(
                g::CLIENT_ID_MISMATCH,
                format!("clientId {client_id} is not this session's client id {own}"),
            )),
            _ => Ok(()),
        }
    }

    /// Refuses (403) an aggregate type outside the session's access list.
    pub fn check_type(&self, type_id: Uuid) -> Result<(), ApiError> {
        if type_id == crate::access::RESERVED_TYPE {
            return Err(ApiError::code(
                g::AGGREGATE_TYPE_FORBIDDEN,
                format!("aggregate type {type_id} is reserved for the gateway's access records"),
            ));
        }
        match &self.types {
            Some(types) if !types.contains(&type_id) => Err(ApiError::code(
                g::AGGREGATE_TYPE_FORBIDDEN,
                format!("this session may not write or read aggregate type {type_id}"),
            )),
            _ => Ok(()),
        }
    }
}

impl FromRequestParts<AppState> for Session {
    type Rejection = ApiError;

    async fn from_request_parts(parts: &mut Parts, state: &AppState) -> Result<Self, ApiError> {
        if state.auth.mode == AuthMode::None {
            return Ok(Session {
                client_id: None,
                types: None,
                expires_at: None,
                actor: Actor::Unchecked,
                token: None,
                body_hash: None,
            });
        }
        let token = match bearer(&parts.headers) {
            Bearer::Operator(secret) => return operator(state, parts, secret),
            Bearer::Token(token) => token,
            Bearer::Missing => {
                return Err(ApiError::code(
                    g::SESSION_REQUIRED,
                    "no session: open one at POST /v1/session and send Authorization: Bearer <token>",
                ));
            }
            Bearer::Malformed(why) => {
                return Err(ApiError::code(
                    g::SESSION_REQUIRED,
                    format!("no session: {why}"),
                ));
            }
        };
        let claims = state.auth.keys.verify(token)?;
        let principal = match claims.principal.as_deref() {
            None => Principal::device(claims.sub),
            Some(text) => Principal::parse(text).map_err(|e| {
                ApiError::code(g::SESSION_INVALID, format!("the session's principal: {e}"))
            })?,
        };
        let facts = TokenFacts {
            client_id: claims.sub,
            principal: &principal,
            jti: claims.jti,
            iat: claims.iat,
        };
        state
            .auth
            .revocations
            .wait_loaded(revoke::FIRST_LOAD_WAIT)
            .await;
        if let Err(refused) = state.auth.revocations.check_token(&facts) {
            // Debug only: a revoked token's holder must not be able to flood the log.
            tracing::debug!(client = %claims.sub, jti = ?claims.jti, code = refused.0.code(), "session refused by the revocation check");
            return Err(refused);
        }
        let body_hash = match state.auth.proofs {
            ProofMode::Off => None,
            ProofMode::Required => Some(check_proof(state, parts, token, claims.sub)?),
        };
        Ok(Session {
            client_id: Some(claims.sub),
            types: claims.types,
            expires_at: Some(claims.exp),
            actor: Actor::Principal(principal),
            token: Some(TokenId {
                jti: claims.jti,
                iat: claims.iat,
            }),
            body_hash,
        })
    }
}

/// Checks the request's `DPoP` proof (`proof`) and remembers its `jti`; returns the hash of
/// the body it was made for. A request without a body (`GET`) is checked against the empty
/// body here, so its handler has nothing left to check.
fn check_proof(
    state: &AppState,
    parts: &Parts,
    token: &str,
    client_id: Uuid,
) -> Result<[u8; 32], ApiError> {
    // Never behind what the replay cache expired entries by (see `ProofReplay::now_ms`).
    let now = state.auth.proof_replay.now_ms(now_ms());
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    let checked = proof::verify(
        proof::header(&parts.headers)?,
        &proof::Expected {
            method: &parts.method,
            target,
            token,
            client_id,
            now_ms: now,
        },
    )?;
    if matches!(
        parts.method,
        axum::http::Method::GET | axum::http::Method::HEAD
    ) {
        proof::check_body(&checked.body_hash, b"")?;
    }
    // An established device's reserve entries count under its address bucket.
    let established = state
        .auth
        .established
        .contains(&client_id)
        .then(|| crate::limits::ip::bucket(crate::limits::ip::peer(&parts.extensions)));
    match state
        .auth
        .proof_replay
        .admit(client_id, &checked.jti, now, established)
    {
        Admit::Fresh => Ok(checked.body_hash),
        Admit::Replayed => Err(ApiError::code(
            g::PROOF_REPLAYED,
            "this DPoP proof (jti) was already used; sign a fresh one for every request",
        )),
        Admit::Full { retry_after_ms } => {
            // One line per interval, not per refusal: a flooding device must not flood the log.
            static FULL_LOG: Throttle = Throttle::new();
            if let Some(suppressed) = FULL_LOG.allow() {
                tracing::warn!(client = %client_id, suppressed, "proof replay cache full: refusing for now");
            }
            Err(ApiError(celeriant_sync_protocol::WriteOutcome::Retry(
                celeriant_sync_protocol::outcome::Failure {
                    retry_after_ms: Some(retry_after_ms),
                    ..celeriant_sync_protocol::outcome::Failure::new(
                        g::PROOF_REPLAY_FULL,
                        "too many recent requests from this device (or in all); retry shortly",
                    )
                },
            )))
        }
    }
}

/// The session of `Authorization: Operator <secret>`: reads everything, writes nothing. Every
/// use is logged (the path through `Debug`, so no byte of it can start a new log line).
fn operator(state: &AppState, parts: &Parts, secret: &str) -> Result<Session, ApiError> {
    let accepted = state
        .auth
        .operator
        .as_ref()
        .is_some_and(|token| token.matches(secret));
    let path = parts.uri.path();
    if !accepted {
        tracing::warn!(method = %parts.method, path = ?path, "operator credential refused");
        return Err(ApiError::code(
            g::SESSION_INVALID,
            "the operator credential is not valid here",
        ));
    }
    tracing::warn!(method = %parts.method, path = ?path, query = ?parts.uri.query(), "operator credential used");
    Ok(Session {
        client_id: None,
        types: None,
        expires_at: None,
        actor: Actor::Operator,
        token: None,
        body_hash: None,
    })
}

/// The gateway's clock, Unix milliseconds.
pub fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The reserves' bucket caps follow their per-address limits (docs/deploy.md: 0 behind a
    /// reverse proxy not named with `--trusted-proxy`).
    #[test]
    fn the_replay_reserves_bucket_caps_are_off_with_their_per_address_limits() {
        let mut config = Config::defaults();
        config.session_secret = Some("s".repeat(64));
        let auth = Auth::from_config(&config).unwrap();
        assert_eq!(
            (auth.replay.bucket_part(), auth.proof_replay.bucket_part()),
            (3_125, 8_192)
        );
        config.session_rate_per_minute = 0;
        config.limits.rate_per_ip = 0;
        let auth = Auth::from_config(&config).unwrap();
        assert_eq!(
            (auth.replay.bucket_part(), auth.proof_replay.bucket_part()),
            (usize::MAX, usize::MAX)
        );
    }
}
