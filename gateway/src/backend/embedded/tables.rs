//! The embedded store's schema: three redb tables, described once.
//!
//! Every key starts with the organisation, the aggregate type and the aggregate id as `u128`s
//! (the UUIDs' numeric values), so one aggregate's rows are contiguous and range scans are
//! cheap.
//!
//! | table          | key                                   | value                                      |
//! |----------------|---------------------------------------|--------------------------------------------|
//! | `aggregates`   | (org, type, id)                       | current version (batch count, 1-based)     |
//! | `batches`      | (org, type, id, version)              | the batch as JSON ([`ReadBatch`])          |
//! | `client_seqs`  | (org, type, id, client)               | highest `client_seq` durable for the client|
//!
//! [`ReadBatch`]: celeriant_sync_protocol::ReadBatch

use redb::TableDefinition;
use uuid::Uuid;

use crate::backend::AggregateKey;

/// (org, type, id)
pub type AggKey = (u128, u128, u128);

/// Current version of each aggregate.
pub const AGGREGATES: TableDefinition<AggKey, u64> = TableDefinition::new("aggregates");

/// Every batch, by aggregate and version.
pub const BATCHES: TableDefinition<(u128, u128, u128, u64), &[u8]> =
    TableDefinition::new("batches");

/// Highest durable `client_seq` per (aggregate, client).
pub const CLIENT_SEQS: TableDefinition<(u128, u128, u128, u128), u64> =
    TableDefinition::new("client_seqs");

/// The table key of an aggregate.
pub fn agg_key(key: &AggregateKey) -> AggKey {
    (
        key.org.as_u128(),
        key.aggregate.type_id.as_u128(),
        key.aggregate.id.as_u128(),
    )
}

/// The `client_seqs` key of an (aggregate, client).
pub fn client_key(key: &AggregateKey, client: Uuid) -> (u128, u128, u128, u128) {
    let (o, t, i) = agg_key(key);
    (o, t, i, client.as_u128())
}
