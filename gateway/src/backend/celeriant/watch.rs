//! The Celeriant backend's change feed: one upstream watch per gateway process, through the
//! pool's `CeleriantPool::watch`, turned into [`Change`]s for the gateway's watch hub.
//!
//! The watch is opened for every aggregate of the organisation (the hub filters by what each
//! stream watches), and kept open for the life of the process:
//!
//! * a notification with a `keep_from_aggregate_version` (a trim: `deleted: false`), or
//!   without a `to_aggregate_version` (a delete: `deleted: true`), is a [`Change::Reset`]; any
//!   other is a [`Change::Changed`] to its `to_aggregate_version`. By its fields, not its
//!   `operation` code: the codes are not documented (request codes put Write at 3, TrimStart
//!   at 4, Delete at 5, but `celeriant_client_tokio`'s own fixtures send 1 for a write), so
//!   they are only checked: [`OperationCodes`] warns once if one kind read by fields comes
//!   with two codes (a delete that names a version, say, read as a write: the mapping would
//!   be wrong, `docs/celeriant.md`), and from then on the backend's streams' `ready`s no
//!   longer say `deletedResets` ([`Mapping`]) and every `reset` is published as a trim
//!   (`deleted: false`, [`OperationCodes::read`]), the event that revealed it included: the
//!   dangerous misreading is a non-deletion read as a deletion (a stream would forget what it
//!   sent, and a lower version that follows is no recreation), and a trim forgets nothing, so
//!   a deletion read as a trim costs only liveness (floors kept until reached or given up on);
//! * on every (re)connection, after the watch is open, a [`Change::Resync`]: whatever was
//!   committed while no watch was open was not notified, so every stream catches up;
//! * an error, the end of the watch, or a watch left mid-frame (`is_desynchronised`) is a
//!   [`Change::Resync`] at once, then a reconnection with exponential backoff (100 ms doubling
//!   to [`MAX_BACKOFF`], reset after a watch that delivered);
//! * the watch is renewed every [`RENEW_EVERY`] (`--celeriant-watch-renew-secs`): closed, opened
//!   again at once, and followed by the [`Change::Resync`] of every (re)connection. A Celeriant
//!   watch sends nothing while nothing changes (no keepalive: neither `celeriant_client_tokio`
//!   nor `celeriant_msg` has one for watches), so silence cannot tell a quiet store from a dead
//!   connection (a node that hung, a half-open TCP connection after a network partition).
//!   Renewing bounds how long such a loss goes unnoticed, at the cost of one resync per period.
//!
//! The watch is scoped to the gateway's organisation (`orgs`) when one is set.
//!
//! [`Node`] tells `tips` which node the watch is attached to, and only while it is open: it is
//! set after `CeleriantPool::watch` returned (the node acknowledged the subscription) and before
//! that (re)connection's [`Change::Resync`] is published, and cleared as soon as the watch is
//! left, before the [`Change::Resync`] that follows. So whoever reads `Some(node)` after a stream
//! was registered knows that either this watch was open on `node` when the stream was
//! registered (and stays open, or a resync reaches the stream), or a resync is published after
//! the registration.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use celeriant_client_tokio::{CeleriantPool, WatchOptions};
use celeriant_msg::request::requests::WatchRequest;
use celeriant_msg::response::watch_event::WatchResponseEvent;
use celeriant_sync_protocol::AggregateRef;
use tokio::sync::broadcast;
use uuid::Uuid;

use crate::backend::{AggregateKey, Change};

/// First wait before reconnecting.
pub const FIRST_BACKOFF: Duration = Duration::from_millis(100);

/// Longest wait between reconnections.
pub const MAX_BACKOFF: Duration = Duration::from_secs(10);

/// How long one upstream watch is kept before it is renewed (the default).
pub const RENEW_EVERY: Duration = Duration::from_secs(300);

