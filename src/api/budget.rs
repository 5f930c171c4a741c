//! How much event data `append` and `appendAtomic` may copy into the module, counted while
//! they copy it.
//!
//! The module's memory (4 GiB at most) is never given back, and what an app passes in is
//! copied before anything is stored: an append of 10,000 events of 1 MiB each, all valid on
//! their own, made the module copy 10 GiB and abort. Two bounds, both checked before each
//! event's copy from its length in bytes (JSON's UTF-8 counted in JS when needed), and again
//! after it:
//! * per call ([`Budget`]): a plain append [`MAX_APPEND_BYTES`], a write sent as one request
//!   (a conditional append, an atomic write) the request's bound — `TOO_MANY_EVENTS`;
//! * per module ([`module_held`]): what the appends called and not yet stored hold in all,
//!   their data and a fixed cost per event and per call, at most [`MAX_HELD_BYTES`] — `BUSY`,
//!   to be tried again once they are stored (calls made in a loop without awaiting, each
//!   valid, held 64 MiB each until IndexedDB took them; or 640 KB each of empty events).

use std::cell::Cell;

use super::errors::ClientError;
use crate::engine::append::{Charge, Held, MAX_APPEND_BYTES, MAX_HELD_BYTES};
use crate::engine::errors::ErrorCode;
use celeriant_sync_protocol::validate::Limits;

/// The most `data` the events of one call may hold in all.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Budget {
    /// In bytes.
    pub(crate) max: usize,
    /// What is refused, for the message: "an append", "a conditional append is sent as one
    /// request".
    pub(crate) what: &'static str,
    /// Already taken by what came before in the same call (an atomic write's earlier writes).
    pub(crate) spent: usize,
}

impl Budget {
    /// A plain append's: [`MAX_APPEND_BYTES`].
    pub(crate) const APPEND: Budget = Budget {
        max: MAX_APPEND_BYTES,
        what: "an append",
        spent: 0,
    };

    /// A write sent as one request, whole (`what` it is): the request's bound.
    pub(crate) fn request(what: &'static str, limits: &Limits) -> Budget {
        Budget {
            max: limits.max_request_bytes,
            what,
            spent: 0,
        }
    }

    /// `TOO_MANY_EVENTS` at event `index`, with at least `data` bytes counted so far.
    pub(crate) fn refuse(&self, data: usize, index: usize) -> ClientError {
        ClientError::new(
            ErrorCode::TooManyEvents,
            format!(
                "events[{index}]: {} holds {data} bytes of data or more, at most {} are accepted",
                self.what, self.max
            ),
        )
        .with("index", index as u32)
    }
}

/// What one event costs the module beyond its `data` and `iv` (the parsed event, its id, the
/// allocator's slack), in [`Held`]'s count.
pub(crate) const EVENT_COST: usize = 128;

/// What one call costs the module beyond its events (its future, task and place in group
/// commit), in [`Held`]'s count.
pub(crate) const CALL_COST: usize = 1024;

thread_local! {
    /// One count for the whole module: every client of the page shares its memory.
    static MODULE: Held = Held::default();
}

/// The module's count of what appends hold until stored.
pub(crate) fn module_held() -> Held {
    MODULE.with(Held::clone)
}

thread_local! {
    /// Whether an append is reading its arguments now.
    static PARSING: Cell<bool> = const { Cell::new(false) };
}

/// Held while an append reads its arguments: an append called from inside them (a getter or
/// `toJSON` of its events) is refused `BUSY` before it copies anything. Each level of such
/// recursion copied an event the count did not see yet (it is charged after the event's last
/// getter ran), so a deep enough one overran the bound; no app needs to append from there.
pub(crate) struct Parsing(());

impl Parsing {
    /// Enters, or `BUSY` if an append is reading its arguments already.
    pub(crate) fn enter() -> Result<Parsing, ClientError> {
        if PARSING.with(|p| p.replace(true)) {
            // A genuine nested call ends with the outer parse, before any microtask can run:
            // clearing the flag in one heals only a flag left set by a JavaScript exception
            // or trap through an outer parse's frames (its guard never dropped), which would
            // otherwise refuse every later append of the page.
            crate::browser::env::spawn(async { PARSING.with(|p| p.set(false)) });
            return Err(ClientError::new(
                ErrorCode::Busy,
                "append called from inside another append's arguments (a getter or toJSON of \
                 its events): refused, nothing stored",
            )
            .with("index", 0u32));
        }
        Ok(Parsing(()))
    }
}

impl Drop for Parsing {
    fn drop(&mut self) {
        PARSING.with(|p| p.set(false));
    }
}

/// `BUSY` at event `index`, which would cost `cost` more: the module's appends hold nearly
/// [`MAX_HELD_BYTES`] already.
pub(crate) fn busy(charge: &Charge, index: usize, cost: usize) -> ClientError {
    ClientError::new(
        ErrorCode::Busy,
        format!(
            "events[{index}]: the appends not stored yet hold {} bytes, and this one needs \
             {cost} more: at most {MAX_HELD_BYTES} are held at once; await them, then try again",
            charge.held()
        ),
    )
    .with("index", index as u32)
}
