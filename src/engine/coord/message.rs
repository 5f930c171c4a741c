//! What the contexts (tabs, workers) of one database tell each other over its channel.
//!
//! The drainer posts its status, `synced` and `parked` notices and a heartbeat; followers post
//! `appended` and `discarded` so the drainer wakes and counts right, and `hello` to ask for the
//! current status. The browser layer encodes these as plain objects (`browser/channel.rs`).

use crate::engine::model::{AggregateRef, ParkRecord};
use crate::engine::status::{Status, SyncedNotice};

/// One message between the contexts of a database.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Message {
    /// The drainer's status changed.
    Status(Status),
    /// Events landed.
    Synced(SyncedNotice),
    /// An aggregate was parked.
    Parked(ParkRecord),
    /// A follower appended `n` events.
    Appended {
        /// How many.
        n: u64,
    },
    /// A context discarded an aggregate's parked events.
    Discarded {
        /// The aggregate.
        aggregate: AggregateRef,
        /// How many events were dropped.
        removed: u32,
    },
    /// The drainer is alive.
    Heartbeat,
    /// A new context asks the drainer for its status.
    Hello,
}
