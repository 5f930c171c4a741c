//! Which client ids are *established*: a device that has had a write land through this
//! gateway process. Pools that a flood of self-made keys could fill keep room for them.
//!
//! Opening a session costs only a key pair anyone can make, so the pools sessions fill (the
//! session replay cache, `crate::auth::replay`; the proof replay cache,
//! `crate::auth::proof_replay`; the write slots, `crate::limits::slots`) can be filled by fresh
//! keys from enough addresses, each within its share. A device that has written before is not
//! a fresh key: it got a session, passed its proofs, and its write was applied. Such a device
//! keeps a reserve in those pools that fresh keys cannot take (issue 26).
//!
//! **What counts.** A client id whose write this process answered `landed`. Not persisted:
//! the replay cache it protects is per process too and starts empty after a restart, so a
//! flood must be mounted again from scratch; keeping the set in the store would cost a store
//! write per new device and a store read per session under flood, and would let one replica's
//! flood be decided by another's history. A device that never wrote (a reader only) is not
//! established: read access costs the attacker nothing more than a session.
//!
//! **Bounded.** The set holds at most `capacity` ids in a `quick_cache` (CLOCK-Pro: an id
//! marked again is kept over one marked once), and only a landed write marks its id again: the
//! question whether an id is established ([`Established::contains`], asked on every session,
//! proof and write) peeks without touching, so an id an attacker established once does not stay
//! by merely making requests. A device that keeps writing stays; ids established once and then
//! only used are the first to go.
//! An attacker can still make established ids of its own, each for a session and a landed
//! write (both limited per address); the reserve is bounded per client id, so each such id
//! takes only its own small part of it.

use uuid::Uuid;

/// The set of established client ids (per process, in memory).
pub struct Established {
    ids: quick_cache::sync::Cache<Uuid, ()>,
}

impl Established {
    /// A set remembering at most about `capacity` ids.
    pub fn new(capacity: usize) -> Self {
        Established {
            ids: quick_cache::sync::Cache::new(capacity.max(1)),
        }
    }

    /// `client` had a write land: it is established (again: a hit keeps it in the set).
    pub fn mark(&self, client: Uuid) {
        if self.ids.get(&client).is_none() {
            self.ids.insert(client, ());
        }
    }

    /// Whether `client` is established. Does not count as a use: only [`Established::mark`]
    /// (a landed write) keeps an id in the set.
    pub fn contains(&self, client: &Uuid) -> bool {
        self.ids.peek(client).is_some()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn marked_ids_are_established_and_the_set_is_bounded() {
        let set = Established::new(100);
        let device = Uuid::from_u128(7);
        assert!(!set.contains(&device));
        set.mark(device);
        assert!(set.contains(&device));
        for n in 1_000..11_000u128 {
            set.mark(Uuid::from_u128(n));
            // The device keeps writing.
            if n % 10 == 0 {
                set.mark(device);
            }
        }
        assert!(set.contains(&device), "a device that keeps writing stays");
        let kept = (1_000..11_000u128)
            .filter(|n| set.contains(&Uuid::from_u128(*n)))
            .count();
        assert!(kept <= 200, "{kept}");
    }

    #[test]
    fn asking_does_not_keep_an_id_only_a_landed_write_does() {
        let set = Established::new(1_000);
        // Established ids the set is full of.
        for n in 1_000..11_000u128 {
            set.mark(Uuid::from_u128(n));
        }
        let asked = Uuid::from_u128(1);
        let writing = Uuid::from_u128(2);
        set.mark(asked);
        set.mark(writing);
        for n in 11_000..41_000u128 {
            set.mark(Uuid::from_u128(n));
            // The attacker's id makes requests (sessions, proofs, writes refused) all along.
            set.contains(&asked);
            if n % 10 == 0 {
                set.mark(writing);
            }
        }
        assert!(set.contains(&writing), "a device whose writes land stays");
        assert!(
            !set.contains(&asked),
            "requests alone do not keep an id established"
        );
    }
}
