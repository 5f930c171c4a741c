//! Group commit: appends made while a write is in progress wait and are written together, in
//! the next transaction.
//!
//! A transaction's cost is mostly its commit (on disk, with `strict` durability), so a burst of
//! appends in one transaction is far cheaper than one transaction each. Each append still
//! resolves only once its own transaction committed, with its own receipts; a group commits
//! whole or not at all (a failure rejects every append of the group, and none of them consumed
//! a sequence). Groups are written in the order their appends were made, so sequences follow
//! call order.
//!
//! What follows a commit (status counts, views, the message to other contexts) is told once per
//! group, not once per append: under load a group holds hundreds of appends.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use futures_channel::oneshot;

use super::model::{AggregateRef, NewEvent, Receipt};
use super::outbox::{Appended, Begun, GroupItem, Outbox, StoreError};
use super::sorted::SortedSet;

/// Most appends written in one transaction.
pub(crate) const MAX_GROUP: usize = 512;

/// Runs a future to completion in the background (`spawn_local` in a browser).
pub type Spawn = Rc<dyn Fn(Pin<Box<dyn Future<Output = ()>>>)>;

/// Told once per committed group, before any of its appends resolves: how many events it
/// stored, each aggregate it touched (once each, in first-append order), and when its
/// transaction began.
pub type Committed = Box<dyn Fn(u64, &[AggregateRef], Begun)>;

struct Queued {
    aggregate: AggregateRef,
    events: Vec<NewEvent>,
    /// The version guard of a conditional append.
    expected_version: Option<u64>,
    reply: oneshot::Sender<Result<Vec<Receipt>, StoreError>>,
}

/// The queue of appends waiting for the next group.
pub struct GroupCommit<O> {
    outbox: Rc<O>,
    spawn: Spawn,
    committed: Committed,
    queued: RefCell<Vec<Queued>>,
    writing: Cell<bool>,
}

impl<O: Outbox + 'static> GroupCommit<O> {
    /// Group commit over `outbox`; `spawn` runs the writer; `committed` hears of each group.
    pub fn new(outbox: Rc<O>, spawn: Spawn, committed: Committed) -> Rc<Self> {
        Rc::new(GroupCommit {
            outbox,
            spawn,
            committed,
            queued: RefCell::new(Vec::new()),
            writing: Cell::new(false),
        })
    }

    /// Stores `events` under the aggregate's next sequences; resolves once the transaction
    /// holding them committed.
    pub fn append(
        self: &Rc<Self>,
        aggregate: AggregateRef,
        events: Vec<NewEvent>,
    ) -> impl Future<Output = Result<Vec<Receipt>, StoreError>> + 'static {
        self.append_guarded(aggregate, events, None)
    }

    /// [`GroupCommit::append`] with a version guard (`Some`: a conditional append).
    pub fn append_guarded(
        self: &Rc<Self>,
        aggregate: AggregateRef,
        events: Vec<NewEvent>,
        expected_version: Option<u64>,
    ) -> impl Future<Output = Result<Vec<Receipt>, StoreError>> + 'static {
        let (reply, receipt) = oneshot::channel();
        self.queued.borrow_mut().push(Queued {
            aggregate,
            events,
            expected_version,
            reply,
        });
        if !self.writing.replace(true) {
            let this = self.clone();
            (self.spawn)(Box::pin(async move { this.write_queued().await }));
        }
        async move { receipt.await.unwrap_or(Err(StoreError::Closed)) }
    }

    async fn write_queued(&self) {
        loop {
            let group: Vec<Queued> = {
                let mut queued = self.queued.borrow_mut();
                let n = queued.len().min(MAX_GROUP);
                queued.drain(..n).collect()
            };
            if group.is_empty() {
                self.writing.set(false);
                return;
            }
            let items: Vec<GroupItem<'_>> = group
                .iter()
                .map(|q| (q.aggregate, q.events.as_slice(), q.expected_version))
                .collect();
            match self.outbox.append_group(&items).await {
                Ok(Appended { receipts, begun }) => {
                    let stored: usize = receipts.iter().map(Vec::len).sum();
                    let mut seen = SortedSet::new();
                    let touched: Vec<AggregateRef> = group
                        .iter()
                        .map(|q| q.aggregate)
                        .filter(|a| seen.insert(*a))
                        .collect();
                    (self.committed)(stored as u64, &touched, begun);
                    for (queued, receipts) in group.into_iter().zip(receipts) {
                        let _ = queued.reply.send(Ok(receipts));
                    }
                }
                Err(e) => {
                    for queued in group {
                        let _ = queued.reply.send(Err(e.clone()));
                    }
                }
            }
        }
    }
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use crate::engine::conformance::{aggregate, event};
    use crate::engine::memory::MemoryOutbox;
    use futures_executor::LocalPool;
    use futures_util::task::LocalSpawnExt;

    #[test]
    fn concurrent_appends_share_transactions_and_keep_call_order() {
        let mut pool = LocalPool::new();
        let spawner = pool.spawner();
        let spawn: Spawn = Rc::new(move |f| spawner.spawn_local(f).unwrap());
        let outbox = Rc::new(MemoryOutbox::new());
        type Told = Vec<(u64, Vec<AggregateRef>)>;
        let told: Rc<RefCell<Told>> = Rc::default();
        let log = told.clone();
        let committed: Committed =
            Box::new(move |n, touched, _| log.borrow_mut().push((n, touched.to_vec())));
        let group = GroupCommit::new(outbox.clone(), spawn, committed);
        let waiting: Vec<_> = (0..1_000u32)
            .map(|i| {
                let a = aggregate(u128::from(i % 3));
                group.append(a, vec![event(i as u8, 4)])
            })
            .collect();
        let receipts = pool.run_until(futures_util::future::join_all(waiting));
        let mut next = [0u64; 3];
        for (i, r) in receipts.into_iter().enumerate() {
            let r = r.unwrap();
            next[i % 3] += 1;
            assert_eq!(
                r[0].client_seq,
                next[i % 3],
                "call order within each aggregate"
            );
        }
        assert_eq!(
            pool.run_until(outbox.count()).unwrap(),
            1_000,
            "everything stored"
        );
        let told = told.borrow();
        assert_eq!(
            told.iter().map(|(n, _)| n).sum::<u64>(),
            1_000,
            "every stored event told once"
        );
        assert!(
            told.len() < 1_000,
            "told per group, not per append: {} groups",
            told.len()
        );
        for (_, touched) in told.iter() {
            let mut distinct = touched.clone();
            distinct.sort();
            distinct.dedup();
            assert_eq!(
                distinct.len(),
                touched.len(),
                "each aggregate once per group"
            );
            assert!(touched.len() <= 3);
        }
    }
}
