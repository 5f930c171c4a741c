//! Byte budgets: how much request-body and response memory the gateway holds at once.
//!
//! 128 connections each sending an 8 MiB body once took the gateway from 90 MB to 1.1 GB,
//! because admission was decided after each body had been buffered; 256 concurrent reads of
//! one 5.6 MB aggregate peaked at 1.6 GB. A [`Budget`] is a semaphore counting bytes: a write
//! reserves its first 64 KiB **before** its body is read and the rest of its `Content-Length`
//! (or the body limit, when it has none) as the bytes arrive, never after they are buffered, a read reserves its page budget before the store is touched, and both keep the
//! reservation until the request is finished with (a write until the store answered, a read
//! until its response has been handed to the connection). Past the budget the answer is 429
//! (42900) at once: nothing queues, so nothing piles up behind it.

use std::sync::Arc;

use celeriant_sync_protocol::codes::gateway as g;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};

use super::notice::Throttle;
use crate::error::ApiError;

/// A number of bytes that may be held at once.
pub struct Budget {
    name: &'static str,
    total: usize,
    bytes: Arc<Semaphore>,
    throttle: Throttle,
}

/// Bytes reserved from a [`Budget`]; given back when dropped.
#[derive(Debug)]
pub struct Reserved(OwnedSemaphorePermit);

impl Reserved {
    /// How many bytes this reservation holds.
    pub fn bytes(&self) -> usize {
        self.0.num_permits()
    }

    /// Gives back everything above `keep` bytes.
    pub fn shrink_to(&mut self, keep: usize) {
        let extra = self.bytes().saturating_sub(keep.max(1));
        if extra > 0 {
            drop(self.0.split(extra));
        }
    }

    /// Adds `more` to this reservation.
    pub fn merge(&mut self, more: Reserved) {
        self.0.merge(more.0);
    }
}

impl Budget {
    /// A budget of `total` bytes, named in messages (`"write bodies"`).
    pub fn new(name: &'static str, total: usize) -> Self {
        let total = total.clamp(1, Semaphore::MAX_PERMITS);
        Budget {
            name,
            total,
            bytes: Arc::new(Semaphore::new(total)),
            throttle: Throttle::new(),
        }
    }

    /// Reserves `n` bytes now (at most the whole budget, at least 1), or refuses with 429
    /// (42900, `retry`) when they are not free.
    pub fn reserve(&self, n: usize) -> Result<Reserved, ApiError> {
        let n = n.clamp(1, self.total).min(u32::MAX as usize) as u32;
        match self.bytes.clone().try_acquire_many_owned(n) {
            Ok(permit) => Ok(Reserved(permit)),
            Err(_) => {
                crate::observe::budget_refused(self.name, "budget");
                if let Some(suppressed) = self.throttle.allow() {
                    tracing::info!(
                        budget = self.name,
                        bytes = n,
                        free = self.bytes.available_permits(),
                        suppressed,
                        "memory budget full: request refused"
                    );
                }
                Err(ApiError::code(
                    g::GATEWAY_BUSY,
                    format!(
                        "the gateway holds as many bytes of {} as it may; retry shortly",
                        self.name
                    ),
                ))
            }
        }
    }

    /// The budget's name, as in messages and metrics (`"write bodies"`).
    pub fn name(&self) -> &'static str {
        self.name
    }

    /// The budget's size.
    pub fn total(&self) -> usize {
        self.total
    }

    /// Bytes free now.
    pub fn available(&self) -> usize {
        self.bytes.available_permits()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reservations_are_bounded_and_given_back() {
        let b = Budget::new("test", 100);
        let mut a = b.reserve(60).unwrap();
        assert_eq!(b.reserve(50).unwrap_err().0.code(), Some(g::GATEWAY_BUSY));
        a.shrink_to(10);
        assert_eq!((a.bytes(), b.available()), (10, 90));
        let more = b.reserve(50).unwrap();
        a.merge(more);
        assert_eq!(a.bytes(), 60);
        drop(a);
        assert_eq!(b.available(), 100);
        assert_eq!(
            b.reserve(1_000).unwrap().bytes(),
            100,
            "clamped to the whole budget"
        );
    }
}
