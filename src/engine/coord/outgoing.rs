//! Outgoing messages that only say "something changed", held briefly and merged, so that a
//! burst of appends costs a few `BroadcastChannel` posts instead of two or three per append.
//!
//! A post is not cheap (a structured clone and a hop through the browser's process), and on the
//! append path it cost as much as the IndexedDB `add` itself. Three kinds are safe to merge,
//! because what they tell is a latest state or a sum, not an event that must arrive on its own:
//!
//! * `Status`: the drainer's latest status replaces the one held;
//! * `Appended { n }`: the counts add up;
//! * `Read(Touched(aggregate))`: each aggregate once (the receiver rebuilds its view from
//!   IndexedDB, which already holds every change).
//!
//! Everything else (landed and parked notices, heartbeats, the read side's requests) is posted at
//! once, as before. The first mergeable message after a quiet spell goes out on the next task;
//! later ones wait until [`FLUSH_EVERY_MS`] after the last flush. Closing flushes what is held;
//! a context that stops draining forgets the status it held.

use super::message::Message;
use crate::engine::model::AggregateRef;
use crate::engine::read::message::ReadMessage;
use crate::engine::sorted::SortedSet;
use crate::engine::status::Status;

/// Mergeable messages leave at most this often.
pub(crate) const FLUSH_EVERY_MS: u64 = 40;

/// What is held until the next flush.
#[derive(Debug, Default)]
pub struct Outgoing {
    status: Option<Status>,
    appended: u64,
    touched: SortedSet<AggregateRef>,
    /// A flush is scheduled.
    scheduled: bool,
    /// When the last flush ran (`None` before the first).
    last_flush: Option<u64>,
}

/// What to do with a message handed to [`Outgoing::hold`].
#[derive(Debug, PartialEq)]
pub enum Hold {
    /// Not mergeable: post it now.
    PostNow(Message),
    /// Held; a flush is already scheduled.
    Held,
    /// Held; schedule a flush in this many milliseconds.
    FlushIn(u64),
}

impl Outgoing {
    /// Takes `message` if it is mergeable; says whether to post it now or when to flush.
    pub fn hold(&mut self, message: Message, now: u64) -> Hold {
        match message {
            Message::Status(status) => self.status = Some(status),
            Message::Appended { n } => self.appended += n,
            Message::Read(ReadMessage::Touched(aggregate)) => {
                self.touched.insert(aggregate);
            }
            other => return Hold::PostNow(other),
        }
        if self.scheduled {
            return Hold::Held;
        }
        self.scheduled = true;
        let due = self.last_flush.map_or(now, |last| last + FLUSH_EVERY_MS);
        Hold::FlushIn(due.saturating_sub(now))
    }

    /// Everything held, merged, in the order: counts, status, touched aggregates.
    pub fn flush(&mut self, now: u64) -> Vec<Message> {
        self.scheduled = false;
        self.last_flush = Some(now);
        let mut out = Vec::new();
        if self.appended > 0 {
            out.push(Message::Appended {
                n: std::mem::take(&mut self.appended),
            });
        }
        if let Some(status) = self.status.take() {
            out.push(Message::Status(status));
        }
        out.extend(
            std::mem::take(&mut self.touched)
                .into_iter()
                .map(|a| Message::Read(ReadMessage::Touched(a))),
        );
        out
    }

    /// This context stopped draining: the status it held is no longer the drainer's, and
    /// posted later it would overwrite the new drainer's in every follower.
    pub fn forget_status(&mut self) {
        self.status = None;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::engine::conformance::aggregate;
    use crate::engine::read::machine::ReadState;
    use crate::engine::status::{Role, SyncState};

    fn touched(i: u128) -> Message {
        Message::Read(ReadMessage::Touched(aggregate(i)))
    }

    #[test]
    fn merges_what_is_mergeable_and_passes_the_rest() {
        let mut out = Outgoing::default();
        assert_eq!(
            out.hold(Message::Heartbeat, 0),
            Hold::PostNow(Message::Heartbeat)
        );
        assert_eq!(
            out.hold(touched(1), 0),
            Hold::FlushIn(0),
            "first after quiet: now"
        );
        assert_eq!(out.hold(touched(1), 1), Hold::Held);
        assert_eq!(out.hold(touched(2), 1), Hold::Held);
        assert_eq!(out.hold(Message::Appended { n: 2 }, 1), Hold::Held);
        assert_eq!(out.hold(Message::Appended { n: 3 }, 1), Hold::Held);
        let status = |pending| Status {
            state: SyncState::Idle,
            pending,
            parked: 0,
            last_error: None,
            role: Role::Drainer,
            read: ReadState::Idle,
            read_refused: Vec::new(),
        };
        let (older, newer) = (status(1), status(5));
        assert_eq!(out.hold(Message::Status(older), 1), Hold::Held);
        assert_eq!(out.hold(Message::Status(newer.clone()), 1), Hold::Held);
        assert_eq!(
            out.flush(2),
            vec![
                Message::Appended { n: 5 },
                Message::Status(newer),
                touched(1),
                touched(2)
            ]
        );
        assert_eq!(out.flush(3), vec![], "nothing held twice");

        out.hold(Message::Status(status(7)), 50);
        out.hold(touched(3), 50);
        out.forget_status();
        assert_eq!(
            out.flush(90),
            vec![touched(3)],
            "a former drainer's status is dropped"
        );
    }

    #[test]
    fn later_flushes_wait_for_the_interval() {
        let mut out = Outgoing::default();
        assert_eq!(out.hold(touched(1), 100), Hold::FlushIn(0));
        out.flush(100);
        assert_eq!(
            out.hold(touched(1), 110),
            Hold::FlushIn(FLUSH_EVERY_MS - 10)
        );
        out.flush(140);
        assert_eq!(out.hold(touched(1), 500), Hold::FlushIn(0), "quiet again");
    }
}
