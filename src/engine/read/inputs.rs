//! What the read machine ([`super::machine::Reader`]) takes and yields: its inputs, its
//! actions, what a stream says and how a page ends, and the state it reports. Kept apart from
//! the machine's rules so each file reads on its own.

use super::super::model::AggregateRef;
use super::message::ReadTag;
use super::streams::StreamId;

/// The read side's state, as `status().read` reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReadState {
    /// Nothing is watched.
    Idle,
    /// The stream is being opened (or reopened after a failure).
    Connecting,
    /// The stream is open and every watched aggregate is caught up.
    Connected,
    /// Pages are being read into the local log.
    CatchingUp,
    /// The platform reports no network: views answer from the local log.
    Offline,
}

impl ReadState {
    /// The state's name as the JS API spells it.
    pub fn as_str(self) -> &'static str {
        match self {
            ReadState::Idle => "idle",
            ReadState::Connecting => "connecting",
            ReadState::Connected => "connected",
            ReadState::CatchingUp => "catchingUp",
            ReadState::Offline => "offline",
        }
    }
}

/// What the change stream said.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Note {
    /// Subscribed: everything from now on will be notified.
    Ready {
        /// The gateway said `"deletedResets": true`: its stream forgets the versions it sent
        /// only on a deletion, so a `changed` on it below one it sent follows a deletion. False
        /// when it does not say (a gateway from before it forgot them on every `reset`, trims
        /// included).
        deleted_resets: bool,
    },
    /// The aggregate reached `version`.
    Changed {
        /// The aggregate.
        aggregate: AggregateRef,
        /// Its version now.
        version: u64,
    },
    /// The aggregate was trimmed or deleted: read it again from scratch.
    Reset {
        /// The aggregate.
        aggregate: AggregateRef,
        /// Deleted (its versions may restart), else trimmed (a trim keeps the tip). `true`
        /// when the gateway does not say (one from before the field): what every `reset` was
        /// taken for then.
        deleted: bool,
    },
    /// The gateway dropped or lagged: catch up everything.
    Resync,
}

/// How reading one page ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PageEnd {
    /// Stored; `more`: the next page exists.
    Stored {
        /// Whether to read on.
        more: bool,
        /// The version the aggregate's local log reaches now (its cursor's): a catch-up that
        /// ends below the highest version a `changed` notified is not caught up (the page was
        /// answered by a replica that lags). Unused when `more`.
        version: u64,
    },
    /// The versions asked for were trimmed; the server still has them from `min_version`.
    Trimmed {
        /// The lowest version still available.
        min_version: u64,
    },
    /// The aggregate is gone on the server (deleted, or recreated below the local cursor), or
    /// the reply came from a replica behind the cursor: read again from scratch, the floor kept.
    Gone,
    /// Not read (network, timeout, a refusal); try again later.
    Failed {
        /// Why.
        message: String,
    },
}

/// What happened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Input {
    /// One more subscriber (any context of the device) wants the aggregate watched.
    Subscribe(AggregateRef),
    /// One subscriber less.
    Unsubscribe(AggregateRef),
    /// Catch this aggregate up now (a batch of it just landed, a `read` of a context of an
    /// older release); its end answers no `read`.
    CatchUp(AggregateRef),
    /// The timer of an [`Action::RetryLater`] of the aggregate ran out: catch it up now. Kept
    /// apart from [`Input::CatchUp`] because it ends the retry pending, so the next miss below
    /// a floor asks for another (inferred from the wall clock, a clock stepping back left an
    /// aggregate below its floor with no retry to come), and only these count for the
    /// backoff.
    Retry(AggregateRef),
    /// A `read` of the aggregate asks for a catch-up: the [`Action::CaughtUp`] of the first
    /// catch-up whose page request begins after this names `tag` (one already under way, its
    /// page asked before, does not).
    Read(AggregateRef, ReadTag),
    /// A stream said something.
    Stream(StreamId, Note),
    /// What a stream's `ready` (fed just before it) says each aggregate's version was once
    /// the stream was registered: an aggregate whose cursor is at its tip need not be read for
    /// this `ready`'s catch-up ([`Action::FetchPageUnlessAt`]). Not every gateway sends them.
    Tips(StreamId, Vec<(AggregateRef, u64)>),
    /// A stream ended (failed, closed, or silent for too long).
    StreamEnded(StreamId),
    /// The gateway refused a stream as naming too many aggregates (400, 40020, or 413 for a
    /// body past its bound: its `--watch-max-aggregates` is below what this device puts in one
    /// stream).
    StreamTooLarge(StreamId),
    /// The gateway refused a stream for the client's stream count (429, 42920: its
    /// `--watch-max-streams-per-client` is at or below what this device opens).
    StreamTooMany(StreamId),
    /// [`Action::FetchPage`] ended.
    Page {
        /// The aggregate.
        aggregate: AggregateRef,
        /// How.
        end: PageEnd,
    },
    /// [`Action::ResetLog`] is done.
    LogReset(AggregateRef),
    /// The current [`Action::Wait`] ran out.
    TimerFired,
    /// The network is back (or the wait was cut short).
    Woken,
    /// The platform's view of the network changed.
    Online(bool),
}

