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
//!
//! What makes it fast without weakening any of that:
//!
//! * **Read-ahead.** While a request is in flight, the next batch is read (assuming the one in
//!   flight lands). If it does land whole, one small transaction both settles it and pins the
//!   next batch, and the next request leaves at once. Any other outcome drops the read-ahead.
//! * **Deferred pruning.** Settling records a landed watermark; the landed events themselves
//!   are deleted later, in chunks, when the drain is idle or too many have accumulated, so
//!   deleting (costly in some engines) is never on the path of a request.

use std::collections::VecDeque;

use uuid::Uuid;

use super::super::auth::{AuthFailure, RENEW_BEFORE_MS, Session};
use super::super::backoff::Backoff;
use super::super::batch::{batch_of, encode};
use super::super::classify::{Action as Decision, Outcome, classify, decide};
use super::super::env::Reply;
use super::super::inspect::{Held, OutcomeKind, OutcomeRecord};
use super::super::model::{AggregateRef, Batch, ParkRecord, StoredEvent};
use super::super::outbox::{Pruned, StoreError};
use super::super::sorted::{SortedMap, SortedSet};
use super::super::status::{SyncState, SyncedNotice};

/// How the drain cuts batches, waits and prunes.
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
    /// Read the next batch while a request is in flight.
    pub read_ahead: bool,
    /// Prune while draining once this many landed events wait to be deleted (when idle, always).
    pub prune_high_water: u64,
    /// Most landed events deleted in one transaction.
    pub prune_chunk: u32,
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
            read_ahead: true,
            prune_high_water: 10_000,
            prune_chunk: 2_000,
        }
    }
}

/// Why the drain stopped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum RunEnd {
    /// The client was closed.
    Closed,
    /// Another context drains now (it took the drain lock, or changed the pin).
    Superseded,
}

/// What the machine needs to know of the moment, besides what happened.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Now {
    /// Unix milliseconds.
    pub ms: u64,
    /// The platform's belief that the network is up.
    pub online: bool,
    /// A uniform number in `[0, 1)`, for backoff jitter.
    pub random: f64,
}

/// What just happened: the result of an [`Action`], or an outside event.
#[derive(Debug)]
pub enum Input {
    /// [`Action::Recount`] finished (the executor updated the counts).
    Recounted(Result<(), StoreError>),
    /// [`Action::FindUnpruned`]'s answer.
    Unpruned(Result<Vec<AggregateRef>, StoreError>),
    /// [`Action::ReadPin`]'s answer.
    PinRead(Result<Option<Batch>, StoreError>),
    /// [`Action::Read`]'s answer.
    Read(Result<Vec<StoredEvent>, StoreError>),
    /// [`Action::Cut`]'s answer.
    Cut(Result<Option<Vec<StoredEvent>>, StoreError>),
    /// [`Action::ReadAhead`]'s answer, for the batch that was in flight.
    ReadAhead {
        /// The batch the read assumed would land.
        in_flight: Batch,
        /// What it found.
        result: Result<Option<Vec<StoredEvent>>, StoreError>,
    },
    /// [`Action::Pin`]'s answer: `false` when the compare-and-set failed.
    Pinned(Result<bool, StoreError>),
    /// [`Action::OpenSession`]'s answer.
    SessionOpened(Result<Session, AuthFailure>),
    /// [`Action::CheckLock`]'s answer.
    MaySend(bool),
    /// [`Action::Send`]'s answer.
    Replied(Reply),
    /// [`Action::Settle`]'s answer: `false` when the compare-and-set failed.
    Settled(Result<bool, StoreError>),
    /// [`Action::Park`]'s answer.
    Parked(Result<(), StoreError>),
    /// [`Action::Prune`]'s answer.
    Pruned(Result<Pruned, StoreError>),
    /// The current [`Action::Wait`] ran out.
    TimerFired,
    /// The current [`Action::Wait`] was cut short by a signal it waited for.
    Woken,
    /// The local log of these aggregates moved: landed events it now holds may be pruned.
    Logged(Vec<AggregateRef>),
    /// The client is closing.
    Close,
    /// Another context drains now.
    Supersede,
}

