//! The drain: the one sync loop of a device, as a pure state machine and its executor.
//!
//! * [`machine`]: [`Drain`], the decisions — which batch next, what an answer means, when to
//!   wait, prune, park — from (state, what just happened, now) to actions, with no I/O;
//! * [`run`](mod@run): the executor that performs those actions over storage, transport and
//!   environment, with the waiting at the edge;
//! * [`flush`](mod@flush): `flush` and `whenSynced`, which wait for events to land.

pub mod flush;
pub mod machine;
pub mod run;

pub use flush::{FlushError, flush, flush_aggregate, when_synced, when_synced_unblocked};
pub use machine::{Drain, Policy, RunEnd};
pub use run::{Edge, run, run_inspected};
