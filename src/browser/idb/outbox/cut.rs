//! Batch cutting and reading: the next batch, round robin over aggregates above their landed
//! watermarks and within the request's budgets, read in growing chunks of records; and the
//! events of a pinned batch read back for a resend. An atomic write is cut whole, across its
//! aggregates, and only once it heads every one of them (rule 3 of `engine::outbox`), all in
//! the cut's one read transaction.

use js_sys::Array;
use wasm_bindgen::JsValue;
use web_sys::{IdbKeyRange, IdbObjectStore};

use super::super::db::{Js, stores};
use super::super::keys::{Agg, after_aggregate, aggregate_of, span_of};
use super::super::records::{events_of, span};
use super::super::request::result;
use super::super::schema::{LANDED, OUTBOX};
use super::super::watermarks::{Marks, mark_of};
use super::{IdbOutbox, landed, store};
use crate::browser::js;
use crate::engine::batch::{cut_at_guards, take_within};
use crate::engine::model::{AggregateRef, Batch, Legs, StoredEvent};
use crate::engine::outbox::{CutQuery, StoreError};

/// The first key in `range` (every array key when `None`).
pub(super) async fn first_key(
    events: &IdbObjectStore,
    range: Option<IdbKeyRange>,
) -> Result<Option<JsValue>, StoreError> {
    let range: JsValue = match range {
        Some(r) => r.into(),
        None => IdbKeyRange::lower_bound(&Array::new()).js()?.into(),
    };
    let key = result(events.get_key(&range)).await.js()?;
    Ok((!key.is_undefined()).then_some(key))
}

/// The records of `a` holding any event in `above < seq <= through` (`above < through`): those
/// ending in that range, and the first one ending after it if it starts inside it — two
/// requests, in flight together.
pub(super) async fn records_holding(
    events: &IdbObjectStore,
    a: &Agg,
    above: u64,
    through: u64,
) -> Result<Vec<JsValue>, StoreError> {
    let inner = events.get_all_with_key(&a.seqs(above as f64, false, through as f64)?.into());
    let tail = events.get(&a.above(through)?.into());
    let (inner, tail) = (result(inner).await.js()?, result(tail).await.js()?);
    let mut records = js::array(&inner);
    if !tail.is_undefined() && span(&tail)?.0 <= through {
        records.push(tail);
    }
    Ok(records)
}

/// The events of `a` in `above < seq <= through` (`above < through`).
pub(super) async fn events_between(
    events: &IdbObjectStore,
    a: &Agg,
    above: u64,
    through: u64,
) -> Result<Vec<StoredEvent>, StoreError> {
    let mut out = Vec::new();
    for value in records_holding(events, a, above, through).await? {
        events_of(a.aggregate, &value, above, through, usize::MAX, &mut out)?;
    }
    Ok(out)
}

/// The aggregate's lowest events above `above`: at most `max_events`, within `max_bytes` of
/// request body, at least one. Read in chunks of records — a few first, then as many as the
/// budgets and the sizes seen call for — so memory stays bounded with large payloads while a
/// long run of small events takes two requests.
async fn head(
    events: &IdbObjectStore,
    a: &Agg,
    above: u64,
    max_events: usize,
    max_bytes: usize,
) -> Result<Vec<StoredEvent>, StoreError> {
    let max_events = max_events.max(1);
    let mut out: Vec<StoredEvent> = Vec::new();
    let mut range = a.above(above)?;
    let mut chunk = 4u32;
    let mut records = 0usize;
    loop {
        let values = result(events.get_all_with_key_and_limit(&range, chunk))
            .await
            .js()?;
        let values = js::array(&values);
        let exhausted = values.len() < chunk as usize;
        records += values.len();
        for value in &values {
            // Events past `max_events` would be cut below: not even decoded.
            events_of(a.aggregate, value, above, u64::MAX, max_events, &mut out)?;
        }
        let fit = take_within(
            out.iter().map(StoredEvent::encoded_len),
            max_events,
            max_bytes,
        );
        if fit < out.len() {
            out.truncate(fit);
            return Ok(out);
        }
        let Some(last) = out.last() else {
            return Ok(out);
        };
        if exhausted || out.len() >= max_events {
            return Ok(out);
        }
        range = a.above(last.client_seq)?;
        let seen: usize = out.iter().map(StoredEvent::encoded_len).sum();
        // Saturating: `usize` is 32 bits here, and a budget may be "unlimited" (`usize::MAX`).
        let by_bytes = max_bytes.saturating_sub(seen).saturating_mul(records) / seen.max(1);
        let by_count = (max_events - out.len()).saturating_mul(records) / out.len();
        chunk = (by_bytes.min(by_count) + 1).clamp(1, 4096) as u32;
    }
}

/// Every landed watermark (the store holds one row per aggregate with landed events still
/// stored: few).
pub(super) async fn all_landed(landed: &IdbObjectStore) -> Result<Marks, StoreError> {
    let keys = js::array(&result(landed.get_all_keys()).await.js()?);
    let values = js::array(&result(landed.get_all()).await.js()?);
    keys.iter()
        .zip(values)
        .map(|(key, through)| Ok((aggregate_of(key)?, through.as_f64().unwrap_or(0.0) as u64)))
        .collect()
}

