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

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use celeriant_client_tokio::CeleriantPool;
use celeriant_sync_protocol::codes::{celeriant as cc, gateway as g};
use celeriant_wal::aggregate_key::AggregateKey as CeleriantKey;

use super::record::{self, Tip};
use crate::access::{AccessRecord, RESERVED_TYPE};
use crate::backend::{AccessChange, AggregateKey, BackendError};
use crate::error::ApiError;

/// The event type of a record batch (its value: the record as JSON).
pub use super::record::RECORD_EVENT_TYPE;

/// Most records one replica caches.
pub const CACHE_ENTRIES: usize = 65_536;

/// Most bytes (estimated: principals' lengths plus a fixed overhead per entry) the cached
/// records of one replica hold: a record may list 256 members, so the entry bound alone would
/// let owners of many large records fill gigabytes.
pub const CACHE_BYTES: usize = 32 << 20;

/// Attempts of one members change that keeps losing the version guard.
pub const UPDATE_ATTEMPTS: usize = 5;

const DOMAIN: &[u8] = b"celeriant-sync access record v1\0";

/// The id of `key`'s access aggregate (see the module documentation).
pub fn record_id(key: &AggregateKey) -> u128 {
    record::derived_id(&[
        DOMAIN,
        key.aggregate.type_id.as_bytes(),
        key.aggregate.id.as_bytes(),
    ])
}

/// Celeriant's key of `key`'s access aggregate.
pub fn record_key(key: &AggregateKey) -> CeleriantKey {
    CeleriantKey::new(key.org.as_u128(), RESERVED_TYPE.as_u128(), record_id(key))
}

#[derive(Clone)]
struct Cached {
    /// Shared: a check takes the record out of the cache without copying its members.
    record: Arc<AccessRecord>,
    version: u64,
    fetched: Instant,
    /// Seen changed (or possibly changed) since fetched: members checks read it again.
    stale: bool,
    /// The cache's resync epoch when stored: older than the current one means stale.
    epoch: u64,
    /// The weight charged against [`CACHE_BYTES`] (set when stored).
    weight: u64,
}

impl Cached {
    fn new(record: Arc<AccessRecord>, version: u64, fetched: Instant) -> Self {
        Cached {
            record,
            version,
            fetched,
            stale: false,
            epoch: 0,
            weight: 0,
        }
    }
}

/// The cache's key: the record's org and id (what the upstream watch reports of a change).
type CacheKey = (u128, u128);

fn cache_key(key: &AggregateKey) -> CacheKey {
    (key.org.as_u128(), record_id(key))
}

/// Charges each entry its estimated bytes, at least `CACHE_BYTES / CACHE_ENTRIES`, so the one
/// weight bound keeps both bounds.
#[derive(Clone)]
struct ByBytes;

impl quick_cache::Weighter<CacheKey, Cached> for ByBytes {
    fn weight(&self, _: &CacheKey, entry: &Cached) -> u64 {
        entry.weight
    }
}

/// The cached records: a `quick_cache` (CLOCK-Pro eviction, bounded by weight) rather than a
/// hand-made map, whose arbitrary eviction once evicted new entries first.
struct Cache {
    entries: quick_cache::sync::Cache<CacheKey, Cached, ByBytes>,
    /// Makes "newer than the held version" and the store one step (a slower concurrent read
    /// never replaces a newer version).
    storing: Mutex<()>,
    /// Bumped by a resync: every entry stored before is stale for members checks.
    epoch: AtomicU64,
}

impl Default for Cache {
    fn default() -> Self {
        Cache {
            entries: quick_cache::sync::Cache::with_weighter(
                CACHE_ENTRIES,
                CACHE_BYTES as u64,
                ByBytes,
            ),
            storing: Mutex::new(()),
            epoch: AtomicU64::new(0),
        }
    }
}

/// The estimated bytes `record` holds in the cache.
fn size_of(record: &AccessRecord) -> usize {
    const OVERHEAD: usize = 128;
    OVERHEAD
        + record.owner.as_str().len()
        + record
            .members
            .keys()
            .chain(record.invited.keys())
            .map(|p| p.as_str().len() + 48)
            .sum::<usize>()
}

