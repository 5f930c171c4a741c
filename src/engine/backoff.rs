//! How long to wait before resending: capped exponential backoff with full jitter, never less
//! than what the server asked for.
//!
//! Full jitter (a uniform draw in `[0, min(cap, base·2^attempt))`) spreads a fleet of clients that
//! failed together, so a recovering gateway is not hit by all of them at once.

/// Backoff parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Backoff {
    /// The first window, in milliseconds.
    pub base_ms: u64,
    /// The largest window, in milliseconds.
    pub cap_ms: u64,
}

impl Default for Backoff {
    fn default() -> Self {
        Backoff {
            base_ms: 250,
            cap_ms: 30_000,
        }
    }
}

impl Backoff {
    /// The delay before attempt number `attempt + 1` (the first resend has `attempt == 0`),
    /// given a uniform `random` in `[0, 1)` and the server's `retry_after_ms`, if any.
    pub(crate) fn delay_ms(&self, attempt: u32, random: f64, retry_after_ms: Option<u64>) -> u64 {
        let window = self
            .base_ms
            .saturating_mul(1u64 << attempt.min(32))
            .min(self.cap_ms);
        let jittered = (window as f64 * random.clamp(0.0, 1.0)) as u64;
        jittered.max(retry_after_ms.unwrap_or(0))
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;

    #[test]
    fn grows_caps_and_jitters() {
        let b = Backoff {
            base_ms: 100,
            cap_ms: 1_000,
        };
        assert_eq!(b.delay_ms(0, 0.999_999, None), 99);
        assert_eq!(b.delay_ms(3, 0.5, None), 400);
        assert_eq!(b.delay_ms(10, 0.999_999, None), 999);
        assert_eq!(b.delay_ms(60, 0.5, None), 500, "no overflow");
        assert_eq!(b.delay_ms(5, 0.0, None), 0, "full jitter reaches zero");
    }

    #[test]
    fn retry_after_is_a_floor() {
        let b = Backoff::default();
        assert_eq!(b.delay_ms(0, 0.0, Some(2_000)), 2_000);
        assert_eq!(b.delay_ms(20, 0.99, Some(10)), 29_700);
    }
}
