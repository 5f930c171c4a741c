//! The send and reply path: a pinned batch made ready (session, lock check, online), sent, and
//! its reply classified into land, retry, wait, isolate or park.

use super::super::super::auth::RENEW_BEFORE_MS;
use super::super::super::batch::batch_of;
use super::super::super::classify::{Action as Decision, Outcome, classify, decide};
use super::super::super::env::Reply;
use super::super::super::inspect::{OutcomeKind, OutcomeRecord};
use super::super::super::model::{AggregateRef, Batch, ParkRecord};
use super::super::super::status::SyncState;
use super::batch::encode_loaded;
use super::{Action, Drain, Loaded, Now, Phase, Report, RunEnd, Settling};

impl Drain {
    /// A batch is loaded: send it (or wait while offline).
    pub(super) fn ready(&mut self, loaded: Loaded, now: Now) {
        self.ready_checked(loaded, now, None);
    }

    /// [`Drain::ready`], with the lock check asked for during a settle (`Some`: `None` while it
    /// is out, then its answer). It counts only if the batch goes out now; otherwise its late
    /// answer is dropped as stale and the lock is checked again before the send.
    pub(super) fn ready_checked(&mut self, loaded: Loaded, now: Now, lock: Option<Option<bool>>) {
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
            Some(Some(true)) => self.send(loaded, now),
            Some(Some(false)) => self.stop(RunEnd::Superseded),
            // Its answer comes in `Checking`.
            Some(None) => self.phase = Phase::Checking(loaded),
            None => {
                self.phase = Phase::Checking(loaded);
                self.emit(Action::CheckLock);
            }
        }
    }

    pub(super) fn wait_offline(&mut self, loaded: Loaded, ms: u64) {
        self.phase = Phase::Waiting(loaded);
        self.report(Report::State(SyncState::Offline));
        self.emit(Action::Wait {
            ms,
            work: false,
            network: true,
        });
    }

    pub(super) fn send(&mut self, loaded: Loaded, now: Now) {
        if let Some(why) = super::verify::misguarded(&loaded.1) {
            return self.park_misguarded(loaded, why, now);
        }
        let body = match self.encoded.take() {
            // The same batch means the same stored events: the same bytes.
            Some((encoded, body)) if encoded == loaded.0 => body,
            _ => match encode_loaded(self.client_id, &loaded.0, &loaded.1) {
                Some(body) => body,
                None => {
                    let why = "its events are not exactly its atomic write's legs, whole".into();
                    return self.park_misguarded(loaded, why, now);
                }
            },
        };
        self.report(Report::State(SyncState::Syncing));
        self.read_ahead_past(&loaded.0);
        let token = self
            .session
            .as_ref()
            .map(|s| s.token.clone())
            .unwrap_or_default();
        self.emit(Action::Send { body, token });
        self.maybe_prune(false);
        self.phase = Phase::Sending(loaded);
    }

    pub(super) fn replied(&mut self, (batch, events): Loaded, reply: &Reply, now: Now) {
        let outcome = classify(reply);
        let unknown = matches!(outcome, Outcome::Unknown { .. });
        let (kind, code, message) = OutcomeKind::of(&outcome);
        self.outcome = Some(OutcomeRecord {
            at: now.ms,
            batch: batch.clone(),
            attempt: self.attempt.saturating_add(1),
            kind,
            code,
            message,
            next_attempt_at: None,
        });
        let (attempt, backoff) = (self.attempt, self.policy.backoff);
        let conditional = events.iter().any(|e| e.guard.is_some());
        let decision = decide(&batch, conditional, outcome, attempt, |retry_after| {
            backoff.delay_ms(attempt, now.random, retry_after)
        });
        let park_landed = matches!(decision, Decision::ParkLanded { .. });
        match decision {
            Decision::Settle { through, duplicate } => {
                let (landed, rest): (Vec<_>, Vec<_>) = if batch.atomic.is_some() {
                    (events, Vec::new()) // whole
                } else {
                    events.into_iter().partition(|e| e.client_seq <= through)
                };
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
                    ..batch.clone()
                };
                let first = events.into_iter().take(1).collect();
                self.report(Report::Error {
                    code: Some(code),
                    message: format!("rejected ({message}); retrying its events one by one"),
                    at: now.ms,
                });
                self.phase = Phase::Isolating((head.clone(), first));
                self.emit(Action::Pin {
                    batch: head,
                    replacing: Some(batch),
                });
            }
            Decision::Park { code, message } | Decision::ParkLanded { code, message } => {
                // 9001 is refused before anything else is looked at: it never landed.
                let may_have_landed = (self.ambiguous || park_landed)
                    && code
                        != celeriant_sync_protocol::codes::celeriant::SHARD_ROUTING_MULTIPLE_SHARDS;
                self.park((batch, events), code, message, may_have_landed, None, now);
            }
            Decision::Verify {
                message,
                current_version,
                named,
            } => self.verify((batch, events), message, current_version, named, now),
        }
    }

    /// Notes in the last outcome when its batch goes out again.
    pub(super) fn due_again(&mut self, at: u64) {
        if let Some(outcome) = self.outcome.as_mut() {
            outcome.next_attempt_at = Some(at);
        }
    }

    /// Parks `loaded` (a rejection, a conflict, a batch that breaks the guard rules): the record
    /// names exactly its events — one record per aggregate, every leg of an atomic write — and
    /// the pin is dropped with it ([`Action::Park`]). `current`: the version a 2003 reported,
    /// and of which aggregate. Nothing read ahead or counted for its read-back survives it.
    pub(super) fn park(
        &mut self,
        (batch, events): Loaded,
        code: u32,
        message: String,
        may_have_landed: bool,
        current: Option<(AggregateRef, u64)>,
        now: Now,
    ) {
        // One record per aggregate: an atomic write's every leg, by its legs (also a leg whose
        // events were not read: it must be discarded with the others); otherwise exactly the
        // events.
        let spans: Vec<(AggregateRef, u64, u64, u32)> = match &batch.atomic {
            Some(legs) => legs
                .iter()
                .map(|l| {
                    let n = (l.last_seq - l.first_seq + 1) as u32;
                    (l.aggregate, l.first_seq, l.last_seq, n)
                })
                .collect(),
            None => events
                .first()
                .map(|e| {
                    let last = events[events.len() - 1].client_seq;
                    (e.aggregate, e.client_seq, last, events.len() as u32)
                })
                .into_iter()
                .collect(),
        };
        let records: Vec<ParkRecord> = spans
            .into_iter()
            .map(|(aggregate, first_seq, last_seq, count)| ParkRecord {
                aggregate,
                first_seq,
                last_seq,
                count,
                code,
                message: message.clone(),
                parked_at: now.ms,
                may_have_landed,
                current_version: current.filter(|(a, _)| *a == aggregate).map(|(_, v)| v),
                atomic: batch.atomic.clone(),
            })
            .collect();
        self.lagging = None;
        self.read_ahead = None;
        self.phase = Phase::Parking(records.clone());
        self.emit(Action::Park { records, batch });
    }
}
