//! The drain's bookkeeping around one batch: the pin (which batch is in flight), the settle
//! (landed watermark raised and pin moved in one transaction), and parking — a rejected batch
//! set aside, listed, and discarded at the app's word (with the ids remembered, so `whenSynced`
//! can tell "discarded" from "landed"). An atomic write is settled, parked and discarded whole:
//! every leg's watermark, park record and events in one transaction.

use wasm_bindgen::JsValue;
use web_sys::IdbObjectStore;

use super::super::db::{Commit, Js, stores};
use super::super::keys::{Agg, uuid_js};
use super::super::records::{all_events_of, key_of, put_run};
use super::super::request::result;
use super::super::schema::{DISCARDED, LANDED, META, OUTBOX, PARKED, PIN_KEY};
use super::codecs::{batch_of_record, park_of_record, parked_of, parked_record, pin_record};
use super::cut::records_holding;
use super::{BOOKKEEPING, IdbOutbox, get, landed, store};
use crate::engine::model::{AggregateRef, Batch, ParkRecord};
use crate::engine::outbox::{Discarded, StoreError};

/// [`Outbox::pinned`](crate::engine::outbox::Outbox::pinned).
pub(super) async fn pinned(this: &IdbOutbox) -> Result<Option<Batch>, StoreError> {
    this.db
        .read(&stores(&[META]), async |tx| {
            batch_of_record(&get(&store(tx, META)?, &PIN_KEY.into()).await?)
        })
        .await
}

/// [`Outbox::pin`](crate::engine::outbox::Outbox::pin).
pub(super) async fn pin(
    this: &IdbOutbox,
    batch: &Batch,
    replacing: Option<&Batch>,
) -> Result<bool, StoreError> {
    this.db
        .write(&stores(&[META]), BOOKKEEPING, Commit::Early, async |tx| {
            let meta = store(tx, META)?;
            let current = batch_of_record(&get(&meta, &PIN_KEY.into()).await?)?;
            if current.as_ref() != replacing {
                return Ok(false); // nothing written
            }
            meta.put_with_key(&pin_record(batch), &PIN_KEY.into())
                .js()?;
            Ok(true)
        })
        .await
}

/// [`Outbox::settle`](crate::engine::outbox::Outbox::settle): an atomic batch raises every
/// leg's watermark to the leg's last sequence (it landed whole), in the same transaction.
pub(super) async fn settle(
    this: &IdbOutbox,
    batch: &Batch,
    through: u64,
    then: Option<&Batch>,
) -> Result<bool, StoreError> {
    let targets: Vec<(Agg, u64)> = match &batch.atomic {
        Some(legs) => legs
            .iter()
            .map(|leg| (Agg::new(&leg.aggregate), leg.last_seq))
            .collect(),
        None => vec![(Agg::new(&batch.aggregate), through)],
    };
    this.db
        .write(
            &stores(&[META, LANDED]),
            BOOKKEEPING,
            Commit::Early,
            async |tx| {
                let meta = store(tx, META)?;
                let watermarks = store(tx, LANDED)?;
                // The pin and the watermarks are read together (one round trip, not two:
                // this transaction stands between a batch's answer and the next request),
                // awaited in the order issued (`idb::request`).
                let pin = meta.get(&PIN_KEY.into());
                let marks: Vec<_> = targets
                    .iter()
                    .map(|(a, _)| watermarks.get(&a.key()))
                    .collect();
                let current = batch_of_record(&result(pin).await.js()?)?;
                let mut stored = Vec::with_capacity(marks.len());
                for mark in marks {
                    stored.push(result(mark).await.js()?.as_f64().unwrap_or(0.0) as u64);
                }
                if current.as_ref() != Some(batch) {
                    return Ok(None); // another drainer moved the pin: nothing written
                }
                let mut raised = Vec::with_capacity(targets.len());
                for ((a, through), stored) in targets.iter().zip(stored) {
                    let landed = stored.max(*through);
                    watermarks
                        .put_with_key(&JsValue::from_f64(landed as f64), &a.key())
                        .js()?;
                    raised.push((a.aggregate, landed));
                }
                match then {
                    Some(next) => meta.put_with_key(&pin_record(next), &PIN_KEY.into()),
                    None => meta.delete(&PIN_KEY.into()),
                }
                .js()?;
                Ok(Some(raised))
            },
        )
        .await
        .map(|written| {
            for (aggregate, landed) in written.iter().flatten() {
                this.watermarks.raised(*aggregate, *landed);
            }
            written.is_some()
        })
}

