//! A 2003 on a conditional batch, and the trap of `docs/protocol.md` 6.1: Celeriant checks the
//! version guard before idempotency, so a conditional write that landed but whose answer was
//! lost gets 2003 on its identical resend. A 2003 is therefore never taken as a conflict before
//! the aggregate was read back:
//!
//! * the batch at the guard's version + 1 (the only one such a write can have created: it lands
//!   only on exactly its expected version) was written by this client id and holds the batch's
//!   first sequence → it **landed**: settled like a 2002;
//! * another batch is there, or none (and the 2003 did not report the aggregate past the
//!   expected version) → a real **conflict**: parked with 2003 and the current version, never
//!   resent unchanged;
//! * none, although the 2003 reported a version past the expected one → the read lags the
//!   write (a read replica behind this very write) or does not show everything (a policy that
//!   hides it): like a failed read, back off, resend the same batch and read again; only after
//!   [`MAX_LAGGING_READS`] such reads in a row parked with 2003, flagged as possibly landed;
//! * the version was trimmed away → nobody can tell: parked with 2003, flagged as possibly
//!   landed;
//! * the read failed → back off and resend the same pinned batch (a new 2003 reads again):
//!   never a guess.
//!
//! Before any batch is encoded, [`misguarded`] checks it keeps the conditional-append rules
//! (all its events carry the first one's guard, and a guarded batch is exactly its guard's
//! sequences); one that does not is parked, flagged as possibly landed, never sent.
//!
//! The machine reads back on every 2003 of a conditional batch, ambiguous earlier attempts or
//! not: one read per conflict is cheap, and the rule needs no bookkeeping to be right.

use super::super::super::env::ReadBack;
use super::super::super::model::{AggregateRef, Guard, MISGUARDED, StoredEvent};
use super::super::super::status::SyncState;
use super::{Action, Conflict, Drain, Loaded, Now, Phase, Report, Settling};

/// Read-backs in a row that show nothing where the 2003 said a version is, before the batch is
/// parked as possibly landed (a lagging read usually catches up within a retry or two).
pub(super) const MAX_LAGGING_READS: u32 = 5;

/// The code of a version-guard conflict.
const CONFLICT: u32 = celeriant_sync_protocol::codes::celeriant::OPTIMISTIC_CONCURRENCY_VIOLATION;

/// Why `events` (a batch about to be encoded) breaks the conditional-append rules, if it does.
/// An atomic write's events are checked leg by leg (each leg alone is held to the rules of a
/// conditional append; that the legs are whole is [`super::batch::encode_loaded`]'s check).
pub(super) fn misguarded(events: &[StoredEvent]) -> Option<String> {
    if events.first()?.atomic.is_some() {
        return events
            .chunk_by(|a, b| a.aggregate == b.aggregate)
            .find_map(misguarded_run);
    }
    misguarded_run(events)
}

/// [`misguarded`] for one aggregate's events.
fn misguarded_run(events: &[StoredEvent]) -> Option<String> {
    let (first, last) = (events.first()?, events.last()?);
    if events.iter().any(|e| e.guard != first.guard) {
        return Some("its events do not all carry the same version guard".into());
    }
    let g = first.guard?;
    (first.client_seq != g.first_seq || last.client_seq != g.last_seq).then(|| {
        format!(
            "it holds sequences {}..={}, but its version guard covers {}..={}",
            first.client_seq, last.client_seq, g.first_seq, g.last_seq
        )
    })
}

impl Drain {
    /// A batch [`misguarded`] refused: parked, flagged as possibly landed (it was pinned, and
    /// whoever wrote it may have sent it), never sent.
    pub(super) fn park_misguarded(&mut self, loaded: Loaded, why: String, now: Now) {
        let message = format!(
            "a batch that breaks the conditional-append rules was not sent ({why}): the \
             outbox was written by something that does not keep them; check the aggregate, \
             then discard or append again"
        );
        self.park(loaded, MISGUARDED, message, true, None, now);
    }

    /// The guarded part of `loaded` a 2003 is about: the leg it names (`named`), or the first
    /// guarded one when it names none; with that leg's aggregate. `None` when the 2003 names an
    /// aggregate and expected version no leg of it has.
    fn judged_leg(
        loaded: &Loaded,
        named: Option<(AggregateRef, u64)>,
    ) -> Option<(AggregateRef, Guard)> {
        let mut guarded = loaded
            .1
            .iter()
            .filter_map(|e| Some((e.aggregate, e.guard?)));
        match named {
            Some((aggregate, expected)) => {
                guarded.find(|(a, g)| *a == aggregate && g.expected_version == expected)
            }
            None => guarded.next(),
        }
    }

