//! `client.appendAtomic(writes)`: events for several aggregates that land all together or not
//! at all (a transfer: debit one account, credit another).
//!
//! Parsed and checked synchronously, whole, before anything is stored: any bad write refuses
//! the call with a typed error naming it (`writes[i]: …`, `write: i`) and nothing is written.
//! Stored in one IndexedDB transaction, in call order with every other append
//! ([`crate::engine::group`]); sent as one request, whole, once it heads each of its aggregates;
//! settled, parked and discarded whole (`docs/client.md`, "Atomic writes").

use js_sys::{Array, Promise};
use wasm_bindgen::prelude::*;

use super::budget::{Budget, Parsing};
use super::client::{SyncClient, promise, storage_lost};
use super::errors::ClientError;
use super::input::request_fits;
use super::{input, output};
use crate::browser::js;
use crate::engine::append::{self, Charge};
use crate::engine::errors::ErrorCode;
use crate::engine::group::AtomicWrites;
use crate::engine::model::NewEvent;
use celeriant_sync_protocol::validate::Limits;

/// The keys of one write.
const WRITE_KEYS: [&str; 3] = ["aggregate", "events", "expectedVersion"];

/// Error of the writes as a whole.
fn bad(message: String) -> ClientError {
    ClientError::new(ErrorCode::InvalidWrites, message)
}

/// `error`, said of `writes[index]`.
fn of_write(mut error: ClientError, index: usize) -> ClientError {
    error.message = format!("writes[{index}]: {}", error.message);
    error.with("write", index as u32)
}

/// Parses and checks the writes, all of them, before anything is stored.
fn parse(
    value: &JsValue,
    limits: &Limits,
    charge: &mut Charge,
    now: u64,
) -> Result<AtomicWrites, ClientError> {
    let (array, n) = match js::own_array(value, limits.max_aggregates.saturating_add(1)) {
        js::Own::Got(got) => got,
        js::Own::Not | js::Own::Threw => {
            return Err(bad(
                "appendAtomic's writes must be an array of { aggregate, events, expectedVersion? }"
                    .into(),
            ));
        }
    };
    if n < 2 || n > limits.max_aggregates {
        return Err(bad(format!(
            "{n} writes: an atomic write names 2 to {} aggregates (one alone is `append`)",
            limits.max_aggregates
        )));
    }
    let mut writes: AtomicWrites = Vec::with_capacity(n);
    for (i, write) in array.iter().enumerate() {
        // The whole write is one request: each write's events get what the earlier left.
        let used: usize = writes.iter().flat_map(|w| &w.1).map(|e| e.data.len()).sum();
        let budget = Budget {
            spent: used,
            ..Budget::request("an atomic write, sent as one request,", limits)
        };
        let parsed = parse_one(&write, limits, budget, charge, now).map_err(|e| of_write(e, i))?;
        if let Some(j) = writes.iter().position(|w| w.0 == parsed.0) {
            return Err(of_write(
                bad(format!(
                    "names the aggregate of writes[{j}]: each aggregate at most once"
                )),
                i,
            ));
        }
        writes.push(parsed);
    }
    fits(&writes, limits)?;
    Ok(writes)
}

/// One `{ aggregate, events, expectedVersion? }`.
fn parse_one(
    write: &JsValue,
    limits: &Limits,
    budget: Budget,
    charge: &mut Charge,
    now: u64,
) -> Result<
    (
        crate::engine::model::AggregateRef,
        Vec<NewEvent>,
        Option<u64>,
    ),
    ClientError,
> {
    if !write.is_object() || js::is_array(write) != Some(false) {
        return Err(bad(
            "must be an object { aggregate, events, expectedVersion? }".into(),
        ));
    }
    if let Some(message) = input::unknown_field(write, &WRITE_KEYS) {
        return Err(bad(message));
    }
    let aggregate = input::aggregate(&input::read(
        write,
        "aggregate",
        ErrorCode::InvalidAggregate,
    )?)?;
    let events = input::events(
        &input::read(write, "events", ErrorCode::InvalidEvents)?,
        limits,
        budget,
        charge,
        now,
    )?;
    append::check(&events, limits)?;
    let expected = input::expected_version(&input::read(
        write,
        "expectedVersion",
        ErrorCode::InvalidOptions,
    )?)?;
    Ok((aggregate, events, expected))
}

