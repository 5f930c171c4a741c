//! An in-memory [`Outbox`]: the reference implementation of the storage rules, used by native
//! tests and the model-based property tests. Not durable, by design.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use uuid::Uuid;

use super::batch::{cut_at_guards, take_within};
use super::model::{AggregateRef, Batch, Guard, Leg, Legs, ParkRecord, Receipt, StoredEvent};
use super::outbox::{
    Appended, Begun, Counted, CutQuery, Discarded, EventState, GroupItem, Outbox, Pruned,
    StoreError,
};

type Key = (AggregateRef, u64);

#[derive(Default)]
struct State {
    client_id: Option<Uuid>,
    events: BTreeMap<Key, StoredEvent>,
    counters: BTreeMap<AggregateRef, u64>,
    landed: BTreeMap<AggregateRef, u64>,
    pin: Option<Batch>,
    parked: BTreeMap<AggregateRef, ParkRecord>,
    discarded: BTreeSet<Uuid>,
    /// Writes that change the counts so far (each is whole at once here: rule 6 holds
    /// trivially).
    writes: u64,
}

impl State {
    /// The next write's place in the order writes began.
    fn begin(&mut self) -> Begun {
        self.writes += 1;
        Begun(self.writes - 1)
    }

    fn landed(&self, aggregate: &AggregateRef) -> u64 {
        self.landed.get(aggregate).copied().unwrap_or(0)
    }

    /// The aggregate's pending events from `above` (exclusive) on, in order.
    fn pending_above(
        &self,
        aggregate: AggregateRef,
        above: u64,
    ) -> impl Iterator<Item = &StoredEvent> {
        let from = above.max(self.landed(&aggregate));
        self.events
            .range((
                Bound::Excluded((aggregate, from)),
                Bound::Included((aggregate, u64::MAX)),
            ))
            .map(|(_, e)| e)
    }

    /// Aggregates with pending events, in key order.
    fn pending_aggregates(&self) -> Vec<AggregateRef> {
        let mut out: Vec<AggregateRef> = Vec::new();
        for (aggregate, seq) in self.events.keys() {
            if out.last() != Some(aggregate) && *seq > self.landed(aggregate) {
                out.push(*aggregate);
            }
        }
        out
    }

    fn is_pending(&self, e: &StoredEvent) -> bool {
        e.client_seq > self.landed(&e.aggregate)
    }

    /// The atomic write `legs`, every leg's pending events in order, if it heads each of its
    /// aggregates (rule 3) and none of them is skipped.
    fn atomic_ready(&self, legs: &Legs, query: &CutQuery<'_>) -> Option<Vec<StoredEvent>> {
        let mut events = Vec::new();
        for leg in legs.iter() {
            if query.skip.binary_search(&leg.aggregate).is_ok() {
                return None;
            }
            let above = match query.assume_landed {
                Some((a, through)) if a == leg.aggregate => through,
                _ => 0,
            };
            let mut pending = self.pending_above(leg.aggregate, above).peekable();
            if pending.peek().map(|e| e.client_seq) != Some(leg.first_seq) {
                return None;
            }
            events.extend(
                pending
                    .take_while(|e| e.client_seq <= leg.last_seq)
                    .cloned(),
            );
        }
        Some(events)
    }

    /// The pending events of `aggregate` in `first..=last`, in order.
    fn pending_in(&self, aggregate: AggregateRef, first: u64, last: u64) -> Vec<StoredEvent> {
        self.events
            .range((aggregate, first)..=(aggregate, last))
            .map(|(_, e)| e)
            .filter(|e| self.is_pending(e))
            .cloned()
            .collect()
    }
}

/// The in-memory outbox.
#[derive(Default)]
pub struct MemoryOutbox {
    state: RefCell<State>,
}

impl MemoryOutbox {
    /// An empty outbox.
    pub fn new() -> Self {
        Self::default()
    }

