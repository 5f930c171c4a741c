//! Invitations, on both stores (embedded, and the Celeriant backend over the fake node): an
//! owner's grant to a principal that is not a member is only an invitation, which gives nothing
//! until the invited principal accepts it (`POST …/members/accept`). Without that step an
//! attacker could pre-create an aggregate id a victim's app will use later, grant the victim
//! `readWrite`, and read what the victim's "creating" write then appended to it (the takeover
//! below). Also: accepting by a principal with no invitation (the 404 of a missing aggregate),
//! revoking an invitation, the cap counting invitations, and the strict accept body.

mod support;

use axum::body::Body;
use axum::http::{Method, Request};
use serde_json::{Value, json};
use support::app::*;
use support::policy::*;

const OTHER_ID: &str = "3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e0a0a";
const NEVER: &str = "3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e0fff";

fn json_request(method: Method, uri: String, auth: &str, body: &Value) -> Request<Body> {
    let raw = serde_json::to_vec(body).unwrap();
    Request::builder()
        .method(method)
        .uri(uri)
        .header("content-type", "application/json")
        .header("content-length", raw.len())
        .header("authorization", auth)
        .body(Body::from(raw))
        .unwrap()
}

async fn put_member(h: &Harness, token: &str, id: &str, principal: &str, access: &str) -> Reply {
    let body = json!({"principal": principal, "access": access});
    let uri = format!("/v1/aggregates/{TYPE}/{id}/members");
    h.send(json_request(
        Method::PUT,
        uri,
        &format!("Bearer {token}"),
        &body,
    ))
    .await
}

async fn accept_with(h: &Harness, token: &str, id: &str, body: &Value) -> Reply {
    let uri = format!("/v1/aggregates/{TYPE}/{id}/members/accept");
    h.send(json_request(
        Method::POST,
        uri,
        &format!("Bearer {token}"),
        body,
    ))
    .await
}

async fn accept(h: &Harness, token: &str, id: &str) -> Reply {
    accept_with(h, token, id, &json!({})).await
}

async fn members_of(h: &Harness, token: &str, id: &str) -> Reply {
    h.get_as(token, &format!("/v1/aggregates/{TYPE}/{id}/members"))
        .await
}

#[tokio::test]
async fn an_invitation_gives_nothing_until_it_is_accepted() {
    for store in STORES {
        an_invitation_gives_nothing_until_it_is_accepted_on(store).await;
    }
}

