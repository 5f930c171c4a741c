//! The drain's executor: performs the [`Drain`] machine's actions over an [`Outbox`], a
//! [`Transport`] and an [`Env`], and feeds their results back until the machine stops.
//!
//! Everything that waits lives here, at the edge: storage operations, the request, the lock
//! check and the read-ahead run concurrently as futures; one wait at a time (a timer, cut short
//! by the hub's signals when the machine asked for that); closing and superseding are noticed
//! whatever is in progress. Dropping an operation's future abandons it: an in-flight request is
//! aborted (its batch stays pinned and is resent identically next time), and a storage
//! operation already handed to the platform completes or rolls back on its own.

use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use super::machine::{Action, Drain, Input, Now, Report, RunEnd};
use crate::engine::auth::Authenticator;
use crate::engine::env::{Env, Transport};
use crate::engine::inspect::Inspector;
use crate::engine::outbox::{CutQuery, Outbox};
use crate::engine::signal::Signal;
use crate::engine::status::{Hub, SyncState};

type Op<'a> = Pin<Box<dyn Future<Output = Input> + 'a>>;

/// The wait the machine asked for.
struct Wait<'a> {
    timer: Pin<Box<dyn Future<Output = ()> + 'a>>,
    /// Ends early once the work signal's generation differs from this.
    work: Option<u64>,
    /// Ends early once the network signal's generation differs from this.
    network: Option<u64>,
}

fn now<E: Env>(env: &E) -> Now {
    Now {
        ms: env.now_ms(),
        online: env.is_online(),
        random: env.random(),
    }
}

/// What the drain runs over.
pub struct Edge<'a, O, T, A, E> {
    /// Storage.
    pub outbox: &'a O,
    /// The write endpoint.
    pub transport: &'a T,
    /// Sessions.
    pub auth: &'a A,
    /// Clock, timers, network state, lock check.
    pub env: &'a E,
    /// Status, counts and wake-ups.
    pub hub: &'a Hub,
}

/// Runs `drain` until it stops: the hub closed, or another context drains now.
pub async fn run<O: Outbox, T: Transport, A: Authenticator, E: Env>(
    drain: Drain,
    edge: Edge<'_, O, T, A, E>,
) -> RunEnd {
    run_inspected(drain, edge, &Inspector::default()).await
}

/// [`run`], telling `inspector` every attempt's outcome and what the machine holds after each
/// step (what `inspect()` shows).
pub async fn run_inspected<O: Outbox, T: Transport, A: Authenticator, E: Env>(
    mut drain: Drain,
    edge: Edge<'_, O, T, A, E>,
    inspector: &Inspector,
) -> RunEnd {
    let Edge {
        outbox,
        transport,
        auth,
        env,
        hub,
    } = edge;
    let policy = drain.policy();
    // A few operations at most (a storage operation, the request or its read-ahead, a prune):
    // a plain list, each polled when the task wakes.
    let mut ops: Vec<Op<'_>> = Vec::new();
    let mut wait: Option<Wait<'_>> = None;
    // The work signal's generation when storage was last searched for work: an append after
    // that must not be slept through.
    let mut work_seen = hub.work.generation();
    // `synced` reports, told once the operations the machine asked for in the same step have
    // started (`next_input`): the next request is on the wire before `synced` listeners, the
    // channel post and `flush`'s check run. Only these wait: the other reports change what
    // the actions of the same step read from the hub (the parked aggregates a cut skips).
    let mut synced: Vec<Report> = Vec::new();
    drain.start();
    loop {
        let network_seen = hub.network.generation();
        while let Some(action) = drain.poll() {
            match action {
                Action::Recount => ops.push(Box::pin(async move {
                    hub.recount_begins();
                    let counted = outbox.counts().await;
                    Input::Recounted(match counted {
                        Ok(counted) => {
                            hub.reset_counts(counted);
                            Ok(())
                        }
                        Err(e) => {
                            hub.recount_failed();
                            Err(e)
                        }
                    })
                })),
                Action::FindUnpruned => {
                    ops.push(Box::pin(
                        async move { Input::Unpruned(outbox.unpruned().await) },
                    ))
                }
                Action::ReadPin => {
                    ops.push(Box::pin(
                        async move { Input::PinRead(outbox.pinned().await) },
                    ))
                }
                Action::Read(batch) => {
                    ops.push(Box::pin(
                        async move { Input::Read(outbox.read(&batch).await) },
                    ))
                }
                Action::Cut { after } => {
                    work_seen = hub.work.generation();
                    let skip = hub.parked_aggregates();
                    ops.push(Box::pin(async move {
                        let query = CutQuery {
                            after,
                            skip: &skip,
                            assume_landed: None,
                            max_events: policy.max_batch_events,
                            max_bytes: policy.max_batch_bytes,
                        };
                        Input::Cut(outbox.next_batch(query).await)
                    }))
                }
                Action::ReadAhead { in_flight } => {
                    let skip = hub.parked_aggregates();
                    ops.push(Box::pin(async move {
                        let query = CutQuery {
                            after: Some(in_flight.aggregate),
                            skip: &skip,
                            assume_landed: Some((in_flight.aggregate, in_flight.last_seq)),
                            max_events: policy.max_batch_events,
                            max_bytes: policy.max_batch_bytes,
                        };
                        let result = outbox.next_batch(query).await;
                        Input::ReadAhead { in_flight, result }
                    }))
                }
                Action::Pin { batch, replacing } => ops.push(Box::pin(async move {
                    Input::Pinned(outbox.pin(&batch, replacing.as_ref()).await)
                })),
                Action::OpenSession => ops.push(Box::pin(async move {
                    Input::SessionOpened(auth.open_session().await)
                })),
                Action::CheckLock => {
                    ops.push(Box::pin(
                        async move { Input::MaySend(env.may_send().await) },
                    ))
                }
                Action::Send { body, token } => {
                    let reply = transport.send(body, token);
                    ops.push(Box::pin(async move { Input::Replied(reply.await) }))
                }
                Action::Settle {
                    batch,
                    through,
                    then,
                } => ops.push(Box::pin(async move {
                    Input::Settled(outbox.settle(&batch, through, then.as_ref()).await)
                })),
                Action::ReadBack {
                    aggregate,
                    version,
                    token,
                } => {
                    let found = transport.read_back(aggregate, version, token);
                    ops.push(Box::pin(async move { Input::ReadBack(found.await) }))
                }
                Action::Park { records, batch } => ops.push(Box::pin(async move {
                    Input::Parked(outbox.park(&records, &batch).await)
                })),
                Action::Prune { aggregate, idle } => ops.push(Box::pin(async move {
                    Input::Pruned(outbox.prune(aggregate, policy.prune_chunk, idle).await)
                })),
                Action::Wait { ms, work, network } => {
                    wait = Some(Wait {
                        timer: Box::pin(env.sleep(ms)),
                        work: work.then_some(work_seen),
                        network: network.then_some(network_seen),
                    })
                }
                Action::Report(report @ Report::Synced { .. }) => synced.push(report),
                Action::Report(report) => apply(hub, report),
                Action::Stop(end) => {
                    for report in synced.drain(..) {
                        apply(hub, report);
                    }
                    // A recount still out is dropped with the run: so is its bookkeeping.
                    hub.recount_failed();
                    if end == RunEnd::Closed {
                        hub.set_state(SyncState::Closed);
                    }
                    inspector.observe(None);
                    hub.stopped.notify();
                    return end;
                }
            }
        }
        let input = next_input(&mut ops, &mut wait, hub, &mut synced).await;
        drain.handle(input, now(env));
        if let Some(outcome) = drain.take_outcome() {
            inspector.record(outcome);
        }
        inspector.observe(drain.held());
    }
}

