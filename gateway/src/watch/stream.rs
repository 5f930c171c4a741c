//! One change stream's body: `ready` first, then what its slot holds, heartbeats in between,
//! until the session expires or the gateway shuts down.
//!
//! The body is pulled by the connection: while a client does not read, nothing is produced
//! and notifications coalesce in the slot (bounded); the idle timeout eventually closes a
//! connection that moves no byte at all.

use std::collections::VecDeque;
use std::convert::Infallible;
use std::time::Duration;

use axum::response::sse::Event;
use futures_util::Stream;
use serde_json::json;

use super::hub::Registration;
use super::slot::Note;

struct State {
    registration: Registration,
    queue: VecDeque<Note>,
    started: bool,
    heartbeat: tokio::time::Interval,
    expiry: std::pin::Pin<Box<tokio::time::Sleep>>,
    closing: tokio::sync::watch::Receiver<bool>,
}

enum Woke {
    Due,
    Heartbeat,
    End,
}

fn event(name: &str, data: serde_json::Value) -> Event {
    Event::default().event(name).data(data.to_string())
}

fn note_event(note: Note) -> Event {
    match note {
        Note::Changed(a, version) => event(
            "changed",
            json!({"typeId": a.type_id, "id": a.id, "version": version}),
        ),
        Note::Reset(a) => event("reset", json!({"typeId": a.type_id, "id": a.id})),
        Note::Resync => event("resync", json!({})),
    }
}

/// The events of a registered stream: `ready`, then notifications and heartbeats every
/// `heartbeat`, ending after `lifetime` (the session's remaining time) or at shutdown.
pub fn events(
    registration: Registration,
    heartbeat: Duration,
    lifetime: Option<Duration>,
    closing: tokio::sync::watch::Receiver<bool>,
) -> impl Stream<Item = Result<Event, Infallible>> + Send + 'static {
    let mut ticks = tokio::time::interval_at(tokio::time::Instant::now() + heartbeat, heartbeat);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    // No session expiry (`--auth none`): a century is as good as never.
    let lifetime = lifetime.unwrap_or(Duration::from_secs(100 * 365 * 86_400));
    let state = State {
        registration,
        queue: VecDeque::new(),
        started: false,
        heartbeat: ticks,
        expiry: Box::pin(tokio::time::sleep(lifetime)),
        closing,
    };
    futures_util::stream::unfold(state, |mut s| async move {
        if !s.started {
            s.started = true;
            return Some((Ok(event("ready", json!({}))), s));
        }
        loop {
            if let Some(note) = s.queue.pop_front() {
                return Some((Ok(note_event(note)), s));
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
                Woke::Heartbeat => return Some((Ok(event("heartbeat", json!({}))), s)),
                Woke::End => return None,
            }
        }
    })
}
