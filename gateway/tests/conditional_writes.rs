//! Conditional and multi-aggregate writes over HTTP, the same cases on both backends (the embedded
//! store, and the Celeriant backend over the fake node): `expectedVersion` per aggregate, the 2003
//! body naming the aggregate with its current version, all-or-nothing across aggregates, the
//! guard-before-idempotency trap (an identical resend of a landed conditional write is 2003, and
//! reading back shows the client's own sequence once), 2002 for a whole multi-aggregate resend,
//! hostile guards, and the access policy judged for every aggregate before anything is written or
//! any version revealed.

mod support;

use axum::http::StatusCode;
use serde_json::{Value, json};
use support::app::*;
use support::device::Device;

const X: &str = "3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e00a1";
const Y: &str = "3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e00b2";

/// One aggregate's part of a write: `id`, its sequences, its guard.
fn leg(id: &str, seqs: &[u64], expected: Option<u64>) -> Value {
    let mut w = json!({"aggregate": {"typeId": TYPE, "id": id}, "allowCreate": true,
                       "events": seqs.iter().map(|s| event(*s)).collect::<Vec<_>>()});
    if let Some(v) = expected {
        w["expectedVersion"] = json!(v);
    }
    w
}

fn body(client: &str, legs: Vec<Value>) -> Value {
    json!({"clientId": client, "writes": legs})
}

/// A harness over `store` with one device and its session.
async fn setup(store: Store) -> (Harness, Device, String) {
    let h = Harness::auth_on(store, |_| {}).await;
    let a = Device::a();
    let token = h.open(&a).await;
    (h, a, token)
}

/// Every (clientId, clientSeq) stored on `id`, in log order, and the aggregate's tip.
async fn log(h: &Harness, token: &str, id: &str) -> (Vec<(String, u64)>, u64) {
    let page = h
        .get_as(
            token,
            &format!("/v1/aggregates/{TYPE}/{id}/events?limit=1000"),
        )
        .await;
    assert_eq!(page.status, StatusCode::OK, "{:?}", page.json);
    let mut out = Vec::new();
    for b in page.json["batches"].as_array().unwrap() {
        for e in b["events"].as_array().unwrap() {
            let client = b["clientId"].as_str().unwrap().to_owned();
            out.push((client, e["clientSeq"].as_u64().unwrap()));
        }
    }
    (out, page.json["tip"].as_u64().unwrap())
}

/// Asserts `r` is the 2003 naming `id` with `expected` and `current`.
fn assert_conflict(r: &Reply, id: &str, expected: u64, current: u64, store: Store) {
    assert_eq!(
        (r.status, r.outcome(), r.code()),
        (StatusCode::UNPROCESSABLE_ENTITY, "rejected", 2003),
        "{store:?}: {:?}",
        r.json
    );
    assert_eq!(r.json["aggregateTypeId"], TYPE, "{store:?}: {:?}", r.json);
    assert_eq!(r.json["aggregateId"], id, "{store:?}: {:?}", r.json);
    assert_eq!(
        r.json["expectedVersion"], expected,
        "{store:?}: {:?}",
        r.json
    );
    assert_eq!(r.json["currentVersion"], current, "{store:?}: {:?}", r.json);
}

fn assert_landed(r: &Reply, version: Option<u64>, store: Store) {
    assert_eq!(
        (r.status, r.outcome()),
        (StatusCode::OK, "landed"),
        "{store:?}: {:?}",
        r.json
    );
    assert_eq!(r.json["duplicate"], false, "{store:?}: {:?}", r.json);
    if let Some(v) = version {
        assert_eq!(r.json["aggregateVersion"], v, "{store:?}: {:?}", r.json);
    }
}

