//! The read side's decisions, as a pure state machine: which aggregates the device watches, the
//! change streams that cover them (one per shard of at most 1,000: [`super::streams`]), and the
//! catch-up that pages what the server confirmed into the local log.
//!
//! The rules (from Celeriant's own watch): a watch covers the live tail only, never the past —
//! so the stream is opened **first**, and once it is ready every watched aggregate is caught up
//! from its cursor; a notification says only "this aggregate reached version N" (versions only
//! advance, so coalescing loses nothing, and re-reading from the cursor never misses an event);
//! `reset` means read the aggregate again from scratch, `resync` means catch up everything the
//! stream covers. A stream that fails or falls silent is reopened with the drain's backoff.
//! Each stream is named by a [`StreamId`]; what a replaced or closed stream still says is
//! ignored.
//!
//! [`Reader::handle`] takes what happened; [`Reader::poll`] yields [`Action`]s. One page is
//! fetched at a time (bounded memory, one request at a time besides the stream); fetching a
//! page and storing it with the aggregate's cursor is one action, so a page and its cursor move
//! together.
//!
//! A `read` asks under a tag ([`Input::Read`]); a catch-up's end ([`Action::CaughtUp`]) names
//! the reads asked before one of its page requests began, and only those
//! ([`super::catch_up`]), so a `read` sees at least what the server had when it asked.
//!
//! A catch-up that ends below the highest version a `changed` notified (a page answered by a
//! replica that lags) is not caught up: it is retried with backoff (the retry timer feeding
//! [`Input::Retry`]), its reads waiting until it reaches the floor each first boarded with,
//! a bounded number of times ([`super::floors`]).

use std::collections::VecDeque;

use super::super::backoff::Backoff;
use super::super::model::AggregateRef;
use super::super::sorted::{SortedMap, SortedSet};
use super::catch_up::CatchUps;
use super::floors::Floors;
pub use super::inputs::{Action, Input, Note, PageEnd, ReadState};
pub use super::streams::StreamId;
use super::streams::{Limits, Phase, Streams, poll_interval};

/// The read-side state machine of the draining context.
#[derive(Debug)]
pub struct Reader {
    backoff: Backoff,
    /// Watched aggregates and how many subscriptions want each.
    watched: SortedMap<AggregateRef, u32>,
    streams: Streams,
    /// Aggregates to catch up, in order; at most one page is read at a time.
    queue: CatchUps,
    fetching: Option<AggregateRef>,
    /// Catch-ups that failed, to try again when the stream is back (and after a backoff).
    failed: Vec<AggregateRef>,
    /// Consecutive failed pages (for the retry's backoff).
    page_failures: u32,
    /// Aggregates the stream said were reset: probed before their next page.
    probe_due: SortedSet<AggregateRef>,
    /// Tips from a `ready`, with the stream that gave them, until the aggregate's next page
    /// uses one or anything since says it may have moved (a change, a reset, a resync, the
    /// stream ending, a catch-up asked); used only while that stream is still the aggregate's.
    tips: SortedMap<AggregateRef, (StreamId, u64)>,
    /// The highest version a `changed` notified, per aggregate, until a catch-up reaches it.
    floors: Floors,
    /// When the unwatched aggregates are caught up next (0: none unwatched).
    poll_at: u64,
    online: bool,
    state: ReadState,
    actions: VecDeque<Action>,
}

impl Reader {
    /// A reader with nothing watched, splitting streams at the gateway's default caps.
    pub fn new(backoff: Backoff) -> Self {
        Self::with_limits(backoff, Limits::default())
    }

    /// A reader with nothing watched, splitting streams at `limits`.
    pub fn with_limits(backoff: Backoff, limits: Limits) -> Self {
        Reader {
            backoff,
            watched: SortedMap::new(),
            streams: Streams::new(limits),
            queue: CatchUps::default(),
            fetching: None,
            failed: Vec::new(),
            page_failures: 0,
            probe_due: SortedSet::new(),
            tips: SortedMap::new(),
            floors: Floors::default(),
            poll_at: 0,
            online: true,
            state: ReadState::Idle,
            actions: VecDeque::new(),
        }
    }

