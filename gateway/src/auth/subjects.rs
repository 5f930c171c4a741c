//! Per-subject caps: how many devices, and how many live sessions, one app user may hold.
//!
//! With app tokens on, a session needs the app's token for a subject (a user) — but before
//! this, one app token opened any number of device sessions: whoever held a user's token (or the
//! user's own runaway script) could mint thousands of devices under that user. Each replica
//! therefore remembers, per subject, the sessions it issued that have not expired yet (client id
//! and expiry): a session for a device the subject does not hold yet is refused past
//! `--max-devices-per-subject` devices, any session past `--max-sessions-per-subject` live
//! sessions — 429 `retry` 42902 with the time until the oldest one expires. A device the
//! subject already holds is never refused: at the session cap its renewal replaces its own
//! oldest session in the count, so someone holding a stolen app token cannot lock the user's
//! own devices out by opening sessions (they can only take free device slots).
//!
//! Memory is bounded: at most `max_subjects` subjects are tracked (expired entries are dropped
//! first). The caps limit abuse of one user's token; they are not what keeps strangers out (the
//! app token is), so past that bound a session for a subject not tracked yet is admitted
//! untracked, with a warning, rather than refusing every new user of the app until sessions
//! expire (which anyone able to create subjects — an app with guest sign-in — could cause).
//! Subjects only come from app tokens that verified, so only the app's own sign-in can create
//! them. Each replica counts its own sessions: in a fleet of N replicas a
//! subject may hold up to N times the caps (docs/protocol.md says so).

use std::collections::HashMap;
use std::sync::Mutex;

use uuid::Uuid;

/// Why a session was refused, and when to try again (milliseconds).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Refusal {
    /// The subject holds `--max-devices-per-subject` devices with live sessions.
    Devices(u64),
    /// The subject holds `--max-sessions-per-subject` live sessions.
    Sessions(u64),
}

/// The caps and what each subject holds (per replica, in memory).
pub struct SubjectCaps {
    max_devices: usize,
    max_sessions: usize,
    max_subjects: usize,
    held: Mutex<HashMap<String, Vec<(Uuid, u64)>>>,
}

/// The retry hint for something that frees at `expires_s` (seconds), from `now_s`.
fn wait_ms(expires_s: u64, now_s: u64) -> u64 {
    expires_s.saturating_sub(now_s).max(1) * 1000
}

impl SubjectCaps {
    /// Caps of `max_devices` devices and `max_sessions` live sessions per subject (0: no cap),
    /// over at most `max_subjects` subjects.
    pub fn new(max_devices: usize, max_sessions: usize, max_subjects: usize) -> Self {
        SubjectCaps {
            max_devices,
            max_sessions,
            max_subjects,
            held: Mutex::new(HashMap::new()),
        }
    }