    /// Stores a group of appends in one step (rule 1); `atomic`: they are one atomic write,
    /// each event carrying every leg.
    fn store(&self, group: &[GroupItem<'_>], atomic: bool) -> Appended {
        let mut state = self.state.borrow_mut();
        let begun = state.begin();
        let legs: Option<Legs> = atomic.then(|| {
            group
                .iter()
                .map(|(aggregate, events, _)| {
                    let last = state.counters.get(aggregate).copied().unwrap_or(0);
                    Leg {
                        aggregate: *aggregate,
                        first_seq: last + 1,
                        last_seq: last + events.len() as u64,
                    }
                })
                .collect::<Vec<_>>()
                .into()
        });
        let mut all = Vec::with_capacity(group.len());
        for (aggregate, events, expected) in group {
            let mut seq = state.counters.get(aggregate).copied().unwrap_or(0);
            let guard = expected.map(|expected_version| Guard {
                expected_version,
                first_seq: seq + 1,
                last_seq: seq + events.len() as u64,
            });
            let mut receipts = Vec::with_capacity(events.len());
            for event in events.iter() {
                seq += 1;
                receipts.push(Receipt {
                    event_id: event.event_id,
                    client_seq: seq,
                });
                state.events.insert(
                    (*aggregate, seq),
                    StoredEvent::new(*aggregate, seq, event)
                        .guarded(guard)
                        .in_atomic(legs.clone()),
                );
            }
            state.counters.insert(*aggregate, seq);
            all.push(receipts);
        }
        Appended {
            receipts: all,
            begun,
        }
    }

    /// How many events are stored, landed ones not yet pruned included (tests).
    pub fn stored(&self) -> usize {
        self.state.borrow().events.len()
    }
}

impl Outbox for MemoryOutbox {
    async fn client_id(&self, fresh: Uuid) -> Result<Uuid, StoreError> {
        Ok(*self.state.borrow_mut().client_id.get_or_insert(fresh))
    }