    /// The next thing to do, if any.
    pub fn poll(&mut self) -> Option<Action> {
        self.actions.pop_front()
    }

    /// The aggregates watched now.
    pub fn watched(&self) -> Vec<AggregateRef> {
        self.watched.keys().copied().collect()
    }

    /// The streams wanted now, each with what it watches (the current one of each shard).
    pub fn streams(&self) -> Vec<(StreamId, Vec<AggregateRef>)> {
        self.streams
            .shards
            .iter()
            .map(|s| (s.id, s.members.iter().copied().collect()))
            .collect()
    }

    /// What one stream names at most now: the limit given, halved each time the gateway
    /// refused a stream as too large.
    pub fn per_stream(&self) -> usize {
        self.streams.per_stream()
    }

    /// How many streams are opened at most now: the limit given, one less each time the
    /// gateway refused a stream for the client's stream count.
    pub fn max_streams(&self) -> usize {
        self.streams.max_streams()
    }

    /// When the unwatched aggregates are caught up next, if any are.
    pub fn poll_due_at(&self) -> Option<u64> {
        (self.poll_at != 0).then_some(self.poll_at)
    }

    /// The watched aggregates that fit in no stream.
    pub fn unwatched(&self) -> Vec<AggregateRef> {
        self.streams.unwatched.iter().copied().collect()
    }

    fn emit(&mut self, action: Action) {
        self.actions.push_back(action);
    }

