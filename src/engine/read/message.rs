//! What the contexts of a device tell each other about the read side, over the database's
//! channel (next to the coordination's own messages).
//!
//! Only the draining context holds the change stream and catches up; the others say what they
//! watch ([`ReadMessage::Watch`], again whenever the drainer asks with
//! [`ReadMessage::WhoWatches`]), ask for catch-ups, and refresh their views when told the log
//! moved or an aggregate's pending events changed. A `read`'s catch-up is asked under a
//! [`ReadTag`], and the catch-up's end names the tags it answers: only a catch-up whose page
//! request began after the `read` asked answers it.

use crate::engine::model::AggregateRef;

/// Names one `read` among every context's: the context that asked and its waiter id there.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct ReadTag {
    /// The asking context's random id.
    pub context: u64,
    /// The `read`'s waiter id in that context.
    pub waiter: u64,
}

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
    CatchUp {
        /// The aggregate.
        aggregate: AggregateRef,
        /// The `read` asking (`None`: a context of an older release, which sends no tag; its
        /// catch-up is done untagged, and that release answers its reads by aggregate).
        read: Option<ReadTag>,
    },
    /// A catch-up ended: `ok` when it reached the server's tip.
    CaughtUp {
        /// The aggregate.
        aggregate: AggregateRef,
        /// Whether it reached the tip.
        ok: bool,
        /// The `read`s (of other contexts than the drainer's) it answers: those asked before
        /// its last page request began; empty for a catch-up no `read` of another context
        /// waits for. `None` from a drainer of an older release, which names no read: every
        /// `read` of the aggregate waiting is answered, as that release did (better than each
        /// waiting out its timeout while an old tab drains, for days perhaps).
        reads: Option<Vec<ReadTag>>,
    },
    /// The aggregate's local log moved (a page was stored, or it was reset).
    LogChanged(AggregateRef),
    /// The aggregate's pending events changed (appended, parked, discarded) in some context.
    Touched(AggregateRef),
}