/// What the executor does next.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Action {
    /// Open a change stream for these aggregates.
    OpenStream {
        /// What its inputs will carry.
        id: StreamId,
        /// What it watches.
        aggregates: Vec<AggregateRef>,
    },
    /// Close this change stream (its shard's new one, if any, is opened by the next action).
    CloseStream(StreamId),
    /// These watched aggregates fit in no stream (reported with code 40020); the list replaces
    /// the previous one.
    Unwatched(Vec<AggregateRef>),
    /// Read the aggregate's next page (from its local cursor) and store it with the cursor.
    FetchPage(AggregateRef),
    /// As [`Action::FetchPage`], but answer `Stored { more: false, .. }` without a request when the
    /// cursor's version equals `tip` (the server's version as of the stream's `ready`, and no
    /// change of it notified since).
    FetchPageUnlessAt(AggregateRef, u64),
    /// Ask the server what is left of the aggregate after a `reset` (its first version: a 410
    /// says the minimum; a tip below the cursor says it is gone); answered as a [`PageEnd`].
    Probe(AggregateRef),
    /// Drop the aggregate's local log below `min_version` (all of it when `gone`); the cursor
    /// moves up to just below `min_version` if it was lower.
    ResetLog {
        /// The aggregate.
        aggregate: AggregateRef,
        /// The lowest version the server still has.
        min_version: u64,
        /// Deleted: nothing is kept, the cursor restarts at 0.
        gone: bool,
    },
    /// Catch the aggregate up again after `ms` (its last page failed, or its catch-up ended
    /// below the version notified), feeding [`Input::Retry`] then.
    RetryLater {
        /// The aggregate.
        aggregate: AggregateRef,
        /// How long to wait.
        ms: u64,
    },
    /// Wait (replacing any current wait), cut short by the network coming back.
    Wait(u64),
    /// The read side's state changed.
    Report(ReadState),
    /// The aggregate's catch-up ended — or ended below its floor (the highest version a
    /// `changed` notified, [`super::floors`]) at a version that some reads need no more than,
    /// and goes on (retried, or read again for a newer floor) for the rest.
    CaughtUp {
        /// The aggregate.
        aggregate: AggregateRef,
        /// `true` when it reached the server's tip as known, or (below the floor) the
        /// version each of `reads` needs; `false`: a page failed, or the floor was given up on.
        ok: bool,
        /// The `read`s it answers ([`Input::Read`]): those asked before a page request of
        /// this catch-up began, so before its last one; below the floor, only those whose own
        /// floor (the one in force when they first boarded a page) the log reaches, the others
        /// waiting for a later catch-up (empty: a catch-up no `read` waits for, or one that
        /// began before they asked — the next one answers them).
        reads: Vec<ReadTag>,
    },
    /// The gateway notified `notified` for the aggregate, yet its catch-ups, retried with
    /// backoff more than [`super::floors::BEHIND_RETRIES`] times and for
    /// [`super::floors::GIVE_UP_MS`] without moving the cursor, still end at
    /// `reached`: the reader stops waiting for that version (for the executor to log; the
    /// catch-up ended as [`Action::CaughtUp`] with `ok: false` just before).
    NeverServed {
        /// The aggregate.
        aggregate: AggregateRef,
        /// The highest version a `changed` notified.
        notified: u64,
        /// The version its local log reaches.
        reached: u64,
    },
}
