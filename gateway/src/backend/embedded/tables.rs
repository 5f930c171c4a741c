//! The embedded store's schema (version 2): six redb tables, described once.
//!
//! Every key starts with the organisation, the aggregate type and the aggregate id as `u128`s
//! (the UUIDs' numeric values), so one aggregate's rows are contiguous and range scans are
//! cheap. Every value carries a CRC-32C of its key and contents (`record.rs`), written with it
//! and checked wherever it is read.
//!
//! | table             | key                        | value                                          |
//! |-------------------|----------------------------|------------------------------------------------|
//! | `meta`            | name                       | `schema` → 2                                   |
//! | `aggregates.v2`   | (org, type, id)            | (current version, checksum)                    |
//! | `batches`         | (org, type, id, version)   | tag, checksum, the batch as JSON ([`ReadBatch`]) |
//! | `client_seqs.v2`  | (org, type, id, client)    | (highest durable `client_seq`, checksum)       |
//! | `client_usage`    | client                     | (bytes of batches stored, checksum)            |
//! | `trims`           | (org, type, id)            | (lowest available version, checksum)           |
//!
//! `trims` holds a row only for an aggregate trimmed by the test hook (`POST /v1/faults/trim`);
//! it is created on the first trim, so a store without it is the same schema 2 (no row: the
//! lowest available version is 1).
//!
//! Schema 1 (before checksums) had `aggregates` and `client_seqs` with bare `u64` values,
//! `batches` holding bare JSON, and no `meta`; `migrate.rs` converts it on open.
//!
//! [`ReadBatch`]: celeriant_sync_protocol::ReadBatch

use redb::TableDefinition;
use uuid::Uuid;

use crate::backend::AggregateKey;

/// The schema this gateway writes.
pub const SCHEMA: u64 = 2;

/// (org, type, id)
pub type AggKey = (u128, u128, u128);

/// (org, type, id, version)
pub type BatchKey = (u128, u128, u128, u64);

/// (org, type, id, client)
pub type ClientKey = (u128, u128, u128, u128);

/// A number stored with its checksum.
pub type Sealed = (u64, u32);

/// Named settings; `schema` is the schema version.
pub const META: TableDefinition<&str, u64> = TableDefinition::new("meta");

/// Current version of each aggregate.
pub const AGGREGATES: TableDefinition<AggKey, Sealed> = TableDefinition::new("aggregates.v2");

/// Every batch, by aggregate and version.
pub const BATCHES: TableDefinition<BatchKey, &[u8]> = TableDefinition::new("batches");

/// Highest durable `client_seq` per (aggregate, client).
pub const CLIENT_SEQS: TableDefinition<ClientKey, Sealed> = TableDefinition::new("client_seqs.v2");

/// Bytes of batch records stored per client id (the storage quota's count).
pub const CLIENT_USAGE: TableDefinition<u128, Sealed> = TableDefinition::new("client_usage");

/// Lowest available version of each trimmed aggregate.
pub const TRIMS: TableDefinition<AggKey, Sealed> = TableDefinition::new("trims");

/// Schema 1: current version of each aggregate, without checksum.
pub const AGGREGATES_V1: TableDefinition<AggKey, u64> = TableDefinition::new("aggregates");

/// Schema 1: highest durable `client_seq`, without checksum.
pub const CLIENT_SEQS_V1: TableDefinition<ClientKey, u64> = TableDefinition::new("client_seqs");

/// The table key of an aggregate.
pub fn agg_key(key: &AggregateKey) -> AggKey {
    (
        key.org.as_u128(),
        key.aggregate.type_id.as_u128(),
        key.aggregate.id.as_u128(),
    )
}

/// The `client_seqs` key of an (aggregate, client).
pub fn client_key(key: &AggregateKey, client: Uuid) -> ClientKey {
    let (o, t, i) = agg_key(key);
    (o, t, i, client.as_u128())
}

/// "aggregate TYPE/ID (org ORG)", for messages.
pub fn describe(key: AggKey) -> String {
    let (o, t, i) = key;
    format!(
        "aggregate {}/{} (org {})",
        Uuid::from_u128(t),
        Uuid::from_u128(i),
        Uuid::from_u128(o)
    )
}
