//! What `client.inspect()` shows, for debugging and support: the outbox per aggregate, the
//! pinned batch with its attempts, the parked aggregates, and the last outcomes of the drain.
//!
//! Two parts, both plain Rust:
//!
//! * [`Inspector`]: memory of this context's drain — a bounded ring of the last
//!   [`OUTCOMES_KEPT`] attempt outcomes and the batch the drain holds now (attempts, last
//!   outcome, next attempt time). The drain machine produces an [`OutcomeRecord`] per reply
//!   ([`crate::engine::drain::Drain::take_outcome`]); the executor feeds it here, with what the
//!   machine holds after every step ([`crate::engine::drain::Drain::held`]).
//! * [`snapshot`]: reads the outbox (any [`Outbox`]) and merges it with the inspector into a
//!   [`Snapshot`]. Storage is authoritative for what is pinned and pending; the inspector only
//!   adds what memory knows (attempts, outcomes), and only when it is about the same batch.
//!
//! The snapshot carries the parked events as stored; the API layer leaves their payloads out
//! unless the app asks for them.

use std::cell::RefCell;
use std::collections::VecDeque;

use super::classify::Outcome;
use super::model::{AggregateRef, Batch, ParkRecord, StoredEvent};
use super::outbox::{Outbox, StoreError};
use super::sorted::SortedMap;

/// How many outcomes the ring keeps.
pub const OUTCOMES_KEPT: usize = 50;

/// What one attempt's reply was, in the inspector's words.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum OutcomeKind {
    /// The batch (or a prefix) landed.
    Landed,
    /// A 2002: an earlier attempt had landed it.
    Duplicate,
    /// Not applied; resent identically after a delay.
    Retry,
    /// May or may not have been applied; resent identically.
    Unknown,
    /// The session was refused; a new one is opened, the batch resent identically.
    Unauthorized,
    /// Permanently refused: isolated or parked.
    Rejected,
}

impl OutcomeKind {
    /// The name JavaScript sees.
    pub fn as_str(self) -> &'static str {
        match self {
            OutcomeKind::Landed => "landed",
            OutcomeKind::Duplicate => "duplicate",
            OutcomeKind::Retry => "retry",
            OutcomeKind::Unknown => "unknown",
            OutcomeKind::Unauthorized => "unauthorized",
            OutcomeKind::Rejected => "rejected",
        }
    }

    /// The kind, code and message of a classified reply.
    pub fn of(outcome: &Outcome) -> (OutcomeKind, Option<u32>, String) {
        match outcome {
            Outcome::Landed {
                duplicate: false, ..
            } => (OutcomeKind::Landed, None, String::new()),
            Outcome::Landed {
                duplicate: true, ..
            } => (
                OutcomeKind::Duplicate,
                Some(celeriant_sync_protocol::codes::celeriant::CLIENT_IDEMPOTENCY_VIOLATION),
                "already landed".into(),
            ),
            Outcome::Retry { code, message, .. } => (OutcomeKind::Retry, *code, message.clone()),
            Outcome::Unknown { code, message, .. } => {
                (OutcomeKind::Unknown, *code, message.clone())
            }
            Outcome::Unauthorized { code, message } => {
                (OutcomeKind::Unauthorized, Some(*code), message.clone())
            }
            Outcome::Rejected { code, message, .. } => {
                (OutcomeKind::Rejected, Some(*code), message.clone())
            }
        }
    }
}

/// One attempt of a batch and what came of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OutcomeRecord {
    /// When the reply (or its absence) was handled, Unix ms.
    pub at: u64,
    /// The batch sent.
    pub batch: Batch,
    /// Which attempt of this batch it was (1 for the first).
    pub attempt: u32,
    /// What it was.
    pub kind: OutcomeKind,
    /// The protocol code, if any.
    pub code: Option<u32>,
    /// The message (empty for a plain success).
    pub message: String,
    /// When the batch is due to be sent again (retry, unknown, unauthorized), Unix ms.
    pub next_attempt_at: Option<u64>,
}

