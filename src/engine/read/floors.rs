//! The versions the change stream notified, per aggregate (the **floors**), so a catch-up
//! answered by a replica that lags is not taken for caught up.
//!
//! With the Celeriant backend a page may be read from a replica behind the one that notified:
//! after `changed` said "the aggregate reached version N", a catch-up could end (no `next`)
//! with the local log below N, and nothing would tell the client again until the next change or
//! resync — a lost notification, the view behind. So the reader remembers the highest version
//! notified for each aggregate, and a catch-up that ends below it is retried with backoff
//! instead of ending caught up.
//!
//! A floor goes when it is reached, when a `reset` says the aggregate was deleted (after a
//! deletion its versions restart, so an older floor would never be reached; a `reset` that
//! does not say, from a gateway before `deleted`, counts as one), when the last subscriber
//! goes (unless reads still wait for it: then when no read waits any more, see
//! `Reader::page_end`), and with the reader (a new one starts without). A trim (a 410,
//! `Trimmed`, or a `reset` saying `deleted: false`) keeps it: a trim keeps the tip. So does a
//! page that finds the aggregate `Gone` (its tip below the cursor): deleted while no `reset`
//! reached this device, or only a replica behind the cursor, whose re-read must not answer
//! the reads below their floor; a real deletion ends it as above, by the recreated versions
//! reaching the floor, or by the give-up.
//!
//! The floor a read needs is the one in force when it first boarded a page request
//! ([`Floors::board`], kept per read by [`super::catch_up`]): a catch-up that reaches it
//! answers the read even if `changed`s raised the floor meanwhile. A page that reaches the
//! floor in force when it began is no miss either (the change that raised it queued another
//! catch-up).
//!
//! A `changed` below the floor replaces it only when it comes on the stream that raised the
//! floor, and that stream's `ready` said `deletedResets` (its gateway forgets what it sent
//! only on a deletion; one from before it forgot on every `reset`, trims included, so a lower
//! version there may follow a trim): versions advance on one stream, so going back there
//! means the aggregate was deleted and recreated, its `reset` lost (the old floor would not
//! be reached until the new versions pass it, reads waiting all along). On another stream (a
//! reconnection, perhaps to another gateway of a fleet, or to a node still catching up) a
//! lower version says nothing of the aggregate going back: the floor keeps the higher one.
//!
//! Bounded: a gateway that notifies a version it never serves makes the reader retry, with
//! the drain's backoff (250 ms doubling to its cap per retry timer fired), until a miss that
//! is both the ninth in a row ([`BEHIND_RETRIES`]) and [`GIVE_UP_MS`] or more after the first
//! without the cursor moving; then the floor is dropped and the executor logs it. Nothing is
//! remembered of it: the next `changed` of the aggregate, of any version (even the one given
//! up on), arms a floor again, as any version may be a recreation's whose reads must not be
//! answered below it (arming a floor never answers a read wrongly; dropping or lowering one
//! can). The cost: one more bounded cycle of retries (at least 30 s and about nine timer pages
//! to its give-up) per `changed` a gateway sends after a give-up. This gateway sends a version
//! already notified on a stream again only after a deletion (a stream's `sent`), and a new
//! stream's tips come in `ready`, which arms nothing; a hostile gateway sending a fresh `changed`
//! every 31 s keeps one aggregate retrying for good, about 20 timer pages a minute, one page in
//! flight for the whole reader. A floor replaced by a recreation starts its own cycle (carrying
//! the old floor's misses and clock made a recreation's first page below the old `at` a give-up,
//! and the read after it was answered below the recreation's version). A retry that moves the
//! cursor (the replica catching up under a stream of changes) starts the clock again: each move is a version served, so this lasts as long as the aggregate keeps
//! being written and the replica keeps lagging — bounded by the write rate, not by a count.
//!
//! At most one retry is pending per aggregate: from the [`Action::RetryLater`] asking for it
//! until its [`Input::Retry`], not inferred from the wall clock, which may step back. A failed
//! page's retry feeds the same input, ending the pending one, so a page that fails may start
//! one more chain of timers beside it. Chains never multiply: a timer fired reads one page at
//! most (catch-ups queued coalesce) and a page asks for one timer at most, so an aggregate has
//! at most one chain plus one per page that failed outside a chain; each ends with the floor
//! (reached, given up on, dropped: a page then asks for none) or at a page that asks for no
//! timer (it does not fail, and reaches the floor or finds a retry pending). The browser's
//! executor also keeps at most 64 timers' handles.

