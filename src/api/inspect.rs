//! `client.inspect()`: a snapshot of the outbox and its drain for debugging and support, as a
//! plain object (shapes in the TypeScript section below; serde views turned into JS by
//! serde-wasm-bindgen). Payloads only with `{ payloads: true }`.

use js_sys::Promise;
use serde::Serialize;
use uuid::Uuid;
use wasm_bindgen::prelude::*;

use super::client::{SyncClient, promise};
use super::errors::ClientError;
use super::output::parked_event;
use crate::browser::convert::{ParkedView, parked_view, status_view};
use crate::browser::inspect::{Inspection, inspect};
use crate::browser::js;
use crate::engine::errors::ErrorCode;
use crate::engine::inspect::{OUTCOMES_KEPT, OutcomeRecord};
use crate::engine::model::{AggregateRef, Batch};

#[wasm_bindgen(typescript_custom_section)]
const TS: &'static str = r#"
/** Options of `inspect()`. */
export interface InspectOptions {
    /** Include the parked events' payloads (`data`, `iv`, `type`, …). Default `false`: ids and sequences only. */
    payloads?: boolean;
}

/** One attempt of a batch and its outcome. */
export interface InspectOutcome {
    /** Unix ms. */
    at: number;
    aggregate: AggregateRef;
    firstSeq: number;
    lastSeq: number;
    count: number;
    /** An atomic write (`appendAtomic`): every leg, in the write's order (the fields above are its first). */
    atomic?: { aggregate: AggregateRef; firstSeq: number; lastSeq: number }[];
    /** Which attempt of this batch (1 for the first). */
    attempt: number;
    outcome: "landed" | "duplicate" | "retry" | "unknown" | "unauthorized" | "rejected";
    /** The protocol code, or null (network failures, plain success). */
    code: number | null;
    message: string;
    /** When the batch goes out again (retry, unknown, unauthorized), Unix ms. */
    nextAttemptAt: number | null;
}

/** The pinned batch: the next request, byte-identical on every resend. */
export interface InspectPinned {
    aggregate: AggregateRef;
    firstSeq: number;
    lastSeq: number;
    count: number;
    /** An atomic write (`appendAtomic`): every leg, in the write's order (the fields above are its first). */
    atomic?: { aggregate: AggregateRef; firstSeq: number; lastSeq: number }[];
    /** Attempts so far (failed ones, plus one in flight); null when another context drains it. */
    attempts: number | null;
    /** A request with it is out now (this context). */
    inFlight: boolean;
    /** Its last outcome, when this context sent it. */
    lastOutcome: InspectOutcome | null;
    /** When it goes out again, Unix ms (null: now, in flight, or unknown here). */
    nextAttemptAt: number | null;
}

/** An aggregate with events waiting or parked. */
export interface InspectAggregate {
    aggregate: AggregateRef;
    /** Events waiting to sync (parked ones not included). */
    pending: number;
    parked: number;
    /** The lowest sequence not landed, and the highest assigned. */
    firstSeq: number;
    lastSeq: number;
}

/** A parked event: without payloads unless `{ payloads: true }`, then the full `ParkedEvent`. */
export type InspectParkedEvent = { clientSeq: number; eventId: string } | ParkedEvent;

/** A parked aggregate and why. */
export interface InspectParked extends ParkedDetail {
    events: InspectParkedEvent[];
}

/** What `inspect()` resolves with. Never includes payloads unless asked. */
export interface InspectSnapshot {
    /** Unix ms. */
    at: number;
    clientId: string;
    databaseName: string;
    /** This context's role. */
    role: "drainer" | "follower";
    /** Which context drains the database. */
    drainer: {
        /** `this` context, an `other` tab or worker, or `none` holds the drain lock now. */
        context: "this" | "other" | "none";
        /** The Web Locks `clientId` of the holder, when the platform says. */
        lockHolder: string | null;
        /** Contexts waiting for the drain lock (null without Web Locks). */
        waiting: number | null;
        /** Whether Web Locks exist here (without them every context drains on its own). */
        locks: boolean;
    };
    status: SyncStatus;
    aggregates: InspectAggregate[];
    pinned: InspectPinned | null;
    parked: InspectParked[];
    /** This context's last outcomes (at most `outcomesKept`), oldest first; empty in a context that never drained. */
    outcomes: InspectOutcome[];
    outcomesKept: number;
    /** The storage's state (as `client.storage`). */
    storage: StorageState;
    /** `navigator.storage.persisted()`: whether the origin's storage is persistent (null where the engine lacks it). */
    persisted: boolean | null;
    /** `navigator.storage.estimate()` (null where the engine lacks it). */
    estimate: StorageEstimate | null;
}
"#;

