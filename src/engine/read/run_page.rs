//! The read executor's pages and streams ([`super::ReadRun`]): one catch-up page within its
//! deadline — the cursor read, the request, what the reply means ([`page`]'s rules), the page
//! stored with its cursor — and [`StreamSink`], through which a platform's change stream tells
//! the executor what it says. Kept apart from `run.rs`, which holds the input queue and the
//! actions.

use std::cell::{Cell, RefCell};
use std::rc::{Rc, Weak};

use super::{
    Input, LocalLog, PageEnd, Parser, ReadPlatform, ReadRun, ReaderNews, Refused, Replied,
    StreamId, WATCH_STREAMS_PER_CLIENT, WATCH_TOO_MANY_AGGREGATES, first, note, page, watch,
};
use crate::engine::model::AggregateRef;

impl<P: ReadPlatform> ReadRun<P> {
    /// Reads the aggregate's next page (a probe with `probe`; nothing when the cursor is at
    /// `tip`) within one deadline over the whole page (a session opening included), so that a
    /// hung `auth` callback cannot stop catch-up for good.
    pub(super) async fn page(
        &self,
        aggregate: AggregateRef,
        probe: bool,
        tip: Option<u64>,
    ) -> PageEnd {
        let (end, storing) = (Cell::new(None), Cell::new(false));
        let deadline = self.platform.page_deadline_ms();
        let mut page = std::pin::pin!(async {
            end.set(Some(self.fetch_page(aggregate, probe, tip, &storing).await))
        });
        if !first(page.as_mut(), self.platform.sleep(deadline)).await && storing.get() {
            // Past the deadline while storing: that transaction commits or aborts on its own,
            // so it is awaited and its news told (dropped, a store that then committed was
            // told to nobody, `close` not waiting for it either).
            page.await;
        }
        end.take().unwrap_or_else(|| PageEnd::Failed {
            message: format!("no page within {deadline} ms"),
        })
    }

    /// Reads the aggregate's next page and stores it with its cursor (compare-and-set on the
    /// cursor read before the request); with `probe`, asks only what is left of it after a
    /// `reset`: its first version (a 410 gives the minimum) and its tip; with `tip`, asks
    /// nothing when the cursor is at it ([`page::at_tip`]).
    async fn fetch_page(
        &self,
        aggregate: AggregateRef,
        probe: bool,
        tip: Option<u64>,
        storing: &Cell<bool>,
    ) -> PageEnd {
        let failed = |message: String| PageEnd::Failed { message };
        let cursor = match self.platform.log().cursor(aggregate).await {
            Ok(cursor) => cursor,
            Err(e) => return failed(e.to_string()),
        };
        // At the tip a `ready` gave, with no change notified since: nothing to read.
        if let Some(end) = tip.and_then(|tip| page::at_tip(cursor, tip)) {
            return end;
        }
        if let Some(why) = self.platform.switched_off() {
            return failed(why.into());
        }
        let reply = match self.platform.request(aggregate, probe, cursor).await {
            Ok(reply) => reply,
            Err(message) => return failed(message),
        };
        if self.stopped.get() {
            return failed("the reader stopped".into());
        }
        // From here a stop no longer keeps the page from being stored: counted until its news.
        let _writing = self.writes.enter();
        storing.set(true);
        match self.platform.read_reply(&reply) {
            Replied::Page {
                batches,
                tip,
                next,
                size,
            } => {
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
                let stored = match self.platform.store(aggregate, &batches, cursor, size).await {
                    Ok(stored) => stored,
                    Err(e) => return failed(e.to_string()),
                };
                if stored.is_some_and(|after| after.version > cursor.version) {
                    self.hub.logged(aggregate);
                    (self.news)(ReaderNews::LogChanged(aggregate));
                }
                page::stored(cursor, stored, next)
            }
            Replied::Trimmed { min_version, body } => page::trimmed(min_version)
                .unwrap_or_else(|| failed(format!("HTTP 410 without a usable minVersion: {body}"))),
            Replied::Failed(message) => failed(message),
        }
    }
}

/// What a platform's change stream tells the executor: its text as it comes, and how it ended.
/// Whatever a stream no longer wanted (closed, replaced, or its reader stopped) says is
/// ignored.
pub struct StreamSink<P: ReadPlatform> {
    pub(super) run: Weak<ReadRun<P>>,
    pub(super) id: StreamId,
    pub(super) parser: Rc<RefCell<Parser>>,
}

impl<P: ReadPlatform> Clone for StreamSink<P> {
    fn clone(&self) -> Self {
        StreamSink {
            run: self.run.clone(),
            id: self.id,
            parser: self.parser.clone(),
        }
    }
}

impl<P: ReadPlatform> StreamSink<P> {
    /// Whether the stream is still wanted.
    pub fn wanted(&self) -> bool {
        self.run.upgrade().is_some_and(|run| run.wanted(self.id))
    }

    /// The stream could not be opened (no session, no proof, the network switched off).
    pub fn failed(&self) {
        if let Some(run) = self.run.upgrade() {
            run.later_if(self.id, Input::StreamEnded(self.id));
        }
    }

    /// A chunk of the stream's text. `ready` reads a `ready` event's data: what the gateway
    /// refused to watch, and each aggregate's version if it gives them. `false`: the stream is
    /// to be closed (its reader is gone, or the text is not Server-Sent Events).
    pub fn chunk(
        &self,
        text: &str,
        ready: impl Fn(&str) -> (Vec<Refused>, Option<Vec<(AggregateRef, u64)>>),
    ) -> bool {
        let Some(run) = self.run.upgrade() else {
            return false;
        };
        let id = self.id;
        let events = match self.parser.borrow_mut().feed(text) {
            Ok(events) => events,
            Err(_) => return false,
        };
        for event in events {
            // `ready` lists what the gateway refused to watch: reported as is; and may give
            // each aggregate's version (fed before the `ready` itself).
            if event.name == watch::READY && run.wanted(id) {
                let (refused, tips) = ready(&event.data);
                run.refused.borrow_mut().insert(id, refused);
                run.publish_refused();
                if let Some(tips) = tips {
                    run.later_if(id, Input::Tips(id, tips));
                }
            }
            match note(&event) {
                Ok(Some(n)) => run.later_if(id, Input::Stream(id, n)),
                Ok(None) => {}
                Err(_) => return false,
            }
        }
        true
    }

    /// The stream ended with HTTP `status` (0: no response, or it broke); `code` reads the
    /// gateway's code from a refusal's body. `false` when its reader is gone (then nothing
    /// more is done about it).
    pub fn ended(&self, status: u16, code: impl Fn() -> Option<u32>) -> bool {
        let Some(run) = self.run.upgrade() else {
            return false;
        };
        let id = self.id;
        // Too many aggregates for this gateway: 40020, or 413 when the body alone is past its
        // bound (200 bytes per aggregate it allows, plus 1 KiB; a stream of more than about
        // twice its cap is refused that way first).
        let too_large =
            status == 413 || (status == 400 && code() == Some(WATCH_TOO_MANY_AGGREGATES));
        // Too many streams for this client: the gateway's per-client cap is below what this
        // device opens.
        let too_many = status == 429 && code() == Some(WATCH_STREAMS_PER_CLIENT);
        let input = if too_large {
            Input::StreamTooLarge(id)
        } else if too_many {
            Input::StreamTooMany(id)
        } else {
            Input::StreamEnded(id)
        };
        run.later_if(id, input);
        true
    }
}