/// [`Outbox::park`](crate::engine::outbox::Outbox::park): one record per aggregate (every leg
/// of an atomic write), all in one transaction.
pub(super) async fn park(
    this: &IdbOutbox,
    records: &[ParkRecord],
    batch: &Batch,
) -> Result<(), StoreError> {
    this.db
        .write(
            &stores(&[PARKED, META]),
            BOOKKEEPING,
            Commit::Early,
            async |tx| {
                let meta = store(tx, META)?;
                let parked = store(tx, PARKED)?;
                for record in records {
                    parked.put(&parked_record(record)).js()?;
                }
                let current = batch_of_record(&get(&meta, &PIN_KEY.into()).await?)?;
                if current.as_ref() == Some(batch) {
                    meta.delete(&PIN_KEY.into()).js()?;
                }
                Ok(())
            },
        )
        .await
}

/// [`Outbox::parked`](crate::engine::outbox::Outbox::parked).
pub(super) async fn parked(this: &IdbOutbox) -> Result<Vec<ParkRecord>, StoreError> {
    this.db
        .read(&stores(&[PARKED]), async |tx| {
            parked_of(result(store(tx, PARKED)?.get_all()).await.js()?)
        })
        .await
}

/// [`Outbox::discard_parked`](crate::engine::outbox::Outbox::discard_parked).
pub(super) async fn discard_parked(
    this: &IdbOutbox,
    aggregate: AggregateRef,
) -> Result<Discarded, StoreError> {
    this.db
        .write(
            &stores(&[PARKED, OUTBOX, DISCARDED, LANDED]),
            this.durability,
            Commit::Early,
            async |tx| {
                let begun = this.db.begun();
                let parked = store(tx, PARKED)?;
                let events = store(tx, OUTBOX)?;
                let discarded = store(tx, DISCARDED)?;
                let a = Agg::new(&aggregate);
                let found = get(&parked, &a.key()).await?;
                if found.is_undefined() {
                    return Ok(Discarded {
                        removed: 0,
                        begun,
                        also: Vec::new(),
                    });
                }
                // A parked atomic write goes whole (a part of it may never be sent alone):
                // every leg's events, by its legs — also a leg without a record — and the other
                // legs' records, only where they are records of this same write.
                let record = park_of_record(&found)?;
                parked.delete(&a.key()).js()?;
                let mut spans = vec![(aggregate, record.first_seq, record.last_seq)];
                let mut also = Vec::new();
                if let Some(legs) = record.atomic.clone() {
                    let others: Vec<_> = legs
                        .iter()
                        .filter(|leg| leg.aggregate != aggregate)
                        .map(|leg| (leg, parked.get(&Agg::new(&leg.aggregate).key())))
                        .collect();
                    for (leg, other) in others {
                        spans.push((leg.aggregate, leg.first_seq, leg.last_seq));
                        let other = result(other).await.js()?;
                        if !other.is_undefined()
                            && park_of_record(&other)?.atomic.as_ref() == Some(&legs)
                        {
                            parked.delete(&Agg::new(&leg.aggregate).key()).js()?;
                            also.push(leg.aggregate);
                        }
                    }
                }
                let now = JsValue::from_f64(js_sys::Date::now());
                let watermarks = store(tx, LANDED)?;
                let mut dropped = 0u32;
                for (leg, first, last) in spans {
                    let a = Agg::new(&leg);
                    // Only what did not land: a landed event is never marked discarded.
                    let first = first.max(landed(&watermarks, &a).await? + 1);
                    if first <= last {
                        dropped += drop_parked(&events, &discarded, &a, first, last, &now).await?;
                    }
                }
                Ok(Discarded {
                    removed: dropped,
                    begun,
                    also,
                })
            },
        )
        .await
}

/// Drops `a`'s events `f..=l` (parked) and remembers their ids as discarded, so `whenSynced`
/// can tell "discarded" from "landed"; says how many it dropped. Each stored record holding any
/// of them loses exactly those (rewritten as what is left on either side).
async fn drop_parked(
    events: &IdbObjectStore,
    discarded: &IdbObjectStore,
    a: &Agg,
    f: u64,
    l: u64,
    now: &JsValue,
) -> Result<u32, StoreError> {
    let mut dropped = 0u32;
    for value in records_holding(events, a, f.saturating_sub(1), l).await? {
        let all = all_events_of(a.aggregate, &value)?;
        events.delete(&key_of(a, &value)?).js()?;
        // `all` is in sequence order: what is below `f`, in it, above `l`.
        let from = all.iter().take_while(|e| e.client_seq < f).count();
        let to = from + all[from..].iter().take_while(|e| e.client_seq <= l).count();
        for e in &all[from..to] {
            discarded.put_with_key(now, &uuid_js(&e.event_id)).js()?;
        }
        dropped += (to - from) as u32;
        put_run(events, a, &all[..from], true)?;
        put_run(events, a, &all[to..], true)?;
    }
    Ok(dropped)
}