/// One leg of an atomic write.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct LegView<'a> {
    aggregate: &'a AggregateRef,
    first_seq: f64,
    last_seq: f64,
}

/// A batch's fields, inlined into an outcome and the pinned batch.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct BatchView<'a> {
    aggregate: &'a AggregateRef,
    first_seq: f64,
    last_seq: f64,
    count: u32,
    /// An atomic write: the fields above are its first leg; every leg here.
    #[serde(skip_serializing_if = "Option::is_none")]
    atomic: Option<Vec<LegView<'a>>>,
}

fn batch_view(b: &Batch) -> BatchView<'_> {
    BatchView {
        aggregate: &b.aggregate,
        first_seq: b.first_seq as f64,
        last_seq: b.last_seq as f64,
        count: b.count,
        atomic: (b.atomic.as_ref()).map(|legs| {
            (legs.iter())
                .map(|l| LegView {
                    aggregate: &l.aggregate,
                    first_seq: l.first_seq as f64,
                    last_seq: l.last_seq as f64,
                })
                .collect()
        }),
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct OutcomeView<'a> {
    at: f64,
    #[serde(flatten)]
    batch: BatchView<'a>,
    attempt: u32,
    outcome: &'static str,
    code: Option<u32>,
    message: &'a str,
    next_attempt_at: Option<f64>,
}

fn outcome_view(r: &OutcomeRecord) -> OutcomeView<'_> {
    OutcomeView {
        at: r.at as f64,
        batch: batch_view(&r.batch),
        attempt: r.attempt,
        outcome: r.kind.as_str(),
        code: r.code,
        message: &r.message,
        next_attempt_at: r.next_attempt_at.map(|t| t as f64),
    }
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct PinnedView<'a> {
    #[serde(flatten)]
    batch: BatchView<'a>,
    attempts: Option<u32>,
    in_flight: bool,
    last_outcome: Option<OutcomeView<'a>>,
    next_attempt_at: Option<f64>,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct AggregateView<'a> {
    aggregate: &'a AggregateRef,
    pending: f64,
    parked: f64,
    first_seq: f64,
    last_seq: f64,
}

#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct DrainerView<'a> {
    context: &'static str,
    lock_holder: Option<&'a str>,
    waiting: Option<u32>,
    locks: bool,
}

/// A parked event: ids and sequence only, or (with payloads) the full `ParkedEvent`, which has
/// `json()` on its prototype and so is built by hand and passed through as it is.
#[derive(Serialize)]
#[serde(untagged, rename_all_fields = "camelCase")]
enum EventView<'a> {
    Ids { client_seq: f64, event_id: &'a Uuid },
    Full(#[serde(serialize_with = "serde_wasm_bindgen::preserve::serialize")] JsValue),
}

/// `InspectSnapshot`. `storage`, `persisted` and `estimate` are JS values already (the same as
/// `client.storage` and the platform's answers), passed through.
#[derive(Serialize)]
#[serde(rename_all = "camelCase")]
struct SnapshotView<'a, S: Serialize> {
    at: f64,
    client_id: String,
    database_name: String,
    role: &'static str,
    drainer: DrainerView<'a>,
    status: S,
    aggregates: Vec<AggregateView<'a>>,
    pinned: Option<PinnedView<'a>>,
    parked: Vec<ParkedView<'a, Vec<EventView<'a>>>>,
    outcomes: Vec<OutcomeView<'a>>,
    outcomes_kept: u32,
    #[serde(serialize_with = "serde_wasm_bindgen::preserve::serialize")]
    storage: JsValue,
    #[serde(serialize_with = "serde_wasm_bindgen::preserve::serialize")]
    persisted: JsValue,
    #[serde(serialize_with = "serde_wasm_bindgen::preserve::serialize")]
    estimate: JsValue,
}

