//! The backend-level writes of the Celeriant backend's tests (`celeriant_tips*.rs`,
//! `celeriant_watch.rs`): aggregate `n` of one org and type, and a write of one event to it.

use celeriant_gateway::backend::{AggregateCommand, AggregateKey, WriteCommand};
use celeriant_sync_protocol::{AggregateRef, Event};
use uuid::Uuid;

/// The org of every aggregate written.
pub const ORG: u128 = 0x0a;
/// The type of every aggregate written.
pub const TYPE: u128 = 0x0b;

/// Aggregate `n`.
pub fn key(n: u128) -> AggregateKey {
    AggregateKey {
        org: Uuid::from_u128(ORG),
        aggregate: AggregateRef {
            type_id: Uuid::from_u128(TYPE),
            id: Uuid::from_u128(n),
        },
    }
}

/// One event, sequence `seq` of client 0xc1, written to aggregate `n` (created if absent).
pub fn command(n: u128, seq: u64) -> WriteCommand {
    WriteCommand {
        principal: None,
        policy: None,
        client_id: Uuid::from_u128(0xc1),
        writes: vec![AggregateCommand {
            key: key(n),
            allow_create: true,
            expected_version: None,
            enforce_client_idempotency: true,
            events: vec![Event {
                client_seq: seq,
                event_id: None,
                timestamp: 1_700_000_000_000,
                event_type: 3,
                minor: 0,
                data: b"x".to_vec(),
                iv: None,
            }],
        }],
    }
}