    /// Handles what happened at `now_ms`; `random` is a uniform draw in `[0, 1)` for jitter.
    pub fn handle(&mut self, input: Input, now_ms: u64, random: f64) {
        let unwatched = self.streams.unwatched.len();
        let resplit = matches!(input, Input::StreamTooLarge(_) | Input::StreamTooMany(_));
        match input {
            Input::Subscribe(aggregate) => {
                let count = self.watched.get_or_default(aggregate);
                *count += 1;
                if *count == 1 {
                    if let Some(shard) = self.streams.add(aggregate) {
                        self.restream(shard, now_ms);
                    }
                    // Caught up at once (the view is fresh even if the stream is slow to come),
                    // and again when its stream is ready.
                    self.enqueue(aggregate);
                }
            }
            Input::Unsubscribe(aggregate) => {
                if let Some(count) = self.watched.get_mut(&aggregate) {
                    *count -= 1;
                    if *count == 0 {
                        self.watched.remove(&aggregate);
                        self.tips.remove(&aggregate);
                        // Its floor goes, unless reads still wait for it: dropped, the next
                        // page ending below it would answer them all below the floor they
                        // boarded with. Kept, it keeps their catch-up retried, and goes when
                        // reached, given up on, or once no read waits (`page_end`).
                        if !self.queue.waiting(&aggregate) {
                            self.floors.forget(&aggregate);
                        }
                        let mut changed: Vec<usize> =
                            self.streams.remove(&aggregate).into_iter().collect();
                        for shard in self.streams.promote() {
                            if !changed.contains(&shard) {
                                changed.push(shard);
                            }
                        }
                        for shard in changed {
                            self.restream(shard, now_ms);
                        }
                        self.drop_empty();
                    }
                }
            }
            Input::CatchUp(aggregate) => {
                // Asked now (a landed batch, a read): a tip from before says nothing.
                self.tips.remove(&aggregate);
                self.enqueue(aggregate);
            }
            Input::Retry(aggregate) => {
                // The retry asked for came: no longer pending, the next miss asks for another.
                self.floors.retry_came(&aggregate);
                self.tips.remove(&aggregate);
                self.enqueue(aggregate);
            }
            Input::Read(aggregate, tag) => {
                // Answered by a catch-up whose page request begins from now on.
                self.tips.remove(&aggregate);
                self.queue.ask(aggregate, tag);
            }
            Input::Stream(id, note) => self.note(id, note),
            Input::Tips(id, tips) => {
                if let Some(shard) = self.streams.by_id(id)
                    && shard.phase == Phase::Opening
                {
                    let kept: Vec<(AggregateRef, u64)> = tips
                        .into_iter()
                        .filter(|(a, _)| shard.members.contains(a))
                        .collect();
                    for (aggregate, tip) in kept {
                        self.tips.insert(aggregate, (id, tip));
                    }
                }
            }
            Input::StreamEnded(id) => {
                if let Some(shard) = self.streams.by_id(id) {
                    for a in shard.members.iter() {
                        self.tips.remove(a);
                    }
                }
                let wait = match self.streams.by_id(id) {
                    Some(shard) if matches!(shard.phase, Phase::Opening | Phase::Up) => {
                        let wait = self.backoff.delay_ms(shard.attempt, random, None).max(250);
                        shard.attempt = shard.attempt.saturating_add(1);
                        shard.phase = Phase::Down {
                            retry_at: now_ms + wait,
                        };
                        Some(wait)
                    }
                    _ => None,
                };
                if wait.is_some() {
                    self.wait_for_retry(now_ms);
                }
            }
            Input::StreamTooLarge(id) => {
                if self.streams.by_id(id).is_some() {
                    // Open (or opening) streams but the refused one, which ended.
                    let open: Vec<StreamId> = (self.streams.shards.iter())
                        .filter(|s| s.id != id && matches!(s.phase, Phase::Opening | Phase::Up))
                        .map(|s| s.id)
                        .collect();
                    if self.streams.shrink() {
                        for id in open {
                            self.emit(Action::CloseStream(id));
                        }
                        for shard in &mut self.streams.shards {
                            shard.id = 0;
                            shard.phase = Phase::Down { retry_at: 0 };
                        }
                        for shard in 0..self.streams.shards.len() {
                            self.restream(shard, now_ms);
                        }
                    } else {
                        // One aggregate per stream refused too: treated as any failure.
                        return self.handle(Input::StreamEnded(id), now_ms, random);
                    }
                }
            }
            Input::StreamTooMany(id) => {
                if let Some(index) = self.streams.index_of(id) {
                    match self.streams.fewer(index) {
                        Some(changed) => {
                            for shard in changed {
                                self.restream(shard, now_ms);
                            }
                        }
                        // One stream refused too: treated as any failure.
                        None => return self.handle(Input::StreamEnded(id), now_ms, random),
                    }
                }
            }
            Input::Page { aggregate, end } => {
                if self.fetching == Some(aggregate) {
                    self.fetching = None;
                }
                if !matches!(end, PageEnd::Failed { .. }) {
                    self.page_failures = 0;
                }
                match end {
                    PageEnd::Stored { more: true, .. } => {
                        // Read on first; the pages to come cover a queued catch-up of it too.
                        self.queue.push_front(aggregate);
                    }
                    PageEnd::Stored {
                        more: false,
                        version,
                    } => self.page_end(aggregate, version, now_ms, random),
                    PageEnd::Trimmed { min_version } => {
                        self.fetching = Some(aggregate);
                        self.emit(Action::ResetLog {
                            aggregate,
                            min_version,
                            gone: false,
                        });
                    }
                    PageEnd::Gone => {
                        // The tip is below the cursor: deleted, or only a replica behind the
                        // cursor (a probe or page answered by a node that lags). Read again
                        // from scratch, but the floor and the reads' needs stay, as on a trim:
                        // dropped, a re-read from that replica would answer every read aboard
                        // below the floor it boarded with. A real deletion still ends them (a
                        // deletion's `reset`, a lower `changed` on the same stream where its
                        // `ready` allows, the recreated versions reaching the floor, or the
                        // give-up).
                        self.fetching = Some(aggregate);
                        self.emit(Action::ResetLog {
                            aggregate,
                            min_version: 1,
                            gone: true,
                        });
                    }
                    PageEnd::Failed { .. } => {
                        self.caught_up(aggregate, false);
                        if !self.failed.contains(&aggregate) {
                            self.failed.push(aggregate);
                        }
                        // Not only when the stream comes back: a stream that stays up says
                        // nothing more about an aggregate whose last change was missed.
                        let ms = self
                            .backoff
                            .delay_ms(self.page_failures, random, None)
                            .max(250);
                        self.page_failures = self.page_failures.saturating_add(1);
                        self.emit(Action::RetryLater { aggregate, ms });
                    }
                }
            }
            Input::LogReset(aggregate) => {
                if self.fetching == Some(aggregate) {
                    self.fetching = None;
                }
                self.queue.push_front(aggregate);
            }
            Input::TimerFired | Input::Woken => {
                let woken = input == Input::Woken;
                for shard in 0..self.streams.shards.len() {
                    if let Phase::Down { retry_at } = self.streams.shards[shard].phase
                        && retry_at != 0
                        && (retry_at <= now_ms || woken)
                    {
                        self.streams.shards[shard].phase = Phase::Down { retry_at: 0 };
                        self.restream(shard, now_ms);
                    }
                }
                if self.poll_at != 0 && self.poll_at <= now_ms {
                    self.poll_at = now_ms + poll_interval(self.streams.unwatched.len());
                    self.catch_up_unwatched();
                }
                self.wait_for_retry(now_ms);
            }
            Input::Online(online) => {
                self.online = online;
                if online {
                    for shard in 0..self.streams.shards.len() {
                        if let Phase::Down { retry_at } = self.streams.shards[shard].phase
                            && retry_at != 0
                        {
                            self.streams.shards[shard].phase = Phase::Down { retry_at: 0 };
                            self.restream(shard, now_ms);
                        }
                    }
                }
            }
        }
        if self.streams.unwatched.len() != unwatched || resplit {
            let list = self.unwatched();
            self.emit(Action::Unwatched(list));
        }
        // No stream tells of the unwatched aggregates' changes: they are polled.
        match (self.streams.unwatched.is_empty(), self.poll_at) {
            (true, _) => self.poll_at = 0,
            (false, 0) => {
                self.poll_at = now_ms + poll_interval(self.streams.unwatched.len());
                self.wait_for_retry(now_ms);
            }
            _ => {}
        }
        self.pump();
        self.report();
    }

