//! The revocations (`crate::auth::revoke`) on the Celeriant backend, kept in Celeriant itself so
//! that every replica of a fleet over one cluster refuses the same sessions.
//!
//! The whole list is **one record** in the reserved type, like the access records (`record`):
//! the aggregate `(org, RESERVED_TYPE, REVOCATIONS_ID)`, where `org` is the gateway's
//! organisation (`--org-id`: replicas of one fleet share it) and [`REVOCATIONS_ID`] is the first
//! 16 bytes of SHA-256 over [`DOMAIN`]. Each batch is one event whose value is the whole list after
//! the change, as JSON `{"revocations":[…records…]}`; a missing aggregate is the empty list.
//!
//! A change is a read-modify-write: the list is read at version n, the change decided on it,
//! and the result appended with `expected_version: n`; on 2003 (another replica changed it
//! meanwhile) read and decide again, at most [`UPDATE_ATTEMPTS`] times, then 11000 (retry).
//! Two replicas revoking at once therefore lose no change.
//!
//! Reading costs one aggregate-details request when the list has not changed since this replica
//! last read it (the version is compared), two otherwise (that batch alone): the periodic
//! refresh of every replica costs the cluster one small request each.
//!
//! **Size.** Every change appends the whole list. A record is at most [`WORST_RECORD_BYTES`]
//! as JSON, so [`MAX_REVOCATIONS`] of them stay under [`MAX_VALUE_BYTES`], well inside the
//! Celeriant client's 10,000,000-byte request limit (and the server's 16 MiB); the gateway
//! refuses to start with a higher `--max-revocations` over this backend, and a change whose
//! list would still not fit is refused with 40022, nothing written.

use std::sync::{Arc, Mutex};

use celeriant_client_tokio::CeleriantPool;
use celeriant_sync_protocol::codes::{celeriant as cc, gateway as g};
use celeriant_wal::aggregate_key::AggregateKey as CeleriantKey;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use super::record::{self, Tip};
use crate::access::RESERVED_TYPE;
use crate::auth::revoke::{Revocation, prune};
use crate::backend::{BackendError, RevocationChange};
use crate::error::ApiError;

/// The domain tag the revocations' aggregate id is derived from.
pub const DOMAIN: &[u8] = b"celeriant-sync revocations v1\0";

/// The revocations' aggregate id: the first 16 bytes of SHA-256 over [`DOMAIN`], big-endian
/// (`edc65025-5763-27cd-9099-11bb34fbd6b2`, pinned by a test).
pub fn revocations_id() -> u128 {
    record::derived_id(&[DOMAIN])
}

/// Most revocations this backend keeps (`--max-revocations` may not be higher with it).
pub const MAX_REVOCATIONS: u64 = 12_000;

/// The largest list value written: room is left under the client's 10,000,000-byte request
/// limit for the request's own fields.
pub const MAX_VALUE_BYTES: usize = 9_000_000;

/// The longest one record can be as JSON: a principal of 256 bytes whose subject is all
/// characters JSON escapes in two bytes (control characters are refused), three 20-digit
/// timestamps, the field names, and the comma between records.
pub const WORST_RECORD_BYTES: usize = 640;

const _: () = assert!(MAX_REVOCATIONS as usize * WORST_RECORD_BYTES + 64 <= MAX_VALUE_BYTES);

/// Attempts of one change that keeps losing the version guard.
pub const UPDATE_ATTEMPTS: usize = 5;

/// The stored value.
#[derive(Serialize, Deserialize)]
struct Stored {
    revocations: Vec<Revocation>,
}

/// The list as last read or written by this replica, and its version (0: no aggregate).
struct Held {
    version: u64,
    list: Arc<Vec<Revocation>>,
}

/// Every how many reloads the tip's batch is read even when its version is the one held: a
/// cluster restored from a backup and written again can hold other contents under a version
/// number this replica has seen (the version guard cannot tell), so the held copy is checked
/// against the store at least this often (once a minute at the default 5 s refresh).
const RECHECK_EVERY: u64 = 12;

