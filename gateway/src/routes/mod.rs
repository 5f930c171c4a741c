//! The HTTP routes of protocol v1, one file each.

pub mod backup;
pub mod faults;
pub mod health;
pub mod members;
pub mod read;
pub mod revocations;
pub mod session;
pub mod watch;
pub mod write;
