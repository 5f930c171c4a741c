//! The change stream behind `POST /v1/watch`: notifications, not events.
//!
//! A backend publishes [`crate::backend::Change`]s; the [`hub::Hub`] fans each out to the
//! streams watching that aggregate, into each stream's bounded [`slot::Slot`]; each stream's
//! body ([`stream::events`]) turns its slot into Server-Sent Events (`ready`, `changed`,
//! `reset`, `resync`, `heartbeat`) as fast as its connection takes them. Nothing on the
//! writer's side ever waits for a reader.

pub mod hub;
pub mod slot;
pub mod stream;

pub use hub::{Hub, Registration, WatchLimits};
