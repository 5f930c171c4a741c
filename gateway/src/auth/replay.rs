//! Refusing a (public key, nonce) pair that was already accepted within the nonce window.
//!
//! A captured `POST /v1/session` body (a log, a proxy) stays valid for the nonce window, so the
//! gateway remembers each accepted pair — keyed by the client id, which is a hash of the key —
//! until its nonce has left the window (nonce + 2 minutes, plus a second of margin), after which
//! Celeriant's own rule refuses it anyway. The memory is bounded: past `capacity` live entries
//! new sessions are refused with a retry hint (never admitted unremembered), so an attacker
//! cannot grow it without limit. Only pairs whose signature verified are remembered, so no one
//! can pre-empt a device's future nonces. Each gateway process has its own cache: replicas do
//! not share it (docs/protocol.md says so).

use std::collections::{BTreeSet, HashSet};
use std::sync::Mutex;

use celeriant_sync_protocol::session::NONCE_MAX_AGE_MS;
use uuid::Uuid;

/// How long after its nonce an entry is kept, in milliseconds.
const KEEP_MS: u64 = NONCE_MAX_AGE_MS + 1_000;

/// What the cache says about a pair.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// First time seen: now remembered.
    Fresh,
    /// Already accepted within the window.
    Replayed,
    /// The cache is full of live entries; the oldest leaves in this many milliseconds.
    Full {
        /// When to try again.
        retry_after_ms: u64,
    },
}

/// The bounded set of recently accepted pairs.
pub struct ReplayCache {
    capacity: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    seen: HashSet<(Uuid, u64)>,
    by_expiry: BTreeSet<(u64, Uuid, u64)>,
}

impl ReplayCache {
    /// A cache holding at most `capacity` live pairs.
    pub fn new(capacity: usize) -> Self {
        ReplayCache {
            capacity,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Remembers (client, nonce) at `now_ms` unless it is there already or the cache is full.
    pub fn admit(&self, client: Uuid, nonce_ms: u64, now_ms: u64) -> Admit {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        while let Some(&first) = inner.by_expiry.first() {
            if first.0 > now_ms {
                break;
            }
            inner.by_expiry.pop_first();
            inner.seen.remove(&(first.1, first.2));
        }
        if inner.seen.contains(&(client, nonce_ms)) {
            return Admit::Replayed;
        }
        if inner.seen.len() >= self.capacity {
            let oldest = inner.by_expiry.first().map_or(now_ms + 1_000, |e| e.0);
            return Admit::Full {
                retry_after_ms: oldest.saturating_sub(now_ms).max(1),
            };
        }
        inner.seen.insert((client, nonce_ms));
        inner
            .by_expiry
            .insert((nonce_ms.saturating_add(KEEP_MS), client, nonce_ms));
        Admit::Fresh
    }

    /// Live entries (for tests and logs).
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .seen
            .len()
    }

    /// Whether no entry is live.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_pair_is_refused_within_the_window_and_forgotten_after() {
        let cache = ReplayCache::new(10);
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let now = 1_000_000;
        assert_eq!(cache.admit(a, now, now), Admit::Fresh);
        assert_eq!(cache.admit(a, now, now + 5), Admit::Replayed);
        assert_eq!(cache.admit(b, now, now + 5), Admit::Fresh, "another key");
        assert_eq!(
            cache.admit(a, now + 1, now + 5),
            Admit::Fresh,
            "another nonce"
        );
        assert_eq!(cache.admit(a, now, now + KEEP_MS - 1), Admit::Replayed);
        assert_eq!(
            cache.admit(a, now, now + KEEP_MS),
            Admit::Fresh,
            "expired, then the window refuses it anyway"
        );
    }

    #[test]
    fn the_cache_is_bounded_and_says_when_room_frees_up() {
        let cache = ReplayCache::new(3);
        let now = 5_000_000;
        for n in 0..3 {
            assert_eq!(
                cache.admit(Uuid::from_u128(n), now + n as u64, now),
                Admit::Fresh
            );
        }
        assert_eq!(
            cache.admit(Uuid::from_u128(9), now, now),
            Admit::Full {
                retry_after_ms: KEEP_MS
            }
        );
        assert_eq!(cache.len(), 3);
        assert_eq!(
            cache.admit(Uuid::from_u128(9), now, now + KEEP_MS),
            Admit::Fresh,
            "the oldest left"
        );
        assert_eq!(cache.len(), 3);
        assert_eq!(
            cache.admit(Uuid::from_u128(8), now, now + KEEP_MS + 2),
            Admit::Fresh
        );
        assert_eq!(cache.len(), 1, "expired entries were dropped");
    }
}