impl Cache {
    fn get(&self, key: &AggregateKey) -> Option<Cached> {
        let mut entry = self.entries.get(&cache_key(key))?;
        if entry.epoch < self.epoch.load(Ordering::Acquire) {
            entry.stale = true;
        }
        Some(entry)
    }

    /// Stores `entry` unless a newer version is held; the cache evicts to keep its bounds.
    fn insert(&self, key: &AggregateKey, mut entry: Cached) {
        let _storing = self.storing.lock().unwrap_or_else(|p| p.into_inner());
        let ckey = cache_key(key);
        // Never go back to an older version (a slower concurrent read).
        if self
            .entries
            .get(&ckey)
            .is_some_and(|old| old.version > entry.version)
        {
            return;
        }
        entry.epoch = self.epoch.load(Ordering::Acquire);
        let floor = CACHE_BYTES / CACHE_ENTRIES;
        entry.weight = size_of(&entry.record).max(floor) as u64;
        self.entries.insert(ckey, entry);
    }

    fn expire(&self, key: CacheKey) {
        let _storing = self.storing.lock().unwrap_or_else(|p| p.into_inner());
        if let Some(mut entry) = self.entries.get(&key) {
            entry.stale = true;
            self.entries.insert(key, entry);
        }
    }
}

/// The access records of one replica: reads, creation, members changes and the cache.
pub struct Records {
    pool: Arc<CeleriantPool>,
    cache: Cache,
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

impl Records {
    /// Records read through `pool`, members re-read after `members_ttl`.
    pub fn new(pool: Arc<CeleriantPool>, members_ttl: Duration) -> Self {
        Records {
            pool,
            cache: Cache::default(),
            members_ttl,
        }
    }

    /// Makes the cached copy of the record `(org, record_id)` stale for members checks (the
    /// upstream watch saw it change); the owner stays cached.
    pub fn expire_record(&self, org: u128, record_id: u128) {
        self.cache.expire((org, record_id));
    }

    /// Makes every cached record stale for members checks (notifications may have been lost).
    pub fn expire_all(&self) {
        self.cache.epoch.fetch_add(1, Ordering::AcqRel);
    }

    fn cached(&self, key: &AggregateKey) -> Option<Cached> {
        self.cache.get(key)
    }

    fn remember(&self, key: AggregateKey, entry: Cached) {
        self.cache.insert(&key, entry);
    }

    /// The record of `key` for an access check: the cached one when the check needs only the
    /// owner (`members: false`) or when it is younger than the members TTL, else read again.
    pub async fn get(
        &self,
        key: &AggregateKey,
        members: bool,
    ) -> Result<Option<Arc<AccessRecord>>, BackendError> {
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
        let tip = match record::tip(&self.pool, &ckey).await? {
            Tip::Deleted => return Err(corrupt(key, "was deleted")),
            Tip::Missing if base.is_none() => return Ok(None),
            // Records are never removed: one seen before and gone now is damage.
            Tip::Missing => return Err(corrupt(key, "has disappeared")),
            Tip::At(version) => version,
        };
        if let Some(mut c) = base.clone()
            && c.version >= tip
        {
            c.fetched = fetched;
            c.stale = false;
            self.remember(*key, c.clone());
            return Ok(Some(c));
        }
        let value = record::value_at(&self.pool, &ckey, tip)
            .await?
            .map_err(|why| corrupt(key, why))?;
        let record: AccessRecord =
            serde_json::from_slice(&value).map_err(|_| corrupt(key, "does not parse"))?;
        if let Some(c) = &base
            && c.record.owner != record.owner
        {
            return Err(corrupt(key, "names another owner than before"));
        }
        let c = Cached::new(Arc::new(record), tip, fetched);
        self.remember(*key, c.clone());
        Ok(Some(c))
    }

