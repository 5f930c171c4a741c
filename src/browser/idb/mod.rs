//! The IndexedDB outbox.
//!
//! * [`schema`]: database version, store names, key paths and the upgrade chain;
//! * [`db`]: the connection (reopened after another tab's upgrade) and the one transaction
//!   helper every operation goes through, with its error mapping;
//! * [`request`]: requests and transactions as futures;
//! * [`keys`]: keys and key ranges;
//! * [`log`]: the local log of what the server confirmed, and the snapshot a view is built from
//!   ([`LocalLog`](crate::engine::read::log::LocalLog) for the outbox's database); [`kept`]:
//!   the pages just stored, kept in memory so the view after a catch-up does not read them back;
//!   `log_fixture` drives it through the log's conformance suite, storing through the trait
//!   and as the reader does (tests only);
//! * [`records`]: how events are laid out in `outbox` records (runs of events, not one
//!   record per event);
//! * [`legs`]: an atomic write's legs as the outbox, pin and park records store them;
//! * [`outbox`]: [`IdbOutbox`](outbox::IdbOutbox), the
//!   [`Outbox`](crate::engine::outbox::Outbox) implementation, one transaction per operation;
//! * [`principal`]: which user the database belongs to (one browser, many users);
//! * [`watermarks`]: the drain's copy of the `landed` watermarks, which keeps `landed` out of
//!   the read-ahead's transaction.

mod counters;
pub mod db;
pub mod kept;
pub(crate) mod keys;
pub(crate) mod legs;
pub(crate) mod log;
pub mod log_fixture;
pub mod outbox;
pub(crate) mod principal;
mod records;
pub(crate) mod request;
pub mod schema;
mod watermarks;
