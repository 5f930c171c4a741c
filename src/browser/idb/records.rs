//! How pending events are laid out in `outbox` records: one record per *run* of consecutive
//! events of one aggregate that were stored together, not one per event.
//!
//! Reading a record back costs Chromium about 30 µs whatever it holds (its structured clone and
//! the hop from its storage backend), so with one record per event a drain spent more time
//! reading its backlog than posting it (docs/benchmarks.md). An append of several events, and a
//! group commit of many appends to one aggregate, are therefore stored as runs of up to
//! [`RUN_MAX_EVENTS`] events and [`RUN_MAX_BYTES`] of wire encoding:
//!
//! | events | key | value |
//! |---|---|---|
//! | one | `[t, a, seq]` | `{ s, e, w }`: sequence, event id, wire encoding (as since version 2) |
//! | `n` ≥ 2 | `[t, a, last, n]` | `{ s, e: [ids], w: [wires] }`: `s` is the first sequence, `last = s + n − 1` |
//!
//! The events of a conditional append carry its guard as `g: [expectedVersion, first, last]` in
//! every record holding them; a run never mixes events of different guards (nor guarded with
//! unguarded ones), so the guard is one field per record. Such a record keeps its wire
//! encoding(s) under `gw`, not `w` (schema version 5): a release before conditional appends
//! ignores `g` and would send the events without their guard, or cut them together with
//! others; finding no `w`, it takes the record as corrupt and sends nothing instead. Readers
//! of this release read either field.
//!
//! The events of an atomic write (`appendAtomic`) carry every leg of it as
//! `a: [[typeId, id, first, last], …]` (in the write's order, [`super::legs`]) in every record
//! holding them, and keep their wire encoding(s) under `aw` (schema version 6), whether or not
//! the leg also carries a guard `g`: a release before atomic writes ignores `a`, and would cut
//! a leg into a batch of its own and send it alone; finding neither `w` nor `gw`, it takes the
//! record as corrupt and sends nothing. A run holds one leg's events only (an aggregate is in a
//! write once), so such a record is never merged with its neighbours.
//!
//! Keying a run by its *last* sequence keeps every "events above x" read one key range (the
//! records whose last event is above x; the first may start at or below x and is filtered), and
//! `n` in the key lets counts and prunes work from keys alone. A batch may end inside a run;
//! the next batch starts inside it. Records never change, except that a prune or a discard
//! that covers part of a run rewrites it as the run of what is left ([`put_run`]).

use js_sys::Array;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::IdbObjectStore;

use super::db::Js;
use super::keys::{Agg, parse_uuid, uuid_js};
use super::legs::{leg_of, legs_js, legs_of};
use super::request::record;
use crate::browser::js;
use crate::engine::batch::take_within;
use crate::engine::model::{AggregateRef, Guard, Legs, StoredEvent};
use crate::engine::outbox::StoreError;

/// The field a guarded record keeps its wire encoding(s) under, in place of `w`.
const GUARDED_WIRES: &str = "gw";
/// The field an atomic write's record keeps its wire encoding(s) under, in place of `w` (and
/// of `gw` on a guarded leg).
const ATOMIC_WIRES: &str = "aw";

/// Most events in one record.
pub(super) const RUN_MAX_EVENTS: usize = 256;
/// Most wire bytes in one record: below the 64 KiB above which Chromium moves a value out to a
/// blob file (slower to write and to read). A larger event is a run of its own.
pub(super) const RUN_MAX_BYTES: usize = 60 * 1024;

/// Stores `events` (consecutive events of `a`, in order) as as few records as the limits
/// allow.
pub(super) fn add_runs(
    store: &IdbObjectStore,
    a: &Agg,
    events: &[StoredEvent],
) -> Result<(), StoreError> {
    let mut rest = events;
    while !rest.is_empty() {
        // A run holds events of one guard and one atomic write only.
        let same = rest
            .iter()
            .position(|e| e.guard != rest[0].guard || e.atomic != rest[0].atomic)
            .unwrap_or(rest.len());
        let n = take_within(
            rest[..same].iter().map(StoredEvent::encoded_len),
            RUN_MAX_EVENTS,
            RUN_MAX_BYTES,
        );
        let (run, after) = rest.split_at(n);
        put_run(store, a, run, false)?;
        rest = after;
    }
    Ok(())
}

/// Writes one run (consecutive events of `a`, in order, at least one) as one record: `add`, or
/// `put` when `replace` (a rewrite after a partial prune or discard).
pub(super) fn put_run(
    store: &IdbObjectStore,
    a: &Agg,
    run: &[StoredEvent],
    replace: bool,
) -> Result<(), StoreError> {
    let (Some(first), Some(last)) = (run.first(), run.last()) else {
        return Ok(());
    };
    let (key, value) = if run.len() == 1 {
        let id = uuid_js(&first.event_id);
        (
            a.event(first.client_seq as f64),
            record(
                first.client_seq as f64,
                &id,
                &JsValue::from_str(&first.wire),
            ),
        )
    } else {
        let (ids, wires) = (Array::new(), Array::new());
        for e in run {
            ids.push(&uuid_js(&e.event_id));
            wires.push(&JsValue::from_str(&e.wire));
        }
        (
            a.run(last.client_seq, run.len()),
            record(first.client_seq as f64, &ids, &wires),
        )
    };
    let object = value.unchecked_ref::<js_sys::Object>();
    if let Some(g) = first.guard {
        let parts = Array::of3(
            &(g.expected_version as f64).into(),
            &(g.first_seq as f64).into(),
            &(g.last_seq as f64).into(),
        );
        js::set(object, "g", parts);
    }
    // Hidden from releases that do not know guards or atomic writes (the module's header).
    let hidden = match (&first.atomic, first.guard) {
        (Some(legs), _) => {
            js::set(object, "a", legs_js(legs));
            Some(ATOMIC_WIRES)
        }
        (None, Some(_)) => Some(GUARDED_WIRES),
        (None, None) => None,
    };
    if let Some(field) = hidden {
        js::set(object, field, js::get(&value, "w"));
        js_sys::Reflect::delete_property(object, &JsValue::from_str("w")).js()?;
    }
    if replace {
        store.put_with_key(&value, &key).js()?;
    } else {
        store.add_with_key(&value, &key).js()?;
    }
    Ok(())
}