#[tokio::test]
async fn a_conditional_append_lands_only_at_its_expected_version() {
    for store in STORES {
        let (h, a, t) = setup(store).await;
        let c = a.client_id.as_str();
        // 0: only while the aggregate does not exist.
        let r = h.write_as(&t, &body(c, vec![leg(X, &[1], Some(0))])).await;
        assert_landed(&r, Some(1), store);
        let r = h.write_as(&t, &body(c, vec![leg(X, &[2], Some(1))])).await;
        assert_landed(&r, Some(2), store);

        // Stale: 2003 with the current version, nothing appended, the sequence not consumed.
        let r = h.write_as(&t, &body(c, vec![leg(X, &[3], Some(1))])).await;
        assert_conflict(&r, X, 1, 2, store);
        // Ahead of the aggregate: the same.
        let r = h.write_as(&t, &body(c, vec![leg(X, &[3], Some(7))])).await;
        assert_conflict(&r, X, 7, 2, store);
        // 0 on an existing aggregate.
        let r = h.write_as(&t, &body(c, vec![leg(X, &[3], Some(0))])).await;
        assert_conflict(&r, X, 0, 2, store);
        let (events, tip) = log(&h, &t, X).await;
        assert_eq!(
            events,
            vec![(c.to_owned(), 1), (c.to_owned(), 2)],
            "{store:?}"
        );
        assert_eq!(tip, 2, "{store:?}");
        // The refused sequence 3 was not consumed: it lands with the right guard.
        let r = h.write_as(&t, &body(c, vec![leg(X, &[3], Some(2))])).await;
        assert_landed(&r, Some(3), store);
        // No guard: no check.
        let r = h.write_as(&t, &body(c, vec![leg(X, &[4], None)])).await;
        assert_landed(&r, Some(4), store);
    }
}

#[tokio::test]
async fn a_multi_aggregate_write_with_one_stale_guard_appends_nothing_anywhere() {
    for store in STORES {
        let (h, a, t) = setup(store).await;
        let c = a.client_id.as_str();
        let r = h.write_as(&t, &body(c, vec![leg(X, &[1], Some(0))])).await;
        assert_landed(&r, Some(1), store);
        // X's guard holds, Y's (0, Y does not exist... but it is expected at 5) fails.
        let r = h
            .write_as(
                &t,
                &body(c, vec![leg(X, &[2], Some(1)), leg(Y, &[1], Some(5))]),
            )
            .await;
        assert_conflict(&r, Y, 5, 0, store);
        assert_eq!(log(&h, &t, X).await.1, 1, "{store:?}: X not advanced");
        assert_eq!(
            log(&h, &t, Y).await,
            (vec![], 0),
            "{store:?}: Y not created"
        );
        // Both stale: the answer names the first in the request's order, either way round.
        let both = |first: &str, second: &str| {
            body(
                c,
                vec![leg(first, &[2], Some(9)), leg(second, &[2], Some(9))],
            )
        };
        let r = h.write_as(&t, &both(X, Y)).await;
        assert_conflict(&r, X, 9, 1, store);
        let r = h.write_as(&t, &both(Y, X)).await;
        assert_conflict(&r, Y, 9, 0, store);
        // Fixed, the same transfer lands on both, whole.
        let r = h
            .write_as(
                &t,
                &body(c, vec![leg(X, &[2], Some(1)), leg(Y, &[1], Some(0))]),
            )
            .await;
        assert_landed(&r, None, store);
        assert!(r.json.get("aggregateVersion").is_none(), "{:?}", r.json);
        if let Some(fake) = &h.fake {
            // Sent upstream as one WriteRequest carrying both guards (Y's access record, written
            // just before it, is a write of its own).
            let last = fake.writes().pop().unwrap();
            let mut guards: Vec<_> = last.writes.values().map(|w| w.expected_version).collect();
            guards.sort();
            assert_eq!(guards, vec![Some(0), Some(1)], "{last:?}");
            assert!(last.writes.values().all(|w| w.enforce_client_idempotency));
        }
        assert_eq!(log(&h, &t, X).await.1, 2, "{store:?}");
        assert_eq!(
            log(&h, &t, Y).await,
            (vec![(c.to_owned(), 1)], 1),
            "{store:?}"
        );
    }
}

async fn set_faults(h: &Harness, rates: Value) {
    let request = axum::http::Request::put("/v1/faults")
        .header("content-type", "application/json")
        .body(axum::body::Body::from(serde_json::to_vec(&rates).unwrap()))
        .unwrap();
    let r = h.send(request).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
}

