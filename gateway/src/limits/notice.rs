//! Log lines about refusals, at most one per interval per kind.
//!
//! A flood of refused requests must not turn into a flood of log lines (the log's disk is a
//! resource too). Each refusal site owns a [`Throttle`]; the first refusal of an interval is
//! logged with the number suppressed since the previous line.

use std::sync::OnceLock;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

/// How often one kind of refusal may be logged.
pub const INTERVAL: Duration = Duration::from_secs(5);

fn now_ms() -> u64 {
    static START: OnceLock<Instant> = OnceLock::new();
    START.get_or_init(Instant::now).elapsed().as_millis() as u64 + 1
}

/// The rate limiter of one kind of log line.
#[derive(Debug, Default)]
pub struct Throttle {
    last_ms: AtomicU64,
    suppressed: AtomicU64,
}

impl Throttle {
    /// A throttle that has logged nothing yet.
    pub const fn new() -> Self {
        Throttle {
            last_ms: AtomicU64::new(0),
            suppressed: AtomicU64::new(0),
        }
    }

    /// `Some(suppressed)` when this occurrence may be logged (with how many were not since the
    /// last line), `None` when it is to be counted only.
    pub fn allow(&self) -> Option<u64> {
        let now = now_ms();
        let last = self.last_ms.load(Ordering::Relaxed);
        if (last == 0 || now.saturating_sub(last) >= INTERVAL.as_millis() as u64)
            && self
                .last_ms
                .compare_exchange(last, now, Ordering::Relaxed, Ordering::Relaxed)
                .is_ok()
        {
            return Some(self.suppressed.swap(0, Ordering::Relaxed));
        }
        self.suppressed.fetch_add(1, Ordering::Relaxed);
        None
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_is_logged_then_counted() {
        let t = Throttle::new();
        assert_eq!(t.allow(), Some(0));
        assert_eq!(t.allow(), None);
        assert_eq!(t.allow(), None);
        assert_eq!(t.suppressed.load(Ordering::Relaxed), 2);
    }
}
