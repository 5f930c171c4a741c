//! The records the outbox keeps and the values it hands out.
//!
//! An event is stored once, at `append`, with the per-aggregate `client_seq` it will carry on
//! every attempt; nothing is ever renumbered. A [`Batch`] is the pinned boundary of one request:
//! once persisted, every resend carries exactly the events in `first_seq..=last_seq`.

use celeriant_sync_protocol::encoding::base64_len;
use celeriant_sync_protocol::json::{EventFields, push_event};
#[cfg(not(target_arch = "wasm32"))]
use celeriant_sync_protocol::wire::Event as WireEvent;
use uuid::Uuid;

pub use celeriant_sync_protocol::AggregateRef;

/// An event as the app hands it to `append`, before it has a sequence.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewEvent {
    /// The app's id for the event (a random UUID v4 unless the app gave one).
    pub event_id: Uuid,
    /// Unix milliseconds at append.
    pub timestamp: u64,
    /// Event type, never 0.
    pub event_type: u64,
    /// Minor type.
    pub minor: u64,
    /// Payload.
    pub data: Vec<u8>,
    /// AES-GCM nonce when the payload is encrypted (12 bytes).
    pub iv: Option<Vec<u8>>,
}

/// An event in the outbox: a [`NewEvent`] with its aggregate and sequence, kept **in its wire
/// encoding** — the JSON of the protocol's `Event`, written once at append.
///
/// Storing the bytes that travel makes every resend byte-identical by construction, makes a
/// batch's size exact before it is built, and leaves the drain loop nothing to convert: a
/// request body is the stored fragments joined ([`super::batch::encode`]).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredEvent {
    /// The aggregate it belongs to.
    pub aggregate: AggregateRef,
    /// Its per-aggregate sequence, assigned at append, `>= 1`.
    pub client_seq: u64,
    /// The app's id for it.
    pub event_id: Uuid,
    /// The event as it travels (`{"clientSeq":…,"eventId":…,…}`).
    pub wire: String,
    /// The version guard of the conditional append it belongs to (`None`: unconditional). On
    /// an atomic write's leg, that leg's guard.
    pub guard: Option<Guard>,
    /// The atomic write (`appendAtomic`) it belongs to: every leg of it, the same on each of its
    /// events (`None`: a plain or conditional append).
    pub atomic: Option<Legs>,
}

/// One aggregate's part of an atomic write (`appendAtomic`): its aggregate and the sequences
/// it was given, in one group commit with the other legs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub struct Leg {
    /// The aggregate.
    pub aggregate: AggregateRef,
    /// The leg's first sequence.
    pub first_seq: u64,
    /// The leg's last sequence (its events are `first_seq..=last_seq`, no gaps: a leg is never
    /// cut, and only a whole write is ever discarded).
    pub last_seq: u64,
}

/// Every leg of one atomic write, in the order the app gave them (the request's order). Shared:
/// each of the write's events, its batch and its park records hold the same list.
///
/// An `Rc<Vec<Leg>>`, not an `Rc<[Leg]>`: building the unsized `Rc` links its own allocation
/// path (layout arithmetic and its panic), which this module needs nowhere else.
pub type Legs = std::rc::Rc<Vec<Leg>>;

/// The version guard of a conditional append (`append(…, { expectedVersion })`), stored with
/// each of its events: the append lands only if the aggregate is at exactly `expected_version`.
/// Its events are always one batch of their own, exactly `first_seq..=last_seq`, never mixed
/// with the aggregate's events before or after it ([`super::batch::cut_at_guards`]), so the
/// request and its every resend carry the guard and nothing else is judged by it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Guard {
    /// The aggregate version the append expects (`0`: only if the aggregate does not exist).
    pub expected_version: u64,
    /// The append's first sequence.
    pub first_seq: u64,
    /// The append's last sequence.
    pub last_seq: u64,
}

impl StoredEvent {
    /// `e` stored under `aggregate` at `client_seq`: encoded once, here.
    pub fn new(aggregate: AggregateRef, client_seq: u64, e: &NewEvent) -> Self {
        let mut wire = String::with_capacity(
            celeriant_sync_protocol::wire::EVENT_JSON_OVERHEAD
                + base64_len(e.data.len())
                + e.iv.as_ref().map_or(0, |iv| base64_len(iv.len())),
        );
        push_event(
            &mut wire,
            EventFields {
                client_seq,
                event_id: Some(&e.event_id),
                timestamp: e.timestamp,
                event_type: e.event_type,
                minor: e.minor,
                data: &e.data,
                iv: e.iv.as_deref(),
            },
        );
        StoredEvent {
            aggregate,
            client_seq,
            event_id: e.event_id,
            wire,
            guard: None,
            atomic: None,
        }
    }

    /// The same event, stored as part of the conditional append `guard`.
    pub fn guarded(self, guard: Option<Guard>) -> Self {
        StoredEvent { guard, ..self }
    }

