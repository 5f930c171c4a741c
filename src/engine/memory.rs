//! An in-memory [`Outbox`]: the reference implementation of the storage rules, used by native
//! tests and the model-based property test. Not durable, by design.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::ops::Bound;

use uuid::Uuid;

use super::batch::take_within;
use super::model::{AggregateRef, Batch, NewEvent, ParkRecord, Receipt, StoredEvent};
use super::outbox::{EventState, Outbox, StoreError};

type Key = (AggregateRef, u64);

#[derive(Default)]
struct State {
    client_id: Option<Uuid>,
    events: BTreeMap<(AggregateRef, u64), StoredEvent>,
    counters: BTreeMap<AggregateRef, u64>,
    pin: Option<Batch>,
    parked: BTreeMap<AggregateRef, ParkRecord>,
    discarded: std::collections::BTreeSet<Uuid>,
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

    fn range(aggregate: AggregateRef, from: u64, to: u64) -> std::ops::RangeInclusive<Key> {
        (aggregate, from)..=(aggregate, to)
    }
}

impl Outbox for MemoryOutbox {
    async fn client_id(&self, fresh: Uuid) -> Result<Uuid, StoreError> {
        Ok(*self.state.borrow_mut().client_id.get_or_insert(fresh))
    }

    async fn append(
        &self,
        aggregate: AggregateRef,
        events: Vec<NewEvent>,
    ) -> Result<Vec<Receipt>, StoreError> {
        let mut state = self.state.borrow_mut();
        let mut seq = state.counters.get(&aggregate).copied().unwrap_or(0);
        let mut receipts = Vec::with_capacity(events.len());
        for event in events {
            seq += 1;
            receipts.push(Receipt {
                event_id: event.event_id,
                client_seq: seq,
            });
            state
                .events
                .insert((aggregate, seq), StoredEvent::new(aggregate, seq, &event));
        }
        state.counters.insert(aggregate, seq);
        Ok(receipts)
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

    async fn next_aggregate(
        &self,
        after: Option<AggregateRef>,
    ) -> Result<Option<AggregateRef>, StoreError> {
        let state = self.state.borrow();
        let next = match after {
            None => state.events.keys().next(),
            Some(a) => state
                .events
                .range((Bound::Excluded((a, u64::MAX)), Bound::Unbounded))
                .next()
                .map(|(k, _)| k),
        };
        Ok(next.map(|(a, _)| *a))
    }

    async fn lowest_pending(&self, aggregate: AggregateRef) -> Result<Option<u64>, StoreError> {
        let state = self.state.borrow();
        Ok(state
            .events
            .range(Self::range(aggregate, 0, u64::MAX))
            .next()
            .map(|((_, s), _)| *s))
    }

    async fn head(
        &self,
        aggregate: AggregateRef,
        max_events: usize,
        max_bytes: usize,
    ) -> Result<Vec<StoredEvent>, StoreError> {
        let state = self.state.borrow();
        let all: Vec<&StoredEvent> = state
            .events
            .range(Self::range(aggregate, 0, u64::MAX))
            .map(|(_, e)| e)
            .take(max_events.max(1))
            .collect();
        let n = take_within(all.iter().map(|e| e.encoded_len()), max_events, max_bytes);
        Ok(all.into_iter().take(n).cloned().collect())
    }

    async fn read(&self, batch: &Batch) -> Result<Vec<StoredEvent>, StoreError> {
        let state = self.state.borrow();
        Ok(state
            .events
            .range(Self::range(
                batch.aggregate,
                batch.first_seq,
                batch.last_seq,
            ))
            .map(|(_, e)| e.clone())
            .collect())
    }

    async fn pinned(&self) -> Result<Option<Batch>, StoreError> {
        Ok(self.state.borrow().pin)
    }

    async fn pin(&self, batch: &Batch, replacing: Option<&Batch>) -> Result<bool, StoreError> {
        let mut state = self.state.borrow_mut();
        if state.pin.as_ref() != replacing {
            return Ok(false);
        }
        state.pin = Some(*batch);
        Ok(true)
    }

    async fn settle(&self, batch: &Batch, through: u64) -> Result<u32, StoreError> {
        let mut state = self.state.borrow_mut();
        let keys: Vec<_> = state
            .events
            .range(Self::range(
                batch.aggregate,
                batch.first_seq,
                through.min(batch.last_seq),
            ))
            .map(|(k, _)| *k)
            .collect();
        for key in &keys {
            state.events.remove(key);
        }
        let rest: Vec<u64> = state
            .events
            .range((
                Bound::Excluded((batch.aggregate, through)),
                Bound::Included((batch.aggregate, batch.last_seq)),
            ))
            .map(|((_, s), _)| *s)
            .collect();
        if state.pin != Some(*batch) {
            return Ok(keys.len() as u32);
        }
        state.pin = match (rest.first(), rest.last()) {
            (Some(&first_seq), Some(&last_seq)) if through < batch.last_seq => Some(Batch {
                first_seq,
                last_seq,
                count: rest.len() as u32,
                ..*batch
            }),
            _ => None,
        };
        Ok(keys.len() as u32)
    }

    async fn park(&self, record: &ParkRecord, batch: &Batch) -> Result<(), StoreError> {
        let mut state = self.state.borrow_mut();
        state.parked.insert(record.aggregate, record.clone());
        if state.pin == Some(*batch) {
            state.pin = None;
        }
        Ok(())
    }

    async fn parked(&self) -> Result<Vec<ParkRecord>, StoreError> {
        Ok(self.state.borrow().parked.values().cloned().collect())
    }

    async fn discard_parked(&self, aggregate: AggregateRef) -> Result<u32, StoreError> {
        let mut state = self.state.borrow_mut();
        let Some(record) = state.parked.remove(&aggregate) else {
            return Ok(0);
        };
        let keys: Vec<_> = state
            .events
            .range(Self::range(aggregate, record.first_seq, record.last_seq))
            .map(|(k, _)| *k)
            .collect();
        for key in &keys {
            if let Some(event) = state.events.remove(key) {
                state.discarded.insert(event.event_id);
            }
        }
        Ok(keys.len() as u32)
    }

    async fn event_state(&self, event_id: Uuid) -> Result<EventState, StoreError> {
        let state = self.state.borrow();
        if let Some(e) = state.events.values().find(|e| e.event_id == event_id) {
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

    async fn count(&self) -> Result<u64, StoreError> {
        Ok(self.state.borrow().events.len() as u64)
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
