//! An in-memory [`LocalLog`]: the reference implementation of the local log's rules, used by
//! native tests, the conformance suite and the model test of the read side. Not durable, by
//! design.
//!
//! The IndexedDB log shares its database with the outbox and reads, inside its transactions,
//! what the outbox knows: the highest sequence assigned per aggregate (rule 3), the landed
//! watermark (rule 4), this device's stored events and the park records (rule 5). This one
//! keeps that *device side* itself, moved by [`MemoryLog::assign`], [`MemoryLog::land`],
//! [`MemoryLog::prune`] and [`MemoryLog::park`], so a test drives it as the outbox would.

use std::cell::RefCell;
use std::collections::{BTreeMap, BTreeSet};
use std::ops::Bound;

use super::super::model::{AggregateRef, ParkRecord};
use super::super::outbox::StoreError;
use super::log::{
    Cursor, LocalLog, Place, Snapshot, after_reset, bad_page, is_base64, place, snapshot_from,
};
use super::view::mine_after;

/// One confirmed event, as the gateway's page carries it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogEvent {
    /// The writer's sequence in the aggregate.
    pub client_seq: u64,
    /// The event's type.
    pub event_type: u64,
    /// Its minor version.
    pub minor: u64,
    /// When it was written (ms).
    pub timestamp: u64,
    /// The payload, base64 (`None`: no data).
    pub data: Option<String>,
}

/// One confirmed batch: a version of the aggregate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogBatch {
    /// Its version.
    pub version: u64,
    /// The client id of its writer, as the server writes it.
    pub client_id: String,
    /// Its events.
    pub events: Vec<LogEvent>,
}

#[derive(Default)]
struct State {
    cursors: BTreeMap<AggregateRef, Cursor>,
    log: BTreeMap<(AggregateRef, u64), LogBatch>,
    // The device side (the outbox's, in the browser).
    assigned: BTreeMap<AggregateRef, u64>,
    landed: BTreeMap<AggregateRef, u64>,
    stored: BTreeSet<(AggregateRef, u64)>,
    parked: BTreeMap<AggregateRef, ParkRecord>,
}

impl State {
    fn cursor(&self, aggregate: AggregateRef) -> Cursor {
        self.cursors.get(&aggregate).copied().unwrap_or_default()
    }
}

/// The in-memory local log.
#[derive(Default)]
pub struct MemoryLog {
    state: RefCell<State>,
}

impl MemoryLog {
    /// An empty log.
    pub fn new() -> Self {
        Self::default()
    }

    /// The device stores `n` new events of `aggregate` (the outbox's `append`): their
    /// sequences, the last one returned.
    pub fn assign(&self, aggregate: AggregateRef, n: u64) -> u64 {
        let mut state = self.state.borrow_mut();
        let first = state.assigned.get(&aggregate).copied().unwrap_or(0) + 1;
        let last = first + n - 1;
        for seq in first..=last {
            state.stored.insert((aggregate, seq));
        }
        state.assigned.insert(aggregate, last);
        last
    }

    /// The drain landed `aggregate`'s events through `seq` (its watermark only rises).
    pub fn land(&self, aggregate: AggregateRef, seq: u64) {
        let mut state = self.state.borrow_mut();
        let landed = state.landed.entry(aggregate).or_default();
        *landed = (*landed).max(seq);
    }

    /// The drain prunes `aggregate`'s landed events the log already holds (at or below both
    /// the watermark and `mine`: `Outbox::prune`'s rule for an aggregate with a log).
    pub fn prune(&self, aggregate: AggregateRef) {
        let mut state = self.state.borrow_mut();
        let landed = state.landed.get(&aggregate).copied().unwrap_or(0);
        let through = landed.min(state.cursor(aggregate).mine);
        state
            .stored
            .retain(|(a, seq)| *a != aggregate || *seq > through);
    }