/// The key a record value is stored under (the inverse of [`put_run`]).
pub(super) fn key_of(a: &Agg, value: &JsValue) -> Result<JsValue, StoreError> {
    let (first, last) = span(value)?;
    Ok(if js::get(value, "e").is_string() {
        a.event(first as f64)
    } else {
        a.run(last, (last + 1 - first) as usize)
    })
}

/// The first and last sequence a record value holds.
pub(super) fn span(value: &JsValue) -> Result<(u64, u64), StoreError> {
    let first = js::get_u64(value, "s")
        .filter(|s| *s >= 1)
        .ok_or_else(bad)?;
    let ids = js::get(value, "e");
    let n = if ids.is_string() {
        1
    } else {
        ids.dyn_ref::<Array>().ok_or_else(bad)?.length() as u64
    };
    if n == 0 {
        return Err(bad());
    }
    Ok((first, first + n - 1))
}

fn bad() -> StoreError {
    StoreError::Corrupt("an outbox record lacks s, e or w".into())
}

/// Appends to `out` the events of record `value` (of `aggregate`) whose sequence is in
/// `above < seq <= through`, until `out` holds `max`.
pub(super) fn events_of(
    aggregate: AggregateRef,
    value: &JsValue,
    above: u64,
    through: u64,
    max: usize,
    out: &mut Vec<StoredEvent>,
) -> Result<(), StoreError> {
    let (first, last) = span(value)?;
    let wires = [GUARDED_WIRES, ATOMIC_WIRES]
        .into_iter()
        .fold(js::get(value, "w"), |w, field| {
            if w.is_undefined() {
                js::get(value, field)
            } else {
                w
            }
        });
    let ids = js::get(value, "e");
    let guard = guard_of(value)?;
    // Decoded once per record: its events share one list.
    let atomic = atomic_of(aggregate, value, first, last)?;
    if ids.is_string() {
        if first > above && first <= through && out.len() < max {
            out.push(StoredEvent {
                aggregate,
                client_seq: first,
                event_id: parse_uuid(&ids)?,
                wire: wires.as_string().ok_or_else(bad)?,
                guard,
                atomic,
            });
        }
        return Ok(());
    }
    let (ids, wires) = (
        Array::from(&ids),
        wires.dyn_into::<Array>().map_err(|_| bad())?,
    );
    let from = above.max(first - 1) + 1;
    let room = max.saturating_sub(out.len()) as u64;
    for seq in from..=last
        .min(through)
        .min(from.saturating_add(room).saturating_sub(1))
    {
        let i = (seq - first) as u32;
        out.push(StoredEvent {
            aggregate,
            client_seq: seq,
            event_id: parse_uuid(&ids.get(i))?,
            wire: wires.get(i).as_string().ok_or_else(bad)?,
            guard,
            atomic: atomic.clone(),
        });
    }
    Ok(())
}

/// The guard a record's events carry (`g`), if any.
fn guard_of(value: &JsValue) -> Result<Option<Guard>, StoreError> {
    let g = js::get(value, "g");
    if g.is_undefined() {
        return Ok(None);
    }
    let parts = g.dyn_ref::<Array>().ok_or_else(bad_guard)?;
    let part = |i| {
        parts
            .get(i)
            .as_f64()
            .filter(|v| *v >= 0.0 && v.fract() == 0.0)
            .map(|v| v as u64)
            .ok_or_else(bad_guard)
    };
    Ok(Some(Guard {
        expected_version: part(0)?,
        first_seq: part(1)?,
        last_seq: part(2)?,
    }))
}

/// The legs a record's events carry (`a`), if any: a list in which the record's own aggregate
/// has a leg spanning the record's events (anything else is corrupt).
fn atomic_of(
    aggregate: AggregateRef,
    value: &JsValue,
    first: u64,
    last: u64,
) -> Result<Option<Legs>, StoreError> {
    let Some(legs) = legs_of(&js::get(value, "a"), "an outbox record")? else {
        return Ok(None);
    };
    match leg_of(&legs, &aggregate) {
        Some(leg) if leg.first_seq <= first && last <= leg.last_seq => Ok(Some(legs)),
        _ => Err(StoreError::Corrupt(
            "an outbox record's atomic legs do not hold it".into(),
        )),
    }
}

fn bad_guard() -> StoreError {
    StoreError::Corrupt("an outbox record has a bad guard (g)".into())
}

/// Every event of record `value` (of `aggregate`).
pub(super) fn all_events_of(
    aggregate: AggregateRef,
    value: &JsValue,
) -> Result<Vec<StoredEvent>, StoreError> {
    let mut out = Vec::new();
    events_of(aggregate, value, 0, u64::MAX, usize::MAX, &mut out)?;
    Ok(out)
}
