//! Owners and members on the Celeriant backend, kept in Celeriant itself so every replica of
//! the gateway agrees.
//!
//! Each data aggregate `(org, type, id)` has at most one **access aggregate**
//! `(org, RESERVED_TYPE, record_id(type, id))` ([`record_key`]): `RESERVED_TYPE` is
//! `crate::access::RESERVED_TYPE`, which the public API refuses (`Session::check_type`), and
//! `record_id` is the first 16 bytes of SHA-256 over a domain tag, the type's and the id's
//! 16 bytes (big-endian), read as a big-endian `u128`. Every batch of it holds one event
//! ([`RECORD_EVENT_TYPE`]) whose value is the whole [`AccessRecord`] as JSON after the change:
//!
//! * version 1 is written by the gateway **before** the first data write of the aggregate, with
//!   `expected_version: 0` and `allow_create: true`: Celeriant commits it only while the record
//!   does not exist, so of two creators racing exactly one gets it; the other gets 2003 and is
//!   judged against the winner's record like any other principal. The owner is version 1's and
//!   never changes: every later batch carries it forward (a members change that names another
//!   owner is refused; a fetched batch naming another owner than the cached one is refused as
//!   damaged data).
//! * each members change appends a batch guarded with `expected_version` = the version the
//!   change was decided on (read-modify-write; on 2003 read again and decide again, at most
//!   [`UPDATE_ATTEMPTS`] times).
//!
//! A crash between the record and the data write leaves a record without data: its owner still
//! owns the id, the retried write lands (it is the owner's), anyone else is refused.
//!
//! Records are cached per replica, at most [`CACHE_ENTRIES`] and about [`CACHE_BYTES`]: an
//! owner never changes, so a check that needs only the owner uses the cached record however old;
//! a check that depends on members reads it again once it is older than the members TTL
//! (`--members-cache-ms`), or once the upstream watch notified a change of the record (or a
//! resync): the TTL is how long a revoked member may keep access through another replica when
//! notifications are late or lost. The replica that makes a change sees it at once. An absent
//! record is never cached (it can be created at any moment). A fetch costs at most two requests
//! (the tip by an aggregate-details request, then that batch), however long the record's
//! history.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use celeriant_client_tokio::{CeleriantPool, ClientError, DetailsError, ServerError, WriteError};
use celeriant_msg::request::read_filters::ReadFilters;
use celeriant_msg::request::requests::{
    AggregateDetailsRequest, ReadRequest, SingleAggregateWrite, WriteRequest,
};
use celeriant_sync_protocol::codes::{celeriant as cc, gateway as g};
use celeriant_wal::aggregate_key::AggregateKey as CeleriantKey;
use celeriant_wal::datablocks::datablock_aggregate_event::DatablockAggregateEvent;
use sha2::{Digest, Sha256};

use super::backend_error;
use crate::access::{AccessRecord, RESERVED_TYPE};
use crate::backend::{AccessChange, AggregateKey, BackendError};
use crate::error::ApiError;

/// The event type of a record batch (its value: the record as JSON).
pub const RECORD_EVENT_TYPE: u64 = 1;

/// Most records one replica caches.
pub const CACHE_ENTRIES: usize = 65_536;

/// Most bytes (estimated: principals' lengths plus a fixed overhead per entry) the cached
/// records of one replica hold: a record may list 256 members, so the entry bound alone would
/// let owners of many large records fill gigabytes.
pub const CACHE_BYTES: usize = 32 << 20;

/// Attempts of one members change that keeps losing the version guard.
pub const UPDATE_ATTEMPTS: usize = 5;

/// The client id the gateway writes access records under (idempotency is off for them: the
/// version guard decides).
const RECORD_WRITER: u128 = 0xac0e_55ed_0000_4000_8000_0000_0000_0001;

const DOMAIN: &[u8] = b"celeriant-sync access record v1\0";

/// The id of `key`'s access aggregate (see the module documentation).
pub fn record_id(key: &AggregateKey) -> u128 {
    let mut hash = Sha256::new();
    hash.update(DOMAIN);
    hash.update(key.aggregate.type_id.as_bytes());
    hash.update(key.aggregate.id.as_bytes());
    let digest = hash.finalize();
    let mut first = [0u8; 16];
    first.copy_from_slice(&digest[..16]);
    u128::from_be_bytes(first)
}