    /// Asks for the wait until the earliest shard backing off may reopen its stream, or the
    /// unwatched aggregates' next poll if that comes first.
    fn wait_for_retry(&mut self, now_ms: u64) {
        let next = self
            .streams
            .shards
            .iter()
            .filter_map(|s| match s.phase {
                Phase::Down { retry_at } if retry_at != 0 => Some(retry_at),
                _ => None,
            })
            .chain((self.poll_at != 0).then_some(self.poll_at))
            .min();
        // A shard already due (its timer late, or replaced by this wait) is reopened at once.
        if let Some(at) = next {
            self.emit(Action::Wait(at.saturating_sub(now_ms)));
        }
    }

    /// Drops shards left with no aggregate, closing their streams.
    fn drop_empty(&mut self) {
        let mut closed = Vec::new();
        self.streams.shards.retain(|s| {
            if s.members.is_empty() {
                // A shard that is down has nothing open (its stream ended).
                if matches!(s.phase, Phase::Opening | Phase::Up) {
                    closed.push(s.id);
                }
                false
            } else {
                true
            }
        });
        for id in closed {
            self.emit(Action::CloseStream(id));
        }
    }

    /// Opens a new stream for the shard's members, closing its current one (a shard with no
    /// member is left to [`Self::drop_empty`]). A shard backing off keeps waiting: its timer
    /// reopens it with its members as they are then.
    fn restream(&mut self, shard: usize, now_ms: u64) {
        let id = self.streams.next_id();
        let s = &mut self.streams.shards[shard];
        if s.members.is_empty() {
            return;
        }
        let old = s.id;
        match s.phase {
            Phase::Down { retry_at } if retry_at > now_ms => return,
            Phase::Down { .. } => {}
            Phase::Opening | Phase::Up => self.actions.push_back(Action::CloseStream(old)),
        }
        s.id = id;
        s.phase = Phase::Opening;
        s.deleted_resets = false;
        let aggregates = s.members.iter().copied().collect();
        self.emit(Action::OpenStream { id, aggregates });
    }

