//! The channel of the read side's contexts model (`tests/read_model_contexts.rs`), split out of
//! it to keep that file short: a context's routing handed an input and what it decides
//! performed (feeding the drainer's reader, posting to the other open contexts, refreshing a
//! view, answering a `read`), the reader's news and this device's landed events routed on, and
//! posted messages delivered (in order per sender and receiver).

use celeriant_sync::engine::model::AggregateRef;
use celeriant_sync::engine::read::log::LocalLog;
use celeriant_sync::engine::read::routing::{Action, Input};
use futures_executor::block_on;

use super::Model;

impl Model {
    /// Hands `input` to context `c`'s routing and performs what it decides; then the reader's
    /// news go to the drainer's routing, and this device's landed events touch a context.
    pub(super) fn route(&mut self, c: usize, input: Input) {
        self.note(format!("ctx {c}: {input:?}"));
        self.contexts[c].routing.handle(input);
        let actions: Vec<Action> = std::iter::from_fn(|| self.contexts[c].routing.poll()).collect();
        for action in actions {
            self.perform(c, action);
        }
        self.pump();
    }

    pub(super) fn pump(&mut self) {
        while !self.world.news.is_empty() || !self.world.touched.is_empty() {
            if !self.world.news.is_empty() {
                let news = self.world.news.remove(0);
                let d = self.drainer.expect("news from a reader nobody holds");
                self.route(d, Input::ReaderNews(news));
            } else {
                let a = self.world.touched.remove(0);
                if let Some(c) = self.random_open() {
                    self.route(c, Input::Touched(a));
                }
            }
        }
    }

    fn perform(&mut self, c: usize, action: Action) {
        match action {
            Action::Feed(input) => {
                assert_eq!(self.drainer, Some(c), "a context without the reader fed it");
                self.note(format!("  reader <- {input:?}"));
                self.world.feed(input);
            }
            Action::Post(message) => {
                for to in self.open_contexts() {
                    if to != c {
                        let queue = self.channel.entry((c, to)).or_default();
                        queue.push_back(message.clone());
                    }
                }
            }
            Action::RefreshViews(a) => self.refresh(c, a),
            Action::Answer { waiter, ok } => {
                self.trace.push(format!("  ctx {c} answers {waiter}: {ok}"));
                let reads = &mut self.contexts[c].reads;
                let i = (reads.iter().position(|r| r.waiter == waiter))
                    .expect("an answer to a read that is not waiting here");
                let read = reads.remove(i);
                let held = self.world.gateway.get(&read.aggregate);
                if ok && !held.is_some_and(|h| h.deleted) {
                    let cursor = block_on(self.world.log.cursor(read.aggregate)).unwrap();
                    if cursor.version < read.tip {
                        self.stale.push((waiter, read.tip, cursor.version));
                    }
                }
                self.answers.push((waiter, ok));
            }
        }
    }

    /// Context `c` rebuilds its view of `a`, if it has one, as `views.rs` does: from its kept
    /// place when the epoch is the same, from scratch otherwise; it equals one read from scratch.
    pub(super) fn refresh(&mut self, c: usize, a: AggregateRef) {
        let log = &self.world.log;
        let Some(view) = self.contexts[c].views.get_mut(&a) else {
            return;
        };
        let s = block_on(log.snapshot(a, view.kept)).unwrap();
        if s.from == 0 {
            view.batches.clear();
        }
        view.batches.extend(s.batches);
        view.kept = Some((s.cursor.epoch, s.cursor.version));
        let scratch = block_on(log.snapshot(a, None)).unwrap();
        assert_eq!(
            view.batches, scratch.batches,
            "a kept view differs from its log"
        );
    }

    /// Delivers everything `from` posted to `to`, in order.
    pub(super) fn deliver_all(&mut self, from: usize, to: usize) {
        while let Some(message) = (self.channel.get_mut(&(from, to))).and_then(|q| q.pop_front()) {
            self.route(to, Input::Message(message));
        }
    }

    /// Delivers the oldest message of a random sender to a random receiver.
    pub(super) fn deliver(&mut self) -> bool {
        let busy: Vec<(usize, usize)> = (self.channel.iter())
            .filter(|(_, q)| !q.is_empty())
            .map(|(k, _)| *k)
            .collect();
        if busy.is_empty() {
            return false;
        }
        let (from, to) = busy[self.world.rng.below(busy.len() as u64) as usize];
        let message = self
            .channel
            .get_mut(&(from, to))
            .unwrap()
            .pop_front()
            .unwrap();
        self.trace.push(format!("from {from}:"));
        self.route(to, Input::Message(message));
        true
    }
}