/// What the executor does next.
#[derive(Debug, Clone, PartialEq)]
pub enum Action {
    /// Read the counts back from storage into the status.
    Recount,
    /// Find aggregates whose landed events an earlier session did not prune.
    FindUnpruned,
    /// Read the pinned batch.
    ReadPin,
    /// Read a pinned batch's events.
    Read(Batch),
    /// Cut the next batch: the first aggregate with pending events after `after` (round robin,
    /// parked ones skipped).
    Cut {
        /// Round-robin position.
        after: Option<AggregateRef>,
    },
    /// Read the batch that would follow `in_flight`, assuming it lands.
    ReadAhead {
        /// The batch in flight.
        in_flight: Batch,
    },
    /// Pin a batch by compare-and-set.
    Pin {
        /// The new pin.
        batch: Batch,
        /// The pin it replaces (`None`: nothing pinned).
        replacing: Option<Batch>,
    },
    /// Open a session (sign a fresh nonce, ask the gateway).
    OpenSession,
    /// Confirm this context still drains, right before sending.
    CheckLock,
    /// Post this body to the write endpoint under the session's token.
    Send {
        /// The request body.
        body: String,
        /// The session's bearer token.
        token: String,
    },
    /// Record that `batch` landed through `through` and pin `then`, by compare-and-set.
    Settle {
        /// The pinned batch.
        batch: Batch,
        /// Highest landed sequence.
        through: u64,
        /// The next pin: the rest of `batch`, or the batch read ahead.
        then: Option<Batch>,
    },
    /// Park an aggregate's rejected events and unpin.
    Park {
        /// What was rejected.
        record: ParkRecord,
        /// The pinned batch.
        batch: Batch,
    },
    /// Delete a chunk of an aggregate's landed events.
    Prune {
        /// Whose.
        aggregate: AggregateRef,
        /// Nothing to send: slower housekeeping may go with it (the IndexedDB outbox compacts
        /// its `ids` store only then; doing it mid-drain stalled a 100,000-event drain).
        idle: bool,
    },
    /// Wait `ms` (replacing any current wait), or less when a signal it names fires.
    Wait {
        /// How long.
        ms: u64,
        /// New work ends it (an append, a discard, since the last [`Action::Cut`]).
        work: bool,
        /// The network coming back ends it.
        network: bool,
    },
    /// Tell the app.
    Report(Report),
    /// Stop; perform nothing more.
    Stop(RunEnd),
}

