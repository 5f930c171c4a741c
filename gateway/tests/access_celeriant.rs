//! Ownership and members where they differ by store, on the Celeriant backend over the fake
//! node: the access record written create-only before the data, an aggregate without a record,
//! a crash between the record and the data write, two replicas changing members at once, and
//! the members TTL across replicas. What both stores must do alike (racing creators, the
//! reserved type) is in `access_both_stores.rs`.

mod support;

use std::sync::Arc;
use std::time::Duration;

use axum::body::Body;
use axum::http::{Method, Request};
use celeriant_gateway::access::RESERVED_TYPE;
use celeriant_gateway::backend::{AggregateCommand, WriteCommand};
use celeriant_msg::process_client_requests::ClientRequest;
use celeriant_sync_protocol::Event;
use serde_json::{Value, json};
use support::app::*;
use support::device::*;
use support::fake_celeriant::{FakeCeleriant, Reply as Node};
use support::policy::{OPERATOR, configure, with_policy};
use uuid::Uuid;

fn events(type_id: &str, id: &str) -> String {
    format!("/v1/aggregates/{type_id}/{id}/events")
}

/// The grantee accepts its invitation (a grant takes effect only then).
async fn accept(h: &Harness, token: &str, id: &str) {
    let request = Request::builder()
        .method(Method::POST)
        .uri(format!("/v1/aggregates/{TYPE}/{id}/members/accept"))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {token}"))
        .body(Body::from("{}"))
        .unwrap();
    let r = h.send(request).await;
    assert_eq!(r.status.as_u16(), 200, "{:?}", r.json);
}

/// The owner grants, the grantee (token `grantee`, same replica) accepts.
async fn grant(h: &Harness, owner: &str, grantee: &str, principal: &str) {
    let r = put_member(h, owner, ID, principal, "read").await;
    assert_eq!(r.status.as_u16(), 200, "{:?}", r.json);
    accept(h, grantee, ID).await;
}

async fn put_member(h: &Harness, token: &str, id: &str, principal: &str, access: &str) -> Reply {
    let body = serde_json::to_vec(&json!({"principal": principal, "access": access})).unwrap();
    let request = Request::builder()
        .method(Method::PUT)
        .uri(format!("/v1/aggregates/{TYPE}/{id}/members"))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {token}"))
        .body(Body::from(body))
        .unwrap();
    h.send(request).await
}

/// The Celeriant requests on the reserved type, in order.
fn record_writes(fake: &FakeCeleriant) -> Vec<(u128, Option<u64>, bool)> {
    fake.writes()
        .into_iter()
        .flat_map(|w| w.writes.into_iter())
        .filter(|(k, _)| k.aggregate_type_id == RESERVED_TYPE.as_u128())
        .map(|(k, w)| (k.aggregate_id, w.expected_version, w.allow_create))
        .collect()
}

#[tokio::test]
async fn the_owner_is_recorded_in_celeriant_create_only_before_the_data() {
    let h = with_policy(Store::Celeriant, "default = \"members\"").await;
    let fake = h.fake.clone().unwrap();
    let (a, b) = (Device::a(), Device::b());
    let (ta, tb) = (h.open(&a).await, h.open(&b).await);
    let r = h
        .write_as(&ta, &write_by(&a.client_id, TYPE, ID, &[1]))
        .await;
    assert_eq!(r.outcome(), "landed", "{:?}", r.json);
    let writes = fake.writes();
    assert_eq!(writes.len(), 2, "the record, then the data");
    let (record_key, record) = writes[0].writes.iter().next().unwrap();
    assert_eq!(record_key.aggregate_type_id, RESERVED_TYPE.as_u128());
    assert_eq!(
        (record.expected_version, record.allow_create),
        (Some(0), true)
    );
    let named: Value = serde_json::from_slice(&record.events[0].event_value).unwrap();
    assert_eq!(named["owner"], format!("device:{}", a.client_id));
    assert_ne!(
        writes[1].writes.keys().next().unwrap().aggregate_type_id,
        RESERVED_TYPE.as_u128()
    );
    // Later writes send no record; a grant appends one, guarded on the version it read.
    h.write_as(&ta, &write_by(&a.client_id, TYPE, ID, &[2]))
        .await;
    let b_principal = format!("device:{}", b.client_id);
    let r = put_member(&h, &ta, ID, &b_principal, "read").await;
    assert_eq!(r.status.as_u16(), 200, "{:?}", r.json);
    accept(&h, &tb, ID).await;
    let records = record_writes(&fake);
    assert_eq!(records.len(), 3, "created, invited, accepted");
    assert_eq!((records[1].1, records[1].2), (Some(1), false));
    assert_eq!((records[2].1, records[2].2), (Some(2), false));
    assert_eq!(
        records[0].0, records[1].0,
        "one access aggregate per aggregate"
    );
    assert_eq!(h.seqs_as(&tb, TYPE, ID).await, [1, 2]);
}

