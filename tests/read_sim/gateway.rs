//! The simulated gateway of the read side's model tests, split out of `tests/read_sim/mod.rs`
//! to keep that file short: each aggregate as the gateway holds it ([`Held`]), the change
//! streams it serves ([`Stream`]), and the [`World`]'s gateway side — appending (this device's
//! events too), trimming and deleting aggregates, notifying the streams that watch them,
//! delivering their notes (and its refusals of streams past its caps) to the machine, and one
//! random step of the gateway, the streams, the network or the executor's faults.

use std::collections::{BTreeMap, VecDeque};

use celeriant_sync::engine::model::AggregateRef;
use celeriant_sync::engine::read::machine::{Input, Note, StreamId};
use celeriant_sync::engine::read::memory_log::{LogBatch, LogEvent};

use super::{ME, World};

/// One aggregate as the gateway holds it.
#[derive(Default)]
pub struct Held {
    pub batches: BTreeMap<u64, LogBatch>,
    pub tip: u64,
    /// The lowest version still available (1 unless trimmed).
    pub min: u64,
    pub deleted: bool,
}

pub struct Stream {
    pub watching: Vec<AggregateRef>,
    /// Subscribed at the gateway: changes are notified from then on.
    pub ready: bool,
    pub notes: VecDeque<Note>,
}

impl World {
    /// The gateway tells the stream, if it watches `aggregate` and is subscribed.
    pub fn notify(&mut self, aggregate: AggregateRef, note: Note) {
        for s in self.streams.values_mut() {
            if s.ready && s.watching.contains(&aggregate) {
                s.notes.push_back(note);
            }
        }
    }

    pub fn append(&mut self, aggregate: AggregateRef) {
        if self.gateway.get(&aggregate).is_some_and(|h| h.deleted) {
            return; // recreating below the log's cursor is out of this model
        }
        let mine = self.rng.chance(0.4);
        let seq = if mine {
            let seq = self.log.assign(aggregate, 1);
            self.log.land(aggregate, seq); // the drain's part, done at once
            self.touched.push(aggregate);
            seq
        } else {
            1
        };
        self.stamp += 1;
        let held = self.gateway.entry(aggregate).or_insert_with(|| Held {
            min: 1,
            ..Held::default()
        });
        held.tip += 1;
        let version = held.tip;
        let batch = LogBatch {
            version,
            client_id: if mine { ME } else { "other" }.into(),
            events: vec![LogEvent {
                client_seq: seq,
                event_type: 1,
                minor: 0,
                timestamp: self.stamp,
                data: Some("AAAA".into()),
            }],
        };
        held.batches.insert(version, batch);
        self.notify(aggregate, Note::Changed { aggregate, version });
    }

    pub fn trim(&mut self, aggregate: AggregateRef) {
        let Some(held) = self.gateway.get_mut(&aggregate) else {
            return;
        };
        if held.min > held.tip || held.deleted {
            return; // nothing left to trim
        }
        let min = held.min + 1 + self.rng.below(held.tip + 1 - held.min);
        held.min = min;
        held.batches.retain(|v, _| *v >= min);
        self.notify(
            aggregate,
            Note::Reset {
                aggregate,
                deleted: false,
            },
        );
    }

    pub fn delete(&mut self, aggregate: AggregateRef) {
        let Some(held) = self.gateway.get_mut(&aggregate) else {
            return;
        };
        *held = Held {
            min: 1,
            deleted: true,
            ..Held::default()
        };
        self.notify(
            aggregate,
            Note::Reset {
                aggregate,
                deleted: true,
            },
        );
    }

    pub fn deliver(&mut self) -> bool {
        // Any stream with something to say, picked at random: streams are separate
        // connections, with no order between them.
        if let Some((id, many)) = self.refused.pop() {
            self.feed(if many {
                Input::StreamTooMany(id)
            } else {
                Input::StreamTooLarge(id)
            });
            return true;
        }
        let busy: Vec<StreamId> = self
            .streams
            .iter()
            .filter(|(_, s)| !s.ready || !s.notes.is_empty())
            .map(|(id, _)| *id)
            .collect();
        if busy.is_empty() {
            return false;
        }
        let id = busy[self.rng.below(busy.len() as u64) as usize];
        let s = self.streams.get_mut(&id).expect("busy");
        let note = if s.ready {
            s.notes.pop_front().expect("busy")
        } else {
            s.ready = true; // subscribed at the gateway now
            // The embedded store's `ready` gives each aggregate's version read after the
            // registration (in one run of four, as the Celeriant backend, none; and one ready
            // in four goes without, as when the gateway's read of them failed).
            if !self.no_tips && !self.rng.chance(0.25) {
                let tips = s
                    .watching
                    .iter()
                    .map(|a| (*a, self.gateway.get(a).map_or(0, |h| h.tip)))
                    .collect();
                self.feed(Input::Tips(id, tips));
            }
            Note::Ready {
                deleted_resets: true,
            }
        };
        self.feed(Input::Stream(id, note));
        true
    }

    pub fn random_stream(&self) -> StreamId {
        let ids: Vec<StreamId> = self.streams.keys().copied().collect();
        ids[self.rng.below(ids.len() as u64) as usize]
    }

    /// One step of the gateway, the streams, the network or the reader's executor (`kind` in
    /// 3..12; some only with `fault`).
    pub fn gateway_step(&mut self, kind: u64, a: AggregateRef, fault: bool) {
        match kind {
            3 | 4 => self.append(a),
            5 if fault => self.trim(a),
            6 if fault && self.rng.chance(0.3) => self.delete(a),
            7 if fault && !self.streams.is_empty() => {
                let id = self.random_stream();
                self.streams.remove(&id);
                self.gone.push(id);
                self.feed(Input::StreamEnded(id));
            }
            11 if fault && !self.gone.is_empty() => {
                // A late callback of a stream closed or ended since: ignored by the machine.
                let id = self.gone[self.rng.below(self.gone.len() as u64) as usize];
                let input = match self.rng.below(4) {
                    0 => Input::Stream(
                        id,
                        Note::Ready {
                            deleted_resets: true,
                        },
                    ),
                    1 => Input::Stream(id, Note::Resync),
                    2 => Input::Stream(
                        id,
                        Note::Reset {
                            aggregate: a,
                            deleted: self.rng.chance(0.5),
                        },
                    ),
                    _ => Input::StreamEnded(id),
                };
                self.feed(input);
            }
            8 if fault && !self.streams.is_empty() => {
                let id = self.random_stream();
                let s = self.streams.get_mut(&id).expect("open");
                if s.ready {
                    s.notes.clear(); // the gateway lagged and dropped them
                    s.notes.push_back(Note::Resync);
                }
            }
            // A page fails, or (where modelled) is answered by a replica that lags — not a
            // fault with the Celeriant backend: it happens in runs without faults too.
            9 if fault => {
                if self.lagging && self.rng.chance(0.5) {
                    self.lag_next = true;
                } else {
                    self.fail_next = true;
                }
            }
            9 if self.lagging && self.rng.chance(0.5) => self.lag_next = true,
            10 if fault => {
                self.online = !self.online;
                self.feed(Input::Online(self.online));
            }
            5 | 6 | 11 => self.complete(),
            7 | 8 => {
                self.deliver();
            }
            _ => {
                self.tick();
            }
        }
    }
}