/// The revocations of one organisation in one cluster.
pub struct Revocations {
    pool: Arc<CeleriantPool>,
    key: CeleriantKey,
    held: Mutex<Option<Held>>,
    /// Reloads since the held copy was last compared with the store ([`RECHECK_EVERY`]).
    reloads: std::sync::atomic::AtomicU64,
    /// Told when the upstream watch saw the list change (or may have missed a change).
    changed: Arc<tokio::sync::Notify>,
}

fn corrupt(why: &str) -> BackendError {
    BackendError::code(
        g::DATA_CORRUPT,
        format!("the revocations record in Celeriant {why}; the last list read is kept"),
    )
}

fn now_s() -> u64 {
    crate::auth::now_ms() / 1000
}

impl Revocations {
    /// The revocations of `org`, through `pool`.
    pub fn new(pool: Arc<CeleriantPool>, org: Uuid) -> Self {
        Revocations {
            pool,
            key: CeleriantKey::new(org.as_u128(), RESERVED_TYPE.as_u128(), revocations_id()),
            held: Mutex::new(None),
            reloads: std::sync::atomic::AtomicU64::new(0),
            changed: Arc::new(tokio::sync::Notify::new()),
        }
    }

    /// Whether `(org, type, id)` is this list's aggregate.
    pub fn is_key(&self, org: u128, type_id: u128, id: u128) -> bool {
        (org, type_id, id)
            == (
                self.key.org_id,
                self.key.aggregate_type_id,
                self.key.aggregate_id,
            )
    }

    /// Notified when the list should be read again at once.
    pub fn changed(&self) -> Arc<tokio::sync::Notify> {
        self.changed.clone()
    }

    fn held(&self) -> Option<(u64, Arc<Vec<Revocation>>)> {
        let held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        held.as_ref().map(|h| (h.version, h.list.clone()))
    }

    /// Keeps `list` as version `version`: the store's list is the truth, also when it went back.
    fn hold(&self, version: u64, list: Arc<Vec<Revocation>>) {
        let mut held = self.held.lock().unwrap_or_else(|p| p.into_inner());
        *held = Some(Held { version, list });
    }