/// What the upstream watch asks for, and how often it is renewed.
#[derive(Debug, Clone, Copy)]
pub struct WatchSettings {
    /// The organisation watched (`None`: every organisation).
    pub org: Option<Uuid>,
    /// How long one watch is kept.
    pub renew: Duration,
}

impl Default for WatchSettings {
    fn default() -> Self {
        WatchSettings {
            org: None,
            renew: RENEW_EVERY,
        }
    }
}

/// The change a Celeriant notification means.
pub fn change_of(event: &WatchResponseEvent) -> Change {
    let key = AggregateKey {
        org: Uuid::from_u128(event.org_id),
        aggregate: AggregateRef {
            type_id: Uuid::from_u128(event.aggregate_type_id),
            id: Uuid::from_u128(event.aggregate_id),
        },
    };
    match (
        event.keep_from_aggregate_version,
        event.to_aggregate_version,
    ) {
        (None, Some(version)) => Change::Changed { key, version },
        // A trim: the versions kept, the tip among them.
        (Some(_), _) => Change::Reset {
            key,
            deleted: false,
        },
        // Neither: a delete (its versions may start again from 1).
        (None, None) => Change::Reset { key, deleted: true },
    }
}

/// Whether [`change_of`]'s mapping by fields has been seen to be wrong in this process (two
/// operation codes for one kind, [`OperationCodes`]). One per backend, shared by its one
/// watch task, which sets it, and the backend, which then has its streams' `ready`s say no
/// `deletedResets` (`Backend::deleted_resets`), and every `reset` published as a trim
/// ([`OperationCodes::read`]): what the hub's streams forget rests on the `reset`s telling
/// deletions from trims, and a client takes a lower `changed` for a recreation only on a
/// stream whose `ready` said so. Never cleared: the mapping does not become right again.
#[derive(Debug, Default)]
pub struct Mapping(AtomicBool);

impl Mapping {
    /// Whether a disagreement was seen.
    pub fn doubted(&self) -> bool {
        self.0.load(Ordering::Relaxed)
    }

    fn doubt(&self) {
        self.0.store(true, Ordering::Relaxed);
    }
}

/// The `operation` code first seen with each kind of change read by fields (write, trim,
/// delete): a second code for one kind means the fields do not tell the kinds apart as
/// [`change_of`] assumes, which is warned of once per kind and sets the backend's
/// [`Mapping`] doubted (the changes are still read by fields: which code means what is not
/// documented).
#[derive(Debug)]
pub struct OperationCodes {
    first: [Option<u8>; 3],
    warned: [bool; 3],
    mapping: Arc<Mapping>,
}

impl OperationCodes {
    /// Checks codes for the backend whose [`Mapping`] is `mapping`.
    pub fn new(mapping: Arc<Mapping>) -> Self {
        OperationCodes {
            first: [None; 3],
            warned: [false; 3],
            mapping,
        }
    }

    /// The change to publish for `event`: [`change_of`], its code checked; once the mapping is
    /// doubted (by this event or an earlier one), a `reset` is published as a trim
    /// (`deleted: false`): a stream then never forgets what it sent on a reading that may be
    /// wrong, and its client keeps its floors.
    pub fn read(&mut self, event: &WatchResponseEvent) -> Change {
        let change = change_of(event);
        self.check(event, &change);
        match change {
            Change::Reset { key, .. } if self.mapping.doubted() => Change::Reset {
                key,
                deleted: false,
            },
            change => change,
        }
    }

    /// Notes `event`'s code for the kind `change` (read from it); whether this is the first
    /// disagreement for that kind (then warned of, and the mapping doubted).
    pub fn check(&mut self, event: &WatchResponseEvent, change: &Change) -> bool {
        let (kind, name) = match change {
            Change::Changed { .. } => (0, "write"),
            Change::Reset { deleted: false, .. } => (1, "trim"),
            Change::Reset { deleted: true, .. } => (2, "delete"),
            Change::Resync => return false,
        };
        let first = *self.first[kind].get_or_insert(event.operation);
        if first == event.operation || self.warned[kind] {
            return false;
        }
        self.warned[kind] = true;
        self.mapping.doubt();
        tracing::warn!(
            kind = name,
            first,
            now = event.operation,
            to = ?event.to_aggregate_version,
            keep_from = ?event.keep_from_aggregate_version,
            "celeriant watch: notifications read as one kind carry two operation codes; \
             the mapping by fields may be wrong; ready no longer says deletedResets, \
             resets published as trims (docs/celeriant.md)"
        );
        true
    }
}