fn event(seq: u64) -> Event {
    serde_json::from_value(support::app::event(seq)).unwrap()
}

#[tokio::test]
async fn an_aggregate_without_a_record_is_nobodys_under_owner_and_everybodys_under_authenticated() {
    for (policy, shared) in [("owner", false), ("authenticated", true)] {
        let h = with_policy(Store::Celeriant, &format!("default = \"{policy}\"")).await;
        // Written as a gateway before owners: no principal, no record.
        let command = WriteCommand {
            principal: None,
            policy: None,
            client_id: Uuid::from_u128(77),
            writes: vec![AggregateCommand {
                key: h.key_of(ID),
                allow_create: true,
                expected_version: None,
                enforce_client_idempotency: true,
                events: vec![event(1)],
            }],
        };
        h.state.backend.write(command).await.unwrap();
        let a = Device::a();
        let ta = h.open(&a).await;
        let read = h.get_as(&ta, &events(TYPE, ID)).await;
        assert_eq!(read.json["tip"] == 1, shared, "{policy}: {:?}", read.json);
        let w = h
            .write_as(&ta, &write_by(&a.client_id, TYPE, ID, &[1]))
            .await;
        if shared {
            assert_eq!(w.outcome(), "landed", "{:?}", w.json);
        } else {
            assert_eq!(w.code(), 40302, "{:?}", w.json);
            let mut body = write_by(&a.client_id, TYPE, ID, &[1]);
            body["writes"][0]["allowCreate"] = json!(false);
            assert_eq!(h.write_as(&ta, &body).await.code(), 2005);
        }
        // Never taken over: no record was written for it.
        assert!(
            record_writes(h.fake.as_ref().unwrap()).is_empty(),
            "{policy}"
        );
        assert_eq!(h.state.backend.access(h.key_of(ID)).await.unwrap(), None);
        // The operator reads it.
        let operator = Request::get(events(TYPE, ID))
            .header("authorization", format!("Operator {OPERATOR}"))
            .body(Body::empty())
            .unwrap();
        assert_eq!(
            h.send(operator).await.json["tip"],
            if shared { 2 } else { 1 }
        );
    }
}

#[tokio::test]
async fn a_crash_between_the_record_and_the_data_leaves_the_id_to_its_owner() {
    let h = with_policy(Store::Celeriant, "default = \"owner\"").await;
    let fake = h.fake.clone().unwrap();
    let (a, b) = (Device::a(), Device::b());
    let (ta, tb) = (h.open(&a).await, h.open(&b).await);
    // Record read (absent), data read (absent), record write: as a node would; the data
    // write's connection dies before the answer.
    fake.script([Node::Store, Node::Store, Node::Store, Node::Close]);
    let r = h
        .write_as(&ta, &write_by(&a.client_id, TYPE, ID, &[1]))
        .await;
    assert_eq!(r.outcome(), "unknown", "{:?}", r.json);
    assert_eq!(record_writes(&fake).len(), 1, "the record landed");
    // Someone else is refused; the owner's retry lands.
    let w = h
        .write_as(&tb, &write_by(&b.client_id, TYPE, ID, &[1]))
        .await;
    assert_eq!(w.code(), 40302, "{:?}", w.json);
    let w = h
        .write_as(&ta, &write_by(&a.client_id, TYPE, ID, &[1]))
        .await;
    assert_eq!(w.outcome(), "landed", "{:?}", w.json);
    assert_eq!(h.seqs_as(&ta, TYPE, ID).await, [1]);
    assert!(h.seqs_as(&tb, TYPE, ID).await.is_empty());
}