use super::super::model::AggregateRef;
use super::super::sorted::SortedMap;
#[cfg(doc)]
use super::inputs::{Action, Input};
use super::streams::StreamId;

/// How long catch-ups may keep ending below a floor without moving the cursor, from the first
/// of them, before the floor is dropped. Time, not only a count: reads, landed batches and
/// `ready`s also end catch-ups, and would use up a count in a few round trips.
pub const GIVE_UP_MS: u64 = 30_000;

/// And how many of them at least: time alone would give up at the first miss after a long
/// outage (a page that failed is no miss), with a single page of a lagging replica.
pub const BEHIND_RETRIES: u32 = 8;

/// One aggregate's floor.
#[derive(Debug, Clone, Copy)]
struct Floor {
    /// The highest version notified.
    version: u64,
    /// The stream that notified it (the last to notify it, if several did).
    stream: StreamId,
    /// Catch-ups in a row that ended below it without moving the cursor.
    misses: u32,
    /// Where the last of them ended.
    at: u64,
    /// When the first of them ended.
    since_ms: u64,
    /// Retries asked for since the cursor last moved (the backoff's attempt): only the retry
    /// timer's, not the catch-ups that reads, landed batches and `ready`s drive.
    retries: u32,
    /// A retry asked for ([`Reached::Behind`] with `retry`) has not come yet.
    retry_pending: bool,
}

impl Floor {
    fn new(version: u64, stream: StreamId) -> Self {
        Floor {
            version,
            stream,
            misses: 0,
            at: 0,
            since_ms: 0,
            retries: 0,
            retry_pending: false,
        }
    }
}

/// What a catch-up that ended at some version means.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Reached {
    /// At or above the floor (or none): caught up; the floor is dropped.
    Yes,
    /// Below it: retry after the backoff of attempt `attempt` (0 first), unless `retry` is
    /// false (one is pending already).
    Behind {
        /// Retries asked for since the cursor last moved.
        attempt: u32,
        /// Whether to ask for a retry (none pending).
        retry: bool,
    },
    /// Below it more than [`BEHIND_RETRIES`] times and [`GIVE_UP_MS`] after the first miss
    /// without the cursor moving: the floor `notified` is dropped.
    GaveUp {
        /// The version notified and never served.
        notified: u64,
    },
}

/// Every aggregate's floor.
#[derive(Debug, Default)]
pub(crate) struct Floors {
    by_aggregate: SortedMap<AggregateRef, Floor>,
    /// The floor in force when the page request in flight began, with its aggregate.
    boarded: Option<(AggregateRef, u64)>,
}

impl Floors {
    /// A `changed` on stream `stream` said the aggregate reached `version`; `goes_back`: that
    /// stream's `ready` said a version below one it sent follows a deletion (`deletedResets`).
    pub(crate) fn notified(
        &mut self,
        aggregate: AggregateRef,
        version: u64,
        stream: StreamId,
        goes_back: bool,
    ) {
        // Nothing given up on is remembered: any version, even the one given up on notified
        // again, may be a recreation's (its `reset` lost or swallowed by a `resync`), and
        // arming a floor never answers a read wrongly, only dropping or lowering one can.
        if let Some(floor) = self.by_aggregate.get_mut(&aggregate)
            && version < floor.version
        {
            if floor.stream != stream || !goes_back {
                // Another stream (a reconnection, perhaps to a node behind): versions only
                // advance on one stream, so this says nothing of them going back. Nor on a
                // stream of a gateway that forgets what it sent on a trim's `reset` too (no
                // `deletedResets`): after a trim whose `reset` a `resync` swallowed, a node
                // still catching up may send a lower version. The floor keeps the higher one.
                return;
            }
            // Went back on the stream that raised the floor: deleted and recreated, its
            // `reset` lost. The old floor means nothing; a retry asked for is still pending.
            *floor = Floor {
                retry_pending: floor.retry_pending,
                ..Floor::new(version, stream)
            };
            return;
        }
        let floor = self
            .by_aggregate
            .get_or_insert_with(aggregate, || Floor::new(version, stream));
        floor.version = version.max(floor.version);
        floor.stream = stream;
    }

