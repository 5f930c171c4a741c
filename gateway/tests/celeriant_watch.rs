//! The Celeriant backend's one upstream watch, against the fake node: a write is notified as
//! `changed`, a trim or delete as `reset`, a watch that ends (cleanly or mid-frame) as
//! `resync` followed by a reconnection (and another `resync` once it is open again); and the
//! whole path over HTTP: a gateway process on `--backend celeriant` streams a write made
//! through it.

mod support;

use std::time::Duration;

use celeriant_gateway::backend::celeriant::{CeleriantBackend, CeleriantOptions};
use celeriant_gateway::backend::{Backend, Change};
use celeriant_msg::response::watch_event::WatchResponseEvent;
use serde_json::{Value, json};
use support::fake_celeriant::FakeCeleriant;
use support::process::{Process, data_dir, post};
use support::sse;
use support::write::{ORG, TYPE, command, key};
use tempfile::TempDir;
use tokio::sync::broadcast;
use uuid::Uuid;

const WAIT: Duration = Duration::from_secs(5);

async fn next(changes: &mut broadcast::Receiver<Change>) -> Change {
    tokio::time::timeout(WAIT, changes.recv())
        .await
        .expect("a change within the wait")
        .unwrap()
}

async fn watches(fake: &FakeCeleriant, n: usize) {
    let deadline = tokio::time::Instant::now() + WAIT;
    while fake.watches() != n {
        assert!(
            tokio::time::Instant::now() < deadline,
            "{} watches, want {n}",
            fake.watches()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test]
async fn one_upstream_watch_changed_reset_resync_and_reconnect() {
    let fake = FakeCeleriant::start();
    let backend = CeleriantBackend::connect(CeleriantOptions {
        addresses: vec![fake.address()],
        api_key: None,
        request_timeout: Duration::from_secs(5),
    })
    .await
    .unwrap();
    let mut changes = backend.changes().unwrap();
    assert_eq!(
        next(&mut changes).await,
        Change::Resync,
        "a resync once the watch is open"
    );
    watches(&fake, 1).await;

    backend.write(command(1, 1)).await.unwrap();
    assert_eq!(
        next(&mut changes).await,
        Change::Changed {
            key: key(1),
            version: 1
        }
    );
    backend.write(command(1, 2)).await.unwrap();
    assert_eq!(
        next(&mut changes).await,
        Change::Changed {
            key: key(1),
            version: 2
        }
    );

    let trimmed = WatchResponseEvent {
        org_id: ORG,
        aggregate_type_id: TYPE,
        aggregate_id: 1,
        operation: 3,
        from_aggregate_version: None,
        to_aggregate_version: Some(2),
        keep_from_aggregate_version: Some(2),
    };
    let deleted = WatchResponseEvent {
        aggregate_id: 2,
        to_aggregate_version: None,
        keep_from_aggregate_version: None,
        ..trimmed.clone()
    };
    fake.notify(vec![trimmed, deleted]);
    assert_eq!(
        next(&mut changes).await,
        Change::Reset {
            key: key(1),
            deleted: false
        }
    );
    assert_eq!(
        next(&mut changes).await,
        Change::Reset {
            key: key(2),
            deleted: true
        }
    );

    fake.end_watches();
    assert_eq!(next(&mut changes).await, Change::Resync, "the watch ended");
    assert_eq!(
        next(&mut changes).await,
        Change::Resync,
        "the watch is open again"
    );
    watches(&fake, 1).await;
    backend.write(command(1, 3)).await.unwrap();
    assert_eq!(
        next(&mut changes).await,
        Change::Changed {
            key: key(1),
            version: 3
        }
    );

    fake.break_watches_mid_frame();
    assert_eq!(next(&mut changes).await, Change::Resync, "left mid-frame");
    assert_eq!(next(&mut changes).await, Change::Resync, "reconnected");
    watches(&fake, 1).await;
    backend.write(command(1, 4)).await.unwrap();
    assert_eq!(
        next(&mut changes).await,
        Change::Changed {
            key: key(1),
            version: 4
        }
    );
    let watch_requests = fake
        .requests()
        .iter()
        .filter(|r| {
            matches!(
                r,
                celeriant_msg::process_client_requests::ClientRequest::Watch(_)
            )
        })
        .count();
    assert_eq!(watch_requests, 3, "one watch at a time, reopened twice");
}

/// Waits until `fake` has one upstream watch open (a change notified before it would be lost).
fn wait_for_upstream_watch(fake: &FakeCeleriant) {
    let deadline = std::time::Instant::now() + WAIT;
    while fake.watches() != 1 {
        assert!(std::time::Instant::now() < deadline, "no upstream watch");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// What each test over HTTP starts with: a gateway process on `--backend celeriant` over a fake
/// node of its own, a watch stream of one aggregate open on it past its `ready`, and the
/// gateway's upstream watch open. Its fields drop in order: the stream, the gateway, its data
/// directory, the node.
struct Watched {
    s: sse::Stream,
    /// The stream's `ready`.
    ready: sse::Sse,
    /// The watch request's body, to open more streams of the same aggregate.
    body: Value,
    gw: Process,
    _data: TempDir,
    fake: FakeCeleriant,
}

/// [`Watched`] of aggregate `n` ([`key`]), the gateway started with `extra` arguments after
/// the usual ones.
fn watched(n: u128, extra: &[&str]) -> Watched {
    let fake = FakeCeleriant::start();
    let data = data_dir();
    let (address, org) = (fake.address(), Uuid::from_u128(ORG).to_string());
    let mut args = vec![
        "--backend",
        "celeriant",
        "--celeriant-addr",
        &address,
        "--org-id",
        &org,
        "--auth",
        "none",
    ];
    args.extend_from_slice(extra);
    let gw = Process::start(data.path(), &args);
    let k = key(n);
    let (type_id, id) = (k.aggregate.type_id.to_string(), k.aggregate.id.to_string());
    let body = json!({"aggregates": [{"typeId": type_id, "id": id}]});
    let mut s = sse::open(&gw.addr, "POST", "/v1/watch", None, Some(&body));
    assert_eq!(s.status, 200, "{}", s.body);
    let ready = s.expect(WAIT);
    assert_eq!(ready.event, "ready");
    wait_for_upstream_watch(&fake);
    Watched {
        s,
        ready,
        body,
        gw,
        _data: data,
        fake,
    }
}

#[test]
fn a_gateway_on_celeriant_streams_what_is_written_through_it() {
    let mut w = watched(7, &[]);
    let k = key(7);
    let (type_id, id) = (k.aggregate.type_id.to_string(), k.aggregate.id.to_string());
    let write = support::app::write_by("5f0c6b2e-8a3d-4c1e-9b7a-2d4e6f8a0b1c", &type_id, &id, &[1]);
    let r = post(&w.gw.base, "/v1/write", None, &write);
    assert_eq!(r.json["outcome"], "landed", "{:?}", r.json);
    loop {
        let e = w.s.expect(WAIT);
        if e.event == "resync" {
            continue; // the upstream watch opening may race the stream's ready
        }
        assert_eq!(e.event, "changed");
        assert_eq!(e.data, json!({"typeId": type_id, "id": id, "version": 1}));
        break;
    }
    w.fake.end_watches();
    assert_eq!(
        w.s.expect(WAIT).event,
        "resync",
        "the upstream watch was lost"
    );
}

fn written(id: u128, version: u64) -> WatchResponseEvent {
    WatchResponseEvent {
        org_id: ORG,
        aggregate_type_id: TYPE,
        aggregate_id: id,
        operation: 1,
        from_aggregate_version: Some(version),
        to_aggregate_version: Some(version),
        keep_from_aggregate_version: None,
    }
}

/// A Celeriant trim is a `reset` saying `deleted: false`, and keeps what the stream sent (a
/// trim keeps the tip): a lower version after it, from a node still catching up, is not sent
/// (it was, and the client took it for a recreation). A Celeriant delete is a `reset` saying
/// `deleted: true`, and what the stream had sent of the aggregate no longer holds: the
/// aggregate created again from version 1 is notified `changed` again. (The stream used to
/// remember version 5 as sent and swallowed every version up to it.)
#[test]
fn a_trim_keeps_what_was_sent_a_deleted_aggregate_created_again_is_notified_again() {
    let mut w = watched(9, &[]);
    let expect = |s: &mut sse::Stream| loop {
        let e = s.expect(WAIT);
        if e.event != "resync" {
            return e;
        }
    };
    w.fake.notify(vec![written(9, 5)]);
    let e = expect(&mut w.s);
    assert_eq!(
        (e.event.as_str(), &e.data["version"]),
        ("changed", &json!(5))
    );
    let trimmed = WatchResponseEvent {
        org_id: ORG,
        aggregate_type_id: TYPE,
        aggregate_id: 9,
        operation: 3,
        from_aggregate_version: None,
        to_aggregate_version: Some(5),
        keep_from_aggregate_version: Some(3),
    };
    w.fake.notify(vec![trimmed]);
    let e = expect(&mut w.s);
    assert_eq!(
        (e.event.as_str(), &e.data["deleted"]),
        ("reset", &json!(false)),
        "a trim's reset says so"
    );
    // A node behind notifies 4; given time to be sent, it is not: the next is 6.
    w.fake.notify(vec![written(9, 4)]);
    std::thread::sleep(Duration::from_millis(300));
    w.fake.notify(vec![written(9, 6)]);
    let e = expect(&mut w.s);
    assert_eq!(
        (e.event.as_str(), &e.data["version"]),
        ("changed", &json!(6)),
        "nothing below what was sent follows a trim"
    );
    let deleted = WatchResponseEvent {
        org_id: ORG,
        aggregate_type_id: TYPE,
        aggregate_id: 9,
        operation: 3,
        from_aggregate_version: None,
        to_aggregate_version: None,
        keep_from_aggregate_version: None,
    };
    w.fake.notify(vec![deleted]);
    let e = expect(&mut w.s);
    assert_eq!(
        (e.event.as_str(), &e.data["deleted"]),
        ("reset", &json!(true)),
        "a deletion's reset says so"
    );
    w.fake.notify(vec![written(9, 1)]);
    let e = expect(&mut w.s);
    assert_eq!(
        (e.event.as_str(), &e.data["version"]),
        ("changed", &json!(1)),
        "the recreated aggregate's version 1 is notified"
    );
}

/// A Celeriant watch sends nothing while nothing changes, so a watch that silently died (a
/// hung node, a half-open connection) looked exactly like a quiet store and was never noticed:
/// every later change was lost without a `resync`. The gateway now renews its watch every
/// `--celeriant-watch-renew-secs` (1 here) and sends `resync`; the watch asks for the gateway's
/// organisation only.
#[test]
fn a_silently_dead_upstream_watch_is_renewed_with_a_resync() {
    let mut w = watched(11, &["--celeriant-watch-renew-secs", "1"]);
    let orgs: Vec<_> = w
        .fake
        .requests()
        .iter()
        .filter_map(|r| match r {
            celeriant_msg::process_client_requests::ClientRequest::Watch(watch) => {
                Some(watch.orgs.clone())
            }
            _ => None,
        })
        .collect();
    assert_eq!(
        orgs[0],
        Some([ORG].into_iter().collect()),
        "the watch asks for the gateway's organisation"
    );

    // The upstream watch hangs; a change made now is not notified on it.
    w.fake.silence_watches();
    while matches!(w.s.next(Duration::from_millis(50)), sse::Next::Event(_)) {}
    w.fake.notify(vec![written(11, 1)]);
    let started = std::time::Instant::now();
    // (A renewal racing the silence may deliver the change on the next watch first.)
    while w.s.expect(WAIT).event != "resync" {}
    println!(
        "a silently dead watch noticed after {:?}",
        started.elapsed()
    );

    // A fresh watch delivers again.
    wait_for_upstream_watch(&w.fake);
    w.fake.notify(vec![written(11, 2)]);
    loop {
        let e = w.s.expect(WAIT);
        if e.event == "resync" {
            continue;
        }
        assert_eq!(
            (e.event.as_str(), &e.data["version"]),
            ("changed", &json!(2))
        );
        break;
    }
}

/// The kinds are read from the notifications' fields, on an assumption (`docs/celeriant.md`):
/// once one kind read by fields comes with two operation codes (a delete naming a version,
/// say, read as a write), a `reset` read as a deletion may be none: the gateway's `ready`s
/// stop saying `deletedResets` (a client then takes no lower `changed` on those streams for
/// a recreation) and its `reset`s are sent as trims. Streams opened before keep what their
/// `ready` said.
#[test]
fn operation_codes_that_disagree_with_the_fields_stop_ready_saying_deleted_resets() {
    let mut w = watched(9, &[]);
    assert_eq!(w.ready.data["deletedResets"], true, "{:?}", w.ready.data);
    let changed = |s: &mut sse::Stream| loop {
        let e = s.expect(WAIT);
        if e.event != "resync" {
            assert_eq!(e.event, "changed", "{:?}", e.data);
            return e.data["version"].clone();
        }
    };
    w.fake.notify(vec![written(9, 5)]);
    assert_eq!(changed(&mut w.s), json!(5));
    // Codes that agree: still said.
    w.fake.notify(vec![written(9, 6)]);
    assert_eq!(changed(&mut w.s), json!(6));
    let mut agreeing = sse::open(&w.gw.addr, "POST", "/v1/watch", None, Some(&w.body));
    let ready = agreeing.expect(WAIT);
    assert_eq!(ready.data["deletedResets"], true, "{:?}", ready.data);
    // Another code for a notification read as a write (published after it is checked).
    w.fake.notify(vec![WatchResponseEvent {
        operation: 5,
        ..written(9, 7)
    }]);
    assert_eq!(changed(&mut w.s), json!(7));
    let mut after = sse::open(&w.gw.addr, "POST", "/v1/watch", None, Some(&w.body));
    assert_eq!(after.status, 200, "{}", after.body);
    let ready = after.expect(WAIT);
    assert_eq!(ready.event, "ready");
    assert!(
        ready.data.get("deletedResets").is_none(),
        "{:?}",
        ready.data
    );
    // A delete (neither version) is published as a trim now, on every stream: the one opened
    // before the doubt too (its `ready` said `deletedResets`, but what it sends is the hub's).
    w.fake.notify(vec![WatchResponseEvent {
        operation: 3,
        from_aggregate_version: None,
        to_aggregate_version: None,
        keep_from_aggregate_version: None,
        ..written(9, 0)
    }]);
    for stream in [&mut w.s, &mut after] {
        let e = loop {
            let e = stream.expect(WAIT);
            if e.event != "resync" {
                break e;
            }
        };
        assert_eq!(
            (e.event.as_str(), &e.data["deleted"]),
            ("reset", &json!(false)),
            "{:?}",
            e.data
        );
    }
}
