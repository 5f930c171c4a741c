//! Posting JSON to the gateway over `fetch`, and the engine's [`Transport`] on top of it.
//!
//! Every request carries an `AbortController`: the request timeout aborts it, and so does
//! dropping the future (the drain drops it when the client closes). A rejected `fetch` (a
//! `TypeError`: network, DNS, CORS) and a timeout are reported as such, by what happened, never
//! by message text; a response whose body breaks mid-way is reported with its status and the
//! body error, so the engine classifies it `unknown`. A request under a session carries its
//! `DPoP` proof ([`super::proof`]).

use gloo_timers::future::TimeoutFuture;
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;
use web_sys::{AbortController, Request, RequestInit, Response};

use std::rc::Rc;

use super::global::fetch_with_request;
use super::js;
use super::network::{NetworkSwitch, SWITCHED_OFF};
use super::session::GatewaySessions;
use crate::engine::env::{ReadBack, Reply, Transport, WrittenBatch};
use crate::engine::model::AggregateRef;
use crate::engine::signal::first;
use celeriant_sync_protocol::events_path;

/// Aborts the request when dropped (after completion, aborting is a no-op).
struct AbortOnDrop(AbortController);

impl Drop for AbortOnDrop {
    fn drop(&mut self) {
        self.0.abort();
    }
}

/// `Name: message` of a thrown value, for `lastError` (never inspected).
pub(crate) fn error_text(error: &JsValue) -> String {
    // Read in glue.js, catching: the error may be an app's (an `auth` callback's, a key
    // function's), with getters that throw or a `message` that is no string.
    super::js::error_text(error, true)
}

async fn exchange(
    url: &str,
    body: Option<(&str, &str)>,
    bearer: Option<&str>,
    proof: Option<&str>,
    controller: &AbortController,
) -> Result<Result<Raw, Reply>, JsValue> {
    let init = RequestInit::new();
    let headers = web_sys::Headers::new()?;
    match body {
        Some((method, body)) => {
            init.set_method(method);
            init.set_body(&JsValue::from_str(body));
            headers.set("Content-Type", "application/json")?;
        }
        None => init.set_method("GET"),
    }
    init.set_signal(Some(&controller.signal()));
    if let Some(token) = bearer {
        headers.set("Authorization", &format!("Bearer {token}"))?;
    }
    if let Some(proof) = proof {
        headers.set("DPoP", proof)?;
    }
    init.set_headers(&headers);
    let request = Request::new_with_str_and_init(url, &init)?;
    let response: Response = match JsFuture::from(fetch_with_request(&request)).await {
        Ok(response) => response.unchecked_into(),
        Err(error) => return Ok(Err(Reply::network(error_text(&error)))),
    };
    let status = response.status();
    let retry_after = response.headers().get("Retry-After").ok().flatten();
    let body = match response.text() {
        Ok(promise) => JsFuture::from(promise).await.map_err(|e| error_text(&e)),
        Err(e) => Err(error_text(&e)),
    };
    Ok(Ok(Raw {
        status,
        retry_after,
        body,
    }))
}

/// A response as `fetch` gave it: the body is still a JS string.
pub(crate) struct Raw {
    pub status: u16,
    pub retry_after: Option<String>,
    /// The body's text (a JS string), or why it could not be read.
    pub body: Result<JsValue, String>,
}

/// Posts `body` (JSON) to `url`, with `Authorization: Bearer` when `bearer` is given and
/// `DPoP` when `proof` is; aborts after `timeout_ms`, or when the future is dropped.
pub(crate) async fn post(
    url: &str,
    body: &str,
    bearer: Option<&str>,
    proof: Option<&str>,
    timeout_ms: u32,
) -> Reply {
    request(url, Some(("POST", body)), bearer, proof, timeout_ms).await
}

/// Puts `body` (JSON) at `url`, as [`post`] does.
pub(crate) async fn put(
    url: &str,
    body: &str,
    bearer: Option<&str>,
    proof: Option<&str>,
    timeout_ms: u32,
) -> Reply {
    request(url, Some(("PUT", body)), bearer, proof, timeout_ms).await
}

/// `GET url`, with `Authorization: Bearer` when `bearer` is given and `DPoP` when `proof` is;
/// aborts after `timeout_ms`, or when the future is dropped.
pub(crate) async fn get(
    url: &str,
    bearer: Option<&str>,
    proof: Option<&str>,
    timeout_ms: u32,
) -> Reply {
    request(url, None, bearer, proof, timeout_ms).await
}

async fn request(
    url: &str,
    body: Option<(&str, &str)>,
    bearer: Option<&str>,
    proof: Option<&str>,
    timeout_ms: u32,
) -> Reply {
    match raw_request(url, body, bearer, proof, timeout_ms).await {
        Ok(raw) => Reply::Http {
            status: raw.status,
            retry_after: raw.retry_after,
            body: raw.body.map(|text| text.as_string().unwrap_or_default()),
        },
        Err(reply) => reply,
    }
}

