//! celeriant-gateway: the HTTP+JSON gateway between browsers and Celeriant.
#![warn(missing_docs)]
pub mod backend;
