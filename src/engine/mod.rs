//! The outbox's logic in plain Rust: no web types, no I/O of its own, an injected clock.
//!
//! Everything that decides *what* happens to an event lives here and is tested natively with
//! `cargo test` (including model-based property tests against a simulated Celeriant and a
//! simulated lock manager):
//!
//! * [`model`]: events, batches, receipts and parked records;
//! * [`append`]: the checks an `append` must pass before anything is written; [`group`]: group
//!   commit of concurrent appends; [`order`]: call order kept across the await of encryption;
//! * [`outbox`]: the storage interface ([`outbox::Outbox`]) and its rules, with an in-memory
//!   implementation ([`memory`]) and a conformance suite ([`conformance`]) that the IndexedDB
//!   implementation in `browser/` must pass too;
//! * [`batch`]: cutting a run of consecutive events into a request, and encoding it;
//! * [`classify`]: what an HTTP reply means ([`classify::Outcome`]) and what to do about it
//!   ([`classify::Action`]);
//! * [`backoff`]: capped exponential backoff with full jitter, honouring `Retry-After`;
//! * [`drain`]: the one sync loop, as a pure state machine and its executor; [`auth`]: the
//!   sessions it writes under;
//! * [`coord`]: which context drains, as a pure state machine;
//! * [`read`]: the read side — catch-up, the change stream, the converged view;
//! * [`status`] and [`signal`]: what the app sees and how the drain is woken;
//! * [`errors`]: the stable error codes JavaScript sees.
//! * [`members`]: sharing an aggregate (`share`, `unshare`, `members`): checks, bodies, refusals.
//! * [`sorted`]: the small ordered maps and sets the client keeps (a sorted `Vec`, for size).
//! * [`inspect`]: what `inspect()` shows (the drain's recent outcomes, the pinned batch's
//!   attempts, the outbox per aggregate).
//!
//! Arrows point one way: `api` → `browser` → `engine` → `protocol`.

pub mod append;
pub mod auth;
pub mod backoff;
pub mod batch;
pub mod classify;
#[doc(hidden)]
pub mod conformance;
pub mod coord;
pub mod drain;
pub mod env;
pub mod errors;
pub mod group;
pub mod inspect;
pub mod members;
pub mod memory;
pub mod model;
pub mod order;
pub mod outbox;
pub mod read;
pub mod signal;
pub mod sorted;
pub mod status;