/// The trap of `docs/protocol.md` §6.1: the guard is checked before idempotency, so the
/// identical resend of a conditional write that landed (its answer lost) is 2003, not 2002. The
/// client must read back: its own (clientId, clientSeq) is in the log, exactly once, so it landed.
#[tokio::test]
async fn an_identical_resend_of_a_landed_conditional_write_is_2003_and_the_log_shows_it_once() {
    for store in STORES {
        let h = Harness::auth_on(store, |c| {
            c.faults = true;
            c.fault_seed = Some(5);
        })
        .await;
        let a = Device::a();
        let t = h.open(&a).await;
        let c = a.client_id.as_str();
        let first = body(c, vec![leg(X, &[1, 2], Some(0))]);
        // Committed, then the connection dropped: the client cannot know it landed.
        set_faults(&h, json!({"dropAfterCommit": 1.0})).await;
        let r = h.write_as(&t, &first).await;
        assert!(r.broken, "{store:?}: {r:?}");
        set_faults(&h, json!({"dropAfterCommit": 0.0})).await;
        // The client resends the very same bytes.
        let r = h.write_as(&t, &first).await;
        assert_conflict(&r, X, 0, 1, store);
        let (events, tip) = log(&h, &t, X).await;
        let own = |seq: u64| {
            events
                .iter()
                .filter(|(who, s)| who == c && *s == seq)
                .count()
        };
        assert_eq!((own(1), own(2), tip), (1, 1, 1), "{store:?}: {events:?}");
        // The multi-aggregate form: the whole landed write's resend is 2003 too.
        let transfer = body(c, vec![leg(X, &[3], Some(1)), leg(Y, &[1], Some(0))]);
        assert_landed(&h.write_as(&t, &transfer).await, None, store);
        let r = h.write_as(&t, &transfer).await;
        assert_conflict(&r, X, 1, 2, store);
        assert_eq!(
            log(&h, &t, Y).await,
            (vec![(c.to_owned(), 1)], 1),
            "{store:?}"
        );
        // Without guards, the same sequences are a duplicate: landed, 2002.
        let unguarded = body(c, vec![leg(X, &[3], None), leg(Y, &[1], None)]);
        let r = h.write_as(&t, &unguarded).await;
        assert_eq!(
            (r.status, r.outcome(), r.code(), &r.json["duplicate"]),
            (StatusCode::OK, "landed", 2002, &json!(true)),
            "{store:?}: {:?}",
            r.json
        );
    }
}

#[tokio::test]
async fn a_multi_aggregate_idempotent_resend_is_2002_for_the_whole_write() {
    for store in STORES {
        let (h, a, t) = setup(store).await;
        let c = a.client_id.as_str();
        let transfer = body(c, vec![leg(X, &[1, 2], None), leg(Y, &[1], None)]);
        assert_landed(&h.write_as(&t, &transfer).await, None, store);
        for _ in 0..2 {
            let r = h.write_as(&t, &transfer).await;
            assert_eq!(
                (r.status, r.outcome(), r.code()),
                (StatusCode::OK, "landed", 2002),
                "{store:?}: {:?}",
                r.json
            );
            assert_eq!(r.json["duplicate"], true);
        }
        assert_eq!(log(&h, &t, X).await.1, 1, "{store:?}");
        assert_eq!(log(&h, &t, Y).await.1, 1, "{store:?}");
        // A write whose one leg is new and other a duplicate is 2002 whole: nothing lands
        // (the new leg is not split off).
        let mixed = body(c, vec![leg(X, &[3], None), leg(Y, &[1], None)]);
        let r = h.write_as(&t, &mixed).await;
        assert_eq!(r.code(), 2002, "{store:?}: {:?}", r.json);
        assert_eq!(
            log(&h, &t, X).await.1,
            1,
            "{store:?}: X's new leg not split off"
        );
        // A duplicate leg and a stale guard on the other: every guard comes before any
        // idempotency answer, across the write, so 2003 (naming Y), never 2002.
        for legs in [
            vec![leg(X, &[1, 2], None), leg(Y, &[2], Some(7))],
            vec![leg(Y, &[2], Some(7)), leg(X, &[1, 2], None)],
        ] {
            let r = h.write_as(&t, &body(c, legs)).await;
            assert_conflict(&r, Y, 7, 1, store);
        }
    }
}

