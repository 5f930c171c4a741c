//! `client.decide(aggregate, decide, { maxAttempts })`: the read-decide-write loop for online
//! decisions that must hold against every other writer ("only if nothing changed").
//!
//! Each attempt: wait for this device's pending events on the aggregate to land (so the view
//! is the server's, not a guess over our own unsent writes), catch the aggregate up, call
//! `decide(view)`, append what it returns with `expectedVersion = view.version`, and wait
//! until that lands. A conflict (2003, confirmed by the drain's read-back, so never our own
//! write's lost answer) whose park holds exactly that attempt's events discards them and goes
//! again; a park flagged as possibly landed, or holding other events, rejects with `PARKED`
//! and stays for the app (discarding it and deciding again could write one decision twice); the
//! rejection carries the attempt (`receipts`, `eventIds`), and when the attempt is still pending
//! behind another append's park it says `mayHaveLanded: true` (it will be sent once that park is
//! discarded: the app tracks it, never decides again). After
//! `maxAttempts` conflicts it rejects with `CONTENTION`. Offline it rejects with `OFFLINE` at
//! once and stores nothing: a decision needs the server's current state.

use js_sys::{Array, Function, Object, Promise};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::{JsFuture, future_to_promise};

use super::client::SyncClient;
use super::errors::ClientError;
use super::input;
use crate::browser::convert::aggregate_to_js;
use crate::browser::js;
use crate::engine::drain;
use crate::engine::errors::ErrorCode;
use crate::engine::outbox::Outbox;

/// Attempts when `maxAttempts` is not given.
const DEFAULT_ATTEMPTS: u64 = 5;
/// The most attempts accepted.
const MAX_ATTEMPTS: u64 = 100;

/// `decide`'s options: `undefined`/`null`, or `{ maxAttempts }` (an integer 1..=100).
fn attempts(value: &JsValue) -> Result<u64, ClientError> {
    let bad = |message: String| ClientError::new(ErrorCode::InvalidOptions, message);
    if value.is_undefined() || value.is_null() {
        return Ok(DEFAULT_ATTEMPTS);
    }
    if !value.is_object() || js::is_array(value) != Some(false) {
        return Err(bad(
            "decide's options must be an object: { maxAttempts }".into()
        ));
    }
    let own = js::own_keys(value).ok_or_else(|| bad("decide's options cannot be read".into()))?;
    for key in own {
        if key != "maxAttempts" {
            return Err(bad(format!(
                "unknown decide option \"{key}\" (options: maxAttempts)"
            )));
        }
    }
    let given = super::input::read(value, "maxAttempts", ErrorCode::InvalidOptions)?;
    if given.is_undefined() {
        return Ok(DEFAULT_ATTEMPTS);
    }
    given
        .as_f64()
        .filter(|v| v.fract() == 0.0 && *v >= 1.0 && *v <= MAX_ATTEMPTS as f64)
        .map(|v| v as u64)
        .ok_or_else(|| {
            bad(format!(
                "maxAttempts must be an integer in 1..={MAX_ATTEMPTS}"
            ))
        })
}

/// What `decide` resolves with.
fn outcome(attempts: u64, version: u64, receipts: JsValue) -> JsValue {
    let o = Object::new();
    js::set(&o, "attempts", attempts as f64);
    js::set(&o, "version", version as f64);
    js::set(&o, "receipts", receipts);
    o.into()
}