/// `GET url` as [`get`], the body left a JS string: a catch-up page (megabytes) is parsed
/// where it is, not copied into the module's memory as UTF-8 and back out for `JSON.parse`
/// (about 15 ms per 2 MiB page in Chromium, issue 28). `Err`: the reply without a response.
pub(crate) async fn get_raw(
    url: &str,
    bearer: Option<&str>,
    proof: Option<&str>,
    timeout_ms: u32,
) -> Result<Raw, Reply> {
    raw_request(url, None, bearer, proof, timeout_ms).await
}

async fn raw_request(
    url: &str,
    body: Option<(&str, &str)>,
    bearer: Option<&str>,
    proof: Option<&str>,
    timeout_ms: u32,
) -> Result<Raw, Reply> {
    let controller = match AbortController::new() {
        Ok(c) => c,
        Err(e) => return Err(Reply::network(error_text(&e))),
    };
    let guard = AbortOnDrop(controller);
    let mut reply = None;
    let finished = first(
        async { reply = Some(exchange(url, body, bearer, proof, &guard.0).await) },
        TimeoutFuture::new(timeout_ms),
    )
    .await;
    match reply {
        Some(Ok(reply)) if finished => reply,
        Some(Err(e)) if finished => Err(Reply::network(error_text(&e))),
        _ => Err(Reply::timeout()),
    }
}

/// Posts write requests to one gateway.
pub(crate) struct FetchTransport {
    /// `{gateway}/v1/write`.
    pub url: String,
    /// The gateway's base URL (for read-backs).
    pub gateway_url: String,
    /// How long one request may take, headers and body together.
    pub timeout_ms: u32,
    /// The client's network switch: off, nothing is sent (a network error at once).
    pub network: NetworkSwitch,
    /// Signs each request's proof with the device key.
    pub sessions: Rc<GatewaySessions>,
}

impl FetchTransport {
    /// `GET url` under the session, with a fresh proof.
    async fn get_signed(&self, url: &str, token: &str) -> Reply {
        let proof = match self.sessions.proof("GET", url, "", token).await {
            Ok(proof) => proof,
            Err(message) => return Reply::network(message),
        };
        get(url, Some(token), Some(&proof), self.timeout_ms).await
    }
}

/// The first batch of a read page's body, as a read-back reports it.
fn first_batch(body: &str) -> Result<Option<WrittenBatch>, String> {
    let parsed = js_sys::JSON::parse(body).map_err(|e| error_text(&e))?;
    let batches = js::get(&parsed, "batches");
    if !js_sys::Array::is_array(&batches) {
        return Err("a page without batches".into());
    }
    let Some(first) = js::array(&batches).into_iter().next() else {
        return Ok(None);
    };
    let bad = || "a batch without version, clientId or events".to_owned();
    let version = js::get_u64(&first, "version").ok_or_else(bad)?;
    let client_id = js::get_string(&first, "clientId")
        .and_then(|s| uuid::Uuid::parse_str(&s).ok())
        .ok_or_else(bad)?;
    let client_seqs = js::array(&js::get(&first, "events"))
        .iter()
        .map(|e| js::get_u64(e, "clientSeq"))
        .collect::<Option<Vec<u64>>>()
        .ok_or_else(bad)?;
    Ok(Some(WrittenBatch {
        version,
        client_id,
        client_seqs,
    }))
}

impl Transport for FetchTransport {
    async fn read_back(&self, aggregate: AggregateRef, version: u64, token: String) -> ReadBack {
        if self.network.is_off() {
            return ReadBack::Failed(SWITCHED_OFF.into());
        }
        let url = format!(
            "{}{}?from={version}&limit=1",
            self.gateway_url,
            events_path(&aggregate)
        );
        match self.get_signed(&url, &token).await {
            Reply::Http {
                status: 200,
                body: Ok(body),
                ..
            } => first_batch(&body).map_or_else(ReadBack::Failed, ReadBack::Found),
            Reply::Http { status: 410, .. } => ReadBack::Trimmed,
            Reply::Http { status, body, .. }
                if (400..500).contains(&status) && ![401, 408, 429].contains(&status) =>
            {
                ReadBack::Refused(format!("HTTP {status}: {}", body.unwrap_or_else(|e| e)))
            }
            Reply::Http { status, body, .. } => {
                ReadBack::Failed(format!("HTTP {status}: {}", body.unwrap_or_else(|e| e)))
            }
            Reply::Failed { message, .. } => ReadBack::Failed(message),
        }
    }

    async fn send(&self, body: String, token: String) -> Reply {
        if self.network.is_off() {
            return Reply::network(SWITCHED_OFF);
        }
        if token.is_empty() {
            return post(&self.url, &body, None, None, self.timeout_ms).await;
        }
        // A fresh proof per attempt: a resend is a new request to the gateway (its jti is new).
        let proof = match self.sessions.proof("POST", &self.url, &body, &token).await {
            Ok(proof) => proof,
            Err(message) => return Reply::network(message),
        };
        post(
            &self.url,
            &body,
            Some(&token),
            Some(&proof),
            self.timeout_ms,
        )
        .await
    }
}
