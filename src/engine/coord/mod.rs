//! One drainer per device: which context of a database drains, and what the others do.
//!
//! * [`machine`]: [`Coordinator`], the decisions — request the drain lock, start or stop the
//!   drain, heartbeat, steal from a silent drainer, mirror or relay — as a pure state machine:
//!   events in, effects out;
//! * [`message`]: what the contexts of one database tell each other;
//! * [`outgoing`]: the messages that only say "something changed", merged before they are
//!   posted.
//!
//! The browser runtime (`browser/runtime.rs`) performs the effects with Web Locks, a
//! `BroadcastChannel` and a timer; `tests/coord_model.rs` interleaves contexts opening,
//! closing, hanging and stealing against a simulated lock manager and channel.

pub mod machine;
pub mod message;
pub mod outgoing;

pub use machine::{Coordinator, Effect, Event, HEARTBEAT_MS, HubUpdate, STEAL_AFTER_MS};
pub use message::Message;
pub use outgoing::{Hold, Outgoing};
