//! The read side: what the server confirmed, kept in a local log and watched live.
//!
//! * `catch_up`: the catch-ups waiting for their page, each aggregate once;
//! * [`floors`]: the versions the stream notified, so a catch-up answered by a replica that
//!   lags is not taken for caught up;
//! * [`fold`]: a projection's cache rule — what of a new view must be folded again;
//! * [`inputs`]: what the read machine takes and yields;
//! * [`log`]: the local log's storage interface ([`log::LocalLog`]) and its rules, with an
//!   in-memory implementation ([`memory_log`]) and a conformance suite ([`log_conformance`])
//!   that the IndexedDB log in `browser/idb/log.rs` must pass too;
//! * [`machine`]: [`Reader`](machine::Reader), the decisions — the one change stream, catch-up
//!   paging, resets, reconnects — with no I/O;
//! * [`message`]: what the contexts of a device tell each other about it;
//! * [`page`]: what a reply to a catch-up page or a probe means;
//! * [`run`]: [`ReadRun`](run::ReadRun), the executor that performs the machine's actions
//!   over a [`ReadPlatform`](run::ReadPlatform) (the browser's in `browser/reader.rs`);
//! * [`routing`]: [`Routing`](routing::Routing), where the read side's work goes between the
//!   contexts of a device (the reader in the draining one) and which `read`s are answered;
//! * [`sse`]: the change stream's Server-Sent Events, parsed from text chunks;
//! * [`streams`]: which change stream watches which aggregate (shards of at most 1,000);
//! * [`subscriptions`]: the subscriptions of every context of the device, merged;
//! * [`view`]: how the confirmed log and this device's pending events converge into one view.

mod catch_up;
pub mod floors;
pub mod fold;
pub mod inputs;
pub mod log;
#[doc(hidden)]
pub mod log_conformance;
pub mod machine;
pub mod memory_log;
pub mod message;
pub mod page;
pub mod routing;
pub mod run;
pub mod sse;
pub mod streams;
pub mod subscriptions;
pub mod view;
