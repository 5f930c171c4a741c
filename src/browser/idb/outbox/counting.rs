//! Questions about what is stored, each one read-only transaction: how many events are pending
//! (from keys alone), which aggregates have pending events, the lowest pending sequence of
//! some aggregates (for `flush`), and where one event stands.

use js_sys::Array;
use uuid::Uuid;
use wasm_bindgen::JsCast;
use web_sys::{IdbKeyRange, IdbObjectStore};

use super::super::db::{Js, stores};
use super::super::keys::{Agg, after_aggregate, aggregate_of, seq_of, span_of, uuid_js};
use super::super::request::{events_above, result};
use super::super::schema::{COUNTERS, DISCARDED, IDS, LANDED, OUTBOX, PARKED};
use super::super::watermarks::{Marks, mark_of};
use super::codecs::parked_of;
use super::cut::all_landed;
use super::{IdbOutbox, get, landed, store};
use crate::browser::js;
use crate::engine::model::AggregateRef;
use crate::engine::outbox::{Counted, EventState, StoreError};

/// Keys read per step when counting.
const KEY_CHUNK: u32 = 10_000;

/// How many events the outbox's records hold, from their keys alone, a chunk of keys at a time.
async fn count_all(events: &IdbObjectStore) -> Result<u64, StoreError> {
    let mut range = IdbKeyRange::lower_bound(&Array::new()).js()?;
    let mut n = 0;
    loop {
        let keys = result(events.get_all_keys_with_key_and_limit(&range, KEY_CHUNK))
            .await
            .js()?;
        n += events_above(&keys, 0.0) as u64;
        let keys: &Array = keys.unchecked_ref();
        if keys.length() < KEY_CHUNK {
            return Ok(n);
        }
        range = IdbKeyRange::lower_bound_with_open(&keys.get(KEY_CHUNK - 1), true).js()?;
    }
}

/// How many events the outbox holds above the watermarks `marks` (every stored event when
/// `None`): every key counted, less what the records of aggregates with a watermark hold at or
/// below it (few aggregates: the requests go out together).
pub(super) async fn count_events(
    events: &IdbObjectStore,
    marks: Option<&Marks>,
) -> Result<u64, StoreError> {
    let total = count_all(events).await?;
    // Issued together, awaited in the order issued: a request's `success` handler is attached
    // when it is awaited, which must come before its event (`idb::request`).
    let marks = marks.map(Vec::as_slice).unwrap_or_default();
    let mut landed = Vec::with_capacity(marks.len());
    for (aggregate, through) in marks {
        let a = Agg::new(aggregate);
        let whole = events.get_all_keys_with_key(&a.seqs(0.0, true, *through as f64)?.into());
        let tail = events.get_key(&a.above(*through)?.into());
        landed.push((whole, tail, *through));
    }
    let mut stored_landed = 0;
    for (whole, tail, through) in landed {
        stored_landed += events_above(&result(whole).await.js()?, 0.0) as u64;
        let tail = result(tail).await.js()?;
        if !tail.is_undefined() {
            let (first, _) = span_of(&tail)?;
            stored_landed += (through + 1).saturating_sub(first);
        }
    }
    Ok(total.saturating_sub(stored_landed))
}

/// [`Outbox::counts`](crate::engine::outbox::Outbox::counts).
pub(super) async fn counts(this: &IdbOutbox) -> Result<Counted, StoreError> {
    this.db
        .read(&stores(&[OUTBOX, LANDED, PARKED]), async |tx| {
            let before = this.db.begun();
            let parked = parked_of(result(store(tx, PARKED)?.get_all()).await.js()?)?;
            // From keys alone: each holds its first and last sequence.
            let marks = all_landed(&store(tx, LANDED)?).await?;
            Ok(Counted {
                events: count_events(&store(tx, OUTBOX)?, Some(&marks)).await?,
                parked,
                before,
            })
        })
        .await
}