/// What `decide` returned, read once: `None` when there is nothing to do (`undefined`, `null`,
/// an empty array), else what `append` is given. An array is copied (at most `max + 1`
/// elements, so a longer one is refused by its count without copying it all) and `append`
/// reads the copy: a Proxy or a `length` getter cannot answer the check one way and the
/// append another. Anything else is handed on as it is, for `append` to refuse.
fn decided(events: &JsValue, max: usize) -> Result<Option<JsValue>, ClientError> {
    if events.is_undefined() || events.is_null() {
        return Ok(None);
    }
    match js::own_array(events, max.saturating_add(1)) {
        js::Own::Got((_, 0)) => Ok(None),
        js::Own::Got((copy, len)) if len <= max => Ok(Some(copy.into())),
        js::Own::Got((_, len)) => Err(ClientError::new(
            ErrorCode::TooManyEvents,
            format!("{len} events in one append; at most {max} are accepted"),
        )),
        js::Own::Not => Ok(Some(events.clone())),
        js::Own::Threw => Err(ClientError::new(
            ErrorCode::InvalidEvents,
            "decide's result cannot be read (a revoked Proxy, a getter that threw?)",
        )),
    }
}

#[wasm_bindgen]
impl SyncClient {
    /// Decides online against the server's current state, and writes only if nothing changed
    /// meanwhile: catch up, `decide(view)` (events to append, or nothing to do), append them
    /// with `expectedVersion = view.version`, wait until landed; on a conflict discard that
    /// attempt and go again. Resolves with `{ attempts, version, receipts }` (`receipts` empty
    /// when there was nothing to do). Rejects with `OFFLINE` at once when offline (nothing
    /// stored), `CONTENTION` after `maxAttempts` (default 5) conflicts, `PARKED` if the write
    /// is rejected for another reason or waits behind another append's park (then with
    /// `mayHaveLanded: true` and the attempt's `eventIds`: track it, do not decide again), and
    /// with what `decide` threw if it threw.
    #[wasm_bindgen(unchecked_return_type = "Promise<DecideResult>")]
    pub fn decide(
        &self,
        #[wasm_bindgen(unchecked_param_type = "AggregateRef")] aggregate: JsValue,
        #[wasm_bindgen(
            unchecked_param_type = "(view: AggregateView) => EventInput[] | null | undefined | Promise<EventInput[] | null | undefined>"
        )]
        decide: Function,
        #[wasm_bindgen(unchecked_param_type = "DecideOptions | undefined")] options: JsValue,
    ) -> Promise {
        let client = self.clone();
        let runtime = self.runtime();
        let parsed = input::aggregate(&aggregate).and_then(|a| Ok((a, attempts(&options)?)));
        future_to_promise(async move {
            let (aggregate, max) = parsed?;
            let js_aggregate = aggregate_to_js(&aggregate);
            for attempt in 1..=max {
                if runtime.hub.is_closed() {
                    return Err(ClientError::closed().into());
                }
                if !client.online() {
                    return Err(offline().into());
                }
                // This device's own pending events on it land first: the view is the server's.
                drain::flush_aggregate(&*runtime.outbox, &runtime.hub, aggregate)
                    .await
                    .map_err(ClientError::from)?;
                let view = runtime.read(aggregate).await.map_err(ClientError::from)?;
                if js::get_bool(&view, "fromCache") == Some(true) {
                    return Err(offline().into());
                }
                let version = js::get_u64(&view, "version").unwrap_or(0);
                let mut events = decide.call1(&JsValue::NULL, &view)?;
                // Awaited through a promise of our own: a returned promise's `then` is called
                // by it, in a microtask, where a throw becomes a rejection; a plain value is
                // taken as it is.
                if events.is_instance_of::<Promise>() {
                    events = JsFuture::from(js::adopt(&events)).await?;
                }
                let Some(events) = decided(&events, client.inner().limits.max_events)? else {
                    return Ok(outcome(attempt, version, Array::new().into()));
                };
                let guard = Object::new();
                js::set(&guard, "expectedVersion", version as f64);
                let receipts =
                    JsFuture::from(client.append_with(js_aggregate.clone(), events, guard.into()))
                        .await?;
                let seqs = receipts.dyn_ref::<Array>().map(|r| {
                    let at = |i: u32| js::get_u64(&r.get(i), "clientSeq");
                    let id = js::get_string(&r.get(r.length().saturating_sub(1)), "eventId");
                    (at(0), at(r.length().saturating_sub(1)), id)
                });
                let Some((Some(first_seq), Some(last_seq), Some(last))) = seqs else {
                    return Ok(outcome(attempt, version, receipts));
                };
                let Ok(last) = uuid::Uuid::parse_str(&last) else {
                    return Ok(outcome(attempt, version, receipts));
                };
                match drain::when_synced_unblocked(&*runtime.outbox, &runtime.hub, last).await {
                    Ok(()) => return Ok(outcome(attempt, version + 1, receipts)),
                    // Someone else wrote first (proven by the read-back) and the park holds
                    // exactly this attempt: dropped, decide again. A park that may have landed,
                    // or holds other events, stays for the app: retrying could write twice.
                    Err(e) if e.is_proven_conflict_of(&aggregate, first_seq, last_seq) => {
                        let discarded = runtime
                            .outbox
                            .discard_parked(aggregate)
                            .await
                            .map_err(ClientError::from)?;
                        runtime.discarded(aggregate, discarded);
                    }
                    Err(e) => return Err(rejection(e, (first_seq, last_seq), &receipts).into()),
                }
            }
            Err(ClientError::new(
                ErrorCode::Contention,
                format!(
                    "the aggregate changed under each of {max} attempts (another writer won \
                     every time); nothing of them was written"
                ),
            )
            .with("attempts", max as f64)
            .into())
        })
    }
}

