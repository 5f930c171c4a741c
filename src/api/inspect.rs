//! `client.inspect()`: a snapshot of the outbox and its drain for debugging and support, as a
//! plain object (shapes in the TypeScript section below). Payloads only with
//! `{ payloads: true }`.

use js_sys::{Array, Object, Promise};
use wasm_bindgen::prelude::*;

use super::client::{SyncClient, promise};
use super::errors::ClientError;
use super::output::parked_event;
use crate::browser::convert::{aggregate_to_js, status_to_js};
use crate::browser::idb::keys::uuid_js;
use crate::browser::inspect::{Inspection, inspect};
use crate::browser::js;
use crate::engine::errors::ErrorCode;
use crate::engine::inspect::{OUTCOMES_KEPT, OutcomeRecord};
use crate::engine::model::Batch;

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

fn batch_fields(o: &Object, b: &Batch) {
    js::set(o, "aggregate", aggregate_to_js(&b.aggregate));
    js::set(o, "firstSeq", b.first_seq as f64);
    js::set(o, "lastSeq", b.last_seq as f64);
    js::set(o, "count", b.count);
    if let Some(legs) = &b.atomic {
        // An atomic write: the fields above are its first leg; every leg here.
        let all = Array::new();
        for l in legs.iter() {
            let x = Object::new();
            js::set(&x, "aggregate", aggregate_to_js(&l.aggregate));
            js::set(&x, "firstSeq", l.first_seq as f64);
            js::set(&x, "lastSeq", l.last_seq as f64);
            all.push(&x);
        }
        js::set(o, "atomic", all);
    }
}

fn time(t: Option<u64>) -> JsValue {
    t.map_or(JsValue::NULL, |t| JsValue::from(t as f64))
}

fn outcome_to_js(r: &OutcomeRecord) -> JsValue {
    let o = Object::new();
    js::set(&o, "at", r.at as f64);
    batch_fields(&o, &r.batch);
    js::set(&o, "attempt", r.attempt);
    js::set(&o, "outcome", r.kind.as_str());
    js::set(&o, "code", r.code.map_or(JsValue::NULL, JsValue::from));
    js::set(&o, "message", r.message.as_str());
    js::set(&o, "nextAttemptAt", time(r.next_attempt_at));
    o.into()
}

fn to_js(client: &SyncClient, i: &Inspection, payloads: bool) -> JsValue {
    let o = Object::new();
    js::set(&o, "at", js_sys::Date::now());
    js::set(&o, "clientId", client.client_id());
    js::set(&o, "databaseName", client.database_name());
    js::set(&o, "role", i.status.role.as_str());
    let d = Object::new();
    js::set(&d, "context", i.drainer.context);
    js::set(
        &d,
        "lockHolder",
        i.drainer
            .holder
            .as_deref()
            .map_or(JsValue::NULL, JsValue::from_str),
    );
    js::set(
        &d,
        "waiting",
        i.drainer.waiting.map_or(JsValue::NULL, JsValue::from),
    );
    js::set(&d, "locks", i.drainer.locks);
    js::set(&o, "drainer", d);
    js::set(&o, "status", status_to_js(&i.status));
    let s = &i.snapshot;
    let aggregates: Array = s
        .aggregates
        .iter()
        .map(|a| {
            let x = Object::new();
            js::set(&x, "aggregate", aggregate_to_js(&a.aggregate));
            js::set(&x, "pending", a.pending as f64);
            js::set(&x, "parked", a.parked as f64);
            js::set(&x, "firstSeq", a.first_seq as f64);
            js::set(&x, "lastSeq", a.last_seq as f64);
            JsValue::from(x)
        })
        .collect();
    js::set(&o, "aggregates", aggregates);
    let pinned = match &s.pinned {
        None => JsValue::NULL,
        Some(p) => {
            let x = Object::new();
            batch_fields(&x, &p.batch);
            js::set(
                &x,
                "attempts",
                p.attempts.map_or(JsValue::NULL, JsValue::from),
            );
            js::set(&x, "inFlight", p.in_flight);
            js::set(
                &x,
                "lastOutcome",
                p.last.as_ref().map_or(JsValue::NULL, outcome_to_js),
            );
            js::set(&x, "nextAttemptAt", time(p.next_attempt_at));
            x.into()
        }
    };
    js::set(&o, "pinned", pinned);
    let parked: Array = s
        .parked
        .iter()
        .map(|p| {
            let x: Object = crate::browser::convert::parked_to_js(&p.record).into();
            let events: Array = p
                .events
                .iter()
                .map(|e| {
                    if payloads {
                        parked_event(e, &p.record)
                    } else {
                        let ev = Object::new();
                        js::set(&ev, "clientSeq", e.client_seq as f64);
                        js::set(&ev, "eventId", uuid_js(&e.event_id));
                        ev.into()
                    }
                })
                .collect();
            js::set(&x, "events", events);
            JsValue::from(x)
        })
        .collect();
    js::set(&o, "parked", parked);
    let outcomes: Array = s.outcomes.iter().map(outcome_to_js).collect();
    js::set(&o, "outcomes", outcomes);
    js::set(&o, "outcomesKept", OUTCOMES_KEPT as u32);
    o.into()
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
            Some(o) if o.is_object() => match js::get(&o, "payloads") {
                v if v.is_undefined() => Ok(false),
                v => v.as_bool().ok_or_else(|| {
                    ClientError::new(
                        ErrorCode::InvalidOptions,
                        "inspect: `payloads` must be a boolean",
                    )
                }),
            },
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
            let snapshot = to_js(&client, &inspection, payloads);
            let o: &Object = snapshot.unchecked_ref();
            js::set(o, "storage", client.storage());
            js::set(o, "persisted", super::storage::persisted().await);
            js::set(o, "estimate", super::storage::estimate().await);
            Ok(snapshot)
        })
    }
}
