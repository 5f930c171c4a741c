//! The celeriant-sync wire protocol, version 1: the one definition both ends compile against.
//!
//! The browser client (`celeriant-sync`) and the HTTP gateway (`celeriant-gateway`) share this
//! crate so that the JSON shapes, the numeric codes and — most importantly — the table that says
//! what a writer must do with each answer cannot drift apart. `docs/protocol.md` is the prose
//! version of this crate, with examples.
//!
//! * [`wire`]: request and response bodies (serde, camelCase JSON).
//! * [`encoding`]: the JSON encodings of ids, integers and bytes (UUID strings, numbers no larger
//!   than 2^53 − 1, standard padded base64).
//! * [`codes`]: Celeriant's write-path codes and the gateway's own codes.
//! * [`outcome`]: the five outcomes (`landed`, `retry`, `unknown`, `unauthorized`, `rejected`)
//!   and the classification of every code into one of them.
//! * [`body_size`]: the size of the largest legal write body, from the limits.
//! * [`validate`]: the checks a write must pass before anything is written, shared so the client
//!   can refuse bad input at `append` with exactly the gateway's rules.
//! * [`json`]: the hand-written JSON the browser client uses (event encoding, outcome reading).
//! * [`session`]: `POST /v1/session`, where a device proves its client id with its key and gets
//!   the token every write and read carries.
//! * [`faults`]: the body of the gateway's fault-injection control endpoint (tests and the demo).
//! * [`watch`]: the change stream: its request body, its events' names and their data.
#![warn(missing_docs)]

pub mod body_size;
pub mod codes;
pub mod encoding;
pub mod faults;
pub mod json;
pub mod outcome;
pub mod session;
mod strict;
pub mod validate;
pub mod watch;
pub mod wire;

pub use outcome::{Class, WriteOutcome};
pub use session::{SESSION_PATH, SessionRequest, SessionResponse};
pub use validate::{Limits, ValidationError};
pub use wire::{AggregateRef, AggregateWrite, Event, ReadBatch, ReadResponse, WriteRequest};

/// The protocol version this crate implements; it is also the path prefix (`/v1/...`).
pub const PROTOCOL_VERSION: u32 = 1;

/// Path of the write endpoint.
pub const WRITE_PATH: &str = "/v1/write";

/// Path of the health endpoint.
pub const HEALTH_PATH: &str = "/healthz";

/// Path of the fault-injection control endpoint (only served when the gateway enables faults).
pub const FAULTS_PATH: &str = "/v1/faults";

/// Path of the change stream (Server-Sent Events): `POST` with the aggregates in a JSON body,
/// or `GET` with repeated `aggregate=<typeId>/<id>` query parameters.
pub const WATCH_PATH: &str = "/v1/watch";

/// Path of the trim test hook (only served when the gateway enables faults).
pub const FAULTS_TRIM_PATH: &str = "/v1/faults/trim";

/// Path of the read endpoint for one aggregate: `/v1/aggregates/{typeId}/{id}/events?from=N`.
pub fn events_path(aggregate: &AggregateRef) -> String {
    format!(
        "/v1/aggregates/{}/{}/events",
        aggregate.type_id, aggregate.id
    )
}