    async fn append_group(&self, group: &[GroupItem<'_>]) -> Result<Appended, StoreError> {
        Ok(self.store(group, false))
    }

    async fn append_atomic(&self, writes: &[GroupItem<'_>]) -> Result<Appended, StoreError> {
        Ok(self.store(writes, true))
    }

    async fn last_assigned(&self, aggregate: AggregateRef) -> Result<u64, StoreError> {
        Ok(self
            .state
            .borrow()
            .counters
            .get(&aggregate)
            .copied()
            .unwrap_or(0))
    }

    async fn next_batch(
        &self,
        query: CutQuery<'_>,
    ) -> Result<Option<Vec<StoredEvent>>, StoreError> {
        let state = self.state.borrow();
        let aggregates = state.pending_aggregates();
        // Round robin: those after `after` first, then from the start through `after`.
        let split = query
            .after
            .map_or(0, |after| aggregates.partition_point(|a| *a <= after));
        let order = aggregates[split..].iter().chain(&aggregates[..split]);
        for aggregate in order {
            if query.skip.binary_search(aggregate).is_ok() {
                continue;
            }
            let above = match query.assume_landed {
                Some((a, through)) if a == *aggregate => through,
                _ => 0,
            };
            let mut pending = state.pending_above(*aggregate, above).peekable();
            let Some(first) = pending.peek() else {
                continue;
            };
            if let Some(legs) = first.atomic.clone() {
                // An atomic write: whole, once it heads every one of its aggregates.
                match state.atomic_ready(&legs, &query) {
                    Some(events) => return Ok(Some(events)),
                    None => continue,
                }
            }
            if let Some(guard) = first.guard {
                // A conditional append: all of its events, whatever the limits.
                let mut head: Vec<StoredEvent> = pending
                    .take_while(|e| e.client_seq <= guard.last_seq)
                    .cloned()
                    .collect();
                cut_at_guards(&mut head);
                return Ok(Some(head));
            }
            let mut head: Vec<StoredEvent> =
                pending.take(query.max_events.max(1)).cloned().collect();
            cut_at_guards(&mut head);
            let n = take_within(
                head.iter().map(|e| e.encoded_len()),
                query.max_events,
                query.max_bytes,
            );
            head.truncate(n);
            return Ok(Some(head));
        }
        Ok(None)
    }

    async fn read(&self, batch: &Batch) -> Result<Vec<StoredEvent>, StoreError> {
        let state = self.state.borrow();
        Ok(batch
            .spans()
            .into_iter()
            .flat_map(|(aggregate, first, last)| state.pending_in(aggregate, first, last))
            .collect())
    }

    async fn pinned(&self) -> Result<Option<Batch>, StoreError> {
        Ok(self.state.borrow().pin.clone())
    }

    async fn pin(&self, batch: &Batch, replacing: Option<&Batch>) -> Result<bool, StoreError> {
        let mut state = self.state.borrow_mut();
        if state.pin.as_ref() != replacing {
            return Ok(false);
        }
        state.pin = Some(batch.clone());
        Ok(true)
    }

    async fn settle(
        &self,
        batch: &Batch,
        through: u64,
        then: Option<&Batch>,
    ) -> Result<bool, StoreError> {
        let mut state = self.state.borrow_mut();
        if state.pin.as_ref() != Some(batch) {
            return Ok(false);
        }
        if batch.atomic.is_some() {
            // Landed whole: every leg.
            for (aggregate, _, last) in batch.spans() {
                let landed = state.landed(&aggregate).max(last);
                state.landed.insert(aggregate, landed);
            }
        } else {
            let landed = state.landed(&batch.aggregate).max(through);
            state.landed.insert(batch.aggregate, landed);
        }
        state.pin = then.cloned();
        Ok(true)
    }

    async fn prune(
        &self,
        aggregate: AggregateRef,
        max: u32,
        _idle: bool,
    ) -> Result<Pruned, StoreError> {
        let mut state = self.state.borrow_mut();
        let landed = state.landed(&aggregate);
        let keys: Vec<Key> = state
            .events
            .range((aggregate, 0)..=(aggregate, landed))
            .map(|(k, _)| *k)
            .take(max as usize)
            .collect();
        for key in &keys {
            state.events.remove(key);
        }
        let more = state
            .events
            .range((aggregate, 0)..=(aggregate, landed))
            .next()
            .is_some();
        Ok(Pruned {
            removed: keys.len() as u32,
            more,
        })
    }

    async fn unpruned(&self) -> Result<Vec<AggregateRef>, StoreError> {
        let state = self.state.borrow();
        Ok(state
            .landed
            .iter()
            .filter(|(a, through)| {
                state
                    .events
                    .range((**a, 0)..=(**a, **through))
                    .next()
                    .is_some()
            })
            .map(|(a, _)| *a)
            .collect())
    }

    async fn park(&self, records: &[ParkRecord], batch: &Batch) -> Result<(), StoreError> {
        let mut state = self.state.borrow_mut();
        for record in records {
            state.parked.insert(record.aggregate, record.clone());
        }
        if state.pin.as_ref() == Some(batch) {
            state.pin = None;
        }
        Ok(())
    }

    async fn parked(&self) -> Result<Vec<ParkRecord>, StoreError> {
        Ok(self.state.borrow().parked.values().cloned().collect())
    }

    async fn discard_parked(&self, aggregate: AggregateRef) -> Result<Discarded, StoreError> {
        let mut state = self.state.borrow_mut();
        let begun = state.begin();
        let Some(record) = state.parked.remove(&aggregate) else {
            return Ok(Discarded {
                removed: 0,
                begun,
                also: Vec::new(),
            });
        };
        // A parked atomic write goes whole: every leg's events, by its legs, and the other legs'
        // records (only theirs: a record of another park is left alone).
        let mut spans = vec![(aggregate, record.first_seq, record.last_seq)];
        let mut also = Vec::new();
        for leg in record.atomic.iter().flat_map(|l| l.iter()) {
            if leg.aggregate == aggregate {
                continue;
            }
            spans.push((leg.aggregate, leg.first_seq, leg.last_seq));
            if state
                .parked
                .get(&leg.aggregate)
                .is_some_and(|r| r.atomic == record.atomic)
            {
                state.parked.remove(&leg.aggregate);
                also.push(leg.aggregate);
            }
        }
        let mut removed = 0;
        for (a, first, last) in spans {
            let keys: Vec<Key> = state
                .events
                .range((a, first)..=(a, last))
                .map(|(k, _)| *k)
                .collect();
            for key in &keys {
                if let Some(event) = state.events.remove(key)
                    && event.client_seq > state.landed(&a)
                {
                    state.discarded.insert(event.event_id);
                    removed += 1;
                }
            }
        }
        Ok(Discarded {
            removed,
            begun,
            also,
        })
    }

    async fn counts(&self) -> Result<Counted, StoreError> {
        let state = self.state.borrow();
        Ok(Counted {
            events: state
                .events
                .values()
                .filter(|e| state.is_pending(e))
                .count() as u64,
            parked: state.parked.values().cloned().collect(),
            before: Begun(state.writes),
        })
    }

    async fn pending_aggregates(&self) -> Result<Vec<(AggregateRef, u64)>, StoreError> {
        let state = self.state.borrow();
        Ok(state
            .pending_aggregates()
            .into_iter()
            .map(|a| (a, state.counters.get(&a).copied().unwrap_or(0)))
            .collect())
    }

    async fn lowest_pending_of(
        &self,
        aggregates: &[AggregateRef],
    ) -> Result<Vec<Option<u64>>, StoreError> {
        let state = self.state.borrow();
        Ok(aggregates
            .iter()
            .map(|a| state.pending_above(*a, 0).next().map(|e| e.client_seq))
            .collect())
    }

    async fn event_state(&self, event_id: Uuid) -> Result<EventState, StoreError> {
        let state = self.state.borrow();
        if let Some(e) = state.events.values().find(|e| e.event_id == event_id)
            && state.is_pending(e)
        {
            return Ok(EventState::Pending {
                aggregate: e.aggregate,
                client_seq: e.client_seq,
            });
        }
        Ok(if state.discarded.contains(&event_id) {
            EventState::Discarded
        } else {
            EventState::Absent
        })
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use futures_executor::block_on;

    #[test]
    fn conformance() {
        block_on(super::super::conformance::run_all(|| async {
            MemoryOutbox::new()
        }));
    }
}