fn request(org: Option<Uuid>) -> WatchRequest {
    WatchRequest {
        correlation_id: None,
        requested_latency_ms: None,
        shard_id: None,
        orgs: org.map(|org| [org.as_u128()].into_iter().collect()),
        aggregate_types: None,
        aggregates: None,
        operation_types: None,
    }
}

/// Told every change before it is published (the access records' cache listens).
pub type Observer = Arc<dyn Fn(&Change) + Send + Sync>;

/// The address of the node the upstream watch is open on, `None` while none is (see the
/// module's header for when it is set and cleared). One per backend, written by its one watch
/// task (`Backend::changes` is called once, by the hub: `crate::state`), whose changes are the
/// ones the streams are told.
#[derive(Debug, Default)]
pub struct Node(std::sync::Mutex<Option<String>>);

impl Node {
    /// The node the watch is open on now.
    pub fn address(&self) -> Option<String> {
        self.lock().clone()
    }

    fn set(&self, address: Option<String>) {
        *self.lock() = address;
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Option<String>> {
        self.0.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Keeps one upstream watch open for as long as anyone listens on `changes`, publishing
/// what it says there, each change shown to `observe` first; `node` says where it is open,
/// `mapping` whether its notifications' kinds were seen to disagree with their codes.
pub async fn run(
    pool: Arc<CeleriantPool>,
    changes: broadcast::Sender<Change>,
    settings: WatchSettings,
    observe: Observer,
    node: Arc<Node>,
    mapping: Arc<Mapping>,
) {
    let publish = |change: Change| {
        observe(&change);
        let _ = changes.send(change);
    };
    let mut backoff = FIRST_BACKOFF;
    let mut reported = false;
    let mut codes = OperationCodes::new(mapping);
    let renew = settings.renew.max(Duration::from_millis(1));
    loop {
        if changes.receiver_count() == 0 {
            return;
        }
        let mut watch = match pool
            .watch(request(settings.org), WatchOptions::default())
            .await
        {
            Ok(watch) => watch,
            Err(e) => {
                if !reported {
                    tracing::warn!(error = %e, "celeriant watch: cannot open; retrying");
                    reported = true;
                }
                tokio::time::sleep(backoff).await;
                backoff = (backoff * 2).min(MAX_BACKOFF);
                continue;
            }
        };
        tracing::info!(node = watch.address(), "celeriant watch: open");
        reported = false;
        // Set before the resync: a stream registered before it gets it (`Node`).
        node.set(Some(watch.address().to_owned()));
        publish(Change::Resync);
        let opened = tokio::time::Instant::now();
        let mut renewing = false;
        loop {
            let left = renew.saturating_sub(opened.elapsed());
            match watch.next_timeout(left).await {
                Ok(Some(response)) => {
                    backoff = FIRST_BACKOFF;
                    for event in &response.events {
                        publish(codes.read(event));
                    }
                }
                Ok(None) => {
                    tracing::debug!(
                        every = ?renew,
                        "celeriant watch: renewed (a silent watch may be a dead one)"
                    );
                    renewing = true;
                    break;
                }
                Err(e) => {
                    tracing::warn!(error = %e, "celeriant watch: lost; resync and reconnect");
                    break;
                }
            }
            if watch.is_desynchronised() {
                tracing::warn!("celeriant watch: desynchronised; resync and reconnect");
                break;
            }
        }
        // Cleared before the resync that follows (`Node`).
        node.set(None);
        drop(watch);
        if renewing {
            // Opened again at once; its resync covers whatever the old one missed.
            continue;
        }
        publish(Change::Resync);
        tokio::time::sleep(backoff).await;
        backoff = (backoff * 2).min(MAX_BACKOFF);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn event(to: Option<u64>, keep: Option<u64>) -> WatchResponseEvent {
        coded(to, keep, 1)
    }

    fn coded(to: Option<u64>, keep: Option<u64>, operation: u8) -> WatchResponseEvent {
        WatchResponseEvent {
            org_id: 1,
            aggregate_type_id: 2,
            aggregate_id: 3,
            operation,
            from_aggregate_version: None,
            to_aggregate_version: to,
            keep_from_aggregate_version: keep,
        }
    }

    #[test]
    fn writes_change_trims_and_deletes_reset() {
        assert!(matches!(
            change_of(&event(Some(7), None)),
            Change::Changed { version: 7, .. }
        ));
        // A trim keeps the tip: not a deletion, whether or not it names the tip.
        assert!(matches!(
            change_of(&event(Some(7), Some(4))),
            Change::Reset { deleted: false, .. }
        ));
        assert!(matches!(
            change_of(&event(None, Some(4))),
            Change::Reset { deleted: false, .. }
        ));
        // Neither a version reached nor one kept from: deleted.
        assert!(matches!(
            change_of(&event(None, None)),
            Change::Reset { deleted: true, .. }
        ));
    }

    #[test]
    fn two_operation_codes_for_one_kind_are_warned_of_once_and_doubt_the_mapping() {
        let mapping = Arc::new(Mapping::default());
        let mut codes = OperationCodes::new(mapping.clone());
        let mut check = |e: WatchResponseEvent| codes.check(&e, &change_of(&e));
        // Each kind keeps its own code: no disagreement.
        assert!(!check(coded(Some(7), None, 3)));
        assert!(!check(coded(None, Some(4), 4)));
        assert!(!check(coded(None, None, 5)));
        assert!(!check(coded(Some(8), None, 3)));
        assert!(!mapping.doubted(), "codes that agree doubt nothing");
        // A delete naming a version, read as a write: a second code for writes, once; the
        // mapping is doubted from then on.
        assert!(check(coded(Some(9), None, 5)));
        assert!(mapping.doubted());
        assert!(!check(coded(Some(9), None, 5)));
        assert!(!check(coded(Some(9), None, 6)));
        // The other kinds are checked on their own.
        assert!(check(coded(None, None, 3)));
    }

    #[test]
    fn once_the_mapping_is_doubted_every_reset_is_published_as_a_trim() {
        let mapping = Arc::new(Mapping::default());
        let mut codes = OperationCodes::new(mapping.clone());
        let deleted = |c: Change| match c {
            Change::Reset { deleted, .. } => deleted,
            other => panic!("not a reset: {other:?}"),
        };
        // Trusted: a delete is a deletion.
        assert!(deleted(codes.read(&coded(None, None, 5))));
        // The event that reveals the disagreement (a second code for deletes) is published
        // as a trim already, and so is every delete after it.
        assert!(!deleted(codes.read(&coded(None, None, 6))));
        assert!(mapping.doubted());
        assert!(!deleted(codes.read(&coded(None, None, 5))));
        // Writes are still writes.
        assert!(matches!(
            codes.read(&coded(Some(9), None, 3)),
            Change::Changed { version: 9, .. }
        ));
    }

    #[test]
    fn after_doubt_a_notification_with_neither_version_publishes_a_trim() {
        let mapping = Arc::new(Mapping::default());
        let mut codes = OperationCodes::new(mapping.clone());
        // A write with two codes doubts the mapping.
        codes.read(&coded(Some(7), None, 3));
        codes.read(&coded(Some(8), None, 5));
        assert!(mapping.doubted());
        assert!(matches!(
            codes.read(&coded(None, None, 5)),
            Change::Reset { deleted: false, .. }
        ));
    }
}
