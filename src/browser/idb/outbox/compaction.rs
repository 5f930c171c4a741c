//! Pruning and compaction: landed events leave the outbox (after the local log holds them, where
//! an aggregate has one), the `landed` watermark goes once nothing landed is stored, and the
//! `ids` store — never pruned record by record — is compacted in one go now and then.

use js_sys::Array;
use wasm_bindgen::{JsCast, JsValue};
use web_sys::{IdbKeyRange, IdbObjectStore};

use super::super::db::{Commit, Js, stores};
use super::super::keys::{Agg, aggregate_of, span_of};
use super::super::records::{all_events_of, put_run};
use super::super::request::result;
use super::super::schema::{CURSORS, IDS, LANDED, OUTBOX};
use super::counting::count_events;
use super::cut::first_key;
use super::{BOOKKEEPING, IdbOutbox, get, landed, store};
use crate::browser::js;
use crate::engine::model::AggregateRef;
use crate::engine::outbox::{Pruned, StoreError};

/// How many pruned events leave their id records behind before the `ids` store is compacted.
pub(super) const ORPHANS_BEFORE_COMPACTING: u64 = 1_000;

/// Drops the id records of events that are gone: all of them when the outbox is empty, or a
/// rebuild from the outbox when it holds more than twice as many ids as events (the outbox
/// never emptied: a steady stream of appends). Never a record-by-record delete (see
/// [`idb::schema`](super::super::schema)). The rebuild walks the outbox [`COMPACT_CHUNK`] records at a time in the
/// same transaction, so its memory does not grow with the backlog (reading the whole outbox at
/// once held half of a 100,000-event backlog in the JS heap, 40 MB, in `npm run bench`).
async fn compact_ids(events: &IdbObjectStore, ids: &IdbObjectStore) -> Result<(), StoreError> {
    if first_key(events, None).await?.is_none() {
        ids.clear().js()?;
        return Ok(());
    }
    let known = result(ids.count()).await.js()?.as_f64().unwrap_or(0.0);
    let stored = count_events(events, None).await? as f64;
    if known <= 2.0 * stored + ORPHANS_BEFORE_COMPACTING as f64 {
        return Ok(());
    }
    ids.clear().js()?;
    let mut range = IdbKeyRange::lower_bound(&Array::new()).js()?;
    let mut chunk = 64u32;
    loop {
        let keys = result(events.get_all_keys_with_key_and_limit(&range, chunk))
            .await
            .js()?;
        let values = result(events.get_all_with_key_and_limit(&range, chunk))
            .await
            .js()?;
        let (keys, values) = (js::array(&keys), js::array(&values));
        let mut put = 0u32;
        for (key, value) in keys.iter().zip(&values) {
            // The key's `t` and `a` as stored: no UUID parsing for a rebuild.
            let parts = Array::from(key);
            let (first, last) = span_of(key)?;
            let stored_ids = js::get(value, "e");
            let list = stored_ids.dyn_ref::<Array>();
            for seq in first..=last {
                let id = match list {
                    Some(list) => list.get((seq - first) as u32),
                    None => stored_ids.clone(),
                };
                let place =
                    Array::of3(&parts.get(0), &parts.get(1), &JsValue::from_f64(seq as f64));
                ids.put_with_key(&place, &id).js()?;
                put += 1;
            }
        }
        match keys.last() {
            Some(last) if keys.len() == chunk as usize => {
                range = IdbKeyRange::lower_bound_with_open(last, true).js()?;
                // About COMPACT_CHUNK events a step, however many each record holds.
                let per_record = (put / chunk).max(1);
                chunk = (COMPACT_CHUNK / per_record).clamp(8, COMPACT_CHUNK);
            }
            _ => return Ok(()),
        }
    }
}

/// Events read per step of the `ids` rebuild.
const COMPACT_CHUNK: u32 = 2_000;