/// The whole write is one request: its events and data must fit one.
fn fits(writes: &AtomicWrites, limits: &Limits) -> Result<(), ClientError> {
    let events: usize = writes.iter().map(|w| w.1.len()).sum();
    if events > limits.max_events {
        return Err(ClientError::new(
            ErrorCode::TooManyEvents,
            format!(
                "an atomic write is sent as one request: {events} events in all, at most {} \
                 are accepted",
                limits.max_events
            ),
        ));
    }
    let mut data = 0;
    for (_, events, _) in writes {
        data += events.iter().map(|e| e.data.len()).sum::<usize>();
    }
    request_fits("an atomic write", data, limits)
}

#[wasm_bindgen]
impl SyncClient {
    /// Stores events for several aggregates (2 to 16, each at most once), each write with its
    /// aggregate's next sequences and an optional `expectedVersion`, in one IndexedDB
    /// transaction; resolves once it committed with the receipts per write. They are sent as
    /// one request and land all together or not at all, after every earlier event of each
    /// aggregate and before every later one; a rejection parks every aggregate of the write
    /// (discarding one discards the whole write). Bad input rejects with a typed error naming
    /// the write (`write`) and stores nothing.
    #[wasm_bindgen(js_name = appendAtomic, unchecked_return_type = "Promise<Receipt[][]>")]
    pub fn append_atomic(
        &self,
        #[wasm_bindgen(unchecked_param_type = "AtomicWrite[]")] writes: JsValue,
    ) -> Promise {
        let inner = self.inner();
        let mut charge = inner.held.charge();
        // Parsed now: the caller's objects are read before any await.
        let parsed = inner.check_open().and_then(|()| {
            // Refused as every other refusal of this call: naming a write (the first).
            let _parsing = Parsing::enter().map_err(|e| of_write(e, 0))?;
            parse(
                &writes,
                &inner.limits,
                &mut charge,
                js_sys::Date::now() as u64,
            )
        });
        // Given back when the write's future ends, at once when the call is refused here.
        let charge = parsed.is_ok().then_some(charge);
        // With encryption, the place in each aggregate's line is taken now, in call order.
        let turns: Vec<_> = match (&parsed, &inner.encryption) {
            (Ok(writes), Some(_)) => writes.iter().map(|w| inner.order.take(w.0)).collect(),
            _ => Vec::new(),
        };
        promise(async move {
            let _charge = charge;
            let mut writes = parsed?;
            let mut held = Vec::with_capacity(turns.len());
            for turn in turns {
                held.push(turn.wait().await);
            }
            if let Some(encryption) = &inner.encryption {
                for (aggregate, events, _) in writes.iter_mut() {
                    encryption.encrypt_all(aggregate, events).await?;
                }
                for (i, (_, events, _)) in writes.iter().enumerate() {
                    append::check(events, &inner.limits)
                        .map_err(|e| of_write(ClientError::from(e), i))?;
                }
                fits(&writes, &inner.limits)?;
            }
            let mut stored = std::pin::pin!(inner.runtime.append_atomic(writes));
            let first = futures_util::poll!(stored.as_mut());
            drop(held);
            let receipts = match first {
                std::task::Poll::Ready(receipts) => receipts,
                std::task::Poll::Pending => stored.await,
            };
            if let Some(lost) = inner.runtime.storage.lost() {
                return Err(storage_lost(lost.pending));
            }
            let receipts = receipts?;
            let out = Array::new();
            for r in &receipts {
                out.push(&output::receipts(r));
            }
            Ok(out.into())
        })
    }
}
