//! Opening sessions at the gateway: the engine's [`Authenticator`] in a browser.
//!
//! A session is asked for with `POST /v1/session { publicKey, nonce, signature }`: the nonce is
//! the current time in milliseconds (corrected by the gateway's clock, learnt from `serverTime`
//! in every answer), signed with the device's non-extractable key. When the app gave an `auth`
//! callback, its token goes along as `Authorization: Bearer` — on this request only; it is
//! asked for again on every session opening, so an expired app token is replaced.
//!
//! Every session names its principal (`user:<sub>` with app tokens): the outbox is bound to the
//! first one ([`super::idb::principal`]), and a session for anyone else is dropped unused and
//! reported as [`AuthFailure::wrong_user`], so one user's events never leave under another's.
//!
//! A nonce the gateway finds outside its window (a skewed clock) or already used is corrected
//! and retried once at once; anything else is reported to the drain, which keeps the events
//! and tries again later.
//!
//! The last session opened is kept ([`GatewaySessions::token`]): the reader reads its pages and
//! opens its change stream under the drain's session rather than open one of its own. The
//! drain's machine still decides for itself when to open one (its session is part of its
//! state), and every session it opens replaces the kept one.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use js_sys::Function;
use wasm_bindgen::JsValue;
use wasm_bindgen_futures::JsFuture;

use super::fetch::{error_text, post};
use super::idb::outbox::IdbOutbox;
use super::idb::principal::Binding;
use super::identity::{Identity, sign};
use super::network::{NetworkSwitch, SWITCHED_OFF};
use crate::engine::auth::{AuthFailure, Authenticator, RENEW_BEFORE_MS, Session};
use crate::engine::env::Reply;
use celeriant_sync_protocol::WriteOutcome;
use celeriant_sync_protocol::codes::gateway as g;
use celeriant_sync_protocol::encoding::encode_base64;
use celeriant_sync_protocol::json::{Members, Scalar};

/// The longest app token taken from the `auth` callback, in UTF-16 units (twice the gateway's
/// bound on bearer tokens, 8 192 bytes: a longer one could never be accepted).
const MAX_APP_TOKEN: u32 = 16_384;

/// Opens sessions for one device at one gateway.
pub(crate) struct GatewaySessions {
    /// `{gateway}/v1/session`.
    pub url: String,
    /// The device.
    pub identity: Identity,
    /// The app's `auth` callback, if it gave one: `() => Promise<string | null>`.
    pub app_auth: Option<Function>,
    /// Per-request timeout.
    pub timeout_ms: u32,
    /// The client's network switch: off, no session is asked for.
    pub network: NetworkSwitch,
    /// The outbox, bound to the principal of its sessions.
    outbox: Rc<IdbOutbox>,
    /// The gateway's clock minus this device's, in ms (learnt from `serverTime`).
    offset: Cell<f64>,
    /// The last nonce sent, so the next is always larger (a replayed nonce is refused).
    last_nonce: Cell<u64>,
    /// The last session opened (by the drain or through [`GatewaySessions::token`]), until a
    /// request under it is refused.
    current: RefCell<Option<Session>>,
}

fn failure(code: Option<u32>, message: impl Into<String>) -> AuthFailure {
    AuthFailure {
        code,
        message: message.into(),
        retry_after_ms: None,
        wrong_user: false,
    }
}

/// What one attempt established.
enum Attempt {
    Opened(Session),
    /// The nonce was refused (clock, replay): try again at once with a fresh one.
    NonceRefused(AuthFailure),
    Failed(AuthFailure),
}

impl GatewaySessions {
    /// Sessions for `identity` at `gateway_url`.
    pub(crate) fn new(
        gateway_url: &str,
        identity: Identity,
        app_auth: Option<Function>,
        timeout_ms: u32,
        network: NetworkSwitch,
        outbox: Rc<IdbOutbox>,
    ) -> Self {
        GatewaySessions {
            url: format!(
                "{gateway_url}{}",
                celeriant_sync_protocol::session::SESSION_PATH
            ),
            identity,
            app_auth,
            timeout_ms,
            network,
            outbox,
            offset: Cell::new(0.0),
            last_nonce: Cell::new(0),
            current: RefCell::new(None),
        }
    }

