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
//!
//! An atomic write (`appendAtomic`) takes its place in the same queue, in call order, but is
//! written in a transaction of its own ([`Outbox::append_atomic`]): the appends queued before it
//! go in the group before, those after it in the next.

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

/// One atomic write's legs: each aggregate, its events and its version guard.
pub type AtomicWrites = Vec<(AggregateRef, Vec<NewEvent>, Option<u64>)>;

/// What waits in the queue: an append, or an atomic write (written alone).
enum Job {
    Append(Queued),
    Atomic {
        writes: AtomicWrites,
        reply: oneshot::Sender<Result<Vec<Vec<Receipt>>, StoreError>>,
    },
}

/// The queue of appends waiting for the next group.
pub struct GroupCommit<O> {
    outbox: Rc<O>,
    spawn: Spawn,
    committed: Committed,
    queued: RefCell<Vec<Job>>,
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
        self.enqueue(Job::Append(Queued {
            aggregate,
            events,
            expected_version,
            reply,
        }));
        async move { receipt.await.unwrap_or(Err(StoreError::Closed)) }
    }

    /// Stores an atomic write (each aggregate at most once) after every append queued before
    /// it, in a transaction of its own; resolves with its receipts per write once it committed.
    pub fn append_atomic(
        self: &Rc<Self>,
        writes: AtomicWrites,
    ) -> impl Future<Output = Result<Vec<Vec<Receipt>>, StoreError>> + 'static {
        let (reply, receipt) = oneshot::channel();
        self.enqueue(Job::Atomic { writes, reply });
        async move { receipt.await.unwrap_or(Err(StoreError::Closed)) }
    }

    fn enqueue(self: &Rc<Self>, job: Job) {
        self.queued.borrow_mut().push(job);
        if !self.writing.replace(true) {
            let this = self.clone();
            (self.spawn)(Box::pin(async move { this.write_queued().await }));
        }
    }

    /// Tells what a committed transaction of `items` stored: its event count and each
    /// aggregate once.
    fn tell(&self, receipts: &[Vec<Receipt>], items: &[GroupItem<'_>], begun: Begun) {
        let stored: usize = receipts.iter().map(Vec::len).sum();
        let mut seen = SortedSet::new();
        let touched: Vec<AggregateRef> = items
            .iter()
            .map(|item| item.0)
            .filter(|a| seen.insert(*a))
            .collect();
        (self.committed)(stored as u64, &touched, begun);
    }

    async fn write_queued(&self) {
        loop {
            let first_atomic = {
                let mut queued = self.queued.borrow_mut();
                match queued.first() {
                    Some(Job::Atomic { .. }) => Some(queued.remove(0)),
                    _ => None,
                }
            };
            if let Some(Job::Atomic { writes, reply }) = first_atomic {
                let items: Vec<GroupItem<'_>> = writes
                    .iter()
                    .map(|(a, events, expected)| (*a, events.as_slice(), *expected))
                    .collect();
                let result = self.outbox.append_atomic(&items).await;
                if let Ok(Appended { receipts, begun }) = &result {
                    self.tell(receipts, &items, *begun);
                }
                let _ = reply.send(result.map(|a| a.receipts));
                continue;
            }
            let group: Vec<Queued> = {
                let mut queued = self.queued.borrow_mut();
                let n = queued
                    .iter()
                    .take(MAX_GROUP)
                    .take_while(|j| matches!(j, Job::Append(_)))
                    .count();
                queued
                    .drain(..n)
                    .filter_map(|j| match j {
                        Job::Append(q) => Some(q),
                        Job::Atomic { .. } => None,
                    })
                    .collect()
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
                    self.tell(&receipts, &items, begun);
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

    /// What a group commit told, per transaction: (events stored, aggregates touched).
    type Told = Rc<RefCell<Vec<(u64, Vec<AggregateRef>)>>>;

    /// A group commit over a fresh memory outbox, its tasks run by `pool`, and what it tells.
    fn group_on(pool: &LocalPool) -> (Rc<MemoryOutbox>, Rc<GroupCommit<MemoryOutbox>>, Told) {
        let spawner = pool.spawner();
        let spawn: Spawn = Rc::new(move |f| spawner.spawn_local(f).unwrap());
        let outbox = Rc::new(MemoryOutbox::new());
        let told: Told = Rc::default();
        let log = told.clone();
        let committed: Committed =
            Box::new(move |n, touched, _| log.borrow_mut().push((n, touched.to_vec())));
        let group = GroupCommit::new(outbox.clone(), spawn, committed);
        (outbox, group, told)
    }

    #[test]
    fn concurrent_appends_share_transactions_and_keep_call_order() {
        let mut pool = LocalPool::new();
        let (outbox, group, told) = group_on(&pool);
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

    #[test]
    fn an_atomic_write_keeps_its_place_in_call_order_in_a_transaction_of_its_own() {
        let mut pool = LocalPool::new();
        let (outbox, group, told) = group_on(&pool);
        let (a, b) = (aggregate(1), aggregate(2));
        let before = group.append(a, vec![event(1, 4)]);
        let atomic = group.append_atomic(vec![
            (b, vec![event(2, 4), event(3, 4)], Some(0)),
            (a, vec![event(4, 4)], None),
        ]);
        let after = group.append(a, vec![event(5, 4)]);
        let (before, atomic, after) =
            pool.run_until(futures_util::future::join3(before, atomic, after));
        assert_eq!(before.unwrap()[0].client_seq, 1);
        let atomic = atomic.unwrap();
        assert_eq!(
            atomic
                .iter()
                .map(|r| r.iter().map(|r| r.client_seq).collect::<Vec<_>>())
                .collect::<Vec<_>>(),
            [vec![1, 2], vec![2]],
            "receipts per write, in call order on each aggregate"
        );
        assert_eq!(after.unwrap()[0].client_seq, 3);
        assert_eq!(
            *told.borrow(),
            [(1, vec![a]), (3, vec![b, a]), (1, vec![a])],
            "three transactions: before, the atomic write alone, after"
        );
        let write = pool
            .run_until(outbox.next_batch(crate::engine::conformance::all(None)))
            .unwrap()
            .unwrap();
        assert_eq!(write.len(), 1, "the append before it is cut alone");
    }
}
