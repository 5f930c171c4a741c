//! Unit tests of the coordination machine: one path each, exact effects.

use super::*;
use crate::engine::read::machine::ReadState;
use crate::engine::status::SyncState;

fn effects(c: &mut Coordinator) -> Vec<Effect> {
    std::iter::from_fn(|| c.poll()).collect()
}

fn started() -> Coordinator {
    let mut c = Coordinator::new();
    c.handle(Event::Start { locks: true }, 0);
    assert_eq!(
        effects(&mut c),
        [
            Effect::Hub(HubUpdate::Role(Role::Follower)),
            Effect::Post(Message::Hello),
            Effect::RequestLock {
                id: 1,
                steal: false
            },
        ]
    );
    c
}

fn status() -> Status {
    Status {
        state: SyncState::Idle,
        pending: 3,
        parked: 0,
        last_error: None,
        role: Role::Drainer,
        read: ReadState::Idle,
        read_refused: Vec::new(),
    }
}

#[test]
fn a_grant_starts_the_drain_and_announces_it() {
    let mut c = started();
    c.handle(Event::LockGranted(1), 5);
    assert_eq!(
        effects(&mut c),
        [
            Effect::Hub(HubUpdate::Role(Role::Drainer)),
            Effect::StartDrain,
            Effect::PostStatus,
        ]
    );
    assert!(c.is_draining() && c.holds_lock());
    c.handle(Event::Tick { pending: 0 }, 1_000);
    assert_eq!(effects(&mut c), [Effect::Post(Message::Heartbeat)]);
    c.handle(Event::Received(Message::Hello), 1_001);
    assert_eq!(effects(&mut c), [Effect::PostStatus]);
    c.handle(Event::Changed(Message::Status(status())), 1_002);
    assert_eq!(effects(&mut c), [Effect::Post(Message::Status(status()))]);
    c.handle(Event::Received(Message::Appended { n: 4 }), 1_003);
    assert_eq!(
        effects(&mut c),
        [Effect::Hub(HubUpdate::Appended { n: 4, begun: None })]
    );
}

#[test]
fn a_failed_request_never_starts_a_drain_and_is_retried_on_the_next_tick() {
    let mut c = started();
    c.handle(Event::LockFailed(1), 5);
    assert_eq!(effects(&mut c), []);
    assert!(!c.is_draining() && !c.holds_lock());
    c.handle(Event::Tick { pending: 9 }, 1_000);
    assert_eq!(
        effects(&mut c),
        [Effect::RequestLock {
            id: 2,
            steal: false
        }]
    );
    // The old request's late answers are ignored.
    c.handle(Event::LockGranted(1), 1_001);
    assert_eq!(effects(&mut c), []);
    c.handle(Event::LockGranted(2), 1_002);
    assert!(effects(&mut c).contains(&Effect::StartDrain));
}

#[test]
fn losing_the_lock_stops_the_drain_and_queues_again() {
    let mut c = started();
    c.handle(Event::LockGranted(1), 5);
    effects(&mut c);
    c.handle(Event::LockLost(1), 10);
    assert_eq!(
        effects(&mut c),
        [
            Effect::Hub(HubUpdate::Error(
                "another context took over draining".into()
            )),
            Effect::StopDrain,
        ]
    );
    assert!(!c.holds_lock(), "it knows at once");
    c.handle(Event::DrainStopped(RunEnd::Superseded), 20);
    assert_eq!(
        effects(&mut c),
        [
            Effect::Hub(HubUpdate::Role(Role::Follower)),
            Effect::RequestLock {
                id: 2,
                steal: false
            },
        ]
    );
    assert!(!c.is_draining());
    // Granted again before the old drain stopped: it restarts once it has.
    c.handle(Event::LockGranted(2), 30);
    assert!(effects(&mut c).contains(&Effect::StartDrain));
    c.handle(Event::LockLost(2), 40);
    effects(&mut c);
    c.handle(Event::Tick { pending: 1 }, 50);
    let retry = effects(&mut c);
    assert_eq!(retry, [], "still draining (stopping): no request yet");
}

#[test]
fn a_follower_with_work_steals_from_a_silent_drainer() {
    let mut c = started();
    c.handle(Event::Received(Message::Status(status())), 1_000);
    assert_eq!(effects(&mut c), [Effect::Hub(HubUpdate::Mirror(status()))]);
    c.handle(Event::Tick { pending: 3 }, 1_000 + STEAL_AFTER_MS);
    assert_eq!(effects(&mut c), [], "not silent long enough");
    c.handle(Event::Received(Message::Heartbeat), 1_000 + STEAL_AFTER_MS);
    c.handle(Event::Tick { pending: 0 }, 2_000 + 3 * STEAL_AFTER_MS);
    assert_eq!(effects(&mut c), [], "nothing pending: no reason to steal");
    c.handle(Event::Tick { pending: 3 }, 2_000 + 3 * STEAL_AFTER_MS);
    assert_eq!(
        effects(&mut c),
        [Effect::RequestLock { id: 2, steal: true }]
    );
    c.handle(Event::LockFailed(1), 2_001 + 3 * STEAL_AFTER_MS);
    assert_eq!(
        effects(&mut c),
        [],
        "the withdrawn request's rejection is stale"
    );
    c.handle(Event::LockGranted(2), 2_002 + 3 * STEAL_AFTER_MS);
    assert!(effects(&mut c).contains(&Effect::StartDrain));
}

#[test]
fn followers_relay_appends_and_mirror_notices_drainers_do_not() {
    let mut c = started();
    c.handle(
        Event::Appended {
            n: 2,
            begun: Begun(7),
        },
        1,
    );
    assert_eq!(
        effects(&mut c),
        [
            Effect::Hub(HubUpdate::Appended {
                n: 2,
                begun: Some(Begun(7))
            }),
            Effect::Post(Message::Appended { n: 2 }),
        ]
    );
    c.handle(Event::Changed(Message::Status(status())), 2);
    assert_eq!(effects(&mut c), [], "a follower relays nothing of its own");
    c.handle(Event::LockGranted(1), 3);
    effects(&mut c);
    c.handle(
        Event::Appended {
            n: 2,
            begun: Begun(8),
        },
        4,
    );
    assert_eq!(
        effects(&mut c),
        [Effect::Hub(HubUpdate::Appended {
            n: 2,
            begun: Some(Begun(8))
        })]
    );
    c.handle(Event::Received(Message::Status(status())), 5);
    assert_eq!(effects(&mut c), [], "the drainer mirrors nobody");
}

#[test]
fn closing_releases_the_lock_and_then_ignores_everything() {
    let mut c = started();
    c.handle(Event::LockGranted(1), 5);
    effects(&mut c);
    c.handle(Event::Close, 6);
    assert_eq!(effects(&mut c), [Effect::ReleaseLock]);
    c.handle(Event::Tick { pending: 1 }, 2_000);
    c.handle(Event::LockGranted(1), 2_001);
    assert_eq!(effects(&mut c), []);
}

#[test]
fn without_web_locks_every_context_drains() {
    let mut c = Coordinator::new();
    c.handle(Event::Start { locks: false }, 0);
    assert!(effects(&mut c).contains(&Effect::StartDrain));
    c.handle(Event::Tick { pending: 1 }, 1_000);
    assert_eq!(effects(&mut c), [Effect::Post(Message::Heartbeat)]);
}
