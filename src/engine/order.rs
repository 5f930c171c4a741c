//! Call order kept across an await, per key (an aggregate): turns taken synchronously, in call
//! order, and served one after the other.
//!
//! Group commit gives an aggregate's sequences in the order its appends *reach* it. With
//! end-to-end encryption an append awaits WebCrypto (and maybe the app's key function) first,
//! and those finish in any order: an append of a plain type, or of a small event, would overtake
//! an earlier one on the same aggregate still encrypting, and the aggregate's log would hold them
//! inverted for good. So each append takes a [`Turn`] for its aggregate when it is called and,
//! before anything else, waits for the turn before it on that aggregate to be released; it
//! releases its own once it has reached group commit (or failed). Only the step before the queue
//! is serialised, and only per aggregate: other aggregates' appends do not wait, and the
//! transactions still group as before.
//!
//! The queue holds an entry per aggregate with a turn outstanding: the last turn released
//! removes it, so it never outgrows the appends in progress.

use std::cell::{Cell, RefCell};
use std::rc::Rc;

use futures_channel::oneshot;

use super::sorted::SortedMap;

/// The last turn taken per key: its number, and a receiver released with it.
type Last<K> = SortedMap<K, (u64, oneshot::Receiver<()>)>;

/// The queues of turns (one per client), per key.
pub struct CallOrder<K: Ord + Clone> {
    last: Rc<RefCell<Last<K>>>,
    taken: Cell<u64>,
}

impl<K: Ord + Clone> Default for CallOrder<K> {
    fn default() -> Self {
        Self {
            last: Rc::default(),
            taken: Cell::new(0),
        }
    }
}

/// A place in a key's call order: [`Turn::wait`] resolves once every earlier turn of the key
/// was released.
#[must_use = "a turn must be waited for, or the order is not transitive"]
pub struct Turn<K: Ord + Clone> {
    previous: Option<oneshot::Receiver<()>>,
    held: Held<K>,
}

/// A turn being served: dropping it lets the next one of its key go.
pub struct Held<K: Ord + Clone> {
    _release: oneshot::Sender<()>,
    key: K,
    number: u64,
    last: Rc<RefCell<Last<K>>>,
}

impl<K: Ord + Clone> CallOrder<K> {
    /// Takes the next turn of `key`; call it synchronously where the call's order is decided.
    pub fn take(&self, key: K) -> Turn<K> {
        let (release, released) = oneshot::channel();
        let number = self.taken.get() + 1;
        self.taken.set(number);
        let previous = self
            .last
            .borrow_mut()
            .insert(key.clone(), (number, released))
            .map(|(_, receiver)| receiver);
        Turn {
            previous,
            held: Held {
                _release: release,
                key,
                number,
                last: self.last.clone(),
            },
        }
    }

    /// Keys with a turn outstanding.
    pub fn len(&self) -> usize {
        self.last.borrow().len()
    }

    /// Whether no turn is outstanding.
    pub fn is_empty(&self) -> bool {
        self.last.borrow().is_empty()
    }
}

impl<K: Ord + Clone> Turn<K> {
    /// Waits for the turn before this one to be released (it waited for its own before it),
    /// and holds this one until the returned [`Held`] is dropped.
    pub async fn wait(self) -> Held<K> {
        if let Some(previous) = self.previous {
            // Released or dropped: both mean the earlier call is past the queue or gone.
            let _ = previous.await;
        }
        self.held
    }
}

impl<K: Ord + Clone> Drop for Held<K> {
    fn drop(&mut self) {
        let mut last = self.last.borrow_mut();
        if last.get(&self.key).is_some_and(|(n, _)| *n == self.number) {
            last.remove(&self.key); // no later turn of this key: nothing to keep
        }
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use futures_executor::LocalPool;
    use futures_util::task::LocalSpawnExt;

    /// Calls whose own work finishes in reverse order still pass in call order per key, a
    /// call that fails (drops its turn at once after waiting) does not let a later one overtake
    /// an earlier one, and another key never waits.
    #[test]
    fn turns_are_served_in_call_order_per_key_whatever_finishes_first() {
        let mut pool = LocalPool::new();
        let spawner = pool.spawner();
        let order = CallOrder::default();
        let passed: Rc<RefCell<Vec<(char, u32)>>> = Rc::default();
        let mut gates = Vec::new();
        for (key, i) in (0..6u32).map(|i| ('a', i)).chain([('b', 0)]) {
            let turn = order.take(key);
            let (open, gate) = oneshot::channel::<()>();
            gates.push(open);
            let passed = passed.clone();
            spawner
                .spawn_local(async move {
                    let held = turn.wait().await;
                    if i != 3 {
                        // The call's own work (an encryption): finishes when its gate opens.
                        let _ = gate.await;
                    }
                    passed.borrow_mut().push((key, i));
                    drop(held);
                })
                .unwrap();
        }
        assert_eq!(order.len(), 2);
        pool.run_until_stalled();
        assert!(
            passed.borrow().is_empty(),
            "nothing of a passes before call 0's work is done"
        );
        // Open the gates in reverse: the work of later calls finishes first; b's first.
        for open in gates.into_iter().rev() {
            let _ = open.send(());
            pool.run_until_stalled();
        }
        let expected: Vec<(char, u32)> = [('b', 0)]
            .into_iter()
            .chain((0..6).map(|i| ('a', i)))
            .collect();
        assert_eq!(*passed.borrow(), expected);
        assert!(order.is_empty(), "released keys are forgotten");
    }

    #[test]
    fn a_dropped_turn_releases_the_next_and_only_the_last_forgets_the_key() {
        let mut pool = LocalPool::new();
        let order = CallOrder::default();
        let first = order.take(1u8);
        let second = order.take(1u8);
        drop(pool.run_until(first.wait()));
        assert_eq!(order.len(), 1, "the second turn is still outstanding");
        drop(pool.run_until(second.wait()));
        assert!(order.is_empty());
    }
}
