//! The drain as a pure state machine: [`Drain::handle`] takes what just happened (an
//! [`Input`]) and the moment ([`Now`]), and queues what to do next ([`Drain::poll`] yields
//! [`Action`]s). It does no I/O, awaits nothing and reads no clock; the executor
//! ([`super::run`]) performs the actions — storage, the request, the lock check, the waits —
//! and feeds their results back.
//!
//! Invariants it keeps (each has a test, natively and in the browser):
//!
//! * One request at a time, one aggregate per request, each aggregate strictly in sequence
//!   order, never skipping ahead: a batch is always the aggregate's lowest pending events.
//! * A batch's boundaries are pinned in storage **before** its first send; every resend sends
//!   the same events, encoded to the same bytes, also after a restart (read back from the pin).
//! * Only `landed` settles events; a rejection parks them (after isolating the offending
//!   event), other aggregates go on, and nothing is ever dropped without the app asking.
//! * A conditional batch (a conditional append's events, alone) is never re-cut; a 2003 on it
//!   settles it only if reading the aggregate back finds its own `(clientId, clientSeq)` at
//!   the version it expected + 1, parks it as a conflict only if the read finds another batch
//!   there or none, and retries the batch if the read fails.
//!
//! What makes it fast without weakening any of that:
//!
//! * **Read-ahead.** While a request is in flight, the next batch is read (assuming the one in
//!   flight lands). If it does land whole, one small transaction both settles it and pins the
//!   next batch, and the next request leaves at once. Any other outcome drops the read-ahead.
//! * **Deferred pruning.** Settling records a landed watermark; the landed events themselves
//!   are deleted later, in chunks, when the drain is idle or too many have accumulated, so
//!   deleting (costly in some engines) is never on the path of a request.
//!
//! The machine's files: [`types`] (policy, inputs, actions, reports), [`batch`] (cutting and the
//! read-ahead), [`reply`] (the send and reply path), [`verify`] (a conditional batch's 2003:
//! landed or a conflict), [`settle`] (settle, prune, storage failures);
//! this one holds the state and [`Drain::handle`], which dispatches each input.

mod batch;
mod reply;
mod settle;
mod types;
mod verify;

use std::collections::VecDeque;

use uuid::Uuid;

use super::super::auth::Session;
use super::super::inspect::{Held, OutcomeRecord};
use super::super::model::{AggregateRef, Batch, ParkRecord, StoredEvent};
use super::super::outbox::StoreError;
use super::super::sorted::{SortedMap, SortedSet};
use super::super::status::SyncState;

pub use types::{Action, Input, Now, Policy, Report, RunEnd};

/// A batch with its events, in memory.
type Loaded = (Batch, Vec<StoredEvent>);

#[derive(Debug)]
enum Phase {
    /// The three reads of a start, run together.
    Starting(Start),
    Recounting,
    ReadingPin,
    Reading(Batch),
    Cutting,
    AwaitingReadAhead,
    Pinning(Loaded),
    Isolating(Loaded),
    Authenticating(Loaded),
    Checking(Loaded),
    Sending(Loaded),
    Settling(Settling),
    /// One record per aggregate (every leg of an atomic write).
    Parking(Vec<ParkRecord>),
    /// A conditional batch got 2003: its aggregate is being read back.
    Verifying(Loaded, Conflict),
    Waiting(Loaded),
    StorageWait,
    Idle,
    Stopped,
}

#[derive(Debug)]
struct Settling {
    batch: Batch,
    /// The events that landed (empty: the batch's events were gone; settle silently).
    landed: Vec<StoredEvent>,
    through: u64,
    duplicate: bool,
    then: Option<Loaded>,
    /// The lock check asked for with the settle, when `then` is to be sent next: `None` while
    /// it is out, then its answer ([`Drain::ready`]).
    lock: Option<Option<bool>>,
}

/// The 2003 a conditional batch got, kept while the aggregate is read back.
#[derive(Debug)]
struct Conflict {
    message: String,
    current_version: Option<u64>,
    /// The guarded aggregate it is about, and its guard (an atomic write's leg the 2003 names).
    leg: (AggregateRef, super::super::model::Guard),
}

