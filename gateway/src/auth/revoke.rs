//! Revocation: the operator refuses a device's, a principal's or one token's sessions.
//!
//! Session tokens are stateless (`super::token`), so refusing one before it expires needs a
//! list every request is checked against. The list is stored by the backend the gateway uses
//! (the embedded store: the `revocations` table; the Celeriant backend: one record in the
//! cluster, `crate::backend::celeriant::revocations`; `crate::backend::Backend::revocations`)
//! and every replica holds it in memory ([`Revocations`]), reloading it from the store every
//! `--revocation-refresh-secs` ([`refresh_loop`]), and at once when the backend notifies a change
//! (the Celeriant backend's upstream watch); the replica that takes a change applies it at
//! once. A request is checked against memory only (three hash lookups), never the store.
//!
//! **What a revocation refuses.** A record names a [`Target`] and the second it was made
//! (`revokedAt`). While a device's or principal's record stands (not lifted), **every** token of
//! it is refused with 40103 (`SESSION_REVOKED`), whatever its `iat`: a token issued after the
//! revocation (by a replica that had not reloaded yet, or under a clock that stepped back) is
//! no way around it. `POST /v1/session` refuses the device or the principal with the same code
//! meanwhile. **Lifting** lets new sessions in again but keeps refusing every token issued at or
//! before the lift (`iat <= liftedAt`: a stolen token stays dead), until none of them can still
//! be alive: `liftedAt + --session-ttl-secs`, after which the record is forgotten. A revoked token (`session`) never blocks new sessions and is
//! forgotten `--session-ttl-secs` after its revocation.
//!
//! **Bounded.** At most `--max-revocations` records are kept; a revocation past the cap is
//! refused (40022) — never evicting another, which would silently let its tokens back in.
//!
//! **Failing closed.** Until the first load from the store succeeded, a request waits for it
//! (at most [`FIRST_LOAD_WAIT`]) and is then refused with a retry (50301). A later failed reload keeps the last list (and is logged): a revocation
//! made on another replica then waits for the next successful reload.

use std::collections::HashMap;
use std::sync::{Arc, RwLock};
use std::time::Duration;

use celeriant_sync_protocol::codes::gateway as g;
use serde::{Deserialize, Serialize};
use uuid::Uuid;

use crate::access::Principal;
use crate::backend::Backend;
use crate::error::ApiError;

/// How long a request waits for the first load of the revocations before it is refused.
pub const FIRST_LOAD_WAIT: Duration = Duration::from_secs(5);

/// The longest revocation id accepted (a principal's limit).
pub const MAX_TARGET_BYTES: usize = crate::access::MAX_PRINCIPAL_BYTES;

/// What a revocation names.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(tag = "kind", content = "id", rename_all = "camelCase")]
pub enum Target {
    /// A device: its client id.
    Device(Uuid),
    /// A principal: `user:<subject>` (every device of that app user) or `device:<clientId>`.
    Principal(Principal),
    /// One token: its `jti`.
    Session(Uuid),
}

impl Target {
    /// The store key: `device:<uuid>`, `principal:<text>` or `session:<uuid>`.
    pub fn key(&self) -> String {
        match self {
            Target::Device(id) => format!("device:{id}"),
            Target::Principal(p) => format!("principal:{p}"),
            Target::Session(id) => format!("session:{id}"),
        }
    }
}

/// One revocation, as stored and listed.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Revocation {
    /// What is revoked.
    #[serde(flatten)]
    pub target: Target,
    /// Unix seconds: every token of the target issued at or before it is refused.
    pub revoked_at: u64,
    /// Unix seconds: when it was lifted (new sessions allowed again); `None` while it stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub lifted_at: Option<u64>,
    /// Unix seconds: when the record is forgotten (no token it refuses can be alive any more);
    /// `None` while it stands.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub forget_at: Option<u64>,
}

impl Revocation {
    /// Whether it still blocks new sessions.
    pub fn stands(&self) -> bool {
        self.lifted_at.is_none() && !matches!(self.target, Target::Session(_))
    }
}

/// What a token says about itself, for the check.
pub struct TokenFacts<'a> {
    /// Its client id (`sub`).
    pub client_id: Uuid,
    /// Its principal.
    pub principal: &'a Principal,
    /// Its id, when it has one.
    pub jti: Option<Uuid>,
    /// Issued at, Unix seconds.
    pub iat: u64,
}

#[derive(Default)]
struct Index {
    loaded: bool,
    by_target: HashMap<Target, Revocation>,
}

/// The in-memory list every request is checked against.
#[derive(Default)]
pub struct Revocations {
    index: RwLock<Index>,
    /// Held across a store change and its [`Revocations::replace`], and across a reload, so a
    /// reload that read the store before a change cannot put the old list back after it.
    serial: tokio::sync::Mutex<()>,
    /// Notified by every [`Revocations::replace`], for [`Revocations::wait_loaded`].
    replaced: tokio::sync::Notify,
}