    /// The floor means nothing any more (a deletion, no subscriber).
    pub(crate) fn forget(&mut self, aggregate: &AggregateRef) {
        self.by_aggregate.remove(aggregate);
    }

    /// A page request of `aggregate` begins: the floor now (0: none), which the reads
    /// boarding it need.
    pub(crate) fn board(&mut self, aggregate: AggregateRef) -> u64 {
        let version = self.by_aggregate.get(&aggregate).map_or(0, |f| f.version);
        self.boarded = Some((aggregate, version));
        version
    }

    /// Whether a catch-up of `aggregate` ending at `version` reached the floor in force when
    /// its last page request began (then it is no miss).
    pub(crate) fn served(&self, aggregate: &AggregateRef, version: u64) -> bool {
        match self.boarded {
            Some((a, floor)) if a == *aggregate => version >= floor,
            _ => !self.above(aggregate, version),
        }
    }

    /// Whether a `changed` notified more than `version`.
    pub(crate) fn above(&self, aggregate: &AggregateRef, version: u64) -> bool {
        self.by_aggregate
            .get(aggregate)
            .is_some_and(|f| f.version > version)
    }

    /// A catch-up of the aggregate ended at `now_ms` with its log at `version`; `served`: it
    /// reached the floor its page request began with (then it is no miss).
    pub(crate) fn reached(
        &mut self,
        aggregate: AggregateRef,
        version: u64,
        served: bool,
        now_ms: u64,
    ) -> Reached {
        let Some(floor) = self.by_aggregate.get_mut(&aggregate) else {
            return Reached::Yes;
        };
        if version >= floor.version {
            self.by_aggregate.remove(&aggregate);
            return Reached::Yes;
        }
        if version > floor.at || served || floor.misses == 0 {
            // The replica serves more than last time (it is catching up), or served what was
            // asked: the count, the clock and the backoff start again.
            floor.misses = 0;
            floor.since_ms = now_ms;
            floor.retries = 0;
        }
        floor.at = version;
        if served {
            return Reached::Behind {
                attempt: 0,
                retry: false,
            };
        }
        floor.misses += 1;
        if floor.misses > BEHIND_RETRIES && now_ms.saturating_sub(floor.since_ms) >= GIVE_UP_MS {
            let notified = floor.version;
            self.by_aggregate.remove(&aggregate);
            return Reached::GaveUp { notified };
        }
        Reached::Behind {
            attempt: floor.retries,
            retry: !floor.retry_pending,
        }
    }

    /// A retry of the aggregate was asked for ([`Action::RetryLater`]): pending until its
    /// [`Input::Retry`] comes, the next one backing off more.
    pub(crate) fn retrying(&mut self, aggregate: &AggregateRef) {
        if let Some(floor) = self.by_aggregate.get_mut(aggregate) {
            floor.retry_pending = true;
            floor.retries = floor.retries.saturating_add(1);
        }
    }

    /// A retry asked for came ([`Input::Retry`]): the next miss may ask for another.
    pub(crate) fn retry_came(&mut self, aggregate: &AggregateRef) {
        if let Some(floor) = self.by_aggregate.get_mut(aggregate) {
            floor.retry_pending = false;
        }
    }
}
