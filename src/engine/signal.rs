//! A single-threaded wake-up primitive: any number of waiters, woken by the next `notify`.
//!
//! The drain loop sleeps until there is work (an append), the network comes back (`online`),
//! a timer fires, or the client closes. Each of those is a [`Signal`]; waiting means racing the
//! relevant ones. A generation counter makes notifications impossible to miss: a waiter created
//! before a `notify` completes even if it is first polled after it.

use std::cell::{Cell, RefCell};
use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll, Waker};

/// A notification source.
#[derive(Default)]
pub struct Signal {
    inner: RefCell<Inner>,
}

#[derive(Default)]
struct Inner {
    generation: u64,
    wakers: Vec<Waker>,
}

impl Signal {
    /// Wakes every current waiter.
    pub fn notify(&self) {
        let wakers = {
            let mut inner = self.inner.borrow_mut();
            inner.generation += 1;
            std::mem::take(&mut inner.wakers)
        };
        for waker in wakers {
            waker.wake();
        }
    }

    /// How many notifications have happened.
    pub fn generation(&self) -> u64 {
        self.inner.borrow().generation
    }

    /// Resolves at the first notification after this call.
    pub fn notified(&self) -> Changed<'_> {
        self.changed_since(self.generation())
    }

    /// Resolves once the generation differs from `generation`.
    pub(crate) fn changed_since(&self, generation: u64) -> Changed<'_> {
        Changed {
            signal: self,
            generation,
        }
    }
}

/// The future returned by [`Signal::notified`].
pub struct Changed<'a> {
    signal: &'a Signal,
    generation: u64,
}

impl Future for Changed<'_> {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let mut inner = self.signal.inner.borrow_mut();
        if inner.generation != self.generation {
            return Poll::Ready(());
        }
        if !inner.wakers.iter().any(|w| w.will_wake(cx.waker())) {
            inner.wakers.push(cx.waker().clone());
        }
        Poll::Pending
    }
}

/// Work under way, counted: each piece holds an [`Entered`] while it runs, and
/// [`InFlight::idle`] resolves once none does (a closing client waits so for its stopped
/// reader's page store or log reset, whose news must be told before the drain lock goes).
#[derive(Default)]
pub struct InFlight {
    count: Cell<u32>,
    ended: Signal,
}

/// One piece of work counted in an [`InFlight`] until dropped.
pub struct Entered<'a>(&'a InFlight);

impl InFlight {
    /// Counts one more piece of work, until the returned guard is dropped.
    pub fn enter(&self) -> Entered<'_> {
        self.count.set(self.count.get() + 1);
        Entered(self)
    }

    /// Whether some piece of work is under way.
    pub fn busy(&self) -> bool {
        self.count.get() > 0
    }

    /// Resolves once no piece of work is under way (at once if none is).
    pub async fn idle(&self) {
        loop {
            let ended = self.ended.notified();
            if !self.busy() {
                return;
            }
            ended.await;
        }
    }
}

impl Drop for Entered<'_> {
    fn drop(&mut self) {
        self.0.count.set(self.0.count.get() - 1);
        self.0.ended.notify();
    }
}

/// Waits for whichever of two futures finishes first; `true` when it was the first.
pub async fn first<A: Future, B: Future>(a: A, b: B) -> bool {
    let (mut a, mut b) = (std::pin::pin!(a), std::pin::pin!(b));
    std::future::poll_fn(|cx| {
        if a.as_mut().poll(cx).is_ready() {
            Poll::Ready(true)
        } else if b.as_mut().poll(cx).is_ready() {
            Poll::Ready(false)
        } else {
            Poll::Pending
        }
    })
    .await
}

#[cfg(all(test, not(target_arch = "wasm32")))]
mod tests {
    use super::*;
    use futures_executor::block_on;

    #[test]
    fn a_notification_before_the_first_poll_is_not_missed() {
        let s = Signal::default();
        let waiter = s.notified();
        s.notify();
        block_on(waiter);
    }

    #[test]
    fn every_waiter_wakes() {
        let s = Signal::default();
        let (a, b) = (s.notified(), s.notified());
        s.notify();
        block_on(async {
            a.await;
            b.await;
        });
        assert_eq!(s.generation(), 1);
    }

    #[test]
    fn idle_waits_for_every_piece_of_work() {
        let work = InFlight::default();
        assert!(block_on(first(work.idle(), std::future::pending::<()>())));
        let (a, b) = (work.enter(), work.enter());
        let mut idle = Box::pin(work.idle());
        let mut cx = Context::from_waker(Waker::noop());
        assert!(idle.as_mut().poll(&mut cx).is_pending());
        drop(a);
        assert!(
            idle.as_mut().poll(&mut cx).is_pending(),
            "one still under way"
        );
        assert!(work.busy());
        drop(b);
        assert!(idle.as_mut().poll(&mut cx).is_ready());
        assert!(!work.busy());
    }

    #[test]
    fn first_reports_which_finished() {
        let s = Signal::default();
        s.notify();
        assert!(block_on(first(
            std::future::ready(()),
            std::future::pending::<()>()
        )));
        assert!(!block_on(first(
            std::future::pending::<()>(),
            s.changed_since(0)
        )));
    }
}