#[tokio::test]
async fn hostile_guards_are_refused_or_answered_without_writing() {
    for store in STORES {
        let (h, a, t) = setup(store).await;
        let c = a.client_id.as_str();
        // Above 2^53 - 1, negative, fractional, a string: 400 at parse, nothing written.
        for bad in [
            json!(9_007_199_254_740_992u64),
            json!(u64::MAX),
            json!(-1),
            json!(0.5),
            json!("0"),
        ] {
            let mut w = body(c, vec![leg(X, &[1], None)]);
            w["writes"][0]["expectedVersion"] = bad.clone();
            let r = h.write_as(&t, &w).await;
            assert_eq!(
                (r.status, r.code()),
                (StatusCode::BAD_REQUEST, 40001),
                "{store:?} {bad}: {:?}",
                r.json
            );
        }
        // The largest legal guard on a missing aggregate: 2003, current 0, nothing created.
        let max = 9_007_199_254_740_991u64;
        let r = h
            .write_as(&t, &body(c, vec![leg(X, &[1], Some(max))]))
            .await;
        assert_conflict(&r, X, max, 0, store);
        assert_eq!(log(&h, &t, X).await, (vec![], 0), "{store:?}");
        // One aggregate twice in a write (with different guards): 400, nothing written.
        let r = h
            .write_as(
                &t,
                &body(c, vec![leg(X, &[1], Some(0)), leg(X, &[2], Some(1))]),
            )
            .await;
        assert_eq!(
            (r.status, r.code()),
            (StatusCode::BAD_REQUEST, 40009),
            "{store:?}: {:?}",
            r.json
        );
        assert_eq!(log(&h, &t, X).await, (vec![], 0), "{store:?}");
        // allowCreate false with expectedVersion 0: existence is checked first (2005) while
        // the aggregate is missing; once it exists the guard answers (2003).
        let mut no_create = body(c, vec![leg(X, &[1], Some(0))]);
        no_create["writes"][0]["allowCreate"] = json!(false);
        let r = h.write_as(&t, &no_create).await;
        assert_eq!(r.code(), 2005, "{store:?}: {:?}", r.json);
        assert_eq!(log(&h, &t, X).await, (vec![], 0), "{store:?}");
        assert_landed(
            &h.write_as(&t, &body(c, vec![leg(X, &[1], None)])).await,
            Some(1),
            store,
        );
        no_create["writes"][0]["events"] = json!([event(2)]);
        let r = h.write_as(&t, &no_create).await;
        assert_conflict(&r, X, 0, 1, store);
        // A guard on one leg and a missing no-create leg: 2005 (existence comes first).
        let mut missing = body(c, vec![leg(X, &[2], Some(9)), leg(Y, &[1], None)]);
        missing["writes"][1]["allowCreate"] = json!(false);
        let r = h.write_as(&t, &missing).await;
        assert_eq!(r.code(), 2005, "{store:?}: {:?}", r.json);
        assert_eq!(log(&h, &t, X).await.1, 1, "{store:?}");
    }
}