/// Celeriant's key of `key`'s access aggregate.
pub fn record_key(key: &AggregateKey) -> CeleriantKey {
    CeleriantKey::new(key.org.as_u128(), RESERVED_TYPE.as_u128(), record_id(key))
}

#[derive(Clone)]
struct Cached {
    record: AccessRecord,
    version: u64,
    fetched: Instant,
    /// Seen changed (or possibly changed) since fetched: members checks read it again.
    stale: bool,
}

/// The cached records and their estimated size.
#[derive(Default)]
struct Cache {
    map: HashMap<AggregateKey, Cached>,
    /// The key of each cached record by its record id (for the watch's notifications).
    by_record: HashMap<u128, AggregateKey>,
    bytes: usize,
}

/// The estimated bytes `record` holds in the cache.
fn size_of(record: &AccessRecord) -> usize {
    const OVERHEAD: usize = 128;
    OVERHEAD
        + record.owner.as_str().len()
        + record
            .members
            .keys()
            .map(|p| p.as_str().len() + 48)
            .sum::<usize>()
}

impl Cache {
    fn remove(&mut self, key: &AggregateKey) {
        if let Some(old) = self.map.remove(key) {
            self.bytes -= size_of(&old.record);
            self.by_record.remove(&record_id(key));
        }
    }

    /// Stores `entry` unless a newer version is held, evicting arbitrary entries until both
    /// bounds hold.
    fn insert(&mut self, key: AggregateKey, entry: Cached) {
        // Never go back to an older version (a slower concurrent read).
        if self
            .map
            .get(&key)
            .is_some_and(|old| old.version > entry.version)
        {
            return;
        }
        self.remove(&key);
        let size = size_of(&entry.record);
        while !self.map.is_empty()
            && (self.map.len() >= CACHE_ENTRIES || self.bytes + size > CACHE_BYTES)
        {
            let Some(evict) = self.map.keys().next().copied() else {
                break;
            };
            self.remove(&evict);
        }
        self.bytes += size;
        self.by_record.insert(record_id(&key), key);
        self.map.insert(key, entry);
    }
}

/// The access records of one replica: reads, creation, members changes and the cache.
pub struct Records {
    pool: Arc<CeleriantPool>,
    cache: Mutex<Cache>,
    members_ttl: Duration,
}

fn corrupt(key: &AggregateKey, why: &str) -> BackendError {
    BackendError::code(
        g::DATA_CORRUPT,
        format!(
            "the access record of {}/{} {why}; it is not used",
            key.aggregate.type_id, key.aggregate.id
        ),
    )
}

fn is_conflict(error: &ClientError) -> bool {
    matches!(
        error,
        ClientError::Server(ServerError::Write {
            kind: WriteError::OptimisticConcurrencyViolation { .. },
            ..
        })
    )
}

impl Records {
    /// Records read through `pool`, members re-read after `members_ttl`.
    pub fn new(pool: Arc<CeleriantPool>, members_ttl: Duration) -> Self {
        Records {
            pool,
            cache: Mutex::new(Cache::default()),
            members_ttl,
        }
    }

