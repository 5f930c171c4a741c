//! The IndexedDB outbox.
//!
//! * [`schema`]: database version, store names, key paths and the upgrade chain;
//! * [`records`]: the stored shapes and their conversion to and from engine values;
//! * [`outbox`]: [`IdbOutbox`](outbox::IdbOutbox), the [`Outbox`](crate::engine::outbox::Outbox)
//!   implementation, one IndexedDB transaction per operation.

pub mod outbox;
pub mod records;
pub mod schema;
