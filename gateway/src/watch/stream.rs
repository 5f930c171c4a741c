//! One change stream's body: `ready` first, then what its slot holds, heartbeats in between,
//! until the session expires or the gateway shuts down.
//!
//! Every notification about an aggregate passes the stream's [`Check`] before it is sent (the
//! access policy, asked again at delivery: an aggregate created by someone else after the
//! stream started is never notified to a stream that may not read it).
//!
//! The body is pulled by the connection: while a client does not read, nothing is produced
//! and notifications coalesce in the slot (bounded). A client that stops reading fills its
//! connection's (shrunk) send buffer, and once a write has waited for room for
//! `--watch-write-timeout-ms` the connection is dropped with this stream
//! (`crate::serve::activity`); the [`Streaming`] guard the stream holds is what marks its
//! connection as carrying a stream. Every stream also ends after its lifetime (the session's
//! remaining time, at most `--watch-max-lifetime-secs`): the body simply ends and the client
//! reconnects.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::Event;
use celeriant_sync_protocol::watch;
use futures_util::Stream;

use super::hub::Registration;
use super::slot::Note;
use crate::serve::activity::Streaming;

/// Whether a notification about an aggregate may be sent on this stream.
pub type Check = std::sync::Arc<
    dyn Fn(celeriant_sync_protocol::AggregateRef) -> futures_util::future::BoxFuture<'static, bool>
        + Send
        + Sync,
>;

/// Whether the stream's session may still hear anything (its token not revoked); asked at every
/// wake — each notification, `resync` included, and each heartbeat — so a revoked stream ends
/// within one heartbeat interval and gives its slots back.
pub type Alive = std::sync::Arc<dyn Fn() -> bool + Send + Sync>;

struct State {
    registration: Registration,
    check: Check,
    alive: Alive,
    queue: VecDeque<Note>,
    started: bool,
    heartbeat: tokio::time::Interval,
    expiry: std::pin::Pin<Box<tokio::time::Sleep>>,
    closing: tokio::sync::watch::Receiver<bool>,
    /// Held for as long as the stream lives (`None` without a real connection): the socket's
    /// stream settings, and the connection pool's mark (streams give way after idle ones).
    _streaming: (
        Option<Streaming>,
        Option<crate::limits::connections::StreamMark>,
    ),
}

enum Woke {
    Due,
    Heartbeat,
    End,
}

/// An event named `name` (one of [`watch`]'s names) with `data` as its JSON.
fn event(name: &str, data: &impl serde::Serialize) -> Event {
    // Cannot fail: the data are structs of ids and numbers.
    let json = serde_json::to_string(data).unwrap_or_else(|_| "{}".into());
    Event::default().event(name).data(json)
}

fn note_event(note: Note) -> Event {
    match note {
        Note::Changed(a, version) => event(
            watch::CHANGED,
            &watch::Changed {
                type_id: a.type_id,
                id: a.id,
                version,
            },
        ),
        Note::Reset(a, deleted) => event(
            watch::RESET,
            &watch::Reset {
                type_id: a.type_id,
                id: a.id,
                deleted,
            },
        ),
        Note::Resync => Event::default().event(watch::RESYNC).data("{}"),
    }
}

/// The events of a registered stream: `ready` (with `ready`'s data), then notifications that
/// pass `check` and heartbeats every `heartbeat`, ending after `lifetime` or at shutdown.
#[allow(clippy::too_many_arguments)]
pub fn events(
    registration: Registration,
    ready: watch::Ready,
    check: Check,
    alive: Alive,
    heartbeat: Duration,
    lifetime: Duration,
    closing: tokio::sync::watch::Receiver<bool>,
    streaming: (
        Option<Streaming>,
        Option<crate::limits::connections::StreamMark>,
    ),
) -> impl Stream<Item = Result<Event, Infallible>> + Send + 'static {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + heartbeat, heartbeat);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let state = State {
        registration,
        check,
        alive,
        queue: VecDeque::new(),
        started: false,
        heartbeat: ticks,
        expiry: Box::pin(tokio::time::sleep(lifetime)),
        closing,
        _streaming: streaming,
    };
    futures_util::stream::unfold((state, Some(ready)), |(mut s, mut ready)| async move {
        if !s.started {
            s.started = true;
            let data = ready.take().unwrap_or_default();
            return Some((Ok(event(watch::READY, &data)), (s, ready)));
        }
        loop {
            if !(s.alive)() {
                return None;
            }
            if let Some(note) = s.queue.pop_front() {
                let aggregate = match note {
                    Note::Changed(a, _) | Note::Reset(a, _) => Some(a),
                    Note::Resync => None,
                };
                if let Some(a) = aggregate
                    && !(s.check)(a).await
                {
                    continue;
                }
                return Some((Ok(note_event(note)), (s, ready)));
            }
            let slot = s.registration.slot.clone();
            let woke = tokio::select! {
                () = slot.wait() => Woke::Due,
                _ = s.heartbeat.tick() => Woke::Heartbeat,
                () = &mut s.expiry => Woke::End,
                _ = s.closing.wait_for(|closing| *closing) => Woke::End,
            };
            match woke {
                Woke::Due => s.queue.extend(slot.drain()),
                Woke::Heartbeat => {
                    if !(s.alive)() {
                        return None;
                    }
                    return Some((
                        Ok(Event::default().event(watch::HEARTBEAT).data("{}")),
                        (s, ready),
                    ));
                }
                Woke::End => return None,
            }
        }
    })
}
