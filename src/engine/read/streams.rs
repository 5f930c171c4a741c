//! Which change stream watches which aggregate.
//!
//! The gateway caps what one stream may name (`--watch-max-aggregates`, 1,000 by default: 400
//! `40020` above it) and how many streams one client id may hold open
//! (`--watch-max-streams-per-client`, 4 by default: 429 `42920` above it). A device that
//! watched more than one stream's worth used to ask for one stream naming everything, be
//! refused, and ask again after a backoff, forever. So the watched set is split into **shards**
//! of at most [`Limits::per_stream`] aggregates, one stream each, at most [`Limits::streams`]
//! shards; one place of the gateway's per-client cap is left free, because a shard's new stream
//! may be opened while the gateway has not yet noticed its old one closed.
//!
//! A shard's membership is stable: adding an aggregate reopens only the shard it joins (the one
//! with the fewest members and room), so a subscription change re-reads that shard's aggregates
//! once its new stream is ready, not every watched one. What fits in no shard is
//! **unwatched**: caught up when subscribed, when any stream becomes ready, on every `resync`
//! and every [`POLL_UNWATCHED_MS`] while there are any ([`poll_interval`]), and reported in
//! `status().read.refused` with code 40020; it moves into a shard as soon as one has room.
//!
//! A gateway that allows fewer streams per client than this device opens refuses the extra one
//! with 429 `42920`: the device then uses one stream less (down to one), placing the refused
//! shard's members in the others or among the unwatched. Both adaptations (this one and the
//! halving on 40020) last as long as the page.

use super::super::model::AggregateRef;
use super::super::sorted::SortedSet;

/// How often the unwatched aggregates are caught up while nothing else does it: no stream
/// tells of their changes, so this is how late their views may be (a page request each).
pub const POLL_UNWATCHED_MS: u64 = 30_000;

/// The wait before the next poll of `unwatched` aggregates: [`POLL_UNWATCHED_MS`], or 100 ms
/// per aggregate when that is longer, so that polling asks for at most 10 pages a second on
/// average however many are unwatched (a device watching 10,000 at the default caps polls its
/// 7,000 unwatched every 700 s).
pub fn poll_interval(unwatched: usize) -> u64 {
    POLL_UNWATCHED_MS.max(100 * unwatched as u64)
}

/// Names one stream the machine asked for; inputs of a stream that is no longer a shard's
/// current one are ignored.
pub type StreamId = u64;

/// How the watched set is split.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Limits {
    /// Most aggregates one stream names (the gateway's `--watch-max-aggregates`).
    pub per_stream: usize,
    /// Most streams (shards) open at once.
    pub streams: usize,
}

impl Default for Limits {
    /// 1,000 aggregates per stream and 3 streams: the gateway's defaults, with one of its 4
    /// per-client places left for a shard's replacement.
    fn default() -> Self {
        Limits {
            per_stream: 1000,
            streams: 3,
        }
    }
}

/// Where a shard's stream is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Phase {
    /// None open; the next one may be opened at `retry_at` (0: at once).
    Down { retry_at: u64 },
    /// Opening; not ready yet.
    Opening,
    /// Ready: changes are being notified.
    Up,
}

/// Some aggregates and the one stream that watches them.
#[derive(Debug)]
pub(crate) struct Shard {
    /// The current stream (0: none asked for yet).
    pub(crate) id: StreamId,
    pub(crate) members: SortedSet<AggregateRef>,
    pub(crate) phase: Phase,
    /// Consecutive failures of this shard's stream.
    pub(crate) attempt: u32,
    /// The current stream's `ready` said `deletedResets` (false until it is ready): a
    /// `changed` on it below a floor it raised is a recreation ([`super::floors`]).
    pub(crate) deleted_resets: bool,
}

/// The shards and what fits in none.
#[derive(Debug)]
pub(crate) struct Streams {
    limits: Limits,
    pub(crate) shards: Vec<Shard>,
    /// Watched, in no shard (every shard full).
    pub(crate) unwatched: SortedSet<AggregateRef>,
    last_id: StreamId,
}

impl Streams {
    pub(crate) fn new(limits: Limits) -> Self {
        Streams {
            limits: Limits {
                per_stream: limits.per_stream.max(1),
                streams: limits.streams.max(1),
            },
            shards: Vec::new(),
            unwatched: SortedSet::new(),
            last_id: 0,
        }
    }

    /// A fresh stream id.
    pub(crate) fn next_id(&mut self) -> StreamId {
        self.last_id += 1;
        self.last_id
    }

    /// The shard whose current stream is `id`, while that stream is opening or open (what a
    /// stream says after it ended is not its shard's business any more).
    pub(crate) fn by_id(&mut self, id: StreamId) -> Option<&mut Shard> {
        self.shards
            .iter_mut()
            .find(|s| s.id == id && id != 0 && matches!(s.phase, Phase::Opening | Phase::Up))
    }

