//! `share`, `unshare`, `acceptShare` and `members` over `fetch`: the members endpoint
//! (`GET`/`PUT /v1/aggregates/{typeId}/{id}/members`, `POST …/members/accept`) called with a
//! session of this device.
//!
//! Every context may call them (not only the draining one), so this keeps a session of its own,
//! opened through the same [`GatewaySessions`] as the drain's — the device's key, the app's
//! `auth` callback, the database's user binding (a session for another user is never used:
//! `WRONG_USER`). It is reused until a minute before it expires; a 401 drops it, and the call
//! is made once more with a fresh one. What the answers mean is decided in
//! [`crate::engine::members`].

use std::cell::RefCell;
use std::rc::Rc;

use js_sys::JSON;
use wasm_bindgen::JsValue;

use super::fetch::{get, post, put};
use super::network::NetworkSwitch;
use super::session::GatewaySessions;
use crate::engine::auth::{Authenticator, RENEW_BEFORE_MS, Session};
use crate::engine::env::Reply;
use crate::engine::errors::ErrorCode;
use crate::engine::members::refusal;
use crate::engine::model::AggregateRef;
use celeriant_sync_protocol::WriteOutcome;

/// A failure of a members call: its code, message and the gateway's code, if it gave one.
pub(crate) struct MembersFailure {
    pub code: ErrorCode,
    pub message: String,
    pub server_code: Option<u32>,
}

fn failed(code: ErrorCode, message: impl Into<String>, server_code: Option<u32>) -> MembersFailure {
    MembersFailure {
        code,
        message: message.into(),
        server_code,
    }
}

/// One call of the members endpoint.
pub(crate) enum MembersCall {
    /// `GET …/members`.
    List,
    /// `PUT …/members` with this body (invite, change, revoke).
    Change(String),
    /// `POST …/members/accept` (body `{}`): accept this principal's invitation.
    Accept,
}

/// The members endpoint of one gateway, for one client.
pub(crate) struct MembersApi {
    gateway_url: String,
    timeout_ms: u32,
    network: NetworkSwitch,
    sessions: Rc<GatewaySessions>,
    session: RefCell<Option<Session>>,
}

impl MembersApi {
    pub(crate) fn new(
        gateway_url: String,
        timeout_ms: u32,
        network: NetworkSwitch,
        sessions: Rc<GatewaySessions>,
    ) -> Self {
        MembersApi {
            gateway_url,
            timeout_ms,
            network,
            sessions,
            session: RefCell::new(None),
        }
    }

    fn offline(&self) -> Option<MembersFailure> {
        (!self.network.online()).then(|| {
            failed(
                ErrorCode::Offline,
                "the client is offline: sharing needs the gateway (nothing was sent)",
                None,
            )
        })
    }

    async fn token(&self) -> Result<String, MembersFailure> {
        let now = js_sys::Date::now() as u64;
        if let Some(s) = self.session.borrow().as_ref()
            && s.expires_at > now + RENEW_BEFORE_MS
        {
            return Ok(s.token.clone());
        }
        match self.sessions.open_session().await {
            Ok(session) => {
                let token = session.token.clone();
                *self.session.borrow_mut() = Some(session);
                Ok(token)
            }
            Err(f) if f.wrong_user => Err(failed(ErrorCode::WrongUser, f.message, None)),
            Err(f) => Err(failed(
                match f.code {
                    None if self.offline().is_some() => ErrorCode::Offline,
                    None => ErrorCode::RequestFailed,
                    Some(_) => ErrorCode::Unauthorized,
                },
                format!("no session: {}", f.message),
                f.code,
            )),
        }
    }

    /// Makes `call` on the members of `aggregate`; resolves with the record.
    pub(crate) async fn call(
        &self,
        aggregate: AggregateRef,
        call: MembersCall,
    ) -> Result<JsValue, MembersFailure> {
        if let Some(offline) = self.offline() {
            return Err(offline);
        }
        let mut url = format!(
            "{}/v1/aggregates/{}/{}/members",
            self.gateway_url, aggregate.type_id, aggregate.id
        );
        if matches!(call, MembersCall::Accept) {
            url.push_str("/accept");
        }
        let mut fresh = false;
        loop {
            let token = self.token().await?;
            // A fresh proof per attempt, as for writes and reads (the gateway requires one).
            let (method, sent) = match &call {
                MembersCall::Change(body) => ("PUT", body.as_str()),
                MembersCall::Accept => ("POST", "{}"),
                MembersCall::List => ("GET", ""),
            };
            let proof = self
                .sessions
                .proof(method, &url, sent, &token)
                .await
                .map_err(|m| failed(ErrorCode::RequestFailed, m, None))?;
            let reply = match method {
                "PUT" => put(&url, sent, Some(&token), Some(&proof), self.timeout_ms).await,
                "POST" => post(&url, sent, Some(&token), Some(&proof), self.timeout_ms).await,
                _ => get(&url, Some(&token), Some(&proof), self.timeout_ms).await,
            };
            let (status, text) = match reply {
                Reply::Http {
                    status,
                    body: Ok(text),
                    ..
                } => (status, text),
                Reply::Http {
                    status,
                    body: Err(e),
                    ..
                } => {
                    let m = format!("HTTP {status}, the answer was lost: {e}");
                    return Err(failed(ErrorCode::RequestFailed, m, None));
                }
                Reply::Failed { message, .. } => {
                    let code = match self.offline() {
                        Some(_) => ErrorCode::Offline,
                        None => ErrorCode::RequestFailed,
                    };
                    return Err(failed(code, message, None));
                }
            };
            if status == 200 {
                return JSON::parse(&text)
                    .map_err(|_| failed(ErrorCode::RequestFailed, "the answer is not JSON", None));
            }
            let failure = WriteOutcome::parse(&text).and_then(|o| o.failure().cloned());
            if status == 401 && !fresh {
                // Expired, rotated secret, revoked: once more with a new session.
                *self.session.borrow_mut() = None;
                fresh = true;
                continue;
            }
            let code = failure.as_ref().map(|f| f.code);
            let message = failure.map_or_else(|| format!("HTTP {status}"), |f| f.message);
            return Err(failed(refusal(status, code), message, code));
        }
    }
}