#[tokio::test]
async fn two_replicas_granting_at_once_lose_no_grant_and_a_revocation_reaches_the_others_by_watch_or_ttl()
 {
    let fake = Arc::new(FakeCeleriant::start());
    let ttl = 1_500;
    let replica = |ms: u64| {
        let fake = fake.clone();
        async move {
            Harness::celeriant(fake, move |c| {
                configure(c, "default = \"members\"");
                c.members_cache_ms = ms;
            })
            .await
        }
    };
    let (h1, h2) = (replica(ttl).await, replica(ttl).await);
    let (a, b) = (Device::a(), Device::b());
    let (ta1, ta2, tb2) = (h1.open(&a).await, h2.open(&a).await, h2.open(&b).await);
    h1.write_as(&ta1, &write_by(&a.client_id, TYPE, ID, &[1]))
        .await;
    for n in 0..8 {
        let (one, two) = (format!("user:one{n}"), format!("user:two{n}"));
        let (r1, r2) = tokio::join!(
            put_member(&h1, &ta1, ID, &one, "read"),
            put_member(&h2, &ta2, ID, &two, "read"),
        );
        assert_eq!((r1.status.as_u16(), r2.status.as_u16()), (200, 200));
    }
    let record = h1
        .state
        .backend
        .access(h1.key_of(ID))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(record.invited.len(), 16, "{record:?}");

    let b_principal = format!("device:{}", b.client_id);
    // The replica that makes a change applies it at once.
    let tb1 = h1.open(&b).await;
    grant(&h1, &ta1, &tb1, &b_principal).await;
    assert_eq!(h1.seqs_as(&tb1, TYPE, ID).await, [1]);
    put_member(&h1, &ta1, ID, &b_principal, "none").await;
    assert!(h1.seqs_as(&tb1, TYPE, ID).await.is_empty());

    // The other replica learns of a change through its upstream watch, well within the TTL
    // (this replica's TTL is a minute, so only the watch can explain it).
    let slow = replica(60_000).await;
    let tbs = slow.open(&b).await;
    assert!(
        slow.seqs_as(&tbs, TYPE, ID).await.is_empty(),
        "cached: no grant"
    );
    grant(&h1, &ta1, &tb1, &b_principal).await;
    eventually(|| async { slow.seqs_as(&tbs, TYPE, ID).await == [1] }).await;
    put_member(&h1, &ta1, ID, &b_principal, "none").await;
    eventually(|| async { slow.seqs_as(&tbs, TYPE, ID).await.is_empty() }).await;

    // Notifications lost (every open upstream watch hangs): the TTL is the bound. h2 decides
    // from its cached record, so the revoked member still reads there, for at most the TTL.
    grant(&h1, &ta1, &tb1, &b_principal).await;
    eventually(|| async { h2.seqs_as(&tb2, TYPE, ID).await == [1] }).await;
    fake.silence_watches();
    put_member(&h1, &ta1, ID, &b_principal, "none").await;
    let reads_at_once = h2.get_as(&tb2, &events(TYPE, ID)).await.json["tip"] == 1;
    tokio::time::sleep(Duration::from_millis(ttl + 100)).await;
    assert!(
        h2.seqs_as(&tb2, TYPE, ID).await.is_empty(),
        "revoked after the TTL"
    );
    assert!(
        reads_at_once,
        "within the TTL the other replica's cache still held the grant"
    );
    // With no cache, another replica sees a revocation at once, watch or not.
    let h3 = replica(0).await;
    let tb3 = h3.open(&b).await;
    fake.silence_watches();
    grant(&h1, &ta1, &tb1, &b_principal).await;
    assert_eq!(h3.seqs_as(&tb3, TYPE, ID).await, [1]);
    put_member(&h1, &ta1, ID, &b_principal, "none").await;
    assert!(h3.seqs_as(&tb3, TYPE, ID).await.is_empty());
}