/// [`Outbox::prune`](crate::engine::outbox::Outbox::prune).
pub(super) async fn prune(
    this: &IdbOutbox,
    aggregate: AggregateRef,
    max: u32,
    idle: bool,
) -> Result<Pruned, StoreError> {
    this.db
        .write(
            &stores(&[OUTBOX, LANDED, IDS, CURSORS]),
            BOOKKEEPING,
            Commit::Early,
            async |tx| {
                let events = store(tx, OUTBOX)?;
                let watermarks = store(tx, LANDED)?;
                let ids = store(tx, IDS)?;
                let a = Agg::new(&aggregate);
                let mut dropped = false;
                let landed_through = landed(&watermarks, &a).await?;
                // An aggregate with a local log keeps its landed events until the log holds
                // them: a view shows them as pending until then (no flicker).
                let logged = get(&store(tx, CURSORS)?, &a.key()).await?;
                let through = if logged.is_undefined() {
                    landed_through
                } else {
                    landed_through.min(js::get_u64(&logged, "mine").unwrap_or(0))
                };
                if through == 0 {
                    let none = Pruned {
                        removed: 0,
                        more: false,
                    };
                    return Ok((none, false));
                }
                // The records holding landed events: those ending at or below `through`
                // (at most `max + 1` of them: each holds at least one event), and the first
                // ending above it, if it starts at or below it.
                let whole = events.get_all_keys_with_key_and_limit(
                    &a.seqs(0.0, true, through as f64)?.into(),
                    max + 1,
                );
                let tail = events.get_key(&a.above(through)?.into());
                let (whole, tail) = (
                    js::array(&result(whole).await.js()?),
                    result(tail).await.js()?,
                );
                let mut spans = Vec::with_capacity(whole.len() + 1);
                for key in whole.iter() {
                    spans.push((key.clone(), span_of(key)?));
                }
                if whole.len() <= max as usize && !tail.is_undefined() {
                    let (first, last) = span_of(&tail)?;
                    if first <= through {
                        spans.push((tail, (first, last)));
                    }
                }
                // Whole records go in one ranged delete; at most one record (where the
                // budget ends, or the one ending above `through`) loses a prefix and is
                // rewritten with what is left.
                let (mut removed, mut more) = (0u64, false);
                let (mut whole_through, mut cut) = (None, None);
                for (key, (first, last)) in spans {
                    let budget = u64::from(max) - removed;
                    if budget == 0 {
                        more = true;
                        break;
                    }
                    let landed_here = last.min(through) + 1 - first;
                    if landed_here <= budget && last <= through {
                        whole_through = Some(last);
                        removed += landed_here;
                        continue;
                    }
                    let take = landed_here.min(budget);
                    cut = Some((key, first + take - 1));
                    removed += take;
                    more = take < landed_here;
                    break;
                }
                if let Some(last) = whole_through {
                    events
                        .delete(&a.seqs(0.0, true, last as f64)?.into())
                        .js()?;
                }
                if let Some((key, through)) = cut {
                    let value = get(&events, &key).await?;
                    let all = all_events_of(aggregate, &value)?;
                    let landed = all.iter().take_while(|e| e.client_seq <= through).count();
                    events.delete(&key).js()?;
                    put_run(&events, &a, &all[landed..], true)?;
                }
                if !more && through == landed_through {
                    // Nothing landed is stored any more: the watermark has done its job.
                    watermarks.delete(&a.key()).js()?;
                    dropped = true;
                }
                this.orphaned.set(this.orphaned.get() + removed);
                // Only when idle: the check counts both stores and a rebuild rewrites what
                // remains, which mid-drain held `outbox` for most of a 100,000-event drain.
                if idle && !more && this.orphaned.get() >= ORPHANS_BEFORE_COMPACTING {
                    this.orphaned.set(0);
                    compact_ids(&events, &ids).await?;
                }
                let pruned = Pruned {
                    removed: removed as u32,
                    more,
                };
                Ok((pruned, dropped))
            },
        )
        .await
        .map(|(pruned, dropped)| {
            if dropped {
                this.watermarks.dropped(&aggregate);
            }
            pruned
        })
}

/// [`Outbox::unpruned`](crate::engine::outbox::Outbox::unpruned).
pub(super) async fn unpruned(this: &IdbOutbox) -> Result<Vec<AggregateRef>, StoreError> {
    // A drain starts (this is one of its first reads): whatever an earlier drain of this
    // context knew of `landed` is read afresh with the next cut.
    this.watermarks.forget();
    this.db
        .read(&stores(&[LANDED]), async |tx| {
            let keys = result(store(tx, LANDED)?.get_all_keys()).await.js()?;
            js::array(&keys).iter().map(aggregate_of).collect()
        })
        .await
}
