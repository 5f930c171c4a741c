//! Each address's and each client id's share of a byte budget: write bodies, read responses.
//!
//! The byte budgets ([`super::budget`]) are global: without a per-key bound, one client could
//! declare eight bodies of the largest size, send one byte of each and hold the whole write
//! budget for `--body-read-timeout-ms`, or ask for pages it never reads and hold the whole
//! read budget until `--idle-timeout-ms`, so every other client was refused 429 (42900). Here
//! each address (per address bucket: IPv6 /56 by default) and each session client id may hold at most an eighth of the
//! budget (never less than the largest single item, so one always fits) at once; past it the
//! request is refused 429 `retry`, code 42910, `Retry-After: 1`. `--write-buffer-bytes-per-ip`
//! and `--read-buffer-bytes-per-ip` set the address's share (0: none, behind a reverse proxy).
//! An entry exists only while its key holds bytes.

use std::collections::HashMap;
use std::hash::Hash;
use std::net::IpAddr;
use std::sync::{Arc, Mutex};

use celeriant_sync_protocol::WriteOutcome;
use celeriant_sync_protocol::codes::gateway as g;
use celeriant_sync_protocol::outcome::{Failure, TRANSIENT_RETRY_AFTER_MS};
use uuid::Uuid;

use super::ip::bucket;
use super::notice::Throttle;
use crate::error::ApiError;

/// Bytes held per key, each key at most `cap`.
pub struct KeyedBytes<K: Hash + Eq + Clone> {
    cap: usize,
    held: Mutex<HashMap<K, usize>>,
}

/// Bytes held by one key; given back when dropped.
pub struct HeldBytes<K: Hash + Eq + Clone> {
    owner: Arc<KeyedBytes<K>>,
    key: K,
    bytes: usize,
}