async fn an_invitation_gives_nothing_until_it_is_accepted_on(store: Store) {
    let h = with_policy(store, "default = \"members\"").await;
    let (a, ta, b, tb) = two(&h).await;
    let (a_principal, b_principal) = (
        format!("device:{}", a.client_id),
        format!("device:{}", b.client_id),
    );
    h.write_as(&ta, &write_by(&a.client_id, TYPE, ID, &[1]))
        .await;

    let r = put_member(&h, &ta, ID, &b_principal, "readWrite").await;
    assert_eq!(r.status.as_u16(), 200, "{:?}", r.json);
    assert_eq!(
        r.json,
        json!({"owner": a_principal, "members": {}, "invited": {&b_principal: "readWrite"}})
    );
    // Invited, not accepted: a stranger to reads and writes.
    assert!(h.seqs_as(&tb, TYPE, ID).await.is_empty(), "{store:?}");
    let w = h
        .write_as(&tb, &write_by(&b.client_id, TYPE, ID, &[2]))
        .await;
    assert_eq!(w.code(), 40302, "{:?}", w.json);
    let w = h
        .write_as(&tb, &no_create(write_by(&b.client_id, TYPE, ID, &[2])))
        .await;
    assert_eq!(w.code(), 2005, "{:?}", w.json);
    // It may see who invites it, and to what, and change nothing.
    let r = members_of(&h, &tb, ID).await;
    assert_eq!(r.status.as_u16(), 200, "{:?}", r.json);
    assert_eq!(
        r.json,
        json!({"owner": a_principal, "members": {}, "invited": {&b_principal: "readWrite"}})
    );
    let r = put_member(&h, &tb, ID, &b_principal, "read").await;
    assert_eq!((r.status.as_u16(), r.code()), (403, 40303));

    // Accepted: a member with the grant it was invited to.
    let r = accept(&h, &tb, ID).await;
    assert_eq!(r.status.as_u16(), 200, "{:?}", r.json);
    assert_eq!(
        r.json,
        json!({"owner": a_principal, "members": {&b_principal: "readWrite"}, "invited": {}})
    );
    assert_eq!(h.seqs_as(&tb, TYPE, ID).await, [1]);
    let w = h
        .write_as(&tb, &write_by(&b.client_id, TYPE, ID, &[2]))
        .await;
    assert_eq!(w.outcome(), "landed", "{:?}", w.json);
    // Accepting again changes nothing.
    let again = accept(&h, &tb, ID).await;
    assert_eq!((again.status.as_u16(), &again.json), (200, &r.json));
    // A member's grant changes at once, without a new invitation.
    let r = put_member(&h, &ta, ID, &b_principal, "read").await;
    assert_eq!(
        r.json,
        json!({"owner": a_principal, "members": {&b_principal: "read"}, "invited": {}})
    );
    let w = h
        .write_as(&tb, &write_by(&b.client_id, TYPE, ID, &[3]))
        .await;
    assert_eq!(w.code(), 40302, "a reader does not write");
    assert_eq!(h.seqs_as(&tb, TYPE, ID).await, [1, 2]);
    // A raise back to readWrite is an invitation: the reader keeps `read` and writes nothing
    // until it accepts (else an owner could invite a victim to a harmless `read`, then raise it).
    let r = put_member(&h, &ta, ID, &b_principal, "readWrite").await;
    assert_eq!(
        r.json,
        json!({"owner": a_principal, "members": {&b_principal: "read"}, "invited": {&b_principal: "readWrite"}})
    );
    let w = h
        .write_as(&tb, &write_by(&b.client_id, TYPE, ID, &[3]))
        .await;
    assert_eq!(
        w.code(),
        40302,
        "{store:?}: a raise gives nothing until accepted"
    );
    let r = members_of(&h, &tb, ID).await;
    assert_eq!(
        r.json["invited"],
        json!({&b_principal: "readWrite"}),
        "it sees the raise"
    );
    let r = accept(&h, &tb, ID).await;
    assert_eq!(
        r.json,
        json!({"owner": a_principal, "members": {&b_principal: "readWrite"}, "invited": {}})
    );
    let w = h
        .write_as(&tb, &write_by(&b.client_id, TYPE, ID, &[3]))
        .await;
    assert_eq!(w.outcome(), "landed", "{:?}", w.json);
    // Lowered: at once.
    let r = put_member(&h, &ta, ID, &b_principal, "read").await;
    assert_eq!(r.json["members"], json!({&b_principal: "read"}));
    assert_eq!(h.seqs_as(&tb, TYPE, ID).await, [1, 2, 3]);
    // Revoked, then granted again: an invitation again, nothing until accepted.
    put_member(&h, &ta, ID, &b_principal, "none").await;
    let r = put_member(&h, &ta, ID, &b_principal, "read").await;
    assert_eq!(r.json["invited"], json!({&b_principal: "read"}));
    assert_eq!(r.json["members"], json!({}));
    assert!(h.seqs_as(&tb, TYPE, ID).await.is_empty());
}

#[tokio::test]
async fn a_pre_created_id_shared_with_the_victim_does_not_take_its_writes() {
    for store in STORES {
        a_pre_created_id_shared_with_the_victim_does_not_take_its_writes_on(store).await;
    }
}

