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
//! **unwatched**: caught up when subscribed, when any stream becomes ready and on every
//! `resync`, and reported in `status().read.refused` with code 40020; it moves into a shard as
//! soon as one has room.

use super::super::model::AggregateRef;
use super::super::sorted::SortedSet;

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
}