/// Waits for whatever comes first: closing, superseding, an operation's result, or the end of
/// the current wait. `later` (reports) is applied once every operation has been polled, so
/// that the ones just asked for have started.
async fn next_input<'a>(
    ops: &mut Vec<Op<'a>>,
    wait: &mut Option<Wait<'a>>,
    hub: &Hub,
    later: &mut Vec<Report>,
) -> Input {
    std::future::poll_fn(|cx| {
        if hub.is_closed() {
            return Poll::Ready(Input::Close);
        }
        if hub.is_superseded() {
            return Poll::Ready(Input::Supersede);
        }
        // Register for the next close or supersede.
        let _ = Pin::new(&mut hub.closing.changed_since(hub.closing.generation())).poll(cx);
        let logged = hub.take_logged();
        if !logged.is_empty() {
            return Poll::Ready(Input::Logged(logged));
        }
        let _ = Pin::new(&mut hub.log.changed_since(hub.log.generation())).poll(cx);
        let mut done = None;
        for i in 0..ops.len() {
            if let Poll::Ready(input) = ops[i].as_mut().poll(cx) {
                drop(ops.remove(i));
                done = Some(input);
                break;
            }
        }
        for report in later.drain(..) {
            apply(hub, report);
        }
        if let Some(input) = done {
            return Poll::Ready(input);
        }
        if let Some(w) = wait.as_mut() {
            if signalled(w.work, &hub.work, cx) || signalled(w.network, &hub.network, cx) {
                *wait = None;
                return Poll::Ready(Input::Woken);
            }
            if w.timer.as_mut().poll(cx).is_ready() {
                *wait = None;
                return Poll::Ready(Input::TimerFired);
            }
        }
        Poll::Pending
    })
    .await
}

/// Whether `signal` changed since generation `since` (registering for the next change if not).
fn signalled(since: Option<u64>, signal: &Signal, cx: &mut std::task::Context<'_>) -> bool {
    since.is_some_and(|g| Pin::new(&mut signal.changed_since(g)).poll(cx).is_ready())
}

fn apply(hub: &Hub, report: Report) {
    match report {
        Report::State(state) => hub.set_state(state),
        Report::Idle => hub.set_idle(),
        Report::Error { code, message, at } => hub.set_error(code, message, at),
        Report::Synced { notice, removed } => hub.synced(notice, removed),
        Report::Parked(record) => hub.parked(record),
    }
}
