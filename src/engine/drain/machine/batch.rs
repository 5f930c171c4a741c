//! Cutting batches and the read-ahead: which batch is next (round robin, its events shaped to
//! the policy's budgets), and the batch read while another is in flight, kept only while it
//! still follows what landed.

use super::super::super::batch::{batch_of, encode, encode_atomic};
use super::super::super::model::{Batch, StoredEvent};
use super::super::super::outbox::StoreError;
use super::{Action, Drain, Loaded, Phase, ReadAhead};

impl Drain {
    /// The next batch: the one read ahead for the batch that just landed whole, or a new cut.
    pub(super) fn next_batch(&mut self) {
        let good = |r: &ReadAhead, whole: &Option<Batch>| whole.as_ref() == Some(&r.in_flight);
        match self.read_ahead.take() {
            Some(r) if good(&r, &self.settled_whole) => match r.result {
                Some(Some(events)) => return self.cut(events),
                Some(None) => {}
                None => {
                    self.read_ahead = Some(r);
                    self.phase = Phase::AwaitingReadAhead;
                    return;
                }
            },
            _ => {}
        }
        self.phase = Phase::Cutting;
        self.emit(Action::Cut { after: self.cursor });
    }

    /// Pins freshly read events as the next batch.
    pub(super) fn cut(&mut self, events: Vec<StoredEvent>) {
        let events = self.shape(events);
        let Some(batch) = batch_of(&events) else {
            return self.next_batch();
        };
        self.cursor = Some(batch.aggregate);
        self.settled_whole = None;
        self.phase = Phase::Pinning((batch.clone(), events));
        self.emit(Action::Pin {
            batch,
            replacing: None,
        });
    }

    /// An aggregate being isolated after a rejection is sent one event at a time, up to the
    /// end of the rejected batch; past it, full batches again.
    pub(super) fn shape(&mut self, mut events: Vec<StoredEvent>) -> Vec<StoredEvent> {
        let Some(first) = events.first() else {
            return events;
        };
        if let Some(&(until, _)) = self.isolating.get(&first.aggregate) {
            // A conditional append or an atomic write is never re-cut (nor can it be in a
            // rejected batch being isolated: each is always a batch of its own).
            if first.client_seq <= until && first.guard.is_none() && first.atomic.is_none() {
                events.truncate(1);
            } else {
                self.isolating.remove(&first.aggregate);
            }
        }
        events
    }

    pub(super) fn read_ahead_done(
        &mut self,
        in_flight: Batch,
        result: Result<Option<Vec<StoredEvent>>, StoreError>,
    ) {
        let Some(r) = self.read_ahead.as_mut() else {
            return; // dropped meanwhile
        };
        if r.in_flight != in_flight || r.result.is_some() {
            return; // an older read's answer: it assumed another batch would land
        }
        match result {
            Ok(found) => {
                // Encoded now, while the batch in flight is out, not after it settles.
                self.encoded = found.as_deref().and_then(|events| {
                    let batch = batch_of(events)?;
                    let body = encode_loaded(self.client_id, &batch, events)?;
                    Some((batch, body))
                });
                r.result = Some(found)
            }
            // Only an optimisation: forget it, the next cut reads again.
            Err(_) => self.read_ahead = None,
        }
        if matches!(self.phase, Phase::AwaitingReadAhead) {
            self.next_batch();
        }
    }

    /// Reads the batch after `batch` while `batch` is being readied and sent (once per batch).
    /// Not past an atomic write: what follows it on several aggregates is read after it lands.
    pub(super) fn read_ahead_past(&mut self, batch: &Batch) {
        if self.policy.read_ahead
            && batch.atomic.is_none()
            && self
                .read_ahead
                .as_ref()
                .is_none_or(|r| r.in_flight != *batch)
        {
            self.read_ahead = Some(ReadAhead {
                in_flight: batch.clone(),
                result: None,
            });
            self.emit(Action::ReadAhead {
                in_flight: batch.clone(),
            });
        }
    }

    /// The batch read ahead while `batch` was in flight, if it is ready; a read still in
    /// progress is kept for [`Drain::next_batch`].
    pub(super) fn take_read_ahead_for(&mut self, batch: &Batch) -> Option<Loaded> {
        let r = self.read_ahead.as_ref()?;
        if r.in_flight != *batch {
            self.read_ahead = None;
            return None;
        }
        r.result.as_ref()?; // still reading: kept for `next_batch`
        let events = self.read_ahead.take()?.result??;
        let events = self.shape(events);
        let batch = batch_of(&events)?;
        Some((batch, events))
    }
}

/// The request body of `events`, the loaded `batch` (`None`: an atomic write's events that are
/// not exactly its legs, whole; never sent).
pub(super) fn encode_loaded(
    client_id: uuid::Uuid,
    batch: &Batch,
    events: &[StoredEvent],
) -> Option<String> {
    match batch.atomic {
        Some(_) => encode_atomic(client_id, events),
        None => Some(encode(client_id, batch.aggregate, events)),
    }
}