    /// The list and its version, read from Celeriant now, not pruned. With `trust_held`, the
    /// batch is read only when its version is not the one held (and every [`RECHECK_EVERY`]th
    /// time anyway); a change (`update`) never trusts the held copy: it is decided on the
    /// store's batch, so that a copy the cluster no longer has is never written back.
    ///
    /// **A cluster that went back** (restored from a backup, a failover to a standby that had
    /// not caught up, or a read answered by a lagging node: its tip below the version held)
    /// may have lost revocations written after its tip. A reload then enforces both lists (the
    /// held copy's entries the store lacks stay refused on this replica: nothing is let back in
    /// by a lagging read) and logs an error naming both versions, for the operator to revoke
    /// again what was lost; a change is decided on the store's list and guarded on the store's
    /// version, so no copy the cluster no longer has is ever written back under a version it
    /// reached again with other contents (`docs/protocol.md` §17.7).
    async fn fetch(&self, trust_held: bool) -> Result<(u64, Arc<Vec<Revocation>>), BackendError> {
        let tip = match record::tip(&self.pool, &self.key).await? {
            Tip::Deleted => return Err(corrupt("was deleted")),
            Tip::Missing => 0,
            Tip::At(version) => version,
        };
        let held = self.held();
        let recheck = self
            .reloads
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed)
            % RECHECK_EVERY
            == 0;
        if let Some((version, list)) = &held {
            if *version == tip && trust_held && !recheck {
                return Ok((*version, list.clone()));
            }
        }
        let list = match tip {
            0 => Arc::new(Vec::new()),
            _ => {
                let value = record::value_at(&self.pool, &self.key, tip)
                    .await?
                    .map_err(corrupt)?;
                let stored: Stored =
                    serde_json::from_slice(&value).map_err(|_| corrupt("does not parse"))?;
                Arc::new(stored.revocations)
            }
        };
        if let Some((version, old)) = &held {
            if *version > tip {
                tracing::error!(
                    held = *version,
                    tip,
                    "the revocations record in Celeriant went back (a restored or failed-over \
                     cluster, or a lagging node): revocations written after its version {tip} \
                     may be lost on other replicas; revoke them again"
                );
                if !trust_held {
                    return Ok((tip, list));
                }
                let stored: std::collections::HashSet<_> = list.iter().map(|r| &r.target).collect();
                let mut both = (*list).clone();
                both.extend(old.iter().filter(|r| !stored.contains(&r.target)).cloned());
                return Ok((*version, Arc::new(both)));
            }
            if *version == tip && **old != *list {
                tracing::error!(
                    version = tip,
                    "the revocations record in Celeriant holds other contents than this replica \
                     read at the same version (a restored cluster written again): the store's \
                     list is taken; revocations made since the restore point may be lost, \
                     revoke them again"
                );
            }
        }
        self.hold(tip, list.clone());
        Ok((tip, list))
    }

    /// Every revocation not yet forgotten.
    pub async fn list(&self) -> Result<Vec<Revocation>, BackendError> {
        let (_, list) = self.fetch(true).await?;
        let mut list = (*list).clone();
        prune(&mut list, now_s());
        Ok(list)
    }

    /// Decides `change` on the current list and appends the result guarded on the version it
    /// was decided on; again on 2003, at most [`UPDATE_ATTEMPTS`] times (then 11000, retry).
    pub async fn update(
        &self,
        change: &RevocationChange,
    ) -> Result<Result<Vec<Revocation>, ApiError>, BackendError> {
        for _ in 0..UPDATE_ATTEMPTS {
            let (version, stored) = self.fetch(false).await?;
            let mut current = (*stored).clone();
            prune(&mut current, now_s());
            let list = match change(current.clone()) {
                Ok(list) => list,
                Err(refused) => return Ok(Err(refused)),
            };
            // Nothing changed (pruning alone is redone at every read): append nothing, since
            // every batch is the whole list, kept forever.
            if list == current {
                return Ok(Ok(list));
            }
            let value = serde_json::to_vec(&Stored {
                revocations: list.clone(),
            })
            .map_err(|e| BackendError::code(g::INTERNAL, e.to_string()))?;
            if value.len() > MAX_VALUE_BYTES {
                return Ok(Err(ApiError::code(
                    g::TOO_MANY_REVOCATIONS,
                    format!(
                        "the revocations would take more than {MAX_VALUE_BYTES} bytes in \
                         Celeriant; lift one or wait until lifted ones are forgotten"
                    ),
                )));
            }
            let next = version
                .checked_add(1)
                .ok_or_else(|| corrupt("has no version after u64::MAX"))?;
            if record::append(&self.pool, &self.key, value, next).await? {
                self.hold(next, Arc::new(list.clone()));
                return Ok(Ok(list));
            }
        }
        Err(BackendError::code(
            cc::SERVER_BUSY,
            format!(
                "the revocations changed {UPDATE_ATTEMPTS} times while this change was decided; \
                 try again"
            ),
        ))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::access::Principal;
    use crate::auth::revoke::Target;

    #[test]
    fn the_id_is_pinned() {
        // Pinned (computed independently: Python hashlib over the documented tag): a changed
        // derivation would orphan the stored list.
        assert_eq!(
            Uuid::from_u128(revocations_id()).to_string(),
            PINNED_ID,
            "the revocations' aggregate id changed"
        );
    }

    const PINNED_ID: &str = "edc65025-5763-27cd-9099-11bb34fbd6b2";

    #[test]
    fn a_full_list_of_the_longest_records_fits_one_request() {
        let subject = "\"".repeat(crate::access::MAX_PRINCIPAL_BYTES - "user:".len());
        let worst = Revocation {
            target: Target::Principal(Principal::user(&subject).unwrap()),
            revoked_at: u64::MAX,
            lifted_at: Some(u64::MAX),
            forget_at: Some(u64::MAX),
        };
        let one = serde_json::to_vec(&worst).unwrap().len() + 1;
        assert!(one <= WORST_RECORD_BYTES, "{one} bytes");
        let list = Stored {
            revocations: vec![worst; MAX_REVOCATIONS as usize],
        };
        let value = serde_json::to_vec(&list).unwrap();
        assert!(value.len() <= MAX_VALUE_BYTES, "{} bytes", value.len());
    }
}