/// What a start has read so far: the counts, the aggregates with landed events left to prune,
/// and the pin. None depends on another, so they are read at once and the drain goes on when
/// all three are in.
#[derive(Debug, Default)]
struct Start {
    recounted: bool,
    unpruned: Option<Result<Vec<AggregateRef>, StoreError>>,
    pin: Option<Result<Option<Batch>, StoreError>>,
}

/// The next batch, read while `in_flight` was out.
#[derive(Debug)]
struct ReadAhead {
    in_flight: Batch,
    /// `None` while the read is in progress.
    result: Option<Option<Vec<StoredEvent>>>,
}

/// The drain state machine of one client.
#[derive(Debug)]
pub struct Drain {
    policy: Policy,
    client_id: Uuid,
    phase: Phase,
    /// Round-robin position: the aggregate served last.
    cursor: Option<AggregateRef>,
    /// Consecutive failed attempts of the pinned batch.
    attempt: u32,
    /// Aggregates whose rejected batch is being retried one event at a time: up to which
    /// sequence, and whether that batch may have landed before it was rejected.
    isolating: SortedMap<AggregateRef, (u64, bool)>,
    /// Whether an attempt of the pinned batch may have landed (an unknown outcome, or a pin
    /// found at start-up: it was pinned before a send that may have happened).
    ambiguous: bool,
    /// The session writes go under, once opened.
    session: Option<Session>,
    /// Consecutive failures to open a session.
    auth_attempt: u32,
    /// While offline: when to probe next (Unix ms).
    next_probe_at: u64,
    read_ahead: Option<ReadAhead>,
    /// The request body of the batch read ahead, encoded while the batch before it was out.
    encoded: Option<(Batch, String)>,
    /// The last batch that landed whole (a read-ahead for it is still good).
    settled_whole: Option<Batch>,
    /// Aggregates with landed events still stored.
    unpruned: SortedSet<AggregateRef>,
    /// Landed events settled and not yet pruned (since this machine started).
    unpruned_events: u64,
    /// The aggregate being pruned now.
    pruning: Option<AggregateRef>,
    actions: VecDeque<Action>,
    /// The last reply's outcome, for the inspector ([`Drain::take_outcome`]).
    outcome: Option<OutcomeRecord>,
    /// The conditional batch whose read-backs lag its 2003, and how many did so far
    /// (`machine/verify.rs`): reset when it settles or parks, or another batch is read back.
    lagging: Option<(Batch, u32)>,
}

impl Drain {
    /// A drain for `client_id`.
    pub fn new(policy: Policy, client_id: Uuid) -> Self {
        Drain {
            policy,
            client_id,
            phase: Phase::Stopped,
            cursor: None,
            attempt: 0,
            isolating: SortedMap::new(),
            ambiguous: true,
            session: None,
            auth_attempt: 0,
            next_probe_at: 0,
            read_ahead: None,
            encoded: None,
            settled_whole: None,
            unpruned: SortedSet::new(),
            unpruned_events: 0,
            pruning: None,
            actions: VecDeque::new(),
            outcome: None,
            lagging: None,
        }
    }

    /// Starts: recount, find leftovers to prune and read the pin, all at once; then the
    /// pinned batch first.
    pub fn start(&mut self) {
        self.phase = Phase::Starting(Start::default());
        self.emit(Action::Recount);
        self.emit(Action::FindUnpruned);
        self.emit(Action::ReadPin);
    }

    /// A start's read came in: wait for the others, then go on as their answers say.
    fn starting(&mut self, start: Start, now: Now) {
        let Start {
            recounted: true,
            unpruned: Some(unpruned),
            pin: Some(pin),
        } = start
        else {
            self.phase = Phase::Starting(start);
            return;
        };
        match unpruned {
            Ok(aggregates) => {
                // Their counts are unknown; prune them before long.
                self.unpruned_events += aggregates.len() as u64 * self.policy.prune_high_water;
                self.unpruned.extend(aggregates);
            }
            // The pin is read again after the wait; what was not found is pruned when its
            // aggregate next lands or is logged.
            Err(e) => return self.storage_failed(e, now),
        }
        self.pin_read(pin, now);
    }

