//! One catch-up page of the browser's read platform ([`BrowserRead`]): the request (under a
//! session and a proof) and what its JSON says, handed to the engine's executor, which decides
//! what it means ([`crate::engine::read::page`]) and stores it. In a file of its own so that
//! `reader.rs` holds the platform and its streams.

use js_sys::Array;
use wasm_bindgen::{JsCast, JsValue};

use super::super::fetch::{Raw, get_raw};
use super::super::js;
use super::{BrowserRead, parse_text};
use crate::engine::env::Reply;
use crate::engine::model::AggregateRef;
use crate::engine::read::log::Cursor;
use crate::engine::read::run::Replied;
use celeriant_sync_protocol::events_path;

/// A page request's reply: its status and text (a JS string, parsed as it is), and the
/// session it was asked under.
pub(crate) struct PageReply {
    status: u16,
    text: JsValue,
    token: String,
}

impl BrowserRead {
    /// Asks for the aggregate's page after `cursor`; with `probe`, for its first version and
    /// tip only.
    pub(super) async fn request_page(
        &self,
        aggregate: AggregateRef,
        probe: bool,
        cursor: Cursor,
    ) -> Result<PageReply, String> {
        let token = self.token().await?;
        let query = if probe {
            "from=1&limit=1".to_owned()
        } else {
            format!("from={}", cursor.version + 1)
        };
        let url = format!(
            "{}{}?{query}",
            self.config.gateway_url,
            events_path(&aggregate)
        );
        let proof = self.sessions.proof("GET", &url, "", &token).await?;
        match get_raw(&url, Some(&token), Some(&proof), self.config.timeout_ms).await {
            Ok(Raw {
                status,
                body: Ok(text),
                ..
            }) => Ok(PageReply {
                status,
                text,
                token,
            }),
            Ok(Raw { body: Err(e), .. }) => Err(e),
            Err(Reply::Failed { message, .. }) => Err(message),
            Err(Reply::Http { status, .. }) => Err(format!("HTTP {status}")),
        }
    }

    /// What `reply` says.
    pub(super) fn read_page(&self, reply: &PageReply) -> Replied<Array> {
        // Parsed as the JS string it came as (see `get_raw`); copied into Rust only for an
        // error message.
        let parsed = parse_text(&reply.text).unwrap_or(JsValue::UNDEFINED);
        let body = || reply.text.as_string().unwrap_or_default();
        match reply.status {
            200 => {
                let batches = js::get(&parsed, "batches");
                if !Array::is_array(&batches) {
                    return Replied::Failed("a page without batches".into());
                }
                let next = js::get(&parsed, "next");
                Replied::Page {
                    batches: Array::from(&batches),
                    tip: js::get_u64(&parsed, "tip"),
                    next: !(next.is_null() || next.is_undefined()),
                    size: u64::from(reply.text.unchecked_ref::<js_sys::JsString>().length()),
                }
            }
            410 => Replied::Trimmed {
                min_version: js::get_u64(&parsed, "minVersion"),
                body: body(),
            },
            401 => {
                self.sessions.refused(&reply.token);
                Replied::Failed("HTTP 401: the session was refused".into())
            }
            status => Replied::Failed(format!(
                "HTTP {status}: {}",
                body().chars().take(300).collect::<String>()
            )),
        }
    }
}