    /// Admits a session for `client` under `subject`, expiring at `expires_s`, and remembers it;
    /// or says why not. Times in Unix seconds.
    pub fn admit(
        &self,
        subject: &str,
        client: Uuid,
        now_s: u64,
        expires_s: u64,
    ) -> Result<(), Refusal> {
        if self.max_devices == 0 && self.max_sessions == 0 {
            return Ok(());
        }
        let mut held = self.held.lock().unwrap_or_else(|e| e.into_inner());
        if !held.contains_key(subject) && held.len() >= self.max_subjects {
            held.retain(|_, sessions| {
                sessions.retain(|&(_, exp)| exp > now_s);
                !sessions.is_empty()
            });
            if held.len() >= self.max_subjects {
                tracing::warn!(
                    tracked = held.len(),
                    "per-subject caps: the table of subjects is full; a new subject's session is \
                     admitted untracked"
                );
                return Ok(());
            }
        }
        let sessions = held.entry(subject.to_owned()).or_default();
        sessions.retain(|&(_, exp)| exp > now_s);
        let known = sessions.iter().any(|&(c, _)| c == client);
        if self.max_sessions > 0 && sessions.len() >= self.max_sessions {
            if known {
                // The device's own oldest session leaves the count (it still works until it
                // expires): a held device always renews.
                let oldest = sessions
                    .iter()
                    .enumerate()
                    .filter(|(_, (c, _))| *c == client)
                    .min_by_key(|(_, (_, exp))| *exp)
                    .map(|(i, _)| i);
                if let Some(i) = oldest {
                    sessions.swap_remove(i);
                }
            } else {
                let oldest = sessions.iter().map(|&(_, exp)| exp).min().unwrap_or(now_s);
                return Err(Refusal::Sessions(wait_ms(oldest, now_s)));
            }
        }
        if self.max_devices > 0 && !known {
            // A device is held until its last session expires.
            let mut last: HashMap<Uuid, u64> = HashMap::new();
            for &(c, exp) in sessions.iter() {
                let e = last.entry(c).or_insert(exp);
                *e = (*e).max(exp);
            }
            if last.len() >= self.max_devices {
                let frees = last.values().copied().min().unwrap_or(now_s);
                return Err(Refusal::Devices(wait_ms(frees, now_s)));
            }
        }
        sessions.push((client, expires_s));
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn device(n: u128) -> Uuid {
        Uuid::from_u128(n)
    }

    #[test]
    fn devices_are_capped_per_subject_and_free_when_their_last_session_expires() {
        let caps = SubjectCaps::new(2, 10, 100);
        assert_eq!(caps.admit("alice", device(1), 0, 100), Ok(()));
        assert_eq!(caps.admit("alice", device(2), 0, 150), Ok(()));
        assert_eq!(
            caps.admit("alice", device(3), 10, 200),
            Err(Refusal::Devices(90_000))
        );
        // A held device renews; another subject is not affected.
        assert_eq!(caps.admit("alice", device(1), 10, 200), Ok(()));
        assert_eq!(caps.admit("bob", device(3), 10, 200), Ok(()));
        // Device 2's only session expires at 150: then a third device fits.
        assert_eq!(
            caps.admit("alice", device(3), 149, 300),
            Err(Refusal::Devices(1_000))
        );
        assert_eq!(caps.admit("alice", device(3), 150, 300), Ok(()));
    }

    #[test]
    fn live_sessions_are_capped_per_subject() {
        let caps = SubjectCaps::new(0, 3, 100);
        for exp in [100, 110, 120] {
            assert_eq!(caps.admit("alice", device(1), 0, exp), Ok(()));
        }
        // The held device renews (its own oldest leaves the count); a new one is refused.
        assert_eq!(caps.admit("alice", device(1), 50, 200), Ok(()));
        assert_eq!(
            caps.admit("alice", device(2), 50, 200),
            Err(Refusal::Sessions(60_000))
        );
        assert_eq!(caps.held.lock().unwrap()["alice"].len(), 3);
    }

    #[test]
    fn the_subject_table_is_bounded_and_reclaims_expired_subjects() {
        let caps = SubjectCaps::new(5, 5, 2);
        assert_eq!(caps.admit("a", device(1), 0, 100), Ok(()));
        assert_eq!(caps.admit("b", device(1), 0, 50), Ok(()));
        // Full: a new subject is admitted, untracked; known subjects are still counted.
        assert_eq!(caps.admit("c", device(1), 10, 100), Ok(()));
        assert!(!caps.held.lock().unwrap().contains_key("c"));
        assert_eq!(caps.admit("a", device(2), 10, 100), Ok(()));
        // Once "b" expired, "c" is tracked.
        assert_eq!(caps.admit("c", device(1), 50, 100), Ok(()));
        assert!(caps.held.lock().unwrap().contains_key("c"));
    }

    #[test]
    fn no_caps_remember_nothing() {
        let caps = SubjectCaps::new(0, 0, 1);
        for n in 0..1000 {
            assert_eq!(caps.admit(&format!("s{n}"), device(n), 0, 100), Ok(()));
        }
        assert!(caps.held.lock().unwrap().is_empty());
    }
}
