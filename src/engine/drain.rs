//! The one sync loop: take the pinned batch (or cut and pin the next one), send it, act on the
//! outcome, repeat; sleep when there is nothing to do, back off when told to.
//!
//! Invariants it keeps (each has a test, natively here and in the browser):
//!
//! * One request at a time, one aggregate per request, each aggregate strictly in sequence
//!   order, never skipping ahead: a batch is always the aggregate's lowest pending events.
//! * A batch's boundaries are pinned in storage **before** its first send; every resend reads
//!   the same events back and encodes them to the same bytes, also after a restart.
//! * Only `landed` settles events; a rejection parks them (after isolating the offending event),
//!   other aggregates go on, and nothing is ever dropped without the app asking.
//! * Waits are woken by new work, the network coming back, or `close`; backoff and offline
//!   probing only by the network and `close`.

use std::collections::BTreeMap;
use std::rc::Rc;

use futures_util::future::select_all;
use uuid::Uuid;

use super::backoff::Backoff;
use super::batch::{batch_of, encode};
use super::classify::{Action, classify, decide};
use super::env::{Env, Transport};
use super::model::{AggregateRef, Batch, ParkRecord, StoredEvent};
use super::outbox::{EventState, Outbox, StoreError};
use super::signal::{Changed, first};
use super::status::{Hub, SyncState, SyncedNotice};

/// How the loop cuts batches and waits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Policy {
    /// Most events in one request.
    pub max_batch_events: usize,
    /// Largest request body, in bytes (a single larger event still goes alone).
    pub max_batch_bytes: usize,
    /// Backoff for `retry` and `unknown`.
    pub backoff: Backoff,
    /// While the platform reports offline, how often to try anyway.
    pub offline_probe_ms: u64,
    /// While idle, how often to look for work nobody announced (another tab's appends).
    pub idle_poll_ms: u64,
    /// After a storage failure, how long before trying again.
    pub storage_retry_ms: u64,
}

impl Default for Policy {
    fn default() -> Self {
        Policy {
            max_batch_events: 500,
            max_batch_bytes: 1 << 20,
            backoff: Backoff::default(),
            offline_probe_ms: 15_000,
            idle_poll_ms: 30_000,
            storage_retry_ms: 1_000,
        }
    }
}

enum Wait {
    /// Another context drains now: stop.
    Stop,
    /// Go on at once.
    No,
    /// Nothing to send: wait for work.
    Work,
    /// Back off this long.
    Backoff(u64),
    /// Offline: probe again after this long.
    Offline(u64),
}

/// Why [`Drainer::run`] returned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// The hub was closed.
    Closed,
    /// Another context drains now (it took the drain lock, or changed the pin).
    Superseded,
}

/// The drain loop over an outbox, a transport and an environment.
pub struct Drainer<O, T, E> {
    outbox: Rc<O>,
    transport: T,
    env: Rc<E>,
    hub: Rc<Hub>,
    policy: Policy,
    client_id: Uuid,
    /// Round-robin position: the aggregate served last.
    cursor: Option<AggregateRef>,
    /// Consecutive failed attempts of the pinned batch.
    attempt: u32,
    /// Aggregates whose rejected batch is being retried one event at a time: up to which
    /// sequence, and whether that batch may have landed before it was rejected.
    isolating: BTreeMap<AggregateRef, (u64, bool)>,
    /// Whether an attempt of the pinned batch may have landed (an unknown outcome, or a pin
    /// found at start-up: it was pinned before a send that may have happened).
    ambiguous: bool,
    /// While offline: when to probe next (Unix ms).
    next_probe_at: u64,
    /// This loop's own last write left nothing pinned (it settled or parked the pinned batch
    /// whole), so the next step need not read the pin back. Only the drainer writes the pin,
    /// and a successor's pin is guarded by compare-and-set.
    unpinned: bool,
}