async fn to_js(client: &SyncClient, i: &Inspection, payloads: bool) -> JsValue {
    let s = &i.snapshot;
    let view = SnapshotView {
        at: js_sys::Date::now(),
        client_id: client.client_id(),
        database_name: client.database_name(),
        role: i.status.role.as_str(),
        drainer: DrainerView {
            context: i.drainer.context,
            lock_holder: i.drainer.holder.as_deref(),
            waiting: i.drainer.waiting,
            locks: i.drainer.locks,
        },
        status: status_view(&i.status),
        aggregates: (s.aggregates.iter())
            .map(|a| AggregateView {
                aggregate: &a.aggregate,
                pending: a.pending as f64,
                parked: a.parked as f64,
                first_seq: a.first_seq as f64,
                last_seq: a.last_seq as f64,
            })
            .collect(),
        pinned: s.pinned.as_ref().map(|p| PinnedView {
            batch: batch_view(&p.batch),
            attempts: p.attempts,
            in_flight: p.in_flight,
            last_outcome: p.last.as_ref().map(outcome_view),
            next_attempt_at: p.next_attempt_at.map(|t| t as f64),
        }),
        parked: (s.parked.iter())
            .map(|p| {
                let events = (p.events.iter())
                    .map(|e| match payloads {
                        true => EventView::Full(parked_event(e, &p.record)),
                        false => EventView::Ids {
                            client_seq: e.client_seq as f64,
                            event_id: &e.event_id,
                        },
                    })
                    .collect();
                parked_view(&p.record, Some(events))
            })
            .collect(),
        outcomes: s.outcomes.iter().map(outcome_view).collect(),
        outcomes_kept: OUTCOMES_KEPT as u32,
        storage: client.storage(),
        persisted: super::storage::persisted().await,
        estimate: super::storage::estimate().await,
    };
    js::to_js(&view)
}

#[wasm_bindgen]
impl SyncClient {
    /// A snapshot for debugging and support: per aggregate the pending and parked counts, the
    /// pinned batch (range, attempts, last outcome and code, next attempt time), parked
    /// aggregates with their events and reasons, which context drains, and this context's last
    /// outcomes. Payloads only with `{ payloads: true }`.
    #[wasm_bindgen(unchecked_return_type = "Promise<InspectSnapshot>")]
    pub fn inspect(
        &self,
        #[wasm_bindgen(unchecked_optional_param_type = "InspectOptions")] options: Option<JsValue>,
    ) -> Promise {
        let payloads = match options.filter(|o| !o.is_undefined() && !o.is_null()) {
            None => Ok(false),
            // A getter that throws is refused, not read as "no payloads".
            Some(o) if o.is_object() => {
                match super::input::read(&o, "payloads", ErrorCode::InvalidOptions) {
                    Err(e) => Err(e),
                    Ok(v) if v.is_undefined() => Ok(false),
                    Ok(v) => v.as_bool().ok_or_else(|| {
                        ClientError::new(
                            ErrorCode::InvalidOptions,
                            "inspect: `payloads` must be a boolean",
                        )
                    }),
                }
            }
            Some(_) => Err(ClientError::new(
                ErrorCode::InvalidOptions,
                "inspect: options must be an object",
            )),
        };
        let client = self.clone();
        promise(async move {
            let payloads = payloads?;
            let runtime = client.runtime();
            if let Some(lost) = runtime.storage.lost() {
                return Err(super::client::storage_lost(lost.pending));
            }
            if runtime.hub.is_closed() {
                return Err(ClientError::closed());
            }
            let inspection = inspect(&runtime).await?;
            Ok(to_js(&client, &inspection, payloads).await)
        })
    }
}