/// The next batch `query` asks for, above the watermarks `marks`: the lowest pending events
/// of the first aggregate, round robin from `query.after`, that has some and is not skipped.
async fn cut(
    events: &IdbObjectStore,
    marks: &Marks,
    query: &CutQuery<'_>,
) -> Result<Option<Vec<StoredEvent>>, StoreError> {
    let start = query.after.as_ref().map(Agg::new);
    // Round robin: aggregates after `after`, then from the start through `after`.
    for pass in 0..2 {
        let mut lower = if pass == 0 {
            after_aggregate(start.as_ref())?
        } else {
            None
        };
        while let Some(key) = first_key(events, lower).await? {
            let aggregate = aggregate_of(&key)?;
            if pass == 1 && query.after.is_some_and(|after| aggregate > after) {
                break; // visited in the first pass
            }
            let a = Agg::new(&aggregate);
            if query.skip.binary_search(&aggregate).is_err() {
                let above = above_of(marks, query, &aggregate);
                let mut found = head(events, &a, above, query.max_events, query.max_bytes).await?;
                if let Some(legs) = found.first().and_then(|e| e.atomic.clone()) {
                    // An atomic write: whole, once it heads every one of its aggregates;
                    // until then this aggregate is passed over.
                    if let Some(write) = atomic_ready(events, marks, query, &legs).await? {
                        return Ok(Some(write));
                    }
                    lower = after_aggregate(Some(&a))?;
                    continue;
                }
                if let Some(guard) = cut_at_guards(&mut found) {
                    // A conditional append: all of its events, whatever the limits.
                    if found.last().is_some_and(|e| e.client_seq < guard.last_seq) {
                        found = events_between(events, &a, above, guard.last_seq).await?;
                    }
                    cut_at_guards(&mut found);
                }
                if !found.is_empty() {
                    return Ok(Some(found));
                }
            }
            lower = after_aggregate(Some(&a))?;
        }
        if query.after.is_none() {
            break; // the first pass started at the beginning
        }
    }
    Ok(None)
}

/// The sequence above which `aggregate`'s events are pending for the cut `query`: its
/// watermark in `marks`, or `query.assume_landed`'s when that is higher.
fn above_of(marks: &Marks, query: &CutQuery<'_>, aggregate: &AggregateRef) -> u64 {
    let above = mark_of(marks, aggregate);
    match query.assume_landed {
        Some((x, through)) if x == *aggregate => above.max(through),
        _ => above,
    }
}

/// The atomic write `legs`, every leg's pending events in the order of its legs, if none of its
/// aggregates is skipped and each leg's first sequence is its aggregate's lowest pending one
/// (the lowest pending of every leg read together, then every leg's events).
async fn atomic_ready(
    events: &IdbObjectStore,
    marks: &Marks,
    query: &CutQuery<'_>,
    legs: &Legs,
) -> Result<Option<Vec<StoredEvent>>, StoreError> {
    if legs
        .iter()
        .any(|leg| query.skip.binary_search(&leg.aggregate).is_ok())
    {
        return Ok(None);
    }
    let mut lowest = Vec::with_capacity(legs.len());
    for leg in legs.iter() {
        let a = Agg::new(&leg.aggregate);
        let above = above_of(marks, query, &leg.aggregate);
        lowest.push((events.get_key(&a.above(above)?.into()), a, above));
    }
    let mut heads = Vec::with_capacity(lowest.len());
    for (key, a, above) in lowest {
        let key = result(key).await.js()?;
        // The first record above the watermark may start at or below it.
        let first = if key.is_undefined() {
            None
        } else {
            Some(span_of(&key)?.0.max(above + 1))
        };
        heads.push((first, a));
    }
    let mut out = Vec::new();
    for (leg, (first, a)) in legs.iter().zip(heads) {
        if first != Some(leg.first_seq) {
            return Ok(None);
        }
        if leg.last_seq >= leg.first_seq {
            out.extend(events_between(events, &a, leg.first_seq - 1, leg.last_seq).await?);
        }
    }
    Ok(Some(out))
}

/// [`Outbox::next_batch`](crate::engine::outbox::Outbox::next_batch).
pub(super) async fn next_batch(
    this: &IdbOutbox,
    query: CutQuery<'_>,
) -> Result<Option<Vec<StoredEvent>>, StoreError> {
    // With the watermarks known, `landed` stays out of the transaction (`idb::watermarks`).
    let (known, generation) = this.watermarks.get();
    let names: &[&str] = if known.is_some() {
        &[OUTBOX]
    } else {
        &[OUTBOX, LANDED]
    };
    let (found, read) = this
        .db
        .read(&stores(names), async |tx| {
            let events = store(tx, OUTBOX)?;
            let (marks, read) = match known {
                Some(marks) => (marks, false),
                None => (all_landed(&store(tx, LANDED)?).await?, true),
            };
            let found = cut(&events, &marks, &query).await?;
            Ok((found, read.then_some(marks)))
        })
        .await?;
    if let Some(marks) = read {
        this.watermarks.loaded(generation, marks);
    }
    Ok(found)
}

/// [`Outbox::read`](crate::engine::outbox::Outbox::read): an atomic batch's every leg, in the
/// order of its legs, in one transaction.
pub(super) async fn read(this: &IdbOutbox, batch: &Batch) -> Result<Vec<StoredEvent>, StoreError> {
    this.db
        .read(&stores(&[OUTBOX, LANDED]), async |tx| {
            let (events, watermarks) = (store(tx, OUTBOX)?, store(tx, LANDED)?);
            let mut out = Vec::new();
            for (aggregate, first, last) in batch.spans() {
                let a = Agg::new(&aggregate);
                let above = landed(&watermarks, &a).await?.max(first.saturating_sub(1));
                if above < last {
                    out.extend(events_between(&events, &a, above, last).await?);
                }
            }
            Ok(out)
        })
        .await
}