    /// A conditional batch got 2003: read its aggregate back at the version it would have made.
    /// Not when the 2003 itself settles it: one that names another aggregate or expected
    /// version cannot be trusted (possibly landed), and one that reports the aggregate at or
    /// below the expected version proves the write did not land (it would have made
    /// `expected + 1`).
    pub(super) fn verify(
        &mut self,
        loaded: Loaded,
        message: String,
        current_version: Option<u64>,
        named: Option<(AggregateRef, u64)>,
        now: Now,
    ) {
        let Some((_, first_guard)) = Self::judged_leg(&loaded, None) else {
            return; // only a conditional batch is verified
        };
        let judged = Self::judged_leg(&loaded, named);
        let conflict = Conflict {
            message,
            current_version,
            // An untrusted 2003 keeps what it said on the aggregate it named, if it is a leg.
            leg: judged.unwrap_or((named.map_or(loaded.0.aggregate, |n| n.0), first_guard)),
        };
        if let Some((aggregate, expected)) = named
            && judged.is_none()
        {
            let why = format!(
                "{} (the 2003 names aggregate {}/{} at expected version {expected}, not a \
                 guarded aggregate of this write with that expected version: its answer cannot \
                 be trusted, so whether this write landed cannot be told; check the aggregate, \
                 then discard or append again)",
                conflict.message, aggregate.type_id, aggregate.id,
            );
            return self.park_conditional(loaded, &conflict, why, true, now);
        }
        let (aggregate, guard) = conflict.leg;
        if let Some(v) = current_version.filter(|v| *v <= guard.expected_version) {
            let why = format!(
                "{} (the aggregate is at version {v}, not past {}: this write did not land)",
                conflict.message, guard.expected_version
            );
            return self.park_conditional(loaded, &conflict, why, false, now);
        }
        let token = self
            .session
            .as_ref()
            .map(|s| s.token.clone())
            .unwrap_or_default();
        self.emit(Action::ReadBack {
            aggregate,
            version: guard.expected_version + 1,
            token,
        });
        self.phase = Phase::Verifying(loaded, conflict);
    }

    /// What the read-back found decides: landed, conflict, or try again.
    pub(super) fn verified(
        &mut self,
        (batch, events): Loaded,
        conflict: Conflict,
        found: ReadBack,
        now: Now,
    ) {
        let (_, guard) = conflict.leg;
        // The leg's first sequence: a guard spans exactly its append's (or leg's) events.
        let first_seq = guard.first_seq;
        let (message, may_have_landed) = match found {
            // Its own earlier attempt: it landed. At whatever version the read shows it: our
            // (client id, sequence) in the log is our events, landed.
            ReadBack::Found(Some(b))
                if b.client_id == self.client_id && b.client_seqs.contains(&first_seq) =>
            {
                self.lagging = None;
                let then = self.take_read_ahead_for(&batch);
                let through = batch.last_seq;
                return self.settle(
                    Settling {
                        batch,
                        landed: events,
                        through,
                        duplicate: true,
                        then,
                        lock: None,
                    },
                    now,
                );
            }
            // The 2003 said the version exists, the read does not show it: it lags this very
            // write, or does not show everything (a policy hides it). Read again a few times
            // (after resending the same batch); then parked as possibly landed, never as a
            // proven conflict. A bare 2003 (no current version: Celeriant's conflict list named
            // none of the request's aggregates) proves nothing about this aggregate either, so
            // an empty read after it is treated the same way.
            ReadBack::Found(None)
                if conflict
                    .current_version
                    .is_none_or(|v| v > guard.expected_version) =>
            {
                let reported = match conflict.current_version {
                    Some(v) => format!("the server reported version {v}"),
                    None => "the server reported a conflict without a version".to_string(),
                };
                let lagged = match self.lagging.take() {
                    Some((b, n)) if b == batch => n + 1,
                    _ => 1,
                };
                if lagged < MAX_LAGGING_READS {
                    self.lagging = Some((batch.clone(), lagged));
                    let why = format!(
                        "version {} not visible yet although {reported}",
                        guard.expected_version + 1,
                    );
                    return self.read_again((batch, events), why, now);
                }
                (
                    format!(
                        "{} (the read-back did not see version {} although {reported}, \
                         {lagged} times: whether this write landed cannot be told; check the \
                         aggregate, then discard or append again)",
                        conflict.message,
                        guard.expected_version + 1,
                    ),
                    true,
                )
            }
            ReadBack::Found(other) => (
                format!(
                    "{} (read back: {}; this write did not land)",
                    conflict.message,
                    match other {
                        Some(b) if b.version == guard.expected_version + 1 =>
                            format!("version {} was written by another write", b.version),
                        _ => format!("there is no version {}", guard.expected_version + 1),
                    }
                ),
                false,
            ),
            ReadBack::Trimmed => (
                format!(
                    "{} (version {} was trimmed, so whether this write landed cannot be read \
                     back: check the aggregate, then discard or append again)",
                    conflict.message,
                    guard.expected_version + 1
                ),
                true,
            ),
            ReadBack::Refused(why) => (
                format!(
                    "{} (reading the aggregate back was refused: {why}; whether this write \
                     landed cannot be told: check the aggregate, then discard or append again)",
                    conflict.message
                ),
                true,
            ),
            ReadBack::Failed(why) => return self.read_again((batch, events), why, now),
        };
        self.park_conditional((batch, events), &conflict, message, may_have_landed, now);
    }

    /// Parks a conditional batch with 2003 and the current version the 2003 reported.
    fn park_conditional(
        &mut self,
        loaded: Loaded,
        conflict: &Conflict,
        message: String,
        may_have_landed: bool,
        now: Now,
    ) {
        let current = conflict.current_version.map(|v| (conflict.leg.0, v));
        self.park(loaded, CONFLICT, message, may_have_landed, current, now);
    }

    /// Never a guess: the same pinned batch again after a backoff (its new 2003 is read back).
    fn read_again(&mut self, (batch, events): Loaded, why: String, now: Now) {
        let delay = self.policy.backoff.delay_ms(self.attempt, now.random, None);
        self.attempt = self.attempt.saturating_add(1);
        self.report(Report::Error {
            code: Some(CONFLICT),
            message: format!(
                "a conditional write got 2003 and reading its aggregate back did not tell \
                 ({why}); it is resent to find out"
            ),
            at: now.ms,
        });
        self.due_again(now.ms + delay);
        self.phase = Phase::Waiting((batch, events));
        self.report(Report::State(SyncState::Backoff));
        self.emit(Action::Wait {
            ms: delay,
            work: false,
            network: true,
        });
    }
}