    /// A request proof for `method url` with `body` under `token`, at the gateway's clock as
    /// last learnt from `serverTime`.
    pub(crate) async fn proof(
        &self,
        method: &str,
        url: &str,
        body: &str,
        token: &str,
    ) -> Result<String, String> {
        let now = (js_sys::Date::now() + self.offset.get()).max(0.0);
        super::proof::sign(&self.identity.key_pair, method, url, body, token, now).await
    }

    /// The app's token, from its callback (`null` or no callback: none).
    async fn app_token(&self) -> Result<Option<String>, AuthFailure> {
        let Some(auth) = &self.app_auth else {
            return Ok(None);
        };
        let called = auth
            .call0(&JsValue::UNDEFINED)
            .map_err(|e| failure(None, format!("the auth callback threw: {}", error_text(&e))))?;
        let value = JsFuture::from(super::js::adopt(&called))
            .await
            .map_err(|e| {
                failure(
                    None,
                    format!("the auth callback failed: {}", error_text(&e)),
                )
            })?;
        if value.is_null() || value.is_undefined() {
            return Ok(None);
        }
        // Read through a bounded copy: a string of any length is copied whole by `as_string`
        // (the gateway takes tokens of at most 8 192 bytes anyway).
        super::js::short_string(&value, MAX_APP_TOKEN)
            .map(Some)
            .ok_or_else(|| {
                failure(
                    None,
                    format!(
                        "the auth callback must resolve with a string (a token) of at most \
                         {MAX_APP_TOKEN} characters, or null"
                    ),
                )
            })
    }

    fn learn_clock(&self, server_time: Option<u64>, at: f64) {
        if let Some(server) = server_time {
            self.offset.set(server as f64 - at);
        }
    }

    async fn attempt(&self) -> Attempt {
        if self.network.is_off() {
            return Attempt::Failed(failure(None, SWITCHED_OFF));
        }
        let app_token = match self.app_token().await {
            Ok(token) => token,
            Err(f) => return Attempt::Failed(f),
        };
        let now = (js_sys::Date::now() + self.offset.get()).max(0.0) as u64;
        let nonce = now.max(self.last_nonce.get() + 1);
        self.last_nonce.set(nonce);
        let nonce = nonce.to_string();
        let signature = match sign(&self.identity.key_pair, &nonce).await {
            Ok(s) => s,
            Err(e) => return Attempt::Failed(failure(None, e.to_string())),
        };
        let body = format!(
            r#"{{"publicKey":"{}","nonce":"{nonce}","signature":"{}"}}"#,
            self.identity.public_key,
            encode_base64(&signature)
        );
        let reply = post(
            &self.url,
            &body,
            app_token.as_deref(),
            None,
            self.timeout_ms,
        )
        .await;
        let answered_at = js_sys::Date::now();
        let (status, retry_after, body) = match reply {
            Reply::Http {
                status,
                retry_after,
                body: Ok(body),
            } => (status, retry_after, body),
            Reply::Http {
                status,
                body: Err(e),
                ..
            } => {
                return Attempt::Failed(failure(
                    None,
                    format!("HTTP {status}, session answer lost: {e}"),
                ));
            }
            Reply::Failed { message, .. } => {
                return Attempt::Failed(failure(None, format!("no session: {message}")));
            }
        };
        if status == 200 {
            return match parse_session(&body) {
                Some(opened) => {
                    self.learn_clock(Some(opened.server_time), answered_at);
                    if opened.client_id != self.identity.client_id.to_string() {
                        return Attempt::Failed(failure(
                            None,
                            "the gateway derived another client id from this device's key",
                        ));
                    }
                    // A session for this very device (a gateway without app tokens has no users
                    // to confuse) is never another user's: nothing to bind or compare.
                    let own = format!("device:{}", self.identity.client_id);
                    let binding = if opened.principal == own {
                        Ok(Binding::Same)
                    } else {
                        self.outbox.bind_principal(&opened.principal).await
                    };
                    match binding {
                        Ok(Binding::Same) => {}
                        Ok(Binding::Other(bound)) => {
                            return Attempt::Failed(AuthFailure {
                                wrong_user: true,
                                ..failure(
                                    None,
                                    format!(
                                        "the session is {}'s but this database belongs to {bound}: \
                                         nothing is sent under it",
                                        opened.principal
                                    ),
                                )
                            });
                        }
                        Err(e) => {
                            return Attempt::Failed(failure(
                                None,
                                format!("cannot check whose this database is: {e}"),
                            ));
                        }
                    }
                    Attempt::Opened(Session {
                        token: opened.token,
                        // In this device's clock.
                        expires_at: (opened.expires_at as f64 - self.offset.get()).max(0.0) as u64,
                    })
                }
                None => Attempt::Failed(failure(None, format!("HTTP {status}, not a session"))),
            };
        }
        let Some(outcome) = WriteOutcome::parse(&body) else {
            return Attempt::Failed(failure(
                None,
                format!("HTTP {status} without a protocol body"),
            ));
        };
        let Some(f) = outcome.failure() else {
            return Attempt::Failed(failure(None, format!("HTTP {status}, not a session")));
        };
        self.learn_clock(f.server_time, answered_at);
        let header_ms = retry_after
            .and_then(|s| s.trim().parse::<u64>().ok())
            .map(|s| s.saturating_mul(1000));
        let refused = AuthFailure {
            code: Some(f.code),
            message: f.message.clone(),
            retry_after_ms: f.retry_after_ms.or(header_ms),
            wrong_user: false,
        };
        if matches!(f.code, g::NONCE_OUT_OF_WINDOW | g::NONCE_REPLAYED) {
            Attempt::NonceRefused(refused)
        } else {
            Attempt::Failed(refused)
        }
    }
}

