//! A catch-up page's request, and the next page read ahead while the reader stores the one
//! before it (issue 28: the catch-up line). Reading a page and storing it are on different
//! threads of the browser — the `GET` on the network, the commit in IndexedDB's backend — so
//! while page N's transaction runs, page N+1's `GET` (and its `JSON.parse`) can too, instead of
//! waiting for N's commit as the plain-JS baseline does.
//!
//! What is read ahead is only ever *offered* to the next page's store; it decides nothing:
//!
//! * **Order.** A page read ahead is stored by the next [`ReaderRuntime`] page task, after
//!   page N's store resolved, through the same compare-and-set store (`IdbOutbox::
//!   store_fetched_page`) with the cursor read afresh: pages still enter the log one after
//!   the other, each in one transaction with the cursor. Reading the bytes earlier changes
//!   when they were read, not what is accepted.
//! * **A failed store does not move the cursor, nor skip a page.** The page read ahead is
//!   kept only when page N's store succeeded and moved the cursor to just below the page's
//!   `from`, tagged with that cursor ([`ReadAhead::keep`]); the next page task uses it only if
//!   the cursor it reads then is *exactly* that one (version, `mine` and epoch), for the same
//!   aggregate ([`ReadAhead::take`]). A store that failed or was refused, a reset (a new
//!   epoch), another store meanwhile, a probe, the network switched off: the page read ahead
//!   is dropped and the page read again as before.
//! * **Validation.** It goes through the same strict checks of every batch (`put_page`).
//! * **Staleness.** Versions on the server never change; the page is only some milliseconds
//!   older than one read when its turn came. A deletion in between is found as a deletion
//!   just after any page's `GET` is: by the change stream's reset or the next page's `tip`.
//! * **Only `200`s** are kept: a refusal (`401`), a trim (`410`) or a failure is left for
//!   the page's own request, whose handling (renewing the session, resetting the log, the
//!   backoff) stays where it was. At most one page is held per reader.
//!
//! [`ReaderRuntime`]: super::reader::ReaderRuntime

use std::cell::RefCell;
use std::rc::Rc;

use futures_channel::oneshot;
use wasm_bindgen::JsValue;

use super::fetch::{Raw, get_raw};
use super::network::NetworkSwitch;
use super::session::GatewaySessions;
use crate::engine::env::Reply;
use crate::engine::model::AggregateRef;
use crate::engine::read::log::Cursor;

#[wasm_bindgen::prelude::wasm_bindgen]
extern "C" {
    /// `JSON.parse` of a JS string as it is (`js_sys::JSON::parse` takes a `&str`: a copy of
    /// the text into JS).
    #[wasm_bindgen(js_namespace = JSON, js_name = parse, catch)]
    fn parse_text(text: &JsValue) -> Result<JsValue, JsValue>;
}

/// A page's reply: its status, its text (the JS string `fetch` gave: megabytes, never copied
/// into Rust but for an error message) and that text parsed (`undefined` if it is not JSON).
pub(crate) struct Got {
    pub status: u16,
    pub text: JsValue,
    pub parsed: JsValue,
}

/// `GET url` under the session `token` with its `proof`, parsed.
pub(crate) async fn get_page(
    url: &str,
    token: &str,
    proof: &str,
    timeout_ms: u32,
) -> Result<Got, String> {
    match get_raw(url, Some(token), Some(proof), timeout_ms).await {
        Ok(Raw {
            status,
            body: Ok(text),
            ..
        }) => {
            let parsed = parse_text(&text).unwrap_or(JsValue::UNDEFINED);
            Ok(Got {
                status,
                text,
                parsed,
            })
        }
        Ok(Raw { body: Err(e), .. }) => Err(e),
        Err(Reply::Failed { message, .. }) => Err(message),
        Err(Reply::Http { status, .. }) => Err(format!("HTTP {status}")),
    }
}

/// A page being read ahead: its reply, if it is a `200`, arrives on the receiver.
pub(crate) struct Reading(oneshot::Receiver<Got>);

/// Starts reading `url` now, in a task of its own (so it goes on while the caller awaits its
/// store): a session token and a fresh proof, as any page, and nothing if the network is
/// switched off by then.
pub(crate) fn start(
    sessions: Rc<GatewaySessions>,
    network: NetworkSwitch,
    url: String,
    timeout_ms: u32,
) -> Reading {
    let (tx, rx) = oneshot::channel();
    super::env::spawn(async move {
        let Ok(token) = sessions.token().await else {
            return;
        };
        let Ok(proof) = sessions.proof("GET", &url, "", &token).await else {
            return;
        };
        if network.is_off() {
            return;
        }
        if let Ok(got) = get_page(&url, &token, &proof, timeout_ms).await
            && got.status == 200
        {
            let _ = tx.send(got);
        }
    });
    Reading(rx)
}

/// The page read ahead for the next page task of one aggregate, if any (see the module).
#[derive(Default)]
pub(crate) struct ReadAhead(RefCell<Option<(AggregateRef, Cursor, Reading)>>);

impl ReadAhead {
    /// Keeps `reading` for the aggregate's next page, to be used only at cursor `after` (the
    /// one the page before it was just stored at). Replaces whatever was kept.
    pub(crate) fn keep(&self, aggregate: AggregateRef, after: Cursor, reading: Reading) {
        *self.0.borrow_mut() = Some((aggregate, after, reading));
    }

    /// Takes what was kept for `aggregate` (another aggregate's stays), whatever the cursor.
    pub(crate) fn take(&self, aggregate: AggregateRef) -> Option<(Cursor, Reading)> {
        let mut kept = self.0.borrow_mut();
        if kept.as_ref().is_some_and(|(a, _, _)| *a == aggregate) {
            kept.take().map(|(_, after, reading)| (after, reading))
        } else {
            None
        }
    }
}

/// The page read ahead, if it was taken for exactly `cursor` and came back a `200`.
pub(crate) async fn ready(taken: Option<(Cursor, Reading)>, cursor: Cursor) -> Option<Got> {
    let (_, Reading(rx)) = taken.filter(|(after, _)| *after == cursor)?;
    rx.await.ok()
}
