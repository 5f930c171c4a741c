//! Sequence assignment: an append group reads each aggregate's counter, gives its events the
//! next sequences, and writes the runs, the `ids` records and the counters in one transaction —
//! with guessed counters (`idb::counters`) the writes go out with the reads, and a wrong guess
//! aborts the transaction and is retried once. An atomic write (`append_atomic`) is the same
//! group commit, its events carrying every leg (`idb::records` stores them on its runs).

use std::cell::Cell;

use js_sys::Object;
use wasm_bindgen::JsValue;
use web_sys::IdbTransaction;

use super::super::db::{Commit, Js, stores};
use super::super::keys::{Agg, uuid_js};
use super::super::records::add_runs;
use super::super::request::result;
use super::super::schema::{COUNTERS, IDS, OUTBOX};
use super::{IdbOutbox, get, store};
use crate::browser::js;
use crate::engine::model::{AggregateRef, Guard, Leg, Legs, Receipt, StoredEvent};
use crate::engine::outbox::{Appended, Cause, GroupItem, StoreError};
use crate::engine::sorted::SortedMap;

impl IdbOutbox {
    /// One try at [`Outbox::append_group`](crate::engine::outbox::Outbox::append_group): the counters are read and the events written in
    /// one transaction. With every counter of the group guessed (`idb::counters`), the writes
    /// are issued with the reads instead of after them; a guess the read contradicts sets
    /// `wrong` and aborts the transaction before anything is committed. `atomic`: the group is
    /// one atomic write (each aggregate at most once), every event carrying its legs.
    async fn append_group_once(
        &self,
        group: &[GroupItem<'_>],
        atomic: bool,
        wrong: &Cell<bool>,
    ) -> Result<Appended, StoreError> {
        // An `add` over an existing key fails its request: committing early is only right
        // where that still aborts the whole transaction.
        let commit = if self.db.early_commit_is_atomic().await {
            Commit::Early
        } else {
            Commit::Auto
        };
        let written = self
            .db
            .write(
                &stores(&[OUTBOX, COUNTERS, IDS]),
                self.durability,
                commit,
                async |tx| {
                    let begun = self.db.begun();
                    let counters = store(tx, COUNTERS)?;
                    // Per aggregate: its key parts, its last sequence, and its new events in
                    // sequence order, stored as runs (`idb::records`).
                    let mut last: SortedMap<AggregateRef, (Agg, u64, Vec<StoredEvent>)> =
                        SortedMap::new();
                    for (aggregate, _, _) in group {
                        last.get_or_insert_with(*aggregate, || {
                            (Agg::new(aggregate), 0, Vec::new())
                        });
                    }
                    // Every counter is read first (the requests run together, and before any
                    // write: a transaction runs its requests in order).
                    let reads: Vec<_> = last
                        .values()
                        .map(|(a, _, _)| counters.get(&a.key()))
                        .collect();
                    // With every counter guessed, the writes go out before the answers.
                    let (bases, unchecked) = match self.counters.guess(last.keys()) {
                        Some(guessed) => (guessed, Some(reads)),
                        None => (counter_answers(reads).await?, None),
                    };
                    for ((_, seq, _), base) in last.values_mut().zip(&bases) {
                        *seq = *base;
                    }
                    let receipts = write_group(tx, group, atomic, &mut last)?;
                    // Checked once the last answer arrived, in its own success event, before
                    // any write's: a wrong guess aborts.
                    let checked = match unchecked {
                        Some(reads) => counter_answers(reads).await? == bases,
                        None => true,
                    };
                    if !checked {
                        wrong.set(true);
                        return Err(StoreError::Failed {
                            name: "AbortError".into(),
                            message: "a counter moved".into(),
                            cause: Cause::NONE,
                        });
                    }
                    let seqs: Vec<(AggregateRef, u64)> =
                        last.iter().map(|(k, (_, seq, _))| (*k, *seq)).collect();
                    Ok((receipts, seqs, begun))
                },
            )
            .await;
        match written {
            Ok((receipts, seqs, begun)) => {
                self.counters.committed(seqs.into_iter());
                Ok(Appended { receipts, begun })
            }
            Err(e) => {
                self.counters.forget();
                Err(e)
            }
        }
    }
}

/// The `last` of each counter read, in the order issued (and awaited in that order: a request's
/// handler is attached when it is awaited, `idb::request`). Consumes the reads: awaiting a
/// request a second time would wait for an event that has passed.
async fn counter_answers(
    reads: Vec<Result<web_sys::IdbRequest, JsValue>>,
) -> Result<Vec<u64>, StoreError> {
    let mut out = Vec::with_capacity(reads.len());
    for read in reads {
        let counter = result(read).await.js()?;
        out.push(js::get_u64(&counter, "last").unwrap_or(0));
    }
    Ok(out)
}

/// Assigns the group's events their sequences after each aggregate's `last`, and issues their
/// writes (the `ids` records, the runs, the counters); returns each append's receipts.
/// `atomic`: the group is one atomic write, and every event carries all of its legs.
fn write_group(
    tx: &IdbTransaction,
    group: &[GroupItem<'_>],
    atomic: bool,
    last: &mut SortedMap<AggregateRef, (Agg, u64, Vec<StoredEvent>)>,
) -> Result<Vec<Vec<Receipt>>, StoreError> {
    let (events, ids, counters) = (store(tx, OUTBOX)?, store(tx, IDS)?, store(tx, COUNTERS)?);
    // One list for every event of the write (each aggregate is in it once: its leg follows
    // its counter).
    let legs: Option<Legs> = atomic.then(|| {
        group
            .iter()
            .map(|(aggregate, batch, _)| {
                let base = last.get(aggregate).map_or(0, |(_, seq, _)| *seq);
                Leg {
                    aggregate: *aggregate,
                    first_seq: base + 1,
                    last_seq: base + batch.len() as u64,
                }
            })
            .collect::<Vec<_>>()
            .into()
    });
    let mut all = Vec::with_capacity(group.len());
    for (aggregate, batch, expected) in group {
        let (a, seq, runs) = last.get_mut(aggregate).expect("one entry per aggregate");
        let guard = expected.map(|expected_version| Guard {
            expected_version,
            first_seq: *seq + 1,
            last_seq: *seq + batch.len() as u64,
        });
        let mut receipts = Vec::with_capacity(batch.len());
        for event in batch.iter() {
            *seq += 1;
            receipts.push(Receipt {
                event_id: event.event_id,
                client_seq: *seq,
            });
            ids.put_with_key(&a.event(*seq as f64), &uuid_js(&event.event_id))
                .js()?;
            runs.push(
                StoredEvent::new(*aggregate, *seq, event)
                    .guarded(guard)
                    .in_atomic(legs.clone()),
            );
        }
        all.push(receipts);
    }
    // Requests go out when made; the commit waits for all of them.
    for (a, _, run) in last.values() {
        add_runs(&events, a, run)?;
    }
    for (a, seq, _) in last.values() {
        let o = Object::new();
        js::set(&o, "t", a.t.clone());
        js::set(&o, "a", a.a.clone());
        js::set(&o, "last", *seq as f64);
        counters.put(&o).js()?;
    }
    Ok(all)
}

/// [`Outbox::append_group`](crate::engine::outbox::Outbox::append_group): one try, and one more after a wrong guess or an upgrade.
pub(super) async fn append_group(
    this: &IdbOutbox,
    group: &[GroupItem<'_>],
) -> Result<Appended, StoreError> {
    append(this, group, false).await
}

/// [`Outbox::append_atomic`](crate::engine::outbox::Outbox::append_atomic): the group commit of
/// [`append_group`], its events carrying the write's legs.
pub(super) async fn append_atomic(
    this: &IdbOutbox,
    writes: &[GroupItem<'_>],
) -> Result<Appended, StoreError> {
    append(this, writes, true).await
}

async fn append(
    this: &IdbOutbox,
    group: &[GroupItem<'_>],
    atomic: bool,
) -> Result<Appended, StoreError> {
    let wrong = Cell::new(false);
    match this.append_group_once(group, atomic, &wrong).await {
        // A guessed counter was wrong (another context appended), or another context
        // upgraded the database mid-append: nothing was written (the transaction aborted);
        // try once more, reading the counters first (every guess is forgotten).
        Err(_) if wrong.get() || this.db.lost_to_upgrade() => {
            this.append_group_once(group, atomic, &wrong).await
        }
        result => result,
    }
}

/// [`Outbox::last_assigned`](crate::engine::outbox::Outbox::last_assigned).
pub(super) async fn last_assigned(
    this: &IdbOutbox,
    aggregate: AggregateRef,
) -> Result<u64, StoreError> {
    this.db
        .read(&stores(&[COUNTERS]), async |tx| {
            let counter = get(&store(tx, COUNTERS)?, &Agg::new(&aggregate).key()).await?;
            Ok(js::get_u64(&counter, "last").unwrap_or(0))
        })
        .await
}