fn revoked(what: &str) -> ApiError {
    ApiError::code(
        g::SESSION_REVOKED,
        format!("{what} was revoked by the operator"),
    )
}

impl Revocations {
    /// An empty list that refuses every session until [`Revocations::replace`] first loads it.
    pub fn new() -> Self {
        Self::default()
    }

    /// Replaces the list with `records` (a load from the store, or a change just stored).
    pub fn replace(&self, records: Vec<Revocation>) {
        let by_target = records.into_iter().map(|r| (r.target.clone(), r)).collect();
        *self.index.write().unwrap_or_else(|p| p.into_inner()) = Index {
            loaded: true,
            by_target,
        };
        self.replaced.notify_waiters();
    }

    fn loaded(&self) -> bool {
        self.index.read().unwrap_or_else(|p| p.into_inner()).loaded
    }

    /// Waits (at most `max`) for the first load, so that a request arriving just after start
    /// is checked rather than refused; the checks still refuse if it has not happened by then.
    pub async fn wait_loaded(&self, max: Duration) {
        let deadline = tokio::time::Instant::now() + max;
        while !self.loaded() {
            let replaced = self.replaced.notified();
            tokio::pin!(replaced);
            replaced.as_mut().enable();
            if self.loaded() {
                return;
            }
            if tokio::time::timeout_at(deadline, replaced).await.is_err() {
                return;
            }
        }
    }

    /// Refuses (401, 40103) a token a revocation covers; 503 (50301) before the first load.
    pub fn check_token(&self, token: &TokenFacts<'_>) -> Result<(), ApiError> {
        let index = self.index.read().unwrap_or_else(|p| p.into_inner());
        if !index.loaded {
            return Err(not_loaded());
        }
        let covers = |target: Target| {
            index
                .by_target
                .get(&target)
                .is_some_and(|r| match r.lifted_at {
                    // Standing: every token of the target, whenever it was issued.
                    None => true,
                    // Lifted: the tokens issued while it stood or before it, and no later one.
                    Some(lifted_at) => token.iat <= lifted_at.max(r.revoked_at),
                })
        };
        if covers(Target::Device(token.client_id)) {
            return Err(revoked("this session's device"));
        }
        if covers(Target::Principal(token.principal.clone())) {
            return Err(revoked("this session's principal"));
        }
        if let Some(jti) = token.jti
            && index.by_target.contains_key(&Target::Session(jti))
        {
            return Err(revoked("this session token"));
        }
        Ok(())
    }

    /// Refuses (401, 40103) a new session for a device or principal whose revocation stands.
    pub fn check_new_session(
        &self,
        client_id: Uuid,
        principal: &Principal,
    ) -> Result<(), ApiError> {
        let index = self.index.read().unwrap_or_else(|p| p.into_inner());
        if !index.loaded {
            return Err(not_loaded());
        }
        let stands = |target: Target| index.by_target.get(&target).is_some_and(|r| r.stands());
        if stands(Target::Device(client_id)) {
            return Err(revoked("this device"));
        }
        if stands(Target::Principal(principal.clone())) {
            return Err(revoked("this principal"));
        }
        Ok(())
    }

    /// Serialises changes and reloads (see the field).
    pub async fn serial(&self) -> tokio::sync::MutexGuard<'_, ()> {
        self.serial.lock().await
    }

    /// How many records are held.
    pub fn len(&self) -> usize {
        self.index
            .read()
            .unwrap_or_else(|p| p.into_inner())
            .by_target
            .len()
    }

    /// Whether no record is held.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }
}

fn not_loaded() -> ApiError {
    ApiError::code(
        g::STORE_DEGRADED,
        "the gateway has not loaded its revocations yet; retry shortly",
    )
}

/// Reloads `list` from `backend` now and then every `every`, and at once whenever the backend
/// notifies a change (`Backend::revocations_changed`), for as long as the process runs.
/// A failed load keeps the last list (logged at most once a minute).
pub async fn refresh_loop(list: Arc<Revocations>, backend: Arc<dyn Backend>, every: Duration) {
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let changed = backend.revocations_changed();
    let mut last_warning: Option<std::time::Instant> = None;
    loop {
        match &changed {
            // A notification that came during a reload is kept (a `Notify` permit), so the
            // change it announced is read by the next one.
            Some(changed) => tokio::select! {
                _ = ticks.tick() => {}
                _ = changed.notified() => {}
            },
            None => {
                ticks.tick().await;
            }
        }
        let _serial = list.serial().await;
        match backend.revocations().await {
            Ok(records) => list.replace(records),
            Err(e) => {
                if last_warning.is_none_or(|t| t.elapsed() >= Duration::from_secs(60)) {
                    last_warning = Some(std::time::Instant::now());
                    tracing::warn!(error = %e, "revocations: reload failed; keeping the last list");
                }
            }
        }
    }
}

