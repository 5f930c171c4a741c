//! The embedded store's health: whether it can take writes, and what `/healthz` reports.
//!
//! Three states, each with the answer a write gets before its body is even read:
//!
//! | state      | when                                                | a write gets              |
//! |------------|-----------------------------------------------------|---------------------------|
//! | `ok`       | the database works and the disk has room            | handled                   |
//! | `lowSpace` | free space under `--min-free-bytes`                 | 507, 50700 (`retry`)      |
//! | `failed`   | an I/O error (redb then refuses everything until it | 503, 50301 (`retry`)      |
//! |            | is reopened): the store is reopening itself         |                           |
//!
//! The free space is sampled by the store's monitor every second and by the writer before
//! every commit group; `lowSpace` ends by itself when space comes back. `failed` ends when the
//! monitor has reopened the database and committed a probe transaction (`mod.rs`). Checksum
//! failures do not change the state (the rest of the store is fine) but are counted and logged
//! (the aggregate and version are named in the log only: `/healthz` is public).

use std::path::Path;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use celeriant_sync_protocol::codes::gateway as g;
use celeriant_sync_protocol::wire::StoreHealth;

use super::record::Corrupt;
use crate::backend::BackendError;
use crate::limits::notice::Throttle;

/// Where the store stands.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum State {
    /// Takes writes.
    Ok,
    /// The disk has this many bytes free, under the floor.
    LowSpace(u64),
    /// An I/O error; reopening. Why.
    Failed(String),
}

/// The store's state and counters.
#[derive(Debug)]
pub struct Health {
    floor: u64,
    state: Mutex<State>,
    free: AtomicU64,
    checksum_failures: AtomicU64,
    recoveries: AtomicU64,
    corrupt_log: Throttle,
}

/// Free bytes for unprivileged writers on the file system holding `dir`.
pub fn free_space(dir: &Path) -> Option<u64> {
    rustix::fs::statvfs(dir)
        .ok()
        .map(|s| s.f_bavail.saturating_mul(s.f_frsize))
}

const UNKNOWN: u64 = u64::MAX;