/// A change the app sees.
#[derive(Debug, Clone, PartialEq)]
pub enum Report {
    /// The drain's state.
    State(SyncState),
    /// Nothing to send: idle, or parked when some aggregate is.
    Idle,
    /// A failure (kept as `lastError` until the next success).
    Error {
        /// The protocol code, if any.
        code: Option<u32>,
        /// What happened.
        message: String,
        /// When.
        at: u64,
    },
    /// Events landed; `removed` of them are no longer pending.
    Synced {
        /// What landed.
        notice: SyncedNotice,
        /// How many events that settles.
        removed: u32,
    },
    /// An aggregate was parked.
    Parked(ParkRecord),
}

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
    Parking(ParkRecord),
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
                self.phase = Phase::Reading(batch);
                self.emit(Action::Read(batch));
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
            Phase::Reading(batch) => (*batch, false),
            Phase::Sending((batch, _)) => (*batch, true),
            Phase::Pinning((batch, _))
            | Phase::Isolating((batch, _))
            | Phase::Authenticating((batch, _))
            | Phase::Checking((batch, _))
            | Phase::Waiting((batch, _)) => (*batch, false),
            Phase::Settling(s) => (s.batch, false),
            _ => return None,
        };
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
                    self.settle(
                        Settling {
                            batch,
                            landed: Vec::new(),
                            through: batch.last_seq,
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
                    self.send(loaded);
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
            (Phase::Parking(record), Input::Parked(result)) => match result {
                Ok(()) => {
                    self.isolating.remove(&record.aggregate);
                    self.attempt = 0;
                    self.ambiguous = false;
                    self.report(Report::Parked(record));
                    self.next_batch();
                }
                Err(e) => self.storage_failed(e, now),
            },
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

    /// The next batch: the one read ahead for the batch that just landed whole, or a new cut.
    fn next_batch(&mut self) {
        let good = |r: &ReadAhead, whole: Option<Batch>| Some(r.in_flight) == whole;
        match self.read_ahead.take() {
            Some(r) if good(&r, self.settled_whole) => match r.result {
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
    fn cut(&mut self, events: Vec<StoredEvent>) {
        let events = self.shape(events);
        let Some(batch) = batch_of(&events) else {
            return self.next_batch();
        };
        self.cursor = Some(batch.aggregate);
        self.settled_whole = None;
        self.phase = Phase::Pinning((batch, events));
        self.emit(Action::Pin {
            batch,
            replacing: None,
        });
    }

    /// An aggregate being isolated after a rejection is sent one event at a time, up to the
    /// end of the rejected batch; past it, full batches again.
    fn shape(&mut self, mut events: Vec<StoredEvent>) -> Vec<StoredEvent> {
        let Some(first) = events.first() else {
            return events;
        };
        if let Some(&(until, _)) = self.isolating.get(&first.aggregate) {
            if first.client_seq <= until {
                events.truncate(1);
            } else {
                self.isolating.remove(&first.aggregate);
            }
        }
        events
    }

    fn read_ahead_done(
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
                    Some((batch, encode(self.client_id, batch.aggregate, events)))
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

    /// A batch is loaded: send it (or wait while offline).
    fn ready(&mut self, loaded: Loaded, now: Now) {
        self.ready_checked(loaded, now, None);
    }

    /// [`Drain::ready`], with the lock check asked for during a settle (`Some`: `None` while it
    /// is out, then its answer). It counts only if the batch goes out now; otherwise its late
    /// answer is dropped as stale and the lock is checked again before the send.
    fn ready_checked(&mut self, loaded: Loaded, now: Now, lock: Option<Option<bool>>) {
        if now.online {
            self.next_probe_at = 0;
        } else {
            // Offline: wait for `online` or the next probe; a probe is one ordinary send.
            if self.next_probe_at == 0 {
                self.next_probe_at = now.ms + self.policy.offline_probe_ms;
            }
            if now.ms < self.next_probe_at {
                let ms = self.next_probe_at - now.ms;
                return self.wait_offline(loaded, ms);
            }
            self.next_probe_at = now.ms + self.policy.offline_probe_ms;
        }
        // Writes need a session: open one first, or renew one about to expire.
        if self
            .session
            .as_ref()
            .is_none_or(|s| now.ms.saturating_add(RENEW_BEFORE_MS) >= s.expires_at)
        {
            self.phase = Phase::Authenticating(loaded);
            self.emit(Action::OpenSession);
            return;
        }
        // Confirm this context still drains (another may have taken over, e.g. from a frozen
        // tab) right before sending.
        match lock {
            Some(Some(true)) => self.send(loaded),
            Some(Some(false)) => self.stop(RunEnd::Superseded),
            // Its answer comes in `Checking`.
            Some(None) => self.phase = Phase::Checking(loaded),
            None => {
                self.phase = Phase::Checking(loaded);
                self.emit(Action::CheckLock);
            }
        }
    }

    fn wait_offline(&mut self, loaded: Loaded, ms: u64) {
        self.phase = Phase::Waiting(loaded);
        self.report(Report::State(SyncState::Offline));
        self.emit(Action::Wait {
            ms,
            work: false,
            network: true,
        });
    }

    /// Reads the batch after `batch` while `batch` is being readied and sent (once per batch).
    fn read_ahead_past(&mut self, batch: &Batch) {
        if self.policy.read_ahead
            && self
                .read_ahead
                .as_ref()
                .is_none_or(|r| r.in_flight != *batch)
        {
            self.read_ahead = Some(ReadAhead {
                in_flight: *batch,
                result: None,
            });
            self.emit(Action::ReadAhead { in_flight: *batch });
        }
    }

    fn send(&mut self, loaded: Loaded) {
        let (batch, events) = &loaded;
        self.report(Report::State(SyncState::Syncing));
        let body = match self.encoded.take() {
            // The same batch means the same stored events: the same bytes.
            Some((encoded, body)) if encoded == *batch => body,
            _ => encode(self.client_id, batch.aggregate, events),
        };
        self.read_ahead_past(batch);
        let token = self
            .session
            .as_ref()
            .map(|s| s.token.clone())
            .unwrap_or_default();
        self.emit(Action::Send { body, token });
        self.maybe_prune(false);
        self.phase = Phase::Sending(loaded);
    }

    fn replied(&mut self, (batch, events): Loaded, reply: &Reply, now: Now) {
        let outcome = classify(reply);
        let unknown = matches!(outcome, Outcome::Unknown { .. });
        let (kind, code, message) = OutcomeKind::of(&outcome);
        self.outcome = Some(OutcomeRecord {
            at: now.ms,
            batch,
            attempt: self.attempt.saturating_add(1),
            kind,
            code,
            message,
            next_attempt_at: None,
        });
        let (attempt, backoff) = (self.attempt, self.policy.backoff);
        let decision = decide(&batch, outcome, attempt, |retry_after| {
            backoff.delay_ms(attempt, now.random, retry_after)
        });
        match decision {
            Decision::Settle { through, duplicate } => {
                let (landed, rest): (Vec<_>, Vec<_>) =
                    events.into_iter().partition(|e| e.client_seq <= through);
                let then = match batch_of(&rest) {
                    Some(rest_batch) => Some((rest_batch, rest)),
                    None => self.take_read_ahead_for(&batch),
                };
                self.settle(
                    Settling {
                        batch,
                        landed,
                        through,
                        duplicate,
                        then,
                        lock: None,
                    },
                    now,
                );
            }
            Decision::Resend {
                delay_ms,
                code,
                message,
                network,
            } => {
                self.attempt = self.attempt.saturating_add(1);
                self.ambiguous |= unknown;
                self.report(Report::Error {
                    code,
                    message,
                    at: now.ms,
                });
                self.due_again(
                    now.ms
                        + if network && !now.online {
                            self.policy.offline_probe_ms
                        } else {
                            delay_ms
                        },
                );
                if network && !now.online {
                    self.next_probe_at = now.ms + self.policy.offline_probe_ms;
                    return self.wait_offline((batch, events), self.policy.offline_probe_ms);
                }
                self.phase = Phase::Waiting((batch, events));
                self.report(Report::State(SyncState::Backoff));
                self.emit(Action::Wait {
                    ms: delay_ms,
                    work: false,
                    network: true,
                });
            }
            Decision::Reauthenticate {
                delay_ms,
                code,
                message,
            } => {
                // Nothing was applied; the events are not at fault. New session, same bytes.
                self.session = None;
                self.attempt = self.attempt.saturating_add(1);
                self.report(Report::Error {
                    code: Some(code),
                    message,
                    at: now.ms,
                });
                self.due_again(now.ms + delay_ms);
                if delay_ms == 0 {
                    return self.ready((batch, events), now);
                }
                self.phase = Phase::Waiting((batch, events));
                self.report(Report::State(SyncState::Unauthorized));
                self.emit(Action::Wait {
                    ms: delay_ms,
                    work: false,
                    network: true,
                });
            }
            Decision::Isolate { code, message } => {
                self.read_ahead = None;
                self.isolating
                    .insert(batch.aggregate, (batch.last_seq, self.ambiguous));
                let head = Batch {
                    last_seq: batch.first_seq,
                    count: 1,
                    ..batch
                };
                let first = events.into_iter().take(1).collect();
                self.report(Report::Error {
                    code: Some(code),
                    message: format!("rejected ({message}); retrying its events one by one"),
                    at: now.ms,
                });
                self.phase = Phase::Isolating((head, first));
                self.emit(Action::Pin {
                    batch: head,
                    replacing: Some(batch),
                });
            }
            Decision::Park { code, message } => {
                self.read_ahead = None;
                let record = ParkRecord {
                    aggregate: batch.aggregate,
                    first_seq: events[0].client_seq,
                    last_seq: events[events.len() - 1].client_seq,
                    count: events.len() as u32,
                    code,
                    message,
                    parked_at: now.ms,
                    may_have_landed: self.ambiguous,
                };
                self.phase = Phase::Parking(record.clone());
                self.emit(Action::Park { record, batch });
            }
        }
    }

    /// Notes in the last outcome when its batch goes out again.
    fn due_again(&mut self, at: u64) {
        if let Some(outcome) = self.outcome.as_mut() {
            outcome.next_attempt_at = Some(at);
        }
    }

    /// The batch read ahead while `batch` was in flight, if it is ready; a read still in
    /// progress is kept for [`Drain::next_batch`].
    fn take_read_ahead_for(&mut self, batch: &Batch) -> Option<Loaded> {
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

    fn settle(&mut self, mut settling: Settling, _now: Now) {
        self.emit(Action::Settle {
            batch: settling.batch,
            through: settling.through,
            then: settling.then.as_ref().map(|(b, _)| *b),
        });
        if settling.then.is_some() {
            // The batch pinned by this settle goes out next: confirm the lock meanwhile, not
            // after the commit (the settle's compare-and-set on the pin fences as well).
            self.emit(Action::CheckLock);
            settling.lock = Some(None);
        }
        self.phase = Phase::Settling(settling);
    }

    fn settled(&mut self, s: Settling, now: Now) {
        self.attempt = 0;
        self.ambiguous = false;
        self.next_probe_at = 0;
        let whole = s.through >= s.batch.last_seq;
        self.settled_whole = whole.then_some(s.batch);
        if let (Some(first), Some(last)) = (s.landed.first(), s.landed.last()) {
            let notice = SyncedNotice {
                aggregate: s.batch.aggregate,
                first_seq: first.client_seq,
                last_seq: last.client_seq,
                event_ids: s.landed.iter().map(|e| e.event_id).collect(),
                duplicate: s.duplicate,
            };
            self.unpruned.insert(s.batch.aggregate);
            self.unpruned_events += s.landed.len() as u64;
            self.report(Report::Synced {
                notice,
                removed: s.landed.len() as u32,
            });
        }
        match s.then {
            Some((batch, events)) => {
                if batch.aggregate != s.batch.aggregate || whole {
                    // The batch read ahead: pinned by the settle.
                    self.cursor = Some(batch.aggregate);
                    self.settled_whole = None;
                    self.ambiguous = self
                        .isolating
                        .get(&batch.aggregate)
                        .is_some_and(|(_, ambiguous)| *ambiguous);
                }
                self.ready_checked((batch, events), now, s.lock);
            }
            None => self.next_batch(),
        }
        self.maybe_prune(false);
    }

    fn pruned(&mut self, result: Result<Pruned, StoreError>, now: Now) {
        let Some(aggregate) = self.pruning.take() else {
            return;
        };
        match result {
            Ok(p) => {
                self.unpruned_events = self.unpruned_events.saturating_sub(u64::from(p.removed));
                if !p.more {
                    self.unpruned.remove(&aggregate);
                }
                if self.unpruned.is_empty() {
                    self.unpruned_events = 0;
                }
                let idle = matches!(self.phase, Phase::Idle);
                self.maybe_prune(idle);
            }
            // Pruning can wait: the events are invisible already; try again when idle next.
            Err(e) => self.storage_error_reported(&e, now),
        }
    }

    /// Deletes landed events, a chunk at a time: when idle, or when too many have piled up.
    fn maybe_prune(&mut self, idle: bool) {
        if self.pruning.is_some() {
            return;
        }
        let Some(aggregate) = self.unpruned.first().copied() else {
            return;
        };
        if idle || self.unpruned_events >= self.policy.prune_high_water {
            self.pruning = Some(aggregate);
            self.emit(Action::Prune { aggregate, idle });
        }
    }

    fn storage_error_reported(&mut self, e: &StoreError, now: Now) {
        self.report(Report::Error {
            code: None,
            message: e.to_string(),
            at: now.ms,
        });
    }

    /// A storage failure on the drain's path: report it, wait, then start again from the pin.
    fn storage_failed(&mut self, e: StoreError, now: Now) {
        self.storage_error_reported(&e, now);
        self.read_ahead = None;
        self.phase = Phase::StorageWait;
        self.emit(Action::Wait {
            ms: self.policy.storage_retry_ms,
            work: false,
            network: false,
        });
    }
}

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;