/// With the policy on (the default `owner` preset), a write naming one aggregate the caller may
/// not write is refused whole: nothing of its other aggregates is written (not even created),
/// and a stale guard on it never reveals its version.
#[tokio::test]
async fn every_aggregate_of_a_write_is_judged_before_anything_is_written() {
    for store in STORES {
        let h = Harness::auth_on(store, |_| {}).await;
        let (a, b) = (Device::a(), Device::b());
        let (ta, tb) = (h.open(&a).await, h.open(&b).await);
        // A owns X (at version 2).
        let r = h
            .write_as(&ta, &body(&a.client_id, vec![leg(X, &[1], Some(0))]))
            .await;
        assert_landed(&r, Some(1), store);
        let r = h
            .write_as(&ta, &body(&a.client_id, vec![leg(X, &[2], Some(1))]))
            .await;
        assert_landed(&r, Some(2), store);
        // B's transfer from its new Y to A's X: refused whole, Y not created.
        for (legs, what) in [
            (vec![leg(Y, &[1], Some(0)), leg(X, &[1], None)], "Y then X"),
            (vec![leg(X, &[1], None), leg(Y, &[1], Some(0))], "X then Y"),
            // A stale guard on A's aggregate: the refusal, not a 2003 with X's version.
            (
                vec![leg(Y, &[1], Some(0)), leg(X, &[1], Some(0))],
                "guarded",
            ),
            (
                vec![leg(Y, &[1], Some(5)), leg(X, &[1], Some(0))],
                "both stale",
            ),
        ] {
            let r = h.write_as(&tb, &body(&b.client_id, legs)).await;
            assert_eq!(
                (r.status, r.outcome(), r.code()),
                (StatusCode::FORBIDDEN, "rejected", 40302),
                "{store:?} {what}: {:?}",
                r.json
            );
            assert!(
                r.json.get("currentVersion").is_none(),
                "{store:?} {what}: {:?}",
                r.json
            );
            assert_eq!(log(&h, &tb, Y).await, (vec![], 0), "{store:?} {what}");
            assert_eq!(log(&h, &ta, X).await.1, 2, "{store:?} {what}");
        }
        // Y alone is B's to create.
        let r = h
            .write_as(&tb, &body(&b.client_id, vec![leg(Y, &[1], Some(0))]))
            .await;
        assert_landed(&r, Some(1), store);
    }
}

/// Two creators racing with `expectedVersion: 0` (under `authenticated`, so that both may write
/// the aggregate): exactly one lands, the other gets 2003 with the winner's version 1, and the
/// log holds the winner's batch alone.
#[tokio::test]
async fn of_two_creators_racing_with_expected_version_zero_exactly_one_lands() {
    for store in STORES {
        let h = support::policy::with_policy(store, "default = \"authenticated\"").await;
        let (a, ta, b, tb) = support::policy::two(&h).await;
        for round in 0..4u128 {
            let id = uuid::Uuid::from_u128(0xC0FFEE + round).to_string();
            let wa = body(&a.client_id, vec![leg(&id, &[1], Some(0))]);
            let wb = body(&b.client_id, vec![leg(&id, &[1], Some(0))]);
            let (ra, rb) = tokio::join!(h.write_as(&ta, &wa), h.write_as(&tb, &wb));
            let (winner, loser) = match (ra.outcome(), rb.outcome()) {
                ("landed", "rejected") => (&a, &rb),
                ("rejected", "landed") => (&b, &ra),
                other => panic!("{store:?}: {other:?} {:?} {:?}", ra.json, rb.json),
            };
            assert_conflict(loser, &id, 0, 1, store);
            let (events, tip) = log(&h, &ta, &id).await;
            assert_eq!(
                (events, tip),
                (vec![(winner.client_id.clone(), 1)], 1),
                "{store:?}"
            );
        }
    }
}

/// A write guarded on a version an absent aggregate cannot have is refused 2003 without
/// making its sender the owner: under `members`, another principal then creates the aggregate
/// and owns it (before the fix the Celeriant backend recorded the refused writer as the owner
/// first, and the real creator got 403).
#[tokio::test]
async fn a_refused_guarded_write_records_no_owner() {
    for store in STORES {
        let h = support::policy::with_policy(store, "default = \"members\"").await;
        let (a, ta, b, tb) = support::policy::two(&h).await;
        let id = uuid::Uuid::from_u128(0x0DD_F00D).to_string();
        let r = h
            .write_as(&ta, &body(&a.client_id, vec![leg(&id, &[1], Some(5))]))
            .await;
        assert_conflict(&r, &id, 5, 0, store);
        let r = h
            .write_as(&tb, &body(&b.client_id, vec![leg(&id, &[1], None)]))
            .await;
        assert_landed(&r, Some(1), store);
        let members = h
            .get_as(&tb, &format!("/v1/aggregates/{TYPE}/{id}/members"))
            .await;
        assert_eq!(
            members.json["owner"],
            format!("device:{}", b.client_id),
            "{store:?}: {:?}",
            members.json
        );
    }
}
