//! Refusing a request proof (`jti`) that this replica already accepted, within bounded memory
//! partitioned by device.
//!
//! A proof is acceptable for at most [`KEEP_MS`] after the gateway first sees it (its `iat` may
//! be 5 s ahead and is then good for 30 s more), so each accepted `jti` is remembered that long,
//! plus a second of margin, and then forgotten: the window refuses it anyway. Entries expire in
//! the order they were admitted (the clock used is never allowed to go back), so one queue
//! drops them in O(1) each.
//!
//! **Bounded and partitioned.** A device (client id) holds at most `per_device` live entries and
//! the replica at most `capacity` in all. Past either, the request is *refused* (429, with the
//! time until its oldest entry leaves) — never admitted unremembered, since forgetting would
//! let a replay through. A device flooding its own partition is refused alone; other devices
//! still have room as long as the total is not reached (with the defaults, 64 devices at their
//! own limit fill it). Only proofs whose signature verified are remembered, so nobody can fill
//! another device's partition without its key.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::Mutex;

use uuid::Uuid;

use super::proof::{MAX_AGE_SECS, MAX_AHEAD_SECS};

/// How long an accepted `jti` is remembered, in milliseconds.
pub const KEEP_MS: u64 = (MAX_AGE_SECS + MAX_AHEAD_SECS + 1) * 1_000;

/// What the cache says about a proof.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Admit {
    /// First time seen: now remembered.
    Fresh,
    /// Already accepted within the window.
    Replayed,
    /// This device's partition, or the whole cache, is full; room frees up in this many ms.
    Full {
        /// When to try again.
        retry_after_ms: u64,
    },
}

/// The bounded, per-device memory of recently accepted proofs.
pub struct ProofReplay {
    per_device: usize,
    capacity: usize,
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Live entries per device.
    devices: HashMap<Uuid, Partition>,
    /// Every live entry, oldest first: (expiry, device, jti).
    order: VecDeque<(u64, Uuid, String)>,
    /// The latest clock reading seen, so expiries never go back.
    clock: u64,
}

/// One device's live entries.
#[derive(Default)]
struct Partition {
    seen: HashSet<String>,
    /// Their expiries, oldest first (the same order as `Inner::order`).
    expiries: VecDeque<u64>,
}

impl ProofReplay {
    /// At most `per_device` live entries per device and `capacity` in all.
    pub fn new(per_device: usize, capacity: usize) -> Self {
        ProofReplay {
            per_device,
            capacity,
            inner: Mutex::new(Inner::default()),
        }
    }

    /// Remembers `jti` for `device` at `now_ms`, unless it is there already or there is no room.
    pub fn admit(&self, device: Uuid, jti: &str, now_ms: u64) -> Admit {
        let mut inner = self.inner.lock().unwrap_or_else(|p| p.into_inner());
        let now = now_ms.max(inner.clock);
        inner.clock = now;
        while inner.order.front().is_some_and(|e| e.0 <= now) {
            let Some((_, d, j)) = inner.order.pop_front() else {
                break;
            };
            if let Some(partition) = inner.devices.get_mut(&d) {
                partition.seen.remove(&j);
                partition.expiries.pop_front();
                if partition.seen.is_empty() {
                    inner.devices.remove(&d);
                }
            }
        }
        let own = inner.devices.get(&device);
        if own.is_some_and(|p| p.seen.contains(jti)) {
            return Admit::Replayed;
        }
        let retry = |expiry: Option<u64>| Admit::Full {
            retry_after_ms: expiry.map_or(1_000, |e| e.saturating_sub(now)).max(1),
        };
        if let Some(p) = own.filter(|p| p.seen.len() >= self.per_device) {
            return retry(p.expiries.front().copied());
        }
        if inner.order.len() >= self.capacity {
            return retry(inner.order.front().map(|e| e.0));
        }
        let expiry = now.saturating_add(KEEP_MS);
        let partition = inner.devices.entry(device).or_default();
        partition.seen.insert(jti.to_owned());
        partition.expiries.push_back(expiry);
        inner.order.push_back((expiry, device, jti.to_owned()));
        Admit::Fresh
    }

    /// Live entries (for tests).
    pub fn len(&self) -> usize {
        self.inner
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .order
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
    fn a_jti_is_refused_within_the_window_per_device_and_forgotten_after() {
        let cache = ProofReplay::new(10, 100);
        let (a, b) = (Uuid::from_u128(1), Uuid::from_u128(2));
        let now = 1_000_000;
        assert_eq!(cache.admit(a, "x", now), Admit::Fresh);
        assert_eq!(cache.admit(a, "x", now + 5), Admit::Replayed);
        assert_eq!(cache.admit(b, "x", now + 5), Admit::Fresh, "another device");
        assert_eq!(cache.admit(a, "x", now + KEEP_MS - 1), Admit::Replayed);
        assert_eq!(cache.admit(a, "x", now + KEEP_MS), Admit::Fresh);
        assert_eq!(cache.len(), 2, "b's entry expired too, a's is new");
    }

    #[test]
    fn a_device_over_its_partition_is_refused_alone_and_the_total_is_bounded() {
        let cache = ProofReplay::new(3, 5);
        let (a, b, c) = (Uuid::from_u128(1), Uuid::from_u128(2), Uuid::from_u128(3));
        let now = 5_000_000;
        for (i, jti) in ["1", "2", "3"].into_iter().enumerate() {
            assert_eq!(cache.admit(a, jti, now + i as u64), Admit::Fresh);
        }
        assert_eq!(
            cache.admit(a, "4", now + 10),
            Admit::Full {
                retry_after_ms: KEEP_MS - 10
            },
            "a's partition is full: refused, not forgotten"
        );
        assert_eq!(cache.admit(a, "1", now + 10), Admit::Replayed);
        assert_eq!(
            cache.admit(b, "1", now + 10),
            Admit::Fresh,
            "b is unaffected"
        );
        assert_eq!(cache.admit(b, "2", now + 10), Admit::Fresh);
        assert_eq!(
            cache.admit(c, "1", now + 10),
            Admit::Full {
                retry_after_ms: KEEP_MS - 10
            },
            "the total is full"
        );
        assert_eq!(cache.len(), 5);
        assert_eq!(cache.admit(a, "4", now + KEEP_MS), Admit::Fresh);
        assert_eq!(cache.admit(c, "1", now + KEEP_MS + 2), Admit::Fresh);
    }

    #[test]
    fn a_clock_going_back_never_shortens_what_is_remembered() {
        let cache = ProofReplay::new(10, 10);
        let a = Uuid::from_u128(1);
        assert_eq!(cache.admit(a, "x", 10_000_000), Admit::Fresh);
        assert_eq!(cache.admit(a, "y", 1_000), Admit::Fresh);
        assert_eq!(
            cache.admit(a, "x", 10_000_000 + KEEP_MS - 1),
            Admit::Replayed
        );
        assert_eq!(
            cache.admit(a, "y", 10_000_000 + KEEP_MS - 1),
            Admit::Replayed
        );
    }
}