impl Health {
    /// A healthy store that refuses writes under `floor` free bytes.
    pub fn new(floor: u64) -> Self {
        Health {
            floor,
            state: Mutex::new(State::Ok),
            free: AtomicU64::new(UNKNOWN),
            checksum_failures: AtomicU64::new(0),
            recoveries: AtomicU64::new(0),
            corrupt_log: Throttle::new(),
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// The current state.
    pub fn current(&self) -> State {
        self.state().clone()
    }

    /// `Ok` when a write may proceed; otherwise the answer it gets.
    pub fn gate(&self) -> Result<(), BackendError> {
        match &*self.state() {
            State::Ok => Ok(()),
            State::LowSpace(free) => Err(BackendError::code(
                g::INSUFFICIENT_STORAGE,
                format!(
                    "the store's disk has {free} bytes free, under the {}-byte floor; writes \
                     resume when space is freed",
                    self.floor
                ),
            )),
            State::Failed(reason) => Err(BackendError::code(
                g::STORE_DEGRADED,
                format!("the store is reopening after an I/O error ({reason}); retry shortly"),
            )),
        }
    }

    /// Records a free-space sample (`None`: unknown), moving between `ok` and `lowSpace`.
    pub fn observe_free(&self, free: Option<u64>) {
        self.free.store(free.unwrap_or(UNKNOWN), Ordering::Relaxed);
        let Some(free) = free else { return };
        let mut state = self.state();
        match &*state {
            State::Ok if free < self.floor => {
                tracing::warn!(
                    free,
                    floor = self.floor,
                    "store: free space under the floor; refusing writes"
                );
                *state = State::LowSpace(free);
            }
            State::LowSpace(_) if free >= self.floor => {
                tracing::info!(
                    free,
                    floor = self.floor,
                    "store: free space back over the floor; taking writes"
                );
                *state = State::Ok;
            }
            State::LowSpace(_) => *state = State::LowSpace(free),
            _ => {}
        }
    }

    /// Whether the disk has room by the last sample (unknown counts as room).
    pub fn has_room(&self) -> bool {
        let free = self.free.load(Ordering::Relaxed);
        free == UNKNOWN || free >= self.floor
    }

    /// The database failed with an I/O error: `failed` until [`Health::recovered`].
    pub fn failed(&self, reason: &str) {
        let mut state = self.state();
        if !matches!(&*state, State::Failed(_)) {
            tracing::error!(
                reason,
                "store: I/O error; refusing writes and reopening the database"
            );
        }
        *state = State::Failed(reason.to_owned());
    }

    /// Whether the store is `failed`.
    pub fn is_failed(&self) -> bool {
        matches!(&*self.state(), State::Failed(_))
    }

    /// The database was reopened and takes writes again.
    pub fn recovered(&self) {
        self.recoveries.fetch_add(1, Ordering::Relaxed);
        *self.state() = State::Ok;
        tracing::info!("store: reopened after an I/O error; taking writes");
        let free = self.free.load(Ordering::Relaxed);
        self.observe_free((free != UNKNOWN).then_some(free));
    }

    /// Counts and logs a checksum failure.
    pub fn corrupt(&self, corrupt: &Corrupt) {
        self.checksum_failures.fetch_add(1, Ordering::Relaxed);
        if let Some(suppressed) = self.corrupt_log.allow() {
            tracing::error!(what = %corrupt.0, suppressed, "store: stored data fails its checksum; not served");
        }
    }

    /// What `/healthz` shows.
    pub fn report(&self) -> StoreHealth {
        let free = self.free.load(Ordering::Relaxed);
        StoreHealth {
            state: match &*self.state() {
                State::Ok => "ok",
                State::LowSpace(_) => "lowSpace",
                State::Failed(_) => "failed",
            }
            .into(),
            free_bytes: (free != UNKNOWN).then_some(free),
            min_free_bytes: self.floor,
            checksum_failures: self.checksum_failures.load(Ordering::Relaxed),
            // Which aggregate is damaged is the operator's business, not every caller's: the
            // details go to the log (`corrupt`), `/healthz` says only how many.
            last_checksum_failure: None,
            recoveries: self.recoveries.load(Ordering::Relaxed),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn code(h: &Health) -> Option<u32> {
        match h.gate() {
            Ok(()) => None,
            Err(BackendError::Code { code, .. }) => Some(code),
            Err(other) => panic!("{other:?}"),
        }
    }

    #[test]
    fn low_space_comes_and_goes_with_the_samples() {
        let h = Health::new(100);
        assert_eq!(code(&h), None);
        h.observe_free(Some(99));
        assert_eq!(code(&h), Some(g::INSUFFICIENT_STORAGE));
        assert_eq!(h.report().state, "lowSpace");
        h.observe_free(Some(100));
        assert_eq!(code(&h), None);
        h.observe_free(None);
        assert!(h.has_room());
    }

    #[test]
    fn a_failure_holds_until_recovered_whatever_the_space() {
        let h = Health::new(0);
        h.failed("No space left on device");
        h.observe_free(Some(1 << 30));
        assert_eq!(code(&h), Some(g::STORE_DEGRADED));
        assert!(h.is_failed());
        h.recovered();
        assert_eq!(code(&h), None);
        assert_eq!(h.report().recoveries, 1);
    }

    #[test]
    fn checksum_failures_are_counted_not_named() {
        let h = Health::new(0);
        h.corrupt(&Corrupt("batch 3 of aggregate x".into()));
        let r = h.report();
        assert_eq!(r.checksum_failures, 1);
        assert_eq!(r.last_checksum_failure, None, "named in the log only");
        assert_eq!(code(&h), None, "the rest of the store still takes writes");
    }
}
