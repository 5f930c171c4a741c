//! The contexts' lives in the read side's contexts model (`tests/read_model_contexts.rs`), split
//! out of it to keep that file short: contexts opening, closing (with their goodbye) and
//! vanishing (without one), the drain ending and another open context taking it over with a
//! new reader, and a stopped reader's page or reset still writing the log afterwards (waited
//! for by a context that closes, lost with one that vanishes).

use std::collections::BTreeMap;

use celeriant_sync::engine::model::AggregateRef;
use celeriant_sync::engine::read::message::ReadMessage;
use celeriant_sync::engine::read::routing::{Input, ReaderNews, Routing};

use super::{Context, MOST, Model};

impl Model {
    pub(super) fn open(&mut self) {
        if self.open_contexts().len() >= MOST {
            return;
        }
        let id = 100 + self.contexts.len() as u64;
        self.trace
            .push(format!("ctx {} opens", self.contexts.len()));
        self.contexts.push(Context {
            routing: Routing::new(id),
            open: true,
            subscribed: BTreeMap::new(),
            views: BTreeMap::new(),
            reads: Vec::new(),
        });
    }

    /// The drain ends in the drainer (it closes, or its lock is lost): its reader stops.
    pub(super) fn stop_drain(&mut self) {
        if let Some(d) = self.drainer.take() {
            self.stop_reader(d);
            self.route(d, Input::ReaderStopped);
        }
    }

    /// The reader of context `d` stops; its page or reset in flight is dropped, or (one in
    /// two) was past its last look at `stopped` and still writes the log.
    fn stop_reader(&mut self, d: usize) {
        if let Some(flight) = self.world.stop()
            && self.world.rng.chance(0.5)
        {
            self.orphans.push((d, flight));
        }
    }

    /// What context `c`'s stopped readers still write ends now, while `c` can tell the others:
    /// it is about to close, and waits for it before its goodbye and before the lock passes
    /// (`Runtime::close`). Not with [`Model::release_before_store`], the old order: then it
    /// ends later, at any step (a takeover included), its news told to nobody.
    fn finish_orphans_of(&mut self, c: usize) {
        while !self.release_before_store
            && let Some(i) = self.orphans.iter().position(|(o, _)| *o == c)
        {
            let orphan = self.orphans.remove(i);
            self.orphans.insert(0, orphan);
            self.finish_orphan();
        }
    }

    /// A stopped reader's page or reset ends: its news go to the context that held it, if it
    /// is still open (a closed one posts nothing more).
    pub(super) fn finish_orphan(&mut self) -> bool {
        if self.orphans.is_empty() {
            return false;
        }
        let (c, flight) = self.orphans.remove(0);
        self.note(format!("orphan of ctx {c} ends"));
        if let Some(a) = self.world.finish_orphan(flight)
            && self.contexts[c].open
        {
            self.route(c, Input::ReaderNews(ReaderNews::LogChanged(a)));
        }
        true
    }

    /// Client `c` closes, as `Runtime::close` does: its reader stops, then its goodbye.
    pub(super) fn close(&mut self, c: usize) {
        if self.drainer == Some(c) {
            self.stop_drain();
        }
        self.finish_orphans_of(c);
        self.route(c, Input::Close);
        assert!(
            self.contexts[c].reads.is_empty(),
            "a closing context answers every waiting read"
        );
        self.contexts[c].open = false;
        self.contexts[c].views.clear();
        // What was posted to it is never read; what it posted still arrives.
        self.channel.retain(|(_, to), _| *to != c);
    }

    /// Context `c` is gone without a word (the tab crashed or was killed): no goodbye, no
    /// `ReaderStopped`; its lock is released, so if it drained, the reader is gone with it, and
    /// the transaction of a page store or reset under way is aborted with it (one that
    /// commits all the same is told to nobody: documented, not modelled).
    pub(super) fn vanish(&mut self, c: usize) {
        self.note(format!("ctx {c} vanishes"));
        if self.drainer == Some(c) {
            self.drainer = None;
            let _ = self.world.stop();
        }
        self.orphans.retain(|(o, _)| *o != c);
        let context = &mut self.contexts[c];
        context.open = false;
        context.reads.clear();
        context.views.clear();
        // What it watches now, and what it said it watched in messages still on their way.
        let mut lingering: Vec<AggregateRef> = context.subscribed.keys().copied().collect();
        for ((from, _), queue) in &self.channel {
            for message in queue.iter().filter(|_| *from == c) {
                if let ReadMessage::Watch { list, .. } = message {
                    lingering.extend(list.iter().map(|(a, _)| *a));
                }
            }
        }
        self.ghosts.insert(c, lingering);
        self.channel.retain(|(_, to), _| *to != c);
    }

    /// With nobody draining, an open context gets the lock: a new reader over the same log.
    pub(super) fn take_over(&mut self) {
        if self.drainer.is_some() {
            return;
        }
        if let Some(c) = self.random_open() {
            // The new drainer asks the open contexts only: a ghost counts no more, unless what
            // it posted is still on its way.
            let channel = &self.channel;
            self.ghosts.retain(|g, _| {
                channel
                    .iter()
                    .any(|((from, _), q)| from == g && !q.is_empty())
            });
            self.world.restart();
            self.drainer = Some(c);
            self.route(c, Input::ReaderStarted);
        }
    }
}