    fn pin_read(&mut self, pin: Result<Option<Batch>, StoreError>, now: Now) {
        match pin {
            Ok(Some(batch)) => {
                // Pinned before a send that may have happened.
                self.ambiguous = true;
                self.phase = Phase::Reading(batch.clone());
                self.emit(Action::Read(batch.clone()));
                // The next batch is read while this one is read back, a session opened and
                // the lock checked, not only once it is sent: after a small pinned batch
                // (an earlier session's), the next one is ready when it lands.
                self.read_ahead_past(&batch);
            }
            Ok(None) => self.next_batch(),
            Err(e) => self.storage_failed(e, now),
        }
    }

    /// Its policy.
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The next thing to do, if any.
    pub fn poll(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// Whether the machine has stopped.
    #[cfg(test)]
    pub(crate) fn is_stopped(&self) -> bool {
        matches!(self.phase, Phase::Stopped)
    }

    /// The outcome of the reply just handled, once (for the inspector's ring).
    pub(crate) fn take_outcome(&mut self) -> Option<OutcomeRecord> {
        self.outcome.take()
    }

    /// The batch the machine holds now — being read, pinned, sent or waiting to be resent —
    /// for the inspector.
    pub fn held(&self) -> Option<Held> {
        let (batch, in_flight) = match &self.phase {
            Phase::Reading(batch) => (batch, false),
            Phase::Sending((batch, _)) => (batch, true),
            Phase::Pinning((batch, _))
            | Phase::Isolating((batch, _))
            | Phase::Authenticating((batch, _))
            | Phase::Checking((batch, _))
            | Phase::Waiting((batch, _)) => (batch, false),
            Phase::Settling(s) => (&s.batch, false),
            Phase::Verifying((batch, _), _) => (batch, false),
            _ => return None,
        };
        let batch = batch.clone();
        Some(Held {
            batch,
            failed_attempts: self.attempt,
            in_flight,
        })
    }

    fn emit(&mut self, action: Action) {
        self.actions.push_back(action);
    }

    fn report(&mut self, report: Report) {
        self.emit(Action::Report(report));
    }

    fn stop(&mut self, end: RunEnd) {
        self.phase = Phase::Stopped;
        self.read_ahead = None;
        self.emit(Action::Stop(end));
    }

    /// Handles what just happened.
    pub fn handle(&mut self, input: Input, now: Now) {
        if matches!(self.phase, Phase::Stopped) {
            return;
        }
        let phase = std::mem::replace(&mut self.phase, Phase::Stopped);
        match (phase, input) {
            (_, Input::Close) => self.stop(RunEnd::Closed),
            (phase, Input::Logged(aggregates)) => {
                let idle = matches!(phase, Phase::Idle);
                self.phase = phase;
                self.unpruned.extend(aggregates);
                self.maybe_prune(idle);
            }
            (_, Input::Supersede) => self.stop(RunEnd::Superseded),

            // Background work, whatever the phase.
            (phase, Input::ReadAhead { in_flight, result }) => {
                self.phase = phase;
                self.read_ahead_done(in_flight, result);
            }
            (phase, Input::Pruned(result)) => {
                self.phase = phase;
                self.pruned(result, now);
            }

            (Phase::Starting(mut start), Input::Recounted(result)) => {
                if let Err(e) = result {
                    self.storage_error_reported(&e, now);
                }
                start.recounted = true;
                self.starting(start, now);
            }
            (Phase::Starting(mut start), Input::Unpruned(result)) => {
                start.unpruned = Some(result);
                self.starting(start, now);
            }
            (Phase::Starting(mut start), Input::PinRead(result)) => {
                start.pin = Some(result);
                self.starting(start, now);
            }
            (Phase::Recounting, Input::Recounted(result)) => {
                if let Err(e) = result {
                    self.storage_error_reported(&e, now);
                }
                self.phase = Phase::Idle;
                self.report(Report::Idle);
                self.emit(Action::Wait {
                    ms: self.policy.idle_poll_ms,
                    work: true,
                    network: true,
                });
                self.maybe_prune(true);
            }
            (Phase::ReadingPin, Input::PinRead(result)) => self.pin_read(result, now),
            (Phase::Reading(batch), Input::Read(result)) => match result {
                Ok(events) if events.is_empty() => {
                    // Its events are gone (settled by another drainer): nothing to send.
                    let through = batch.last_seq;
                    self.settle(
                        Settling {
                            batch,
                            landed: Vec::new(),
                            through,
                            duplicate: false,
                            then: None,
                            lock: None,
                        },
                        now,
                    );
                }
                Ok(events) => self.ready((batch, events), now),
                Err(e) => self.storage_failed(e, now),
            },
            (Phase::Cutting, Input::Cut(result)) => match result {
                Ok(Some(events)) => self.cut(events),
                Ok(None) => {
                    // Nothing to send: recount (other contexts may have written), then idle.
                    self.phase = Phase::Recounting;
                    self.emit(Action::Recount);
                }
                Err(e) => self.storage_failed(e, now),
            },
            (Phase::Pinning(loaded), Input::Pinned(result)) => match result {
                Ok(true) => {
                    self.ambiguous = self
                        .isolating
                        .get(&loaded.0.aggregate)
                        .is_some_and(|(_, ambiguous)| *ambiguous);
                    self.ready(loaded, now);
                }
                // Another drainer pinned a batch since we looked: it is active.
                Ok(false) => self.stop(RunEnd::Superseded),
                Err(e) => self.storage_failed(e, now),
            },
            (Phase::Isolating(loaded), Input::Pinned(result)) => match result {
                Ok(true) => {
                    self.attempt = 0;
                    self.ready(loaded, now);
                }
                Ok(false) => self.stop(RunEnd::Superseded),
                Err(e) => self.storage_failed(e, now),
            },
            (Phase::Authenticating(loaded), Input::SessionOpened(result)) => match result {
                Ok(session) => {
                    self.session = Some(session);
                    self.auth_attempt = 0;
                    self.phase = Phase::Checking(loaded);
                    self.emit(Action::CheckLock);
                }
                Err(failure) => {
                    // Never a judgement on the events: they wait, and the session is asked for
                    // again after a backoff.
                    let wait = self.policy.backoff.delay_ms(
                        self.auth_attempt,
                        now.random,
                        failure.retry_after_ms,
                    );
                    self.auth_attempt = self.auth_attempt.saturating_add(1);
                    let wrong_user = failure.wrong_user;
                    self.report(Report::Error {
                        code: failure.code,
                        message: failure.message,
                        at: now.ms,
                    });
                    self.report(Report::State(if wrong_user {
                        SyncState::WrongUser
                    } else {
                        SyncState::Unauthorized
                    }));
                    self.phase = Phase::Waiting(loaded);
                    self.emit(Action::Wait {
                        ms: wait,
                        work: false,
                        network: true,
                    });
                }
            },
            (Phase::Checking(loaded), Input::MaySend(may)) => {
                if may {
                    self.send(loaded, now);
                } else {
                    self.stop(RunEnd::Superseded);
                }
            }
            (Phase::Sending(loaded), Input::Replied(reply)) => self.replied(loaded, &reply, now),
            (Phase::Settling(mut settling), Input::MaySend(may)) => {
                if settling.lock == Some(None) {
                    settling.lock = Some(Some(may));
                }
                self.phase = Phase::Settling(settling);
            }
            (Phase::Settling(settling), Input::Settled(result)) => match result {
                Ok(true) => self.settled(settling, now),
                Ok(false) => self.stop(RunEnd::Superseded),
                Err(e) => self.storage_failed(e, now),
            },
            (Phase::Parking(records), Input::Parked(result)) => match result {
                Ok(()) => {
                    self.attempt = 0;
                    self.ambiguous = false;
                    for record in records {
                        self.isolating.remove(&record.aggregate);
                        self.report(Report::Parked(record));
                    }
                    self.next_batch();
                }
                Err(e) => self.storage_failed(e, now),
            },
            (Phase::Verifying(loaded, conflict), Input::ReadBack(found)) => {
                self.verified(loaded, conflict, found, now)
            }
            (Phase::Waiting(loaded), Input::TimerFired | Input::Woken) => self.ready(loaded, now),
            (Phase::Idle, Input::TimerFired | Input::Woken) => self.next_batch(),
            (Phase::StorageWait, Input::TimerFired | Input::Woken) => {
                // Whatever the failed write did or did not do, the pin is read back.
                self.phase = Phase::ReadingPin;
                self.emit(Action::ReadPin);
            }
            // Anything else is stale (a wake-up while busy): keep going.
            (phase, _) => self.phase = phase,
        }
    }
}

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;
