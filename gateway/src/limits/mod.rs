//! Fair share and admission: what one request, one client or one address may take at once.
//!
//! Each bound here turns a resource an attacker could exhaust into a typed refusal decided
//! before the expensive part (reading a body, touching the store):
//!
//! * [`connections`]: open connections, overall and per address (`crate::serve` applies it);
//! * [`fair`]: per-address and per-client rate and concurrency, for writes and reads apart
//!   (429, 42910);
//! * [`slots`]: write slots (`--max-inflight`), the last quarter reserved for addresses holding
//!   few (429, 42900);
//! * [`budget`]: bytes of write bodies and of read responses held at once (429, 42900);
//! * [`share_bytes`]: each address's and client id's share of the write-body and read-response
//!   bytes (429, 42910);
//! * [`reserve`]: the last quarter of those two byte budgets, which only an address holding
//!   little of it may take (429, 42900);
//! * [`cheap`]: per-address rates of `/healthz` and static files, and of preflights, 405s and
//!   `Host` refusals (429, 42911).
//!
//! Per-key state is bounded: concurrency entries exist only while a request of that key is in
//! flight (so there are at most as many as open connections), and the rate limiters drop idle
//! keys once they track [`keyed::MAX_TRACKED`] of them. [`ip`] says which key an address counts
//! under, [`nested`] gives each IPv6 /64 half of its bucket's rates and caps; [`notice`] keeps the refusal log lines from becoming a flood of their own.

pub mod budget;
pub mod cheap;
pub mod connections;
pub mod fair;
pub mod ip;
pub mod keyed;
pub mod nested;
pub mod notice;
pub mod reserve;
pub mod share_bytes;
pub mod slots;