struct Opened {
    client_id: String,
    token: String,
    principal: String,
    expires_at: u64,
    server_time: u64,
}

fn parse_session(body: &str) -> Option<Opened> {
    let members = Members::parse(body)?;
    let text = |name: &str| match members.get(name).ok()? {
        Some(Scalar::Str(s)) => Some(s.clone()),
        _ => None,
    };
    let number = |name: &str| match members.get(name).ok()? {
        Some(Scalar::Int(n)) => Some(*n),
        _ => None,
    };
    Some(Opened {
        client_id: text("clientId")?,
        token: text("token")?,
        principal: text("principal")?,
        expires_at: number("expiresAt")?,
        server_time: number("serverTime")?,
    })
}

impl GatewaySessions {
    /// The token of a session good for [`RENEW_BEFORE_MS`] more: the last one opened (most
    /// often the drain's), or a new one.
    pub(crate) async fn token(&self) -> Result<String, AuthFailure> {
        if let Some(session) = self.current.borrow().as_ref()
            && session.expires_at > js_sys::Date::now() as u64 + RENEW_BEFORE_MS
        {
            return Ok(session.token.clone());
        }
        self.open_session().await.map(|session| session.token)
    }

    /// A request under `token` was refused (401): the next [`GatewaySessions::token`] opens a
    /// new session — unless one was opened since, which is kept.
    pub(crate) fn refused(&self, token: &str) {
        let mut current = self.current.borrow_mut();
        if current.as_ref().is_some_and(|s| s.token == token) {
            *current = None;
        }
    }
}

impl Authenticator for GatewaySessions {
    async fn open_session(&self) -> Result<Session, AuthFailure> {
        let opened = match self.attempt().await {
            Attempt::Opened(session) => Ok(session),
            Attempt::Failed(f) => Err(f),
            // The clock was corrected from `serverTime` (or the nonce was used): once more now.
            Attempt::NonceRefused(_) => match self.attempt().await {
                Attempt::Opened(session) => Ok(session),
                Attempt::Failed(f) | Attempt::NonceRefused(f) => Err(f),
            },
        }?;
        *self.current.borrow_mut() = Some(opened.clone());
        Ok(opened)
    }
}