/// What the drain holds now, as the machine reports it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Held {
    /// The batch (pinned, being pinned, in flight or waiting to be resent).
    pub batch: Batch,
    /// Failed attempts of it so far.
    pub failed_attempts: u32,
    /// A request with it is out now.
    pub in_flight: bool,
}

/// What this context's drain knows of the batch it holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HeldInfo {
    /// What the machine holds.
    pub held: Held,
    /// The last outcome of this batch (or of the batch it was isolated from).
    pub last: Option<OutcomeRecord>,
    /// When it is due to be sent again.
    pub next_attempt_at: Option<u64>,
}

fn same_batch(a: &Batch, b: &Batch) -> bool {
    // Isolating re-pins the first event of a rejected batch: the same batch for the inspector.
    a.aggregate == b.aggregate && a.first_seq == b.first_seq
}

#[derive(Debug, Default)]
struct State {
    outcomes: VecDeque<OutcomeRecord>,
    held: Option<HeldInfo>,
}

/// This context's memory of its drain (empty in a context that does not drain).
#[derive(Debug)]
pub struct Inspector {
    capacity: usize,
    state: RefCell<State>,
}

impl Default for Inspector {
    fn default() -> Self {
        Inspector::new(OUTCOMES_KEPT)
    }
}

impl Inspector {
    /// An inspector keeping the last `capacity` outcomes.
    pub fn new(capacity: usize) -> Self {
        Inspector {
            capacity: capacity.max(1),
            state: RefCell::default(),
        }
    }

    /// An attempt's outcome (the executor takes it from the machine).
    pub fn record(&self, record: OutcomeRecord) {
        let mut s = self.state.borrow_mut();
        if let Some(info) = s.held.as_mut()
            && same_batch(&info.held.batch, &record.batch)
        {
            info.next_attempt_at = record.next_attempt_at;
            info.last = Some(record.clone());
        }
        if s.outcomes.len() == self.capacity {
            s.outcomes.pop_front();
        }
        s.outcomes.push_back(record);
    }

    /// What the machine holds after a step (`None`: nothing, e.g. idle or stopped).
    pub(crate) fn observe(&self, held: Option<Held>) {
        let mut s = self.state.borrow_mut();
        s.held = match (s.held.take(), held) {
            (_, None) => None,
            (Some(info), Some(held)) if same_batch(&info.held.batch, &held.batch) => {
                Some(HeldInfo {
                    next_attempt_at: if held.in_flight {
                        None
                    } else {
                        info.next_attempt_at
                    },
                    held,
                    last: info.last,
                })
            }
            (_, Some(held)) => Some(HeldInfo {
                held,
                last: None,
                next_attempt_at: None,
            }),
        };
    }

    /// The batch the drain holds, with what is known of its attempts.
    pub fn held(&self) -> Option<HeldInfo> {
        self.state.borrow().held.clone()
    }

    /// The last outcomes, oldest first.
    pub fn outcomes(&self) -> Vec<OutcomeRecord> {
        self.state.borrow().outcomes.iter().cloned().collect()
    }
}

/// One aggregate with events waiting.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggregateInfo {
    /// The aggregate.
    pub aggregate: AggregateRef,
    /// Events waiting to sync (parked ones not included).
    pub pending: u64,
    /// Parked events.
    pub parked: u64,
    /// The lowest sequence not landed.
    pub first_seq: u64,
    /// The highest sequence assigned.
    pub last_seq: u64,
}

/// The pinned batch: storage's pin, with what this context's drain knows of it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PinnedInfo {
    /// The pin as stored.
    pub batch: Batch,
    /// Attempts so far (failed ones, plus one if a request is out), when this context drains
    /// it; `None` when another context does.
    pub attempts: Option<u32>,
    /// A request with it is out now (this context's drain).
    pub in_flight: bool,
    /// Its last outcome, when this context sent it.
    pub last: Option<OutcomeRecord>,
    /// When it is due to be sent again.
    pub next_attempt_at: Option<u64>,
}