    /// The aggregate is parked (`None`: no longer).
    pub fn park(&self, aggregate: AggregateRef, record: Option<ParkRecord>) {
        let mut state = self.state.borrow_mut();
        match record {
            Some(record) => state.parked.insert(aggregate, record),
            None => state.parked.remove(&aggregate),
        };
    }
}

fn well_formed(e: &LogEvent) -> bool {
    e.data.as_deref().is_none_or(is_base64)
}

impl LocalLog for MemoryLog {
    type Page = Vec<LogBatch>;
    type Batch = LogBatch;
    type Pending = u64;

    async fn cursor(&self, aggregate: AggregateRef) -> Result<Cursor, StoreError> {
        Ok(self.state.borrow().cursor(aggregate))
    }

    async fn ensure_cursor(&self, aggregate: AggregateRef) -> Result<Cursor, StoreError> {
        let mut state = self.state.borrow_mut();
        Ok(*state.cursors.entry(aggregate).or_default())
    }

    async fn logged(&self) -> Result<Vec<AggregateRef>, StoreError> {
        Ok(self.state.borrow().cursors.keys().copied().collect())
    }

    async fn store_page(
        &self,
        aggregate: AggregateRef,
        page: &Vec<LogBatch>,
        me: &str,
        expected: Cursor,
    ) -> Result<Option<Cursor>, StoreError> {
        let mut state = self.state.borrow_mut();
        let mut cursor = state.cursor(aggregate);
        if cursor != expected {
            return Ok(None);
        }
        let assigned = state.assigned.get(&aggregate).copied().unwrap_or(0);
        // Checked whole before anything is written: the write is all of the page or none.
        let mut new = Vec::new();
        for batch in page {
            if place(cursor.version, batch.version)? == Place::Skip {
                continue;
            }
            if batch.events.is_empty() {
                return Err(bad_page("a batch without events"));
            }
            for e in &batch.events {
                if !well_formed(e) {
                    return Err(bad_page("an event without its fields"));
                }
                if batch.client_id == me {
                    cursor.mine = mine_after(cursor.mine, e.client_seq, assigned);
                }
            }
            cursor.version = batch.version;
            new.push(batch.clone());
        }
        for batch in new {
            state.log.insert((aggregate, batch.version), batch);
        }
        state.cursors.insert(aggregate, cursor);
        Ok(Some(cursor))
    }

    async fn reset_log(
        &self,
        aggregate: AggregateRef,
        min_version: u64,
        gone: bool,
    ) -> Result<(), StoreError> {
        let mut state = self.state.borrow_mut();
        let landed = state.landed.get(&aggregate).copied().unwrap_or(0);
        let (cursor, through) = after_reset(state.cursor(aggregate), min_version, gone, landed);
        let through = through.unwrap_or(u64::MAX);
        state
            .log
            .retain(|(a, version), _| *a != aggregate || *version > through);
        state.cursors.insert(aggregate, cursor);
        Ok(())
    }

    async fn snapshot(
        &self,
        aggregate: AggregateRef,
        kept: Option<(u64, u64)>,
    ) -> Result<Snapshot<LogBatch, u64>, StoreError> {
        let state = self.state.borrow();
        let cursor = state.cursor(aggregate);
        let from = snapshot_from(kept, cursor);
        let batches = state
            .log
            .range((
                Bound::Excluded((aggregate, from)),
                Bound::Included((aggregate, cursor.version)),
            ))
            .map(|(_, b)| b.clone())
            .collect();
        let pending = state
            .stored
            .range((
                Bound::Excluded((aggregate, cursor.mine)),
                Bound::Included((aggregate, u64::MAX)),
            ))
            .map(|(_, seq)| *seq)
            .collect();
        Ok(Snapshot {
            from,
            batches,
            cursor,
            pending,
            parked: state.parked.get(&aggregate).cloned(),
        })
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use futures_executor::block_on;

    #[test]
    fn conformance() {
        block_on(super::super::log_conformance::run_all(|| async {
            MemoryLog::new()
        }));
    }
}