impl<O: Outbox, T: Transport, E: Env> Drainer<O, T, E> {
    /// A loop for `client_id`.
    pub fn new(
        outbox: Rc<O>,
        transport: T,
        env: Rc<E>,
        hub: Rc<Hub>,
        policy: Policy,
        client_id: Uuid,
    ) -> Self {
        Drainer {
            outbox,
            transport,
            env,
            hub,
            policy,
            client_id,
            cursor: None,
            attempt: 0,
            isolating: BTreeMap::new(),
            ambiguous: true,
            next_probe_at: 0,
            unpinned: false,
        }
    }

    /// Runs until the hub is closed, or until another context is found draining. Call
    /// [`Drainer::recount`] first so the status is right from the start.
    pub async fn run(mut self) -> RunEnd {
        while !self.hub.is_closed() {
            if self.hub.is_superseded() {
                return RunEnd::Superseded;
            }
            let (work, network) = (self.hub.work.generation(), self.hub.network.generation());
            let wait = match self.step().await {
                Ok(wait) => wait,
                Err(e) => {
                    self.hub.set_error(None, e.to_string(), self.env.now_ms());
                    Wait::Backoff(self.policy.storage_retry_ms)
                }
            };
            match wait {
                Wait::Stop => return RunEnd::Superseded,
                Wait::No => {}
                Wait::Work => {
                    if let Err(e) = self.recount().await {
                        self.hub.set_error(None, e.to_string(), self.env.now_ms());
                    }
                    self.hub.set_idle();
                    let signals = [
                        self.hub.work.changed_since(work),
                        self.hub.network.changed_since(network),
                    ];
                    self.wait(self.policy.idle_poll_ms, signals).await;
                }
                Wait::Backoff(ms) => {
                    self.hub.set_state(SyncState::Backoff);
                    self.wait(ms, [self.hub.network.changed_since(network)])
                        .await;
                }
                Wait::Offline(ms) => {
                    self.hub.set_state(SyncState::Offline);
                    self.wait(ms, [self.hub.network.changed_since(network)])
                        .await;
                }
            }
        }
        self.hub.set_state(SyncState::Closed);
        self.hub.stopped.notify();
        RunEnd::Closed
    }