/// A parked aggregate, with its events.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParkedInfo {
    /// Why, and which events.
    pub record: ParkRecord,
    /// The parked events (their payloads are shown only when the app asks).
    pub events: Vec<StoredEvent>,
}

/// What `inspect()` returns, before conversion to JavaScript.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// Aggregates with events waiting or parked, in key order.
    pub aggregates: Vec<AggregateInfo>,
    /// The pinned batch, if any.
    pub pinned: Option<PinnedInfo>,
    /// Parked aggregates.
    pub parked: Vec<ParkedInfo>,
    /// This context's last outcomes, oldest first.
    pub outcomes: Vec<OutcomeRecord>,
}

/// Per aggregate: pending and parked counts from the highest sequence assigned, the lowest not
/// landed, and the park records. Sequences are contiguous, so the outbox holds
/// `last - lowest + 1` unlanded events of the aggregate, of which the park records' are parked.
pub fn aggregates(
    pending: &[(AggregateRef, u64)],
    lowest: &[Option<u64>],
    parked: &[ParkRecord],
) -> Vec<AggregateInfo> {
    let mut parked_of: SortedMap<AggregateRef, u64> = SortedMap::new();
    for r in parked {
        *parked_of.get_or_default(r.aggregate) += u64::from(r.count);
    }
    let mut out: SortedMap<AggregateRef, AggregateInfo> = SortedMap::new();
    for (&(aggregate, last_seq), lowest) in pending.iter().zip(lowest) {
        let Some(first_seq) = *lowest else { continue };
        let Some(unlanded) = last_seq.checked_sub(first_seq) else {
            continue;
        };
        let parked = parked_of.remove(&aggregate).unwrap_or(0);
        out.insert(
            aggregate,
            AggregateInfo {
                aggregate,
                pending: (unlanded + 1).saturating_sub(parked),
                parked,
                first_seq,
                last_seq,
            },
        );
    }
    // A parked aggregate the pending list did not name (nothing else waits in it).
    for r in parked {
        if let Some(n) = parked_of.remove(&r.aggregate) {
            out.insert(
                r.aggregate,
                AggregateInfo {
                    aggregate: r.aggregate,
                    pending: 0,
                    parked: n,
                    first_seq: r.first_seq,
                    last_seq: r.last_seq,
                },
            );
        }
    }
    // In aggregate order.
    out.into_values().collect()
}

/// Reads `outbox` and merges it with `inspector` (this context's drain; pass a fresh one in a
/// context that does not drain).
pub async fn snapshot<O: Outbox>(
    outbox: &O,
    inspector: &Inspector,
) -> Result<Snapshot, StoreError> {
    let pending = outbox.pending_aggregates().await?;
    let refs: Vec<AggregateRef> = pending.iter().map(|(a, _)| *a).collect();
    let lowest = outbox.lowest_pending_of(&refs).await?;
    let records = outbox.parked().await?;
    let pinned = outbox.pinned().await?.map(|batch| {
        let info = inspector
            .held()
            .filter(|i| same_batch(&i.held.batch, &batch));
        PinnedInfo {
            batch,
            attempts: info
                .as_ref()
                .map(|i| i.held.failed_attempts + u32::from(i.held.in_flight)),
            in_flight: info.as_ref().is_some_and(|i| i.held.in_flight),
            next_attempt_at: info.as_ref().and_then(|i| i.next_attempt_at),
            last: info.and_then(|i| i.last),
        }
    });
    let mut parked = Vec::with_capacity(records.len());
    for record in &records {
        let batch = Batch::plain(
            record.aggregate,
            record.first_seq,
            record.last_seq,
            record.count,
        );
        let events = outbox.read(&batch).await?;
        parked.push(ParkedInfo {
            record: record.clone(),
            events,
        });
    }
    Ok(Snapshot {
        aggregates: aggregates(&pending, &lowest, &records),
        pinned,
        parked,
        outcomes: inspector.outcomes(),
    })
}

#[cfg(all(test, not(target_arch = "wasm32")))]
#[path = "inspect_tests.rs"]
mod tests;
