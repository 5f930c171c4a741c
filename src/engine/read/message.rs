//! What the contexts of a device tell each other about the read side, over the database's
//! channel (next to the coordination's own messages).
//!
//! Only the draining context holds the change stream and catches up; the others say what they
//! watch ([`ReadMessage::Watch`], again whenever the drainer asks with
//! [`ReadMessage::WhoWatches`]), ask for catch-ups, and refresh their views when told the log
//! moved or an aggregate's pending events changed.

use crate::engine::model::AggregateRef;

/// One read-side message between the contexts of a database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ReadMessage {
    /// Everything context `context` subscribes to now, with how many subscriptions each.
    Watch {
        /// The context's random id.
        context: u64,
        /// Its subscriptions (empty: it has none, or it is going away).
        list: Vec<(AggregateRef, u32)>,
    },
    /// A new drainer asks every context for its [`ReadMessage::Watch`].
    WhoWatches,
    /// Catch this aggregate up (a `read` in another context).
    CatchUp(AggregateRef),
    /// A catch-up ended: `ok` when it reached the server's tip.
    CaughtUp {
        /// The aggregate.
        aggregate: AggregateRef,
        /// Whether it reached the tip.
        ok: bool,
    },
    /// The aggregate's local log moved (a page was stored, or it was reset).
    LogChanged(AggregateRef),
    /// The aggregate's pending events changed (appended, parked, discarded) in some context.
    Touched(AggregateRef),
}