/// [`Outbox::pending_aggregates`](crate::engine::outbox::Outbox::pending_aggregates).
pub(super) async fn pending_aggregates(
    this: &IdbOutbox,
) -> Result<Vec<(AggregateRef, u64)>, StoreError> {
    this.db
        .read(&stores(&[OUTBOX, LANDED, COUNTERS]), async |tx| {
            let events = store(tx, OUTBOX)?;
            let counters = store(tx, COUNTERS)?;
            let marks = all_landed(&store(tx, LANDED)?).await?;
            // Aggregate by aggregate, the question about one and the search for the next
            // in flight together (awaited in the order issued, `idb::request`).
            let mut pending = Vec::new();
            let everything = IdbKeyRange::lower_bound(&Array::new()).js()?;
            let mut next = events.get_key(&everything.into());
            loop {
                let key = result(next).await.js()?;
                if key.is_undefined() {
                    break;
                }
                let a = Agg::new(&aggregate_of(&key)?);
                let Some(after) = after_aggregate(Some(&a))? else {
                    break;
                };
                let above = events.get_key(&a.above(mark_of(&marks, &a.aggregate))?.into());
                next = events.get_key(&after.into());
                if !result(above).await.js()?.is_undefined() {
                    pending.push(a);
                }
            }
            let reads: Vec<_> = pending.iter().map(|a| counters.get(&a.key())).collect();
            let mut out = Vec::with_capacity(pending.len());
            for (a, read) in pending.into_iter().zip(reads) {
                let counter = result(read).await.js()?;
                out.push((a.aggregate, js::get_u64(&counter, "last").unwrap_or(0)));
            }
            Ok(out)
        })
        .await
}

/// [`Outbox::lowest_pending_of`](crate::engine::outbox::Outbox::lowest_pending_of).
pub(super) async fn lowest_pending_of(
    this: &IdbOutbox,
    aggregates: &[AggregateRef],
) -> Result<Vec<Option<u64>>, StoreError> {
    // `flush` asks after every settle. With the drain's copy of the watermarks, `landed`
    // stays out of the transaction, so the check never holds the next settle back
    // (`idb::watermarks`); every request is in flight at once.
    let (known, _) = this.watermarks.get();
    let names: &[&str] = if known.is_some() {
        &[OUTBOX]
    } else {
        &[OUTBOX, LANDED]
    };
    this.db
        .read(&stores(names), async |tx| {
            let events = store(tx, OUTBOX)?;
            let aggs: Vec<Agg> = aggregates.iter().map(Agg::new).collect();
            let marks: Vec<u64> = match &known {
                Some(marks) => aggs.iter().map(|a| mark_of(marks, &a.aggregate)).collect(),
                None => {
                    let watermarks = store(tx, LANDED)?;
                    let reads: Vec<_> = aggs.iter().map(|a| watermarks.get(&a.key())).collect();
                    let mut marks = Vec::with_capacity(reads.len());
                    for read in reads {
                        marks.push(result(read).await.js()?.as_f64().unwrap_or(0.0) as u64);
                    }
                    marks
                }
            };
            let mut firsts = Vec::with_capacity(aggs.len());
            for (a, through) in aggs.iter().zip(&marks) {
                firsts.push(events.get_key(&a.above(*through)?.into()));
            }
            let mut out = Vec::with_capacity(aggs.len());
            for (first, through) in firsts.into_iter().zip(marks) {
                let key = result(first).await.js()?;
                // The first record above the watermark may start at or below it.
                out.push(if key.is_undefined() {
                    None
                } else {
                    Some(span_of(&key)?.0.max(through + 1))
                });
            }
            Ok(out)
        })
        .await
}

/// [`Outbox::event_state`](crate::engine::outbox::Outbox::event_state).
pub(super) async fn event_state(
    this: &IdbOutbox,
    event_id: Uuid,
) -> Result<EventState, StoreError> {
    this.db
        .read(&stores(&[OUTBOX, IDS, DISCARDED, LANDED]), async |tx| {
            let id = uuid_js(&event_id);
            let key = get(&store(tx, IDS)?, &id).await?;
            if !key.is_undefined() {
                let aggregate = aggregate_of(&key)?;
                let client_seq = seq_of(&key)?;
                // The first record ending at or after the event holds it, if any does.
                let a = Agg::new(&aggregate);
                let holder = result(
                    store(tx, OUTBOX)?
                        .get_key(&a.seqs(client_seq as f64, true, f64::INFINITY)?.into()),
                )
                .await
                .js()?;
                let still = !holder.is_undefined() && span_of(&holder)?.0 <= client_seq;
                let through = landed(&store(tx, LANDED)?, &a).await?;
                if still && client_seq > through {
                    return Ok(EventState::Pending {
                        aggregate,
                        client_seq,
                    });
                }
            }
            // Gone (or landed, not yet pruned): landed, unless the app discarded it.
            let mark = get(&store(tx, DISCARDED)?, &id).await?;
            Ok(if mark.is_undefined() {
                EventState::Absent
            } else {
                EventState::Discarded
            })
        })
        .await
}