/// Drops the records whose `forget_at` has passed.
pub fn prune(records: &mut Vec<Revocation>, now_s: u64) {
    records.retain(|r| r.forget_at.is_none_or(|at| at > now_s));
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts(principal: &Principal, iat: u64, jti: Option<Uuid>) -> TokenFacts<'_> {
        TokenFacts {
            client_id: Uuid::from_u128(1),
            principal,
            jti,
            iat,
        }
    }

    #[test]
    fn a_standing_revocation_refuses_every_token_and_lifting_admits_only_later_ones() {
        let list = Revocations::new();
        let alice = Principal::user("alice").unwrap();
        assert_eq!(
            list.check_token(&facts(&alice, 5, None))
                .unwrap_err()
                .0
                .code(),
            Some(g::STORE_DEGRADED),
            "nothing is admitted before the first load"
        );
        let mut record = Revocation {
            target: Target::Device(Uuid::from_u128(1)),
            revoked_at: 10,
            lifted_at: None,
            forget_at: None,
        };
        list.replace(vec![record.clone()]);
        // Standing: a token issued after the revocation (another replica that had not reloaded,
        // a clock stepped back) is refused like the older ones.
        for iat in [9, 10, 11, 1_000] {
            let e = list.check_token(&facts(&alice, iat, None)).unwrap_err();
            assert_eq!(e.0.code(), Some(g::SESSION_REVOKED), "iat {iat}");
        }
        let bob = Principal::user("bob").unwrap();
        assert!(
            list.check_new_session(Uuid::from_u128(1), &bob).is_err(),
            "a standing revocation refuses new sessions"
        );
        assert!(list.check_new_session(Uuid::from_u128(2), &bob).is_ok());
        record.lifted_at = Some(20);
        record.forget_at = Some(30);
        list.replace(vec![record.clone()]);
        assert!(list.check_new_session(Uuid::from_u128(1), &bob).is_ok());
        // Lifted at 20: every token issued up to the lift stays refused, later ones pass.
        for iat in [10, 11, 20] {
            assert!(
                list.check_token(&facts(&alice, iat, None)).is_err(),
                "iat {iat}"
            );
        }
        assert!(list.check_token(&facts(&alice, 21, None)).is_ok());
        let mut records = vec![record];
        prune(&mut records, 29);
        assert_eq!(records.len(), 1);
        prune(&mut records, 30);
        assert!(records.is_empty());
    }

    #[test]
    fn a_principal_or_one_token_can_be_revoked() {
        let list = Revocations::new();
        let alice = Principal::user("alice").unwrap();
        let jti = Uuid::from_u128(99);
        list.replace(vec![
            Revocation {
                target: Target::Principal(alice.clone()),
                revoked_at: 10,
                lifted_at: None,
                forget_at: None,
            },
            Revocation {
                target: Target::Session(jti),
                revoked_at: 10,
                lifted_at: None,
                forget_at: Some(100),
            },
        ]);
        assert!(list.check_token(&facts(&alice, 3, None)).is_err());
        let bob = Principal::user("bob").unwrap();
        assert!(list.check_token(&facts(&bob, 3, None)).is_ok());
        assert!(list.check_token(&facts(&bob, 50, Some(jti))).is_err());
        assert!(list.check_new_session(Uuid::from_u128(1), &bob).is_ok());
        assert!(list.check_new_session(Uuid::from_u128(1), &alice).is_err());
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_waits_for_the_first_load_and_is_refused_if_it_never_comes() {
        let list = Arc::new(Revocations::new());
        let loader = list.clone();
        tokio::spawn(async move {
            tokio::time::sleep(Duration::from_millis(300)).await;
            loader.replace(Vec::new());
        });
        list.wait_loaded(FIRST_LOAD_WAIT).await;
        let alice = Principal::user("alice").unwrap();
        assert!(list.check_token(&facts(&alice, 1, None)).is_ok());
        let never = Revocations::new();
        let started = tokio::time::Instant::now();
        never.wait_loaded(FIRST_LOAD_WAIT).await;
        assert_eq!(started.elapsed(), FIRST_LOAD_WAIT);
        assert!(never.check_token(&facts(&alice, 1, None)).is_err());
    }

    #[test]
    fn the_wire_form_names_kind_and_id() {
        let r = Revocation {
            target: Target::Principal(Principal::user("a").unwrap()),
            revoked_at: 1,
            lifted_at: None,
            forget_at: None,
        };
        let text = serde_json::to_string(&r).unwrap();
        assert_eq!(text, r#"{"kind":"principal","id":"user:a","revokedAt":1}"#);
        assert_eq!(serde_json::from_str::<Revocation>(&text).unwrap(), r);
    }
}