/// Waits (at most 5 s) until `check` holds.
async fn eventually<F, Fut>(check: F)
where
    F: Fn() -> Fut,
    Fut: std::future::Future<Output = bool>,
{
    let deadline = tokio::time::Instant::now() + Duration::from_secs(5);
    while !check().await {
        assert!(tokio::time::Instant::now() < deadline, "not within 5 s");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test]
async fn a_record_with_a_long_history_is_fetched_in_two_requests() {
    let h = with_policy(Store::Celeriant, "default = \"members\"").await;
    let fake = h.fake.clone().unwrap();
    let a = Device::a();
    let ta = h.open(&a).await;
    h.write_as(&ta, &write_by(&a.client_id, TYPE, ID, &[1]))
        .await;
    for n in 0..12 {
        let r = put_member(&h, &ta, ID, &format!("user:u{n}"), "read").await;
        assert_eq!(r.status.as_u16(), 200);
    }
    // Another replica, cold: the record's tip, then that one batch (the whole record).
    let other = Harness::celeriant(fake.clone(), |c| configure(c, "default = \"members\"")).await;
    let ta2 = other.open(&a).await;
    let before = fake.requests().len();
    let r = other
        .get_as(&ta2, &format!("/v1/aggregates/{TYPE}/{ID}/members"))
        .await;
    assert_eq!(
        r.json["invited"].as_object().unwrap().len(),
        12,
        "{:?}",
        r.json
    );
    // The replica's upstream watch may open meanwhile, and its revocations list may be reloaded
    // (one details request on the same reserved type, seen under a loaded `npm test`).
    let revocations = celeriant_gateway::backend::celeriant::revocations::revocations_id();
    let asked: Vec<String> = fake.requests()[before..]
        .iter()
        .filter(|r| match r {
            ClientRequest::Watch(_) => false,
            ClientRequest::AggregateDetails(d) => d.aggregate_key.aggregate_id != revocations,
            ClientRequest::Read(read) => read.aggregate_key.aggregate_id != revocations,
            _ => true,
        })
        .map(|r| match r {
            ClientRequest::AggregateDetails(d) => {
                assert_eq!(d.aggregate_key.aggregate_type_id, RESERVED_TYPE.as_u128());
                "details".to_owned()
            }
            ClientRequest::Read(read) => {
                assert_eq!(
                    read.aggregate_key.aggregate_type_id,
                    RESERVED_TYPE.as_u128()
                );
                format!(
                    "read {}..{:?}",
                    read.filters.from_aggregate_version, read.filters.to_aggregate_version
                )
            }
            other => panic!("{other:?}"),
        })
        .collect();
    // The members endpoint reads the record (its tip, then that batch), and the readability
    // check then uses that fresh copy.
    assert_eq!(asked, ["details", "read 13..Some(13)"]);
}

#[tokio::test]
async fn without_sessions_owners_are_still_recorded_as_the_embedded_store_does() {
    let fake = Arc::new(FakeCeleriant::start());
    let h = Harness::celeriant(fake.clone(), |c| {
        c.auth = celeriant_gateway::config::AuthMode::None
    })
    .await;
    let r = h.write(&write_by(CLIENT, TYPE, ID, &[1])).await;
    assert_eq!(r.outcome(), "landed", "{:?}", r.json);
    let record = h.state.backend.access(h.key_of(ID)).await.unwrap();
    assert_eq!(record.unwrap().owner.as_str(), format!("device:{CLIENT}"));
    // Nothing is refused: another client id appends.
    let other = "6f1c1c5e-6a4c-4f52-9a37-1e2a8d2f0002";
    let r = h.write(&write_by(other, TYPE, ID, &[1])).await;
    assert_eq!(r.outcome(), "landed", "{:?}", r.json);
    assert_eq!(record_writes(&fake).len(), 1);
}

#[tokio::test]
async fn a_write_refused_for_one_aggregate_records_no_owner_for_another() {
    let h = with_policy(Store::Celeriant, "default = \"owner\"").await;
    let fake = h.fake.clone().unwrap();
    let (a, b) = (Device::a(), Device::b());
    let (ta, tb) = (h.open(&a).await, h.open(&b).await);
    let taken = "3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e0b01";
    let fresh = "3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e0b02";
    h.write_as(&ta, &write_by(&a.client_id, TYPE, taken, &[1]))
        .await;
    let mut body = write_by(&b.client_id, TYPE, fresh, &[1]);
    let other = write_by(&b.client_id, TYPE, taken, &[1]);
    body["writes"]
        .as_array_mut()
        .unwrap()
        .push(other["writes"][0].clone());
    let r = h.write_as(&tb, &body).await;
    assert_eq!(r.code(), 40302, "{:?}", r.json);
    assert_eq!(record_writes(&fake).len(), 1, "only A's record");
    assert_eq!(h.state.backend.access(h.key_of(fresh)).await.unwrap(), None);
}

#[tokio::test]
async fn celeriants_own_2005_reads_exactly_like_a_refusal() {
    let h = with_policy(Store::Celeriant, "default = \"owner\"").await;
    let fake = h.fake.clone().unwrap();
    let (a, b) = (Device::a(), Device::b());
    let (ta, tb) = (h.open(&a).await, h.open(&b).await);
    h.write_as(&ta, &write_by(&a.client_id, TYPE, ID, &[1]))
        .await;
    let no_create = |id: &str| {
        let mut body = write_by(&b.client_id, TYPE, id, &[1]);
        body["writes"][0]["allowCreate"] = json!(false);
        body
    };
    let refused = h.write_as(&tb, &no_create(ID)).await;
    // A missing aggregate that this write may not create is refused by the gateway, before
    // the data write is sent (sent, it could land in an aggregate created meanwhile).
    let writes_before = fake.writes().len();
    let missing = h
        .write_as(&tb, &no_create("3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e0c01"))
        .await;
    assert_eq!(fake.writes().len(), writes_before, "no data write is sent");
    assert_eq!(
        (refused.status, &refused.json),
        (missing.status, &missing.json)
    );
    assert_eq!(missing.json["message"], "aggregate does not exist");
    // Celeriant's own 2005 (the owner's record is cached: the data write is the first request)
    // is worded the same.
    fake.script([Node::error(2005, "aggregate 0x1234 not found on shard 3")]);
    let mut own = no_create(ID);
    own["clientId"] = json!(a.client_id);
    let upstream = h.write_as(&ta, &own).await;
    assert_eq!(
        (refused.status, &refused.json),
        (upstream.status, &upstream.json)
    );
}

#[tokio::test]
async fn a_members_change_that_changes_nothing_appends_no_record() {
    let h = with_policy(Store::Celeriant, "default = \"members\"").await;
    let fake = h.fake.clone().unwrap();
    let a = Device::a();
    let ta = h.open(&a).await;
    h.write_as(&ta, &write_by(&a.client_id, TYPE, ID, &[1]))
        .await;
    assert_eq!(record_writes(&fake).len(), 1, "the owner's record");
    for _ in 0..5 {
        let r = put_member(&h, &ta, ID, "user:nobody", "none").await;
        assert_eq!(r.status.as_u16(), 200, "{:?}", r.json);
    }
    assert_eq!(record_writes(&fake).len(), 1, "revoking a non-member");
    for _ in 0..5 {
        let r = put_member(&h, &ta, ID, "user:carol", "read").await;
        assert_eq!(r.status.as_u16(), 200, "{:?}", r.json);
    }
    assert_eq!(record_writes(&fake).len(), 2, "one grant, repeated");
    let r = put_member(&h, &ta, ID, "user:carol", "none").await;
    assert_eq!(r.status.as_u16(), 200, "{:?}", r.json);
    assert_eq!(record_writes(&fake).len(), 3, "a real revocation");
}

#[tokio::test]
async fn a_first_write_asks_whether_the_aggregate_exists_without_reading_it() {
    let h = with_policy(Store::Celeriant, "default = \"owner\"").await;
    let fake = h.fake.clone().unwrap();
    let a = Device::a();
    let ta = h.open(&a).await;
    let r = h
        .write_as(&ta, &write_by(&a.client_id, TYPE, ID, &[1]))
        .await;
    assert_eq!(r.outcome(), "landed", "{:?}", r.json);
    let requests = fake.requests();
    assert!(
        !requests.iter().any(|r| matches!(r, ClientRequest::Read(_))),
        "no batch is read to learn existence: {requests:?}"
    );
    // The revocations' record is read once at start (its tip): not part of the write.
    let revocations = celeriant_gateway::backend::celeriant::revocations::revocations_id();
    let details = requests
        .iter()
        .filter(|r| {
            matches!(r, ClientRequest::AggregateDetails(d)
                if d.aggregate_key.aggregate_id != revocations)
        })
        .count();
    assert_eq!(
        details, 2,
        "the record's tip, then the aggregate's existence"
    );
}

/// Over the Celeriant backend the gateway holds no data of its own: a backup, and its status,
/// are 404 (40400) even with the operator credential, and nothing is started.
#[tokio::test]
async fn backups_are_refused_over_the_celeriant_backend() {
    let h = with_policy(Store::Celeriant, "default = \"members\"").await;
    for method in [Method::POST, Method::GET] {
        let request = Request::builder()
            .method(method.clone())
            .uri("/v1/backup")
            .header("authorization", format!("Operator {OPERATOR}"))
            .body(Body::empty())
            .unwrap();
        let r = h.send(request).await;
        assert_eq!(
            (r.status.as_u16(), r.code()),
            (404, 40400),
            "{method}: {:?}",
            r.json
        );
    }
}