    /// Makes the cached copy of the record with id `record_id` stale for members checks (the
    /// upstream watch saw it change); the owner stays cached.
    pub fn expire_record(&self, record_id: u128) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(key) = cache.by_record.get(&record_id).copied()
            && let Some(entry) = cache.map.get_mut(&key)
        {
            entry.stale = true;
        }
    }

    /// Makes every cached record stale for members checks (notifications may have been lost).
    pub fn expire_all(&self) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        for entry in cache.map.values_mut() {
            entry.stale = true;
        }
    }

    fn cached(&self, key: &AggregateKey) -> Option<Cached> {
        let cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache.map.get(key).cloned()
    }

    fn remember(&self, key: AggregateKey, entry: Cached) {
        let mut cache = self.cache.lock().unwrap_or_else(|p| p.into_inner());
        cache.insert(key, entry);
    }

    /// The record of `key` for an access check: the cached one when the check needs only the
    /// owner (`members: false`) or when it is younger than the members TTL, else read again.
    pub async fn get(
        &self,
        key: &AggregateKey,
        members: bool,
    ) -> Result<Option<AccessRecord>, BackendError> {
        if let Some(c) = self.cached(key)
            && (!members || (!c.stale && c.fetched.elapsed() < self.members_ttl))
        {
            return Ok(Some(c.record));
        }
        Ok(self.fetch(key).await?.map(|c| c.record))
    }

    /// Reads `key`'s record from Celeriant, caches and returns it: the record's tip (an
    /// aggregate-details request), then, unless the cache holds that version, the tip's batch
    /// alone — each batch is the whole record, so a fetch costs at most two requests however
    /// many changes the record has seen.
    async fn fetch(&self, key: &AggregateKey) -> Result<Option<Cached>, BackendError> {
        let base = self.cached(key);
        let ckey = record_key(key);
        let fetched = Instant::now();
        let details = self
            .pool
            .aggregate_details(AggregateDetailsRequest {
                correlation_id: None,
                aggregate_key: ckey.clone(),
            })
            .await;
        let tip = match details {
            Ok(d) if d.is_deleted => return Err(corrupt(key, "was deleted")),
            Ok(d) => d.max_aggregate_version,
            Err(ClientError::Server(ServerError::Details {
                kind: DetailsError::AggregateNotExists,
                ..
            })) if base.is_none() => return Ok(None),
            Err(e) => return Err(backend_error(e)),
        };
        if let Some(mut c) = base.clone()
            && c.version >= tip
        {
            c.fetched = fetched;
            c.stale = false;
            self.remember(*key, c.clone());
            return Ok(Some(c));
        }
        let response = self
            .pool
            .read(ReadRequest {
                correlation_id: None,
                aggregate_key: ckey,
                filters: ReadFilters::new(tip).to_aggregate_version(tip),
            })
            .await
            .map_err(backend_error)?;
        let Some(batch) = response
            .event_batches
            .iter()
            .find(|b| b.aggregate_version == tip)
        else {
            return Err(corrupt(key, "has no batch at its tip"));
        };
        let [event] = batch.events.as_slice() else {
            return Err(corrupt(key, "has a batch that is not one event"));
        };
        let record: AccessRecord = serde_json::from_slice(&event.event_value)
            .map_err(|_| corrupt(key, "does not parse"))?;
        if let Some(c) = &base
            && c.record.owner != record.owner
        {
            return Err(corrupt(key, "names another owner than before"));
        }
        let c = Cached {
            record,
            version: tip,
            fetched,
            stale: false,
        };
        self.remember(*key, c.clone());
        Ok(Some(c))
    }

    /// The record of `key` read from Celeriant now (the members endpoint).
    pub async fn read(&self, key: &AggregateKey) -> Result<Option<AccessRecord>, BackendError> {
        Ok(self.fetch(key).await?.map(|c| c.record))
    }

    /// Appends `record` as version `version` (guarded on `version - 1`); `Ok(false)`: the guard
    /// was stale (2003), nothing was appended.
    async fn append(
        &self,
        key: &AggregateKey,
        record: &AccessRecord,
        version: u64,
    ) -> Result<bool, BackendError> {
        let value = serde_json::to_vec(record)
            .map_err(|e| BackendError::code(g::INTERNAL, e.to_string()))?;
        let event = DatablockAggregateEvent {
            client_seq: version,
            event_seq: 0,
            event_id: None,
            event_timestamp: std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64),
            event_type_major: RECORD_EVENT_TYPE,
            event_type_minor: 0,
            event_value: Arc::new(value),
            iv: None,
        };
        let write = SingleAggregateWrite {
            events: vec![event],
            allow_create: version == 1,
            expected_version: Some(version - 1),
            enforce_client_idempotency: false,
        };
        let request = WriteRequest {
            correlation_id: None,
            client_id: RECORD_WRITER,
            user_id: None,
            writes: [(record_key(key), write)].into(),
        };
        match self.pool.write(request).await {
            Ok(_) => {
                self.remember(
                    *key,
                    Cached {
                        record: record.clone(),
                        version,
                        fetched: Instant::now(),
                        stale: false,
                    },
                );
                Ok(true)
            }
            Err(e) if is_conflict(&e) => Ok(false),
            Err(e) => Err(backend_error(e)),
        }
    }

    /// Records `record` (no members) as `key`'s first record, create-only. `Ok(false)`: a
    /// record exists already (another creator won); judge against it.
    pub async fn create(
        &self,
        key: &AggregateKey,
        record: &AccessRecord,
    ) -> Result<bool, BackendError> {
        self.append(key, record, 1).await
    }

    /// Changes `key`'s members: reads the record, lets `change` decide, appends the result
    /// guarded on the version it was decided on; again on 2003, at most [`UPDATE_ATTEMPTS`]
    /// times (then 11000, retry: the record is contended).
    pub async fn update(
        &self,
        key: &AggregateKey,
        change: &AccessChange,
    ) -> Result<Result<AccessRecord, ApiError>, BackendError> {
        for _ in 0..UPDATE_ATTEMPTS {
            let current = self.fetch(key).await?;
            let version = current.as_ref().map_or(0, |c| c.version);
            let owner = current.as_ref().map(|c| c.record.owner.clone());
            let record = match change(current.map(|c| c.record)) {
                Ok(record) => record,
                Err(refused) => return Ok(Err(refused)),
            };
            // Each batch carries the owner forward; a change never names another.
            if owner.as_ref() != Some(&record.owner) {
                return Err(BackendError::code(
                    g::INTERNAL,
                    "a members change named another owner",
                ));
            }
            if self.append(key, &record, version + 1).await? {
                return Ok(Ok(record));
            }
        }
        Err(BackendError::code(
            cc::SERVER_BUSY,
            format!(
                "the members of {}/{} changed {UPDATE_ATTEMPTS} times while this change was \
                 decided; try again",
                key.aggregate.type_id, key.aggregate.id
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use celeriant_sync_protocol::AggregateRef;
    use uuid::Uuid;

    #[test]
    fn the_cache_keeps_to_its_bounds_and_never_goes_back_a_version() {
        let key = |i: u128| AggregateKey {
            org: Uuid::from_u128(1),
            aggregate: AggregateRef {
                type_id: Uuid::from_u128(2),
                id: Uuid::from_u128(i),
            },
        };
        let mut big = AccessRecord::owned_by(crate::access::Principal::user("o").unwrap());
        for n in 0..256 {
            let p = crate::access::Principal::user(&format!("{n:0>200}")).unwrap();
            big.members.insert(p, crate::access::Grant::Read);
        }
        let entry = |record: &AccessRecord, version| Cached {
            record: record.clone(),
            version,
            fetched: Instant::now(),
            stale: false,
        };
        let mut cache = Cache::default();
        for i in 0..1_000 {
            cache.insert(key(i), entry(&big, 1));
            assert!(cache.bytes <= CACHE_BYTES);
        }
        assert!(cache.map.len() < 1_000);
        let held: usize = cache.map.values().map(|c| size_of(&c.record)).sum();
        assert_eq!(held, cache.bytes);
        let small = AccessRecord::owned_by(crate::access::Principal::user("o").unwrap());
        cache.insert(key(5_000), entry(&small, 3));
        cache.insert(key(5_000), entry(&small, 2));
        assert_eq!(cache.map[&key(5_000)].version, 3);
    }

    #[test]
    fn a_record_id_depends_on_the_type_and_the_id_and_is_stable() {
        let key = |t: u128, i: u128| AggregateKey {
            org: Uuid::from_u128(1),
            aggregate: AggregateRef {
                type_id: Uuid::from_u128(t),
                id: Uuid::from_u128(i),
            },
        };
        assert_ne!(record_id(&key(1, 2)), record_id(&key(2, 1)));
        assert_ne!(record_id(&key(1, 2)), record_id(&key(1, 3)));
        assert_eq!(record_id(&key(1, 2)), record_id(&key(1, 2)));
        // Pinned (computed independently: Python hashlib over the documented bytes): a changed
        // derivation would orphan every record already stored.
        assert_eq!(
            Uuid::from_u128(record_id(&key(1, 2))).to_string(),
            "49683f7b-0202-9eb0-31be-c36095c86270"
        );
        let k = record_key(&key(1, 2));
        assert_eq!(k.aggregate_type_id, RESERVED_TYPE.as_u128());
        assert_eq!(k.org_id, 1);
    }
}