    fn note(&mut self, id: StreamId, note: Note) {
        let Some(shard) = self.streams.by_id(id) else {
            return; // a stream replaced or closed since
        };
        match note {
            Note::Ready { deleted_resets } => {
                shard.phase = Phase::Up;
                shard.attempt = 0;
                shard.deleted_resets = deleted_resets;
                // The stream covers what happens from now on: catch up what happened before.
                let members: Vec<AggregateRef> = shard.members.iter().copied().collect();
                for aggregate in members {
                    self.enqueue(aggregate);
                }
                for aggregate in std::mem::take(&mut self.failed) {
                    self.enqueue(aggregate);
                }
                self.catch_up_unwatched();
            }
            Note::Changed { aggregate, version } => {
                if shard.members.contains(&aggregate) {
                    self.tips.remove(&aggregate);
                    let goes_back = shard.deleted_resets;
                    self.floors.notified(aggregate, version, id, goes_back);
                    self.enqueue(aggregate);
                }
            }
            Note::Reset { aggregate, deleted } => {
                // Probed before its next page, even if a page of it is in flight now.
                if shard.members.contains(&aggregate) {
                    self.tips.remove(&aggregate);
                    // After a deletion its versions restart, so the floor goes. A trim keeps the tip: the floor and the reads' needs stay,
                    // else the next page, from a replica that lags, would answer every read
                    // aboard below the floor it boarded with.
                    if deleted {
                        self.floors.forget(&aggregate);
                    }
                    self.probe_due.insert(aggregate);
                    self.queue.push_front(aggregate);
                }
            }
            Note::Resync => {
                let members: Vec<AggregateRef> = shard.members.iter().copied().collect();
                for aggregate in members {
                    self.tips.remove(&aggregate);
                    self.enqueue(aggregate);
                }
                self.catch_up_unwatched();
            }
        }
    }

    /// What no stream watches is caught up whenever a stream is (re)established or resynced.
    fn catch_up_unwatched(&mut self) {
        let unwatched = self.unwatched();
        for aggregate in unwatched {
            self.enqueue(aggregate);
        }
    }

    /// Queues a catch-up (once: a queued aggregate is read up to the tip anyway).
    fn enqueue(&mut self, aggregate: AggregateRef) {
        self.queue.push_back(aggregate);
    }

    /// Starts the next page, one at a time.
    fn pump(&mut self) {
        if self.fetching.is_some() {
            return;
        }
        if let Some(aggregate) = self.queue.pop_front() {
            self.fetching = Some(aggregate);
            // The reads waiting for it board this page: its catch-up's end answers them once
            // it reaches the floor in force when they first boarded.
            let floor = self.floors.board(aggregate);
            let read = self.queue.board(aggregate, floor);
            // Only while the stream that gave it is still the aggregate's current one: a tip
            // of a replaced or ended stream (or of a shard the aggregate left) says nothing
            // of what happened between that stream's end and the next one's registration.
            // Nor with a read aboard: the stream may have been registered, and the tip read,
            // before the read asked (a change since then is notified, but perhaps after this
            // page would answer the read).
            let tip = self
                .tips
                .remove(&aggregate)
                .filter(|(id, _)| !read && self.streams.covers(*id, &aggregate))
                .map(|(_, tip)| tip);
            if self.probe_due.remove(&aggregate) {
                self.emit(Action::Probe(aggregate));
            } else if let Some(tip) = tip {
                self.emit(Action::FetchPageUnlessAt(aggregate, tip));
            } else {
                self.emit(Action::FetchPage(aggregate));
            }
        }
    }

    fn report(&mut self) {
        let state = if self.watched.is_empty() && self.fetching.is_none() {
            ReadState::Idle
        } else if !self.online {
            ReadState::Offline
        } else if self.fetching.is_some() {
            ReadState::CatchingUp
        } else if self
            .streams
            .shards
            .iter()
            .all(|shard| shard.phase == Phase::Up)
        {
            ReadState::Connected
        } else {
            ReadState::Connecting
        };
        if state != self.state {
            self.state = state;
            self.emit(Action::Report(state));
        }
    }
}

#[path = "machine_page_end.rs"]
mod page_end;

#[cfg(test)]
#[path = "machine_test_support.rs"]
mod test_support;

#[cfg(test)]
#[path = "machine_tests.rs"]
mod tests;

#[cfg(test)]
#[path = "machine_read_tests.rs"]
mod read_tests;

#[cfg(test)]
#[path = "machine_floor_tests.rs"]
mod floor_tests;

#[cfg(test)]
#[path = "machine_floor_reset_tests.rs"]
mod floor_reset_tests;