    /// The index of the shard whose current, opening or open, stream is `id`.
    pub(crate) fn index_of(&self, id: StreamId) -> Option<usize> {
        self.shards
            .iter()
            .position(|s| s.id == id && id != 0 && matches!(s.phase, Phase::Opening | Phase::Up))
    }

    /// Whether the stream `id` is the current, opening or open, stream of the shard holding
    /// `aggregate`.
    pub(crate) fn covers(&self, id: StreamId, aggregate: &AggregateRef) -> bool {
        self.shards.iter().any(|s| {
            s.id == id
                && id != 0
                && matches!(s.phase, Phase::Opening | Phase::Up)
                && s.members.contains(aggregate)
        })
    }

    /// Places a newly watched aggregate: the index of the shard it joined, or `None` when every
    /// shard is full (it is unwatched then).
    pub(crate) fn add(&mut self, aggregate: AggregateRef) -> Option<usize> {
        let room = self
            .shards
            .iter()
            .enumerate()
            .filter(|(_, s)| s.members.len() < self.limits.per_stream)
            .min_by_key(|(_, s)| s.members.len())
            .map(|(i, _)| i);
        let index = match room {
            Some(i) => i,
            None if self.shards.len() < self.limits.streams => {
                self.shards.push(Shard {
                    id: 0,
                    members: SortedSet::new(),
                    phase: Phase::Down { retry_at: 0 },
                    attempt: 0,
                    deleted_resets: false,
                });
                self.shards.len() - 1
            }
            None => {
                self.unwatched.insert(aggregate);
                return None;
            }
        };
        self.shards[index].members.insert(aggregate);
        Some(index)
    }

    /// Forgets an aggregate no longer watched: the index of the shard it left, if it was in
    /// one (the shard may be empty now).
    pub(crate) fn remove(&mut self, aggregate: &AggregateRef) -> Option<usize> {
        if self.unwatched.remove(aggregate) {
            return None;
        }
        self.shards
            .iter()
            .position(|s| s.members.contains(aggregate))
            .inspect(|&i| {
                self.shards[i].members.remove(aggregate);
            })
    }

    /// Moves unwatched aggregates into shards with room; the shards that took some.
    pub(crate) fn promote(&mut self) -> Vec<usize> {
        let mut changed = Vec::new();
        while let Some(aggregate) = self.unwatched.first().copied() {
            let Some(i) = self
                .shards
                .iter()
                .position(|s| s.members.len() < self.limits.per_stream)
            else {
                break;
            };
            self.unwatched.remove(&aggregate);
            self.shards[i].members.insert(aggregate);
            if !changed.contains(&i) {
                changed.push(i);
            }
        }
        changed
    }

    /// Halves what one stream names after the gateway refused a stream as too large (its
    /// `--watch-max-aggregates` is below ours), and re-splits everything; every shard's stream
    /// must be reopened. Returns `false` once a stream of one aggregate was refused (nothing
    /// smaller to try).
    pub(crate) fn shrink(&mut self) -> bool {
        if self.limits.per_stream <= 1 {
            return false;
        }
        self.limits.per_stream /= 2;
        // In order (a SortedSet, not a sort: the module's size, engine::sorted).
        let mut all = std::mem::take(&mut self.unwatched);
        for shard in &mut self.shards {
            all.extend(std::mem::take(&mut shard.members));
        }
        let mut all: Vec<AggregateRef> = all.into_iter().collect();
        for shard in &mut self.shards {
            while shard.members.len() < self.limits.per_stream {
                match all.pop() {
                    Some(a) => shard.members.insert(a),
                    None => break,
                };
            }
        }
        for a in all {
            self.add(a);
        }
        self.shards.retain(|s| !s.members.is_empty());
        true
    }

    /// What one stream names at most now (halved by each [`Self::shrink`]).
    pub(crate) fn per_stream(&self) -> usize {
        self.limits.per_stream
    }

    /// How many streams are opened at most now (one less after each [`Self::fewer`]).
    pub(crate) fn max_streams(&self) -> usize {
        self.limits.streams
    }

    /// Uses one stream less after the gateway refused the shard `index`'s stream for the
    /// client's stream count (its `--watch-max-streams-per-client` is at or below what this
    /// device opens, counting the place kept for a replacement): the refused shard is dissolved
    /// and its members placed again, into shards with room or unwatched. Returns the shards
    /// that took some (their streams must be reopened), or `None` once a single stream was
    /// refused (nothing fewer to try).
    pub(crate) fn fewer(&mut self, index: usize) -> Option<Vec<usize>> {
        if self.limits.streams <= 1 || index >= self.shards.len() {
            return None;
        }
        self.limits.streams -= 1;
        let dissolved = self.shards.remove(index);
        // Never more shards than the count (`add` creates one only below it), so none is left
        // over the new count by removing one.
        debug_assert!(self.shards.len() <= self.limits.streams);
        let mut changed = Vec::new();
        for aggregate in dissolved.members {
            if let Some(i) = self.add(aggregate)
                && !changed.contains(&i)
            {
                changed.push(i);
            }
        }
        Some(changed)
    }
}