/// The attack the invitations close: A pre-creates the id B's app will use, grants B
/// `readWrite`; B's "creating" write must not land in A's aggregate.
async fn a_pre_created_id_shared_with_the_victim_does_not_take_its_writes_on(store: Store) {
    let h = with_policy(store, "default = \"members\"").await;
    let (attacker, ta, victim, tv) = two(&h).await;
    let v_principal = format!("device:{}", victim.client_id);
    let r = h
        .write_as(&ta, &write_by(&attacker.client_id, TYPE, ID, &[1]))
        .await;
    assert_eq!(r.outcome(), "landed");
    let r = put_member(&h, &ta, ID, &v_principal, "readWrite").await;
    assert_eq!(r.status.as_u16(), 200, "{:?}", r.json);

    // The victim's first write, allowCreate as an app creating its aggregate sends it.
    let w = h
        .write_as(&tv, &write_by(&victim.client_id, TYPE, ID, &[1, 2]))
        .await;
    assert_eq!(
        (w.status.as_u16(), w.outcome(), w.code()),
        (403, "rejected", 40302),
        "{store:?}: {:?}",
        w.json
    );
    // Nothing of the victim's is stored: the attacker reads its own batch and nothing else.
    let page = h
        .get_as(&ta, &format!("/v1/aggregates/{TYPE}/{ID}/events"))
        .await;
    assert_eq!(page.json["tip"], 1, "{:?}", page.json);
    let batches = page.json["batches"].as_array().unwrap();
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0]["clientId"], attacker.client_id);
    assert!(!page.json.to_string().contains(&victim.client_id));
    // The store agrees (not only the attacker's view): the operator reads everything.
    let request = Request::get(format!("/v1/aggregates/{TYPE}/{ID}/events"))
        .header("authorization", format!("Operator {OPERATOR}"))
        .body(Body::empty())
        .unwrap();
    let stored = h.send(request).await;
    assert_eq!(stored.json["tip"], 1, "{:?}", stored.json);
    assert!(!stored.json.to_string().contains(&victim.client_id));
}

#[tokio::test]
async fn accepting_without_an_invitation_is_the_404_of_a_missing_aggregate() {
    for store in STORES {
        accepting_without_an_invitation_is_the_404_of_a_missing_aggregate_on(store).await;
    }
}

async fn accepting_without_an_invitation_is_the_404_of_a_missing_aggregate_on(store: Store) {
    let h = with_policy(
        store,
        &format!("default = \"members\"\n[types]\n\"{OWNER_TYPE}\" = \"owner\"\n"),
    )
    .await;
    let (a, ta, b, tb) = two(&h).await;
    for id in [ID, OTHER_ID] {
        h.write_as(&ta, &write_by(&a.client_id, TYPE, id, &[1]))
            .await;
    }
    put_member(&h, &ta, ID, &format!("device:{}", b.client_id), "read").await;

    // B is not invited to OTHER_ID: exactly the answer of an aggregate that does not exist.
    let refused = accept(&h, &tb, OTHER_ID).await;
    let missing = accept(&h, &tb, NEVER).await;
    assert_eq!((refused.status.as_u16(), refused.code()), (404, 40400));
    assert_eq!(refused.json, missing.json);
    let r = members_of(&h, &tb, OTHER_ID).await;
    assert_eq!((r.status.as_u16(), r.code()), (404, 40400));
    assert!(h.seqs_as(&tb, TYPE, OTHER_ID).await.is_empty());
    // The owner has nothing to accept; the operator changes nothing.
    let r = accept(&h, &ta, ID).await;
    assert_eq!((r.status.as_u16(), r.code()), (400, 40001), "{:?}", r.json);
    let uri = format!("/v1/aggregates/{TYPE}/{ID}/members/accept");
    let op = json_request(
        Method::POST,
        uri,
        &format!("Operator {OPERATOR}"),
        &json!({}),
    );
    let r = h.send(op).await;
    assert_eq!((r.status.as_u16(), r.code()), (403, 40303), "{:?}", r.json);
    // The body is `{}`, strictly; nothing is accepted by a refused body.
    for body in [json!({"access": "readWrite"}), json!([]), json!(null)] {
        let r = accept_with(&h, &tb, ID, &body).await;
        assert_eq!(r.code(), 40001, "{body}: {:?}", r.json);
    }
    let uri = format!("/v1/aggregates/{TYPE}/{ID}/members/accept");
    let request = Request::post(uri)
        .header("content-type", "text/plain")
        .header("authorization", format!("Bearer {tb}"))
        .body(Body::from("{}"))
        .unwrap();
    assert_eq!(h.send(request).await.code(), 41500);
    assert!(
        h.seqs_as(&tb, TYPE, ID).await.is_empty(),
        "still invited only"
    );
    // GET is not a way to accept.
    let r = h
        .get_as(&tb, &format!("/v1/aggregates/{TYPE}/{ID}/members/accept"))
        .await;
    assert_eq!(r.status.as_u16(), 405, "{:?}", r.json);
    // A type without members has no invitations to accept.
    h.write_as(&ta, &write_by(&a.client_id, OWNER_TYPE, ID, &[1]))
        .await;
    let uri = format!("/v1/aggregates/{OWNER_TYPE}/{ID}/members/accept");
    let r = h
        .send(json_request(
            Method::POST,
            uri,
            &format!("Bearer {tb}"),
            &json!({}),
        ))
        .await;
    assert_eq!((r.status.as_u16(), r.code()), (403, 40304), "{:?}", r.json);
    // B accepts its own invitation.
    let r = accept(&h, &tb, ID).await;
    assert_eq!(r.status.as_u16(), 200, "{:?}", r.json);
    assert_eq!(h.seqs_as(&tb, TYPE, ID).await, [1]);
}