    /// Sleeps `ms`, or until one of `signals` or `close`.
    async fn wait<const N: usize>(&self, ms: u64, signals: [Changed<'_>; N]) {
        if self.hub.is_closed() || self.hub.is_superseded() {
            return;
        }
        let wakers = select_all(signals.into_iter().chain([self.hub.closing.notified()]));
        first(self.env.sleep(ms), wakers).await;
    }

    /// Reads the counts back from storage (they drift only if another context wrote).
    pub async fn recount(&self) -> Result<(), StoreError> {
        let total = self.outbox.count().await?;
        let parked = self.outbox.parked().await?;
        self.hub.reset_counts(total, parked);
        Ok(())
    }

    async fn step(&mut self) -> Result<Wait, StoreError> {
        let pinned = if self.unpinned {
            None
        } else {
            self.outbox.pinned().await?
        };
        self.unpinned = false;
        let (batch, cut) = match pinned {
            Some(batch) => (batch, None),
            None => match self.cut_next().await? {
                Some((batch, events)) => {
                    if !self.outbox.pin(&batch, None).await? {
                        // Another drainer pinned a batch since we looked: it is active.
                        return Ok(Wait::Stop);
                    }
                    self.ambiguous = self
                        .isolating
                        .get(&batch.aggregate)
                        .is_some_and(|(_, ambiguous)| *ambiguous);
                    (batch, Some(events))
                }
                None => return Ok(Wait::Work),
            },
        };
        // A batch cut just now is exactly the events just read; a pinned one is read back.
        let events = match cut {
            Some(events) => events,
            None => self.outbox.read(&batch).await?,
        };
        if events.is_empty() {
            // Its events are gone (settled elsewhere): nothing left to send.
            self.outbox.settle(&batch, batch.last_seq).await?;
            return Ok(Wait::No);
        }

        let now = self.env.now_ms();
        if self.env.is_online() {
            self.next_probe_at = 0;
        } else {
            // Offline: wait for `online` or the next probe; a probe is one ordinary send.
            if self.next_probe_at == 0 {
                self.next_probe_at = now + self.policy.offline_probe_ms;
            }
            if now < self.next_probe_at {
                return Ok(Wait::Offline(self.next_probe_at - now));
            }
            self.next_probe_at = now + self.policy.offline_probe_ms;
        }

        // Confirm this context still drains (another may have taken over, e.g. from a frozen
        // tab) right before sending.
        if !self.env.may_send().await {
            return Ok(Wait::Stop);
        }
        self.hub.set_state(SyncState::Syncing);
        let body = encode(self.client_id, batch.aggregate, &events);
        let closing = self.hub.closing.notified();
        let send = self.transport.send(body);
        let reply = {
            use futures_util::future::{Either, select};
            match select(std::pin::pin!(send), closing).await {
                Either::Left((reply, _)) => reply,
                // Closing: the request is aborted; the batch stays pinned for the next run.
                Either::Right(_) => return Ok(Wait::No),
            }
        };
        let (attempt, random) = (self.attempt, self.env.random());
        let backoff = self.policy.backoff;
        let outcome = classify(&reply);
        let unknown = matches!(outcome, super::classify::Outcome::Unknown { .. });
        let action = decide(&batch, outcome, |retry_after| {
            backoff.delay_ms(attempt, random, retry_after)
        });

        match action {
            Action::Settle { through, duplicate } => {
                let removed = self.outbox.settle(&batch, through).await?;
                self.unpinned = through >= batch.last_seq;
                self.attempt = 0;
                self.ambiguous = false;
                self.next_probe_at = 0;
                let settled: Vec<_> = events.iter().filter(|e| e.client_seq <= through).collect();
                let notice = SyncedNotice {
                    aggregate: batch.aggregate,
                    first_seq: settled.first().map_or(batch.first_seq, |e| e.client_seq),
                    last_seq: settled.last().map_or(through, |e| e.client_seq),
                    event_ids: settled.iter().map(|e| e.event_id).collect(),
                    duplicate,
                };
                self.hub.synced(notice, removed);
                Ok(Wait::No)
            }
            Action::Resend {
                delay_ms,
                code,
                message,
                network,
            } => {
                self.attempt = self.attempt.saturating_add(1);
                self.ambiguous |= unknown;
                self.hub.set_error(code, message, now);
                if network && !self.env.is_online() {
                    self.next_probe_at = now + self.policy.offline_probe_ms;
                    return Ok(Wait::Offline(self.policy.offline_probe_ms));
                }
                Ok(Wait::Backoff(delay_ms))
            }
            Action::Isolate { code, message } => {
                self.isolating
                    .insert(batch.aggregate, (batch.last_seq, self.ambiguous));
                let head = Batch {
                    last_seq: batch.first_seq,
                    count: 1,
                    ..batch
                };
                if !self.outbox.pin(&head, Some(&batch)).await? {
                    return Ok(Wait::Stop);
                }
                self.attempt = 0;
                let message = format!("rejected ({message}); retrying its events one by one");
                self.hub.set_error(Some(code), message, now);
                Ok(Wait::No)
            }
            Action::Park { code, message } => {
                let record = ParkRecord {
                    aggregate: batch.aggregate,
                    first_seq: events[0].client_seq,
                    last_seq: events[events.len() - 1].client_seq,
                    count: events.len() as u32,
                    code,
                    message,
                    parked_at: now,
                    may_have_landed: self.ambiguous,
                };
                self.outbox.park(&record, &batch).await?;
                self.unpinned = true;
                self.attempt = 0;
                self.ambiguous = false;
                self.isolating.remove(&batch.aggregate);
                self.hub.parked(record);
                Ok(Wait::No)
            }
        }
    }

    /// The next aggregate after the cursor (round robin) that is not parked, its batch and the
    /// batch's events.
    async fn cut_next(&mut self) -> Result<Option<(Batch, Vec<StoredEvent>)>, StoreError> {
        let mut after = self.cursor;
        let mut wrapped = after.is_none();
        let aggregate = loop {
            match self.outbox.next_aggregate(after).await? {
                Some(aggregate) if self.hub.is_parked(&aggregate) => after = Some(aggregate),
                Some(aggregate) => break aggregate,
                None if wrapped => return Ok(None),
                None => {
                    wrapped = true;
                    after = None;
                }
            }
        };
        self.cursor = Some(aggregate);
        let isolating = self.isolating.get(&aggregate).copied();
        let max_events = if isolating.is_some() {
            1
        } else {
            self.policy.max_batch_events
        };
        let events = self
            .outbox
            .head(aggregate, max_events, self.policy.max_batch_bytes)
            .await?;
        if let (Some((until, _)), Some(head)) = (isolating, events.first())
            && head.client_seq > until
        {
            // Past the rejected range: back to full batches.
            self.isolating.remove(&aggregate);
            let events = self
                .outbox
                .head(
                    aggregate,
                    self.policy.max_batch_events,
                    self.policy.max_batch_bytes,
                )
                .await?;
            return Ok(batch_of(&events).map(|batch| (batch, events)));
        }
        Ok(batch_of(&events).map(|batch| (batch, events)))
    }
}

/// Why `flush` or `when_synced` did not resolve.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FlushError {
    /// An aggregate with events appended before the flush is parked.
    #[error("aggregate {}/{} is parked ({code}): {message}", .aggregate.type_id, .aggregate.id)]
    Parked {
        /// The aggregate.
        aggregate: AggregateRef,
        /// The rejection's code.
        code: u32,
        /// The rejection's message.
        message: String,
    },
    /// The event was parked and then discarded by the app: it will never land.
    #[error("event {0} was discarded after a permanent rejection")]
    Discarded(Uuid),
    /// The client was closed first.
    #[error("the client was closed before everything landed")]
    Closed,
    /// Storage failed.
    #[error(transparent)]
    Store(#[from] StoreError),
}

/// Resolves once every event appended before the call has landed (or was discarded); fails as
/// soon as one of their aggregates is parked.
pub async fn flush<O: Outbox>(outbox: &O, hub: &Hub) -> Result<(), FlushError> {
    // Targets: every aggregate with pending events, up to its highest sequence now.
    let mut targets = Vec::new();
    let mut after = None;
    while let Some(aggregate) = outbox.next_aggregate(after).await? {
        targets.push((aggregate, outbox.last_assigned(aggregate).await?));
        after = Some(aggregate);
    }
    loop {
        let progress = hub.progress.generation();
        let mut remaining = Vec::with_capacity(targets.len());
        let aggregates: Vec<AggregateRef> = targets.iter().map(|(a, _)| *a).collect();
        let lowest = outbox.lowest_pending_of(&aggregates).await?;
        for ((aggregate, target), lowest) in targets.into_iter().zip(lowest) {
            match lowest {
                Some(lowest) if lowest <= target => {
                    if let Some(record) = hub.park_record(&aggregate) {
                        return Err(FlushError::Parked {
                            aggregate,
                            code: record.code,
                            message: record.message,
                        });
                    }
                    remaining.push((aggregate, target));
                }
                _ => {}
            }
        }
        if remaining.is_empty() {
            return Ok(());
        }
        if hub.is_closed() {
            return Err(FlushError::Closed);
        }
        targets = remaining;
        hub.progress.changed_since(progress).await;
    }
}

/// Resolves once the event `event_id` has landed (it is no longer in the outbox and was not
/// discarded), whoever appended it and whichever context drains; fails as soon as it is parked
/// or discarded. An id this database never held counts as landed.
pub async fn when_synced<O: Outbox>(
    outbox: &O,
    hub: &Hub,
    event_id: Uuid,
) -> Result<(), FlushError> {
    loop {
        let progress = hub.progress.generation();
        match outbox.event_state(event_id).await? {
            EventState::Absent => return Ok(()),
            EventState::Discarded => return Err(FlushError::Discarded(event_id)),
            EventState::Pending {
                aggregate,
                client_seq,
            } => {
                if let Some(record) = hub.park_record(&aggregate)
                    && (record.first_seq..=record.last_seq).contains(&client_seq)
                {
                    return Err(FlushError::Parked {
                        aggregate,
                        code: record.code,
                        message: record.message,
                    });
                }
            }
        }
        if hub.is_closed() {
            return Err(FlushError::Closed);
        }
        hub.progress.changed_since(progress).await;
    }
}