    /// The record of `key` read from Celeriant now (the members endpoint).
    pub async fn read(&self, key: &AggregateKey) -> Result<Option<AccessRecord>, BackendError> {
        Ok(self.fetch(key).await?.map(|c| (*c.record).clone()))
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
        if !record::append(&self.pool, &record_key(key), value, version).await? {
            return Ok(false);
        }
        let entry = Cached::new(Arc::new(record.clone()), version, Instant::now());
        self.remember(*key, entry);
        Ok(true)
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
            let decided_on = current.as_ref().map(|c| c.record.clone());
            let record = match change(decided_on.as_deref().cloned()) {
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
            // A change that changes nothing (granting what is granted, revoking a non-member)
            // appends nothing: every batch is the whole record, kept forever.
            if decided_on.as_deref() == Some(&record) {
                return Ok(Ok(record));
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

    fn cache_key_of(i: u128) -> AggregateKey {
        AggregateKey {
            org: Uuid::from_u128(1),
            aggregate: AggregateRef {
                type_id: Uuid::from_u128(2),
                id: Uuid::from_u128(i),
            },
        }
    }

    #[test]
    fn the_cache_keeps_to_its_bounds_and_never_goes_back_a_version() {
        let key = cache_key_of;
        let mut big = AccessRecord::owned_by(crate::access::Principal::user("o").unwrap());
        for n in 0..256 {
            let p = crate::access::Principal::user(&format!("{n:0>200}")).unwrap();
            big.members.insert(p, crate::access::Grant::Read);
        }
        let big = Arc::new(big);
        let cache = Cache::default();
        for i in 0..1_000 {
            cache.insert(&key(i), Cached::new(big.clone(), 1, Instant::now()));
            assert!(cache.entries.weight() <= CACHE_BYTES as u64);
        }
        assert!(cache.entries.len() < 1_000);
        let small = Arc::new(AccessRecord::owned_by(
            crate::access::Principal::user("o").unwrap(),
        ));
        cache.insert(&key(5_000), Cached::new(small.clone(), 3, Instant::now()));
        cache.insert(&key(5_000), Cached::new(small, 2, Instant::now()));
        assert_eq!(cache.get(&key(5_000)).unwrap().version, 3);
    }

    #[test]
    fn new_entries_stay_cached_once_the_cache_is_full() {
        let record = Arc::new(AccessRecord::owned_by(
            crate::access::Principal::user("o").unwrap(),
        ));
        let cache = Cache::default();
        let total = CACHE_ENTRIES as u128 + 20_000;
        for i in 0..total {
            cache.insert(
                &cache_key_of(i),
                Cached::new(record.clone(), 1, Instant::now()),
            );
        }
        assert!(cache.entries.len() <= CACHE_ENTRIES);
        // The newest entries are held (the arbitrary eviction dropped new ones first), and an
        // entry stored now stays until it is looked up again.
        let newest = (total - 1_000..total)
            .filter(|i| cache.get(&cache_key_of(*i)).is_some())
            .count();
        assert!(newest >= 900, "only {newest} of the newest 1000 are cached");
        for i in total..total + 1_000 {
            cache.insert(
                &cache_key_of(i),
                Cached::new(record.clone(), 1, Instant::now()),
            );
            assert!(
                cache.get(&cache_key_of(i)).is_some(),
                "entry {i} was evicted at once"
            );
        }
    }

    #[test]
    fn a_resync_makes_every_entry_stale_and_a_notification_one() {
        let record = Arc::new(AccessRecord::owned_by(
            crate::access::Principal::user("o").unwrap(),
        ));
        let cache = Cache::default();
        for i in 0..3 {
            cache.insert(
                &cache_key_of(i),
                Cached::new(record.clone(), 1, Instant::now()),
            );
        }
        cache.expire(cache_key(&cache_key_of(0)));
        assert!(cache.get(&cache_key_of(0)).unwrap().stale);
        assert!(!cache.get(&cache_key_of(1)).unwrap().stale);
        cache.epoch.fetch_add(1, Ordering::AcqRel);
        assert!(cache.get(&cache_key_of(1)).unwrap().stale);
        cache.insert(&cache_key_of(1), Cached::new(record, 2, Instant::now()));
        assert!(!cache.get(&cache_key_of(1)).unwrap().stale);
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
