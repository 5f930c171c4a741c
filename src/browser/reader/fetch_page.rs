//! One catch-up page of the reader ([`ReaderRuntime::fetch_page`]): the request, what the
//! reply means ([`page`]'s rules), and the page stored with its cursor in one transaction. In a
//! file of its own so that `reader.rs` holds the executor's loop and streams.

use std::cell::Cell;

use js_sys::Array;
use wasm_bindgen::{JsCast, JsValue};

use super::super::fetch::{Raw, get_raw};
use super::super::js;
use super::super::network::SWITCHED_OFF;
use super::{ReaderRuntime, parse_text};
use crate::engine::env::Reply;
use crate::engine::model::AggregateRef;
use crate::engine::read::log::LocalLog;
use crate::engine::read::machine::PageEnd;
use crate::engine::read::page;
use crate::engine::read::routing::ReaderNews;
use celeriant_sync_protocol::events_path;

impl ReaderRuntime {
    /// Reads the aggregate's next page and stores it with its cursor (compare-and-set on the
    /// cursor read before the request); with `probe`, asks only what is left of it after a
    /// `reset`: its first version (a 410 gives the minimum) and its tip; with `tip`, asks
    /// nothing when the cursor is at it ([`page::at_tip`]).
    pub(super) async fn fetch_page(
        &self,
        aggregate: AggregateRef,
        probe: bool,
        tip: Option<u64>,
        storing: &Cell<bool>,
    ) -> PageEnd {
        let failed = |message: String| PageEnd::Failed { message };
        let cursor = match self.outbox.cursor(aggregate).await {
            Ok(cursor) => cursor,
            Err(e) => return failed(e.to_string()),
        };
        // At the tip a `ready` gave, with no change notified since: nothing to read.
        if let Some(end) = tip.and_then(|tip| page::at_tip(cursor, tip)) {
            return end;
        }
        if self.config.network.is_off() {
            return failed(SWITCHED_OFF.into());
        }
        let token = match self.token().await {
            Ok(token) => token,
            Err(message) => return failed(message),
        };
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
        let proof = match self.sessions.proof("GET", &url, "", &token).await {
            Ok(proof) => proof,
            Err(message) => return failed(message),
        };
        let (status, text) =
            match get_raw(&url, Some(&token), Some(&proof), self.config.timeout_ms).await {
                Ok(Raw {
                    status,
                    body: Ok(text),
                    ..
                }) => (status, text),
                Ok(Raw { body: Err(e), .. }) => return failed(e),
                Err(Reply::Failed { message, .. }) => return failed(message),
                Err(Reply::Http { status, .. }) => return failed(format!("HTTP {status}")),
            };
        if self.stopped.get() {
            return failed("the reader stopped".into());
        }
        // From here a stop no longer keeps the page from being stored: counted until its news.
        let _writing = self.writes.enter();
        storing.set(true);
        // Parsed as the JS string it came as (see `get_raw`); copied into Rust only for an
        // error message.
        let parsed = parse_text(&text).unwrap_or(JsValue::UNDEFINED);
        let body = || text.as_string().unwrap_or_default();
        match status {
            200 => {
                let batches = js::get(&parsed, "batches");
                if !Array::is_array(&batches) {
                    return failed("a page without batches".into());
                }
                let batches = Array::from(&batches);
                let tip = js::get_u64(&parsed, "tip");
                if probe {
                    // Version 1 is still there (else 410): gone only if the aggregate was
                    // deleted or recreated below what the local log holds (or this replica
                    // lags behind it).
                    return page::probed(tip, cursor);
                }
                if page::shrunk(tip, cursor) {
                    // Deleted while no `reset` reached this device (the stream was down or
                    // lagged): found by the page itself (tests/read_model.rs). Or a replica
                    // behind the cursor: the read machine keeps the floor on `Gone`.
                    return PageEnd::Gone;
                }
                let size = u64::from(text.unchecked_ref::<js_sys::JsString>().length());
                let stored = match self
                    .outbox
                    .store_fetched_page(aggregate, &batches, &self.config.me, cursor, size)
                    .await
                {
                    Ok(stored) => stored,
                    Err(e) => return failed(e.to_string()),
                };
                if stored.is_some_and(|after| after.version > cursor.version) {
                    self.hub.logged(aggregate);
                    (self.news)(ReaderNews::LogChanged(aggregate));
                }
                let next = js::get(&parsed, "next");
                page::stored(cursor, stored, !(next.is_null() || next.is_undefined()))
            }
            410 => page::trimmed(js::get_u64(&parsed, "minVersion")).unwrap_or_else(|| {
                failed(format!("HTTP 410 without a usable minVersion: {}", body()))
            }),
            401 => {
                self.sessions.refused(&token);
                failed("HTTP 401: the session was refused".into())
            }
            _ => failed(format!(
                "HTTP {status}: {}",
                body().chars().take(300).collect::<String>()
            )),
        }
    }
}
