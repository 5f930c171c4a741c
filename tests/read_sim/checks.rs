//! The checks of the read side's simulated world, split out of `tests/read_sim/mod.rs` to keep
//! that file short: after every step, the log holds only the gateway's batches and each kept
//! view equals its log; once quiescent, the reader's streams cover what is watched within the
//! gateway's caps and every watched log (and view) converged to what the gateway holds.

use celeriant_sync::engine::model::AggregateRef;
use celeriant_sync::engine::read::log::LocalLog;
use celeriant_sync::engine::read::memory_log::LogBatch;
use futures_executor::block_on;

use super::World;

impl World {
    /// Every batch the log holds is the gateway's batch of that version, while it has it; each
    /// kept view equals its log.
    pub fn check_log(&self) {
        for (aggregate, held) in &self.gateway {
            let s = block_on(self.log.snapshot(*aggregate, None)).unwrap();
            for b in &s.batches {
                if let Some(g) = held.batches.get(&b.version) {
                    assert_eq!(b, g, "the log holds a batch the gateway never sent");
                }
            }
            if let Some(view) = self.views.get(aggregate) {
                assert_eq!(view.batches, s.batches, "a kept view differs from its log");
            }
        }
    }

    pub fn check_quiescent(&self) {
        let watched: Vec<AggregateRef> = self.subscribed.keys().copied().collect();
        self.check_reader(&watched);
        for aggregate in &watched {
            let s = block_on(self.log.snapshot(*aggregate, None)).unwrap();
            assert_eq!(
                self.views[aggregate].batches, s.batches,
                "the view did not converge"
            );
        }
    }

    /// Once quiescent, the reader watches `watched`, its streams are open, ready and cover it
    /// once within the gateway's caps, and every watched aggregate's log holds what the gateway
    /// holds (no notification lost).
    pub fn check_reader(&self, watched: &[AggregateRef]) {
        let watched = watched.to_vec();
        assert_eq!(self.reader.watched(), watched, "the machine's watched set");
        let wanted = self.reader.streams();
        assert_eq!(
            wanted.len(),
            self.streams.len(),
            "open streams {:?} against the machine's {wanted:?}",
            self.streams.keys().collect::<Vec<_>>()
        );
        assert!(wanted.len() <= self.reader.max_streams().min(self.stream_cap));
        let mut covered: Vec<AggregateRef> = self.reader.unwatched();
        for (id, aggregates) in &wanted {
            let s = self.streams.get(id).expect("every shard's stream is open");
            assert_eq!(&s.watching, aggregates, "a stream covers its shard");
            assert!(s.ready, "every stream is ready");
            assert!(!aggregates.is_empty(), "a stream with nothing watched");
            covered.extend(aggregates);
        }
        covered.sort();
        assert_eq!(
            covered, watched,
            "the streams and the unwatched cover the watched set, once each"
        );
        let per_stream = self.reader.per_stream();
        assert!(
            wanted
                .iter()
                .all(|(_, a)| a.len() <= per_stream.min(self.gateway_cap)),
            "every stream within what the gateway takes"
        );
        if !self.reader.unwatched().is_empty() {
            assert!(
                wanted.len() == self.reader.max_streams()
                    && wanted.iter().all(|(_, a)| a.len() == per_stream),
                "unwatched aggregates while a stream has room"
            );
        }
        // The unwatched ones too: the poll let run while settling caught them up.
        for aggregate in &watched {
            let held = self.gateway.get(aggregate);
            let (tip, min) = held.map_or((0, 1), |h| (h.tip, h.min));
            let s = block_on(self.log.snapshot(*aggregate, None)).unwrap();
            assert_eq!(
                s.cursor.version, tip,
                "a notification was lost: {aggregate:?}"
            );
            let served: Vec<&LogBatch> = s.batches.iter().filter(|b| b.version >= min).collect();
            let expected: Vec<&LogBatch> =
                held.map_or(Vec::new(), |h| h.batches.values().collect());
            assert_eq!(
                served, expected,
                "the log did not converge to the gateway's"
            );
            // Known and left open: an event of this device that landed in an aggregate deleted
            // before the log read it back (the log's cursor still at or below the deleted tip)
            // is never found gone — no page or probe shows a tip below the cursor — so it stays
            // pending. Checked for every aggregate that was not deleted.
            if !held.is_some_and(|h| h.deleted) {
                let pending = s.pending.iter().filter(|seq| **seq > s.cursor.mine).count();
                assert_eq!(pending, 0, "an event of this device stays pending");
            }
        }
    }
}