    /// The same event, stored as part of the atomic write `legs`.
    pub fn in_atomic(self, legs: Option<Legs>) -> Self {
        StoredEvent {
            atomic: legs,
            ..self
        }
    }

    /// The event decoded from its wire form (native tests; the browser decodes with the
    /// platform's own `JSON`).
    #[cfg(not(target_arch = "wasm32"))]
    pub fn decode(&self) -> Result<WireEvent, serde_json::Error> {
        serde_json::from_str(&self.wire)
    }

    /// Its exact size inside a request body (with the separating comma).
    pub fn encoded_len(&self) -> usize {
        self.wire.len() + 1
    }
}

/// What `append` returns for each event once its transaction committed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Receipt {
    /// The event's id.
    pub event_id: Uuid,
    /// The sequence it was stored under.
    pub client_seq: u64,
}

/// The boundaries of one request: a run of consecutive pending events of one aggregate, or an
/// atomic write (then the fields name its first leg, and `atomic` every leg).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Batch {
    /// The aggregate.
    pub aggregate: AggregateRef,
    /// Lowest sequence in the batch.
    pub first_seq: u64,
    /// Highest sequence in the batch.
    pub last_seq: u64,
    /// How many events (sequences may have gaps after a discard).
    pub count: u32,
    /// The atomic write this batch is, whole (`None`: one aggregate's events).
    pub atomic: Option<Legs>,
}

impl Batch {
    /// A batch of one aggregate's events.
    pub fn plain(aggregate: AggregateRef, first_seq: u64, last_seq: u64, count: u32) -> Self {
        Batch {
            aggregate,
            first_seq,
            last_seq,
            count,
            atomic: None,
        }
    }

    /// The batch that is the atomic write `legs`, whole.
    pub fn of_atomic(legs: &Legs) -> Option<Self> {
        let first = legs.first()?;
        Some(Batch {
            aggregate: first.aggregate,
            first_seq: first.first_seq,
            last_seq: first.last_seq,
            count: (first.last_seq - first.first_seq + 1) as u32,
            atomic: Some(legs.clone()),
        })
    }

    /// Each aggregate the batch writes, with its sequence span.
    pub fn spans(&self) -> Vec<(AggregateRef, u64, u64)> {
        match &self.atomic {
            Some(legs) => legs
                .iter()
                .map(|l| (l.aggregate, l.first_seq, l.last_seq))
                .collect(),
            None => vec![(self.aggregate, self.first_seq, self.last_seq)],
        }
    }

    /// How many events the batch holds, over every leg.
    pub fn events(&self) -> u64 {
        match &self.atomic {
            Some(legs) => legs.iter().map(|l| l.last_seq - l.first_seq + 1).sum(),
            None => u64::from(self.count),
        }
    }
}

/// Park code of a batch that was pinned when this database moved from a random client id to its
/// device key: it may have landed under the old id, which no key proves any more, so it is not
/// resent under the new one (that could land it twice); the app decides. (Code 0 is a server
/// answer that contradicts itself, [`super::classify::PROTOCOL_VIOLATION`]; 2 is
/// [`MISGUARDED`]; every other park code is the server's.)
pub const IDENTITY_CHANGED: u32 = 1;

/// Park code of a batch whose events do not all carry the first one's guard, or that does not
/// span exactly its guard's sequences (storage written by something that does not keep the
/// conditional-append rules, e.g. an older release): never encoded and sent, since it could
/// be written without its version guard or cut apart; it may have landed (it was pinned).
pub const MISGUARDED: u32 = 2;

/// An aggregate stopped by a permanent rejection, and the events that were rejected.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParkRecord {
    /// The aggregate; its later events wait until the app discards the parked ones.
    pub aggregate: AggregateRef,
    /// Lowest rejected sequence.
    pub first_seq: u64,
    /// Highest rejected sequence.
    pub last_seq: u64,
    /// How many events are parked.
    pub count: u32,
    /// The rejection's code (Celeriant's or the gateway's).
    pub code: u32,
    /// The rejection's message.
    pub message: String,
    /// Unix milliseconds when it was parked.
    pub parked_at: u64,
    /// An earlier attempt of these events had an unknown outcome (or was interrupted by a
    /// restart), so they may have landed before the rejection: Celeriant checks some things
    /// (a deleted aggregate, 2006) before idempotency, and a gateway's limits can change.
    pub may_have_landed: bool,
    /// For a conditional append refused by its version guard (code 2003, confirmed by reading
    /// the aggregate back): the aggregate's version the server reported.
    pub current_version: Option<u64>,
    /// For a part of an atomic write: every leg of it (each leg's aggregate is parked with the
    /// same code; discarding one discards them all, since a part alone may never be sent).
    pub atomic: Option<Legs>,
}