/// `decide`'s rejection when waiting for its attempt stopped on anything but a proven conflict
/// of exactly that attempt. It always carries the attempt (`receipts`, `eventIds`, `firstSeq`,
/// `lastSeq`) so the app can track it. When some of the attempt is not in the park that stopped
/// the wait (it waits behind another append's park, or the client closed, or storage failed), the
/// attempt is still pending and will be sent later: `PARKED`/the error with `mayHaveLanded: true`
/// and `pendingBehindPark`, never the other park's flag (a `false` there would invite deciding
/// again, and both decisions could land).
fn rejection(e: drain::FlushError, (first, last): (u64, u64), receipts: &JsValue) -> ClientError {
    let ids: Array = receipts
        .dyn_ref::<Array>()
        .map(|r| r.iter().map(|x| js::get(&x, "eventId")).collect())
        .unwrap_or_default();
    let error = match e {
        // The whole attempt is in the park: it describes the attempt (discarding it drops it).
        drain::FlushError::Parked {
            first_seq,
            last_seq,
            ..
        } if first_seq <= first && last <= last_seq => ClientError::from(e),
        drain::FlushError::Parked {
            aggregate,
            code,
            message,
            first_seq,
            last_seq,
            may_have_landed,
        } => ClientError::new(
            ErrorCode::Parked,
            format!(
                "this decision's write (sequences {first}..={last}) waits behind another parked \
                 append on aggregate {}/{} (sequences {first_seq}..={last_seq}, code {code}: \
                 {message}); it is still pending and will be sent once that park is discarded, \
                 so it may land: do not decide again, track it (whenSynced on its eventIds)",
                aggregate.type_id, aggregate.id
            ),
        )
        .with("aggregate", aggregate_to_js(&aggregate))
        .with("parkCode", code)
        .with("mayHaveLanded", true)
        .with("pendingBehindPark", true)
        .with("blockingParkMayHaveLanded", may_have_landed),
        drain::FlushError::Discarded(_) => ClientError::from(e),
        // Closed or storage failed: the attempt is stored and will still be sent.
        other => ClientError::from(other).with("mayHaveLanded", true),
    };
    error
        .with("receipts", receipts.clone())
        .with("eventIds", ids)
        .with("firstSeq", first as f64)
        .with("lastSeq", last as f64)
}

fn offline() -> ClientError {
    ClientError::new(
        ErrorCode::Offline,
        "decide needs the server's current state: the client is offline; nothing was stored",
    )
}