const OWNER_TYPE: &str = "0d6c7b1a-2b55-4f0e-8a7d-6c4e9b3a0999";

#[tokio::test]
async fn a_revoked_invitation_cannot_be_accepted_and_invitations_count_toward_the_cap() {
    for store in STORES {
        a_revoked_invitation_cannot_be_accepted_and_invitations_count_toward_the_cap_on(store)
            .await;
    }
}

async fn a_revoked_invitation_cannot_be_accepted_and_invitations_count_toward_the_cap_on(
    store: Store,
) {
    let h = with_policy(store, "default = \"members\"").await;
    let (a, ta, b, tb) = two(&h).await;
    let b_principal = format!("device:{}", b.client_id);
    h.write_as(&ta, &write_by(&a.client_id, TYPE, ID, &[1]))
        .await;
    put_member(&h, &ta, ID, &b_principal, "readWrite").await;
    let r = put_member(&h, &ta, ID, &b_principal, "none").await;
    assert_eq!(r.status.as_u16(), 200);
    assert_eq!(r.json["invited"], json!({}));
    let r = accept(&h, &tb, ID).await;
    assert_eq!((r.status.as_u16(), r.code()), (404, 40400), "{:?}", r.json);
    assert_eq!(members_of(&h, &tb, ID).await.code(), 40400);
    assert!(h.seqs_as(&tb, TYPE, ID).await.is_empty());

    // 255 invitations and one member: the cap is reached, for invitations and grants alike.
    put_member(&h, &ta, ID, &b_principal, "read").await;
    assert_eq!(accept(&h, &tb, ID).await.status.as_u16(), 200);
    for n in 0..255 {
        let r = put_member(&h, &ta, ID, &format!("user:u{n}"), "read").await;
        assert_eq!(r.status.as_u16(), 200, "{n}: {:?}", r.json);
    }
    let r = put_member(&h, &ta, ID, "user:one-too-many", "read").await;
    assert_eq!((r.status.as_u16(), r.code()), (400, 40021));
    // Changing an invitation or a member at the cap is still allowed.
    let r = put_member(&h, &ta, ID, "user:u0", "readWrite").await;
    assert_eq!(r.json["invited"]["user:u0"], "readWrite");
    let r = put_member(&h, &ta, ID, &b_principal, "readWrite").await;
    assert_eq!(
        r.json["members"][&b_principal], "read",
        "a raise waits for its accept"
    );
    assert_eq!(r.json["invited"][&b_principal], "readWrite");
    // Withdrawing an invitation makes room.
    put_member(&h, &ta, ID, "user:u0", "none").await;
    let r = put_member(&h, &ta, ID, "user:one-more", "read").await;
    assert_eq!(r.status.as_u16(), 200, "{:?}", r.json);
}