impl<K: Hash + Eq + Clone> KeyedBytes<K> {
    /// At most `cap` bytes per key.
    pub fn new(cap: usize) -> Arc<Self> {
        Arc::new(KeyedBytes {
            cap,
            held: Mutex::new(HashMap::new()),
        })
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<K, usize>> {
        self.held.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Takes `bytes` for `key`, or `None` when the key would hold more than its cap.
    pub fn take(self: &Arc<Self>, key: K, bytes: usize) -> Option<HeldBytes<K>> {
        let mut held = self.lock();
        let now = held.get(&key).copied().unwrap_or(0);
        if now.saturating_add(bytes) > self.cap {
            return None;
        }
        held.insert(key.clone(), now + bytes);
        Some(HeldBytes {
            owner: self.clone(),
            key,
            bytes,
        })
    }

    /// Bytes `key` holds now.
    pub fn held(&self, key: &K) -> usize {
        self.lock().get(key).copied().unwrap_or(0)
    }

    /// Keys holding bytes now.
    pub fn keys(&self) -> usize {
        self.lock().len()
    }
}

impl<K: Hash + Eq + Clone> Drop for HeldBytes<K> {
    fn drop(&mut self) {
        let mut held = self.owner.lock();
        if let Some(n) = held.get_mut(&self.key) {
            *n = n.saturating_sub(self.bytes);
            if *n == 0 {
                held.remove(&self.key);
            }
        }
    }
}

/// The per-address and per-client shares of one byte budget.
pub struct ByteShare {
    /// What the budget holds, for messages ("write-body", "read-response").
    what: &'static str,
    total: usize,
    /// `None`: no per-address share (`--write-buffer-bytes-per-ip 0`).
    ip: Option<Arc<KeyedBytes<IpAddr>>>,
    client: Arc<KeyedBytes<Uuid>>,
    throttle: Throttle,
}

/// A request's bytes in its address's and client's shares (a write's until the store
/// answered, a read's until its page was taken by the connection).
pub struct SharedBytes {
    _ip: Option<HeldBytes<IpAddr>>,
    _client: Option<HeldBytes<Uuid>>,
}

impl ByteShare {
    /// Shares of a budget of `total` bytes of `what`: each key at most `total / 8`, never
    /// less than `max_body` (the largest single item; nor more than `total`). `per_ip`
    /// overrides the address's share (0: the whole budget, for a gateway behind a reverse
    /// proxy, where every request has the proxy's address), also at least `max_body`.
    pub fn new(what: &'static str, total: usize, max_body: usize, per_ip: Option<usize>) -> Self {
        let total = total.max(1);
        let cap = (total / 8).max(max_body).min(total);
        let ip_cap = match per_ip {
            None => Some(cap),
            Some(0) => None,
            Some(n) => Some(n.max(max_body).min(total)),
        };
        ByteShare {
            what,
            total,
            ip: ip_cap.map(KeyedBytes::new),
            client: KeyedBytes::new(cap),
            throttle: Throttle::new(),
        }
    }

    /// Bytes `ip` holds now; `None` without a per-address share.
    pub fn held_by(&self, ip: IpAddr) -> Option<usize> {
        self.ip.as_ref().map(|share| share.held(&bucket(ip)))
    }

    /// Most bytes one client id may hold.
    pub fn cap(&self) -> usize {
        self.client.cap
    }

    /// Takes `bytes` (clamped as the budget clamps them) for `ip` and `client`, or refuses
    /// with 429 (42910, `retry`, 1 s).
    pub fn take(
        &self,
        ip: IpAddr,
        client: Option<Uuid>,
        bytes: usize,
    ) -> Result<SharedBytes, ApiError> {
        let bytes = bytes.clamp(1, self.total);
        let ip_held = match &self.ip {
            None => None,
            Some(share) => Some(
                share
                    .take(bucket(ip), bytes)
                    .ok_or_else(|| self.refuse("this address", &ip.to_string(), share.cap))?,
            ),
        };
        let client_held =
            match client {
                None => None,
                Some(id) => Some(self.client.take(id, bytes).ok_or_else(|| {
                    self.refuse("this client id", &id.to_string(), self.client.cap)
                })?),
            };
        Ok(SharedBytes {
            _ip: ip_held,
            _client: client_held,
        })
    }

    fn refuse(&self, whose: &str, key: &str, share: usize) -> ApiError {
        crate::observe::budget_refused(self.what, "share");
        let message = format!(
            "{whose} holds its share ({share} bytes) of the {} budget; retry shortly",
            self.what
        );
        if let Some(suppressed) = self.throttle.allow() {
            tracing::info!(key, %message, suppressed, budget = self.what, "fair share of bytes: refused");
        }
        ApiError(WriteOutcome::Retry(Failure {
            retry_after_ms: Some(TRANSIENT_RETRY_AFTER_MS),
            ..Failure::new(g::RATE_LIMITED, message)
        }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn each_key_holds_at_most_its_share_and_gives_it_back() {
        let s = ByteShare::new("test", 800, 50, None);
        assert_eq!(s.cap(), 100);
        let a: IpAddr = "192.0.2.1".parse().unwrap();
        let b: IpAddr = "192.0.2.2".parse().unwrap();
        let c = Uuid::from_u128(1);
        let first = s.take(a, Some(c), 60).unwrap();
        let e = s.take(a, None, 41).err().unwrap();
        assert_eq!(e.0.code(), Some(g::RATE_LIMITED));
        let e = s.take(b, Some(c), 41).err().unwrap();
        assert_eq!(
            e.0.code(),
            Some(g::RATE_LIMITED),
            "same client, other address"
        );
        let _other = s.take(b, None, 100).unwrap();
        drop(first);
        assert_eq!((s.ip.as_ref().unwrap().held(&a), s.client.keys()), (0, 0));
        let _again = s.take(a, Some(c), 100).unwrap();
    }

    #[test]
    fn one_largest_body_always_fits() {
        let s = ByteShare::new("test", 100, 90, None);
        assert_eq!(s.cap(), 90);
        assert_eq!(ByteShare::new("test", 100, 500, None).cap(), 100);
        let proxy = ByteShare::new("test", 800, 50, Some(0));
        let ip: IpAddr = "192.0.2.1".parse().unwrap();
        let _a = proxy.take(ip, None, 400).unwrap();
        let _b = proxy.take(ip, None, 400).unwrap();
    }
}
