//! Call order kept across an await: turns taken synchronously, in call order, and served one
//! after the other.
//!
//! Group commit gives sequences in the order appends *reach* it. With end-to-end encryption an
//! append awaits WebCrypto (and maybe the app's key function) first, and those finish in any
//! order: an append of a plain type, or of a small event, would overtake an earlier one still
//! encrypting, and the aggregate's log would hold them inverted for good. So each append takes a
//! [`Turn`] when it is called and, before anything else, waits for the turn before it to be
//! released; it releases its own once it has reached group commit (or failed). Only the step
//! before the queue is serialised: the transactions still group as before.

use std::cell::RefCell;

use futures_channel::oneshot;

/// The queue of turns (one per client).
#[derive(Default)]
pub struct CallOrder {
    /// Released when the last turn taken is released.
    last: RefCell<Option<oneshot::Receiver<()>>>,
}

/// A place in the call order: [`Turn::wait`] resolves once every earlier turn was released.
#[must_use = "a turn must be waited for, or the order is not transitive"]
pub struct Turn {
    previous: Option<oneshot::Receiver<()>>,
    release: oneshot::Sender<()>,
}

/// A turn being served: dropping it lets the next one go.
pub struct Held {
    _release: oneshot::Sender<()>,
}

impl CallOrder {
    /// Takes the next turn; call it synchronously where the call's order is decided.
    pub fn take(&self) -> Turn {
        let (release, released) = oneshot::channel();
        let previous = self.last.replace(Some(released));
        Turn { previous, release }
    }
}

impl Turn {
    /// Waits for the turn before this one to be released (it waited for its own before it),
    /// and holds this one until the returned [`Held`] is dropped.
    pub async fn wait(self) -> Held {
        if let Some(previous) = self.previous {
            // Released or dropped: both mean the earlier call is past the queue or gone.
            let _ = previous.await;
        }
        Held {
            _release: self.release,
        }
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use futures_executor::LocalPool;
    use futures_util::task::LocalSpawnExt;
    use std::rc::Rc;

    /// Calls whose own work finishes in reverse order still pass in call order, and a call that
    /// fails (drops its turn at once after waiting) does not let a later one overtake an
    /// earlier one.
    #[test]
    fn turns_are_served_in_call_order_whatever_finishes_first() {
        let mut pool = LocalPool::new();
        let spawner = pool.spawner();
        let order = CallOrder::default();
        let passed: Rc<RefCell<Vec<u32>>> = Rc::default();
        let mut gates = Vec::new();
        for i in 0..6u32 {
            let turn = order.take();
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
                    passed.borrow_mut().push(i);
                    drop(held);
                })
                .unwrap();
        }
        pool.run_until_stalled();
        assert!(
            passed.borrow().is_empty(),
            "nothing passes before call 0's work is done"
        );
        // Open the gates in reverse: the work of later calls finishes first.
        for open in gates.into_iter().rev() {
            let _ = open.send(());
            pool.run_until_stalled();
        }
        assert_eq!(*passed.borrow(), vec![0, 1, 2, 3, 4, 5]);
    }

    #[test]
    fn a_dropped_turn_releases_the_next() {
        let mut pool = LocalPool::new();
        let order = CallOrder::default();
        let first = order.take();
        let second = order.take();
        drop(pool.run_until(first.wait()));
        pool.run_until(second.wait());
    }
}
