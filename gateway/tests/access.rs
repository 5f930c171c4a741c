//! The access policy through the HTTP app, on both stores (the embedded store, and the Celeriant
//! backend over the fake node, where owners and members live in Celeriant as access records):
//! every preset on write and read, the owner recorded by the creating write, the answers that
//! are no existence oracle, user principals shared by a user's devices, the members endpoint,
//! the operator credential, two creators racing. Embedded only: the owners an older store is
//! given on open, a damaged record. Celeriant-specific cases are in `access_celeriant.rs`.

mod support;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::json;
use support::app::*;
use support::device::*;
use support::policy::*;

const OTHER_ID: &str = "3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e0a0a";
const NEVER: &str = "3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e0fff";
const APP_SECRET: &str = "an app secret of at least thirty-two bytes";

fn events_path(id: &str) -> String {
    format!("/v1/aggregates/{TYPE}/{id}/events")
}

/// The grantee accepts its invitation (a grant takes effect only then).
async fn accept(h: &Harness, token: &str, id: &str) -> Reply {
    let request = Request::builder()
        .method(Method::POST)
        .uri(format!("/v1/aggregates/{TYPE}/{id}/members/accept"))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {token}"))
        .body(Body::from("{}"))
        .unwrap();
    let r = h.send(request).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    r
}

async fn put_member(h: &Harness, token: &str, id: &str, principal: &str, access: &str) -> Reply {
    let body = serde_json::to_vec(&json!({"principal": principal, "access": access})).unwrap();
    let request = Request::builder()
        .method(Method::PUT)
        .uri(format!("/v1/aggregates/{TYPE}/{id}/members"))
        .header("content-type", "application/json")
        .header("content-length", body.len())
        .header("authorization", format!("Bearer {token}"))
        .body(Body::from(body))
        .unwrap();
    h.send(request).await
}

#[tokio::test]
async fn under_the_default_owner_policy_another_principal_sees_nothing_and_writes_nothing() {
    for store in STORES {
        under_the_default_owner_policy_another_principal_sees_nothing_and_writes_nothing_on(store)
            .await;
    }
}

async fn under_the_default_owner_policy_another_principal_sees_nothing_and_writes_nothing_on(
    store: Store,
) {
    let h = Harness::auth_on(store, |_| {}).await;
    let (a, ta, b, tb) = two(&h).await;
    let r = h
        .write_as(&ta, &write_by(&a.client_id, TYPE, ID, &[1]))
        .await;
    assert_eq!(r.outcome(), "landed", "{:?}", r.json);

    // Read: exactly the answer for an aggregate that never existed.
    let theirs = h.get_as(&tb, &events_path(ID)).await;
    let never = h.get_as(&tb, &events_path(NEVER)).await;
    assert_eq!((theirs.status, &theirs.json), (never.status, &never.json));
    assert_eq!(theirs.json, json!({"batches": [], "next": null, "tip": 0}));
    // Also with `from` past the start: the same empty page.
    let theirs = h.get_as(&tb, &format!("{}?from=5", events_path(ID))).await;
    assert_eq!(theirs.json, never.json);

    // Append without allowCreate: the answer of a missing aggregate, byte for byte.
    let theirs = h
        .write_as(&tb, &no_create(write_by(&b.client_id, TYPE, ID, &[1])))
        .await;
    let never = h
        .write_as(&tb, &no_create(write_by(&b.client_id, TYPE, NEVER, &[1])))
        .await;
    assert_eq!((theirs.status, &theirs.json), (never.status, &never.json));
    assert_eq!(theirs.code(), 2005);
    // With allowCreate: 403, 40302 (it cannot be created: it exists).
    let r = h
        .write_as(&tb, &write_by(&b.client_id, TYPE, ID, &[7]))
        .await;
    assert_eq!(
        (r.status.as_u16(), r.outcome(), r.code()),
        (403, "rejected", 40302)
    );

    // Nothing of B's was stored; A's next write lands at version 2.
    assert_eq!(h.seqs_as(&ta, TYPE, ID).await, [1]);
    let r = h
        .write_as(&ta, &write_by(&a.client_id, TYPE, ID, &[2]))
        .await;
    assert_eq!(r.json["aggregateVersion"], 2, "{:?}", r.json);
    // The owner sees its members record; B gets the 404 of a missing aggregate.
    let mine = h
        .get_as(&ta, &format!("/v1/aggregates/{TYPE}/{ID}/members"))
        .await;
    assert_eq!(
        mine.json,
        json!({"owner": format!("device:{}", a.client_id), "members": {}, "invited": {}})
    );
    let theirs = h
        .get_as(&tb, &format!("/v1/aggregates/{TYPE}/{ID}/members"))
        .await;
    let never = h
        .get_as(&tb, &format!("/v1/aggregates/{TYPE}/{NEVER}/members"))
        .await;
    assert_eq!((theirs.status.as_u16(), theirs.code()), (404, 40400));
    assert_eq!(theirs.json, never.json);
}

#[tokio::test]
async fn the_first_creator_owns_an_id_and_the_later_one_is_refused() {
    for store in STORES {
        the_first_creator_owns_an_id_and_the_later_one_is_refused_on(store).await;
    }
}

async fn the_first_creator_owns_an_id_and_the_later_one_is_refused_on(store: Store) {
    let h = Harness::auth_on(store, |_| {}).await;
    let (a, ta, b, tb) = two(&h).await;
    // B creates the id first (say it guessed it); A's first write is refused, not merged.
    let r = h
        .write_as(&tb, &write_by(&b.client_id, TYPE, OTHER_ID, &[1]))
        .await;
    assert_eq!(r.outcome(), "landed");
    let r = h
        .write_as(&ta, &write_by(&a.client_id, TYPE, OTHER_ID, &[1]))
        .await;
    assert_eq!((r.status.as_u16(), r.code()), (403, 40302), "{:?}", r.json);
    assert!(
        h.seqs_as(&ta, TYPE, OTHER_ID).await.is_empty(),
        "A reads nothing of B's"
    );
    assert_eq!(
        h.seqs_as(&tb, TYPE, OTHER_ID).await,
        [1],
        "B's aggregate holds B's only"
    );
}

fn app_token(sub: &str) -> String {
    let exp = jsonwebtoken::get_current_timestamp() + 300;
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &json!({"sub": sub, "exp": exp, "iss": "https://sign-in.example", "aud": "celeriant-sync-tests"}),
        &EncodingKey::from_secret(APP_SECRET.as_bytes()),
    )
    .unwrap()
}

#[tokio::test]
async fn with_app_tokens_a_users_devices_share_its_aggregates() {
    for store in STORES {
        with_app_tokens_a_users_devices_share_its_aggregates_on(store).await;
    }
}

async fn with_app_tokens_a_users_devices_share_its_aggregates_on(store: Store) {
    let h = Harness::auth_on(store, |c| {
        let file = c.data_dir.join("app-secret");
        std::fs::write(&file, APP_SECRET).unwrap();
        c.app_token_alg = Some(celeriant_gateway::config::AppTokenAlg::Hs256);
        c.app_token_key_file = Some(file);
        c.app_token_issuer = Some("https://sign-in.example".into());
        c.app_token_audience = Some("celeriant-sync-tests".into());
    })
    .await;
    let open = |device: Device, sub: &'static str| {
        let h = &h;
        async move {
            let r = h
                .session(&device.session_body(fresh_nonce()), Some(&app_token(sub)))
                .await;
            assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
            assert_eq!(r.json["principal"], format!("user:{sub}"));
            (device, r.json["token"].as_str().unwrap().to_owned())
        }
    };
    let (a, alice_a) = open(Device::a(), "alice").await;
    let (b, alice_b) = open(Device::b(), "alice").await;
    let (_, bob) = open(Device::a(), "bob").await;
    let r = h
        .write_as(&alice_a, &write_by(&a.client_id, TYPE, ID, &[1]))
        .await;
    assert_eq!(r.outcome(), "landed");
    // Alice's second device reads and appends; Bob, on the same device as Alice's first,
    // sees nothing: the principal is the user, not the device.
    let r = h
        .write_as(&alice_b, &write_by(&b.client_id, TYPE, ID, &[1]))
        .await;
    assert_eq!(r.outcome(), "landed", "{:?}", r.json);
    assert_eq!(h.seqs_as(&alice_b, TYPE, ID).await, [1, 1]);
    assert!(h.seqs_as(&bob, TYPE, ID).await.is_empty());
    let r = h
        .write_as(&bob, &write_by(&a.client_id, TYPE, ID, &[2]))
        .await;
    assert_eq!(r.code(), 40302);
}

#[tokio::test]
async fn each_preset_decides_reads_and_writes_as_documented() {
    for store in STORES {
        each_preset_decides_reads_and_writes_as_documented_on(store).await;
    }
}

async fn each_preset_decides_reads_and_writes_as_documented_on(store: Store) {
    // (preset, B may read, B's append answer without/with allowCreate, B may create its own)
    for (preset, reads, appends, creates) in [
        ("authenticated", true, ("landed", "landed"), true),
        ("authenticated-read", true, ("rejected", "rejected"), true),
        ("members", false, ("rejected", "rejected"), true),
        ("members-read", false, ("rejected", "rejected"), true),
    ] {
        let h = with_policy(store, &format!("default = \"{preset}\"")).await;
        let (a, ta, b, tb) = two(&h).await;
        let r = h
            .write_as(&ta, &write_by(&a.client_id, TYPE, ID, &[1]))
            .await;
        assert_eq!(r.outcome(), "landed", "{preset}");
        let page = h.get_as(&tb, &events_path(ID)).await;
        assert_eq!(page.json["tip"] == 1, reads, "{preset}: {:?}", page.json);
        let r1 = h
            .write_as(&tb, &no_create(write_by(&b.client_id, TYPE, ID, &[1])))
            .await;
        let r2 = h
            .write_as(&tb, &write_by(&b.client_id, TYPE, ID, &[2]))
            .await;
        assert_eq!(
            (r1.outcome(), r2.outcome()),
            appends,
            "{preset}: {:?}",
            r1.json
        );
        // A reader that may not write gets the plain 403; a non-reader the 2005 of a missing one.
        if appends.0 == "rejected" {
            assert_eq!(r1.code(), if reads { 40302 } else { 2005 }, "{preset}");
            assert_eq!(r2.code(), 40302, "{preset}");
            assert_eq!(
                h.seqs_as(&ta, TYPE, ID).await,
                [1],
                "{preset}: nothing stored"
            );
        }
        let r = h
            .write_as(&tb, &write_by(&b.client_id, TYPE, OTHER_ID, &[1]))
            .await;
        assert_eq!(r.outcome() == "landed", creates, "{preset}");
    }

    // read-only: nobody creates or appends; everyone reads.
    let h = with_policy(
        store,
        &format!("default = \"owner\"\n[types]\n\"{TYPE}\" = \"read-only\"\n"),
    )
    .await;
    let (a, ta, _, tb) = two(&h).await;
    let r = h
        .write_as(&ta, &write_by(&a.client_id, TYPE, ID, &[1]))
        .await;
    assert_eq!((r.status.as_u16(), r.code()), (403, 40302), "{:?}", r.json);
    assert_eq!(h.get_as(&tb, &events_path(ID)).await.status, StatusCode::OK);
    // Another type falls back to the default (owner).
    let other = "0d6c7b1a-2b55-4f0e-8a7d-6c4e9b3a0999";
    let r = h
        .write_as(&ta, &write_by(&a.client_id, other, ID, &[1]))
        .await;
    assert_eq!(r.outcome(), "landed", "{:?}", r.json);
}

#[tokio::test]
async fn the_owner_grants_and_revokes_members() {
    for store in STORES {
        the_owner_grants_and_revokes_members_on(store).await;
    }
}

async fn the_owner_grants_and_revokes_members_on(store: Store) {
    let h = with_policy(store, "default = \"members\"").await;
    let (a, ta, b, tb) = two(&h).await;
    let b_principal = format!("device:{}", b.client_id);
    h.write_as(&ta, &write_by(&a.client_id, TYPE, ID, &[1]))
        .await;

    // Before any grant B sees nothing; B may not grant itself (404: it cannot even read it).
    assert!(h.seqs_as(&tb, TYPE, ID).await.is_empty());
    let r = put_member(&h, &tb, ID, &b_principal, "readWrite").await;
    assert_eq!((r.status.as_u16(), r.code()), (404, 40400), "{:?}", r.json);

    let r = put_member(&h, &ta, ID, &b_principal, "read").await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(r.json["invited"][&b_principal], "read");
    assert!(
        h.seqs_as(&tb, TYPE, ID).await.is_empty(),
        "not accepted yet"
    );
    let r = accept(&h, &tb, ID).await;
    assert_eq!(r.json["members"][&b_principal], "read");
    assert_eq!(h.seqs_as(&tb, TYPE, ID).await, [1]);
    // Another member's grant is not B's to see: B sees the owner and its own grant only.
    let r = put_member(&h, &ta, ID, "user:someone-else", "readWrite").await;
    assert_eq!(r.json["members"].as_object().unwrap().len(), 1);
    assert_eq!(r.json["invited"].as_object().unwrap().len(), 1);
    let r = h
        .get_as(&tb, &format!("/v1/aggregates/{TYPE}/{ID}/members"))
        .await;
    assert_eq!(
        r.json,
        json!({"owner": format!("device:{}", a.client_id), "members": {&b_principal: "read"}, "invited": {}})
    );
    put_member(&h, &ta, ID, "user:someone-else", "none").await;
    let w = h
        .write_as(&tb, &write_by(&b.client_id, TYPE, ID, &[1]))
        .await;
    assert_eq!(w.code(), 40302, "a reader does not write");
    // A member that reads is told it is not the owner.
    let r = put_member(&h, &tb, ID, &b_principal, "readWrite").await;
    assert_eq!((r.status.as_u16(), r.code()), (403, 40303));

    // A raise is an invitation: B writes once it accepted it.
    let r = put_member(&h, &ta, ID, &b_principal, "readWrite").await;
    assert_eq!(r.json["members"][&b_principal], "read");
    assert_eq!(r.json["invited"][&b_principal], "readWrite");
    let r = accept(&h, &tb, ID).await;
    assert_eq!(r.json["members"][&b_principal], "readWrite");
    let w = h
        .write_as(&tb, &write_by(&b.client_id, TYPE, ID, &[1]))
        .await;
    assert_eq!(w.outcome(), "landed", "{:?}", w.json);

    let r = put_member(&h, &ta, ID, &b_principal, "none").await;
    assert_eq!(r.json["members"], json!({}));
    assert!(h.seqs_as(&tb, TYPE, ID).await.is_empty(), "revoked");
    let w = h
        .write_as(&tb, &write_by(&b.client_id, TYPE, ID, &[2]))
        .await;
    assert_eq!(w.code(), 40302);

    // Bodies are strict; principals are checked; the owner is no member of its own.
    for (body, code) in [
        (json!({"principal": b_principal, "access": "write"}), 40001),
        (
            json!({"principal": b_principal, "access": "read", "x": 1}),
            40001,
        ),
        (json!({"principal": "bob", "access": "read"}), 40001),
        (
            json!({"principal": format!("device:{}", a.client_id), "access": "read"}),
            40001,
        ),
    ] {
        let raw = serde_json::to_vec(&body).unwrap();
        let request = Request::builder()
            .method(Method::PUT)
            .uri(format!("/v1/aggregates/{TYPE}/{ID}/members"))
            .header("content-type", "application/json")
            .header("content-length", raw.len())
            .header("authorization", format!("Bearer {ta}"))
            .body(Body::from(raw))
            .unwrap();
        let r = h.send(request).await;
        assert_eq!(r.code(), code, "{body}: {:?}", r.json);
    }

    // At most 256 members and invitations.
    for n in 0..256 {
        let r = put_member(&h, &ta, ID, &format!("user:u{n}"), "read").await;
        assert_eq!(r.status, StatusCode::OK, "{n}: {:?}", r.json);
    }
    let r = put_member(&h, &ta, ID, "user:one-too-many", "read").await;
    assert_eq!((r.status.as_u16(), r.code()), (400, 40021));
    // Changing an existing member is still allowed at the cap.
    let r = put_member(&h, &ta, ID, "user:u0", "readWrite").await;
    assert_eq!(r.status, StatusCode::OK);
}

#[tokio::test]
async fn members_exist_only_where_the_policy_has_them() {
    for store in STORES {
        members_exist_only_where_the_policy_has_them_on(store).await;
    }
}

async fn members_exist_only_where_the_policy_has_them_on(store: Store) {
    let h = with_policy(
        store,
        &format!("default = \"owner\"\n[types]\n\"{TYPE}\" = \"members-read\"\n"),
    )
    .await;
    let (a, ta, b, tb) = two(&h).await;
    let b_principal = format!("device:{}", b.client_id);
    h.write_as(&ta, &write_by(&a.client_id, TYPE, ID, &[1]))
        .await;
    let r = put_member(&h, &ta, ID, &b_principal, "readWrite").await;
    assert_eq!(
        (r.status.as_u16(), r.code()),
        (403, 40304),
        "members-read: read only"
    );
    let r = put_member(&h, &ta, ID, &b_principal, "read").await;
    assert_eq!(r.status, StatusCode::OK);
    accept(&h, &tb, ID).await;
    assert_eq!(h.seqs_as(&tb, TYPE, ID).await, [1]);
    // Under owner (another type): no members at all.
    let other = "0d6c7b1a-2b55-4f0e-8a7d-6c4e9b3a0999";
    h.write_as(&ta, &write_by(&a.client_id, other, ID, &[1]))
        .await;
    let body = serde_json::to_vec(&json!({"principal": b_principal, "access": "read"})).unwrap();
    let request = Request::put(format!("/v1/aggregates/{other}/{ID}/members"))
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {ta}"))
        .body(Body::from(body))
        .unwrap();
    let r = h.send(request).await;
    assert_eq!((r.status.as_u16(), r.code()), (403, 40304));
}

async fn as_operator(h: &Harness, secret: &str, request: Request<Body>) -> Reply {
    let (mut parts, body) = request.into_parts();
    parts.headers.insert(
        "authorization",
        format!("Operator {secret}").parse().unwrap(),
    );
    h.send(Request::from_parts(parts, body)).await
}

#[tokio::test]
async fn the_operator_reads_everything_and_writes_nothing() {
    for store in STORES {
        the_operator_reads_everything_and_writes_nothing_on(store).await;
    }
}

async fn the_operator_reads_everything_and_writes_nothing_on(store: Store) {
    let h = with_policy(store, "default = \"owner\"").await;
    let (a, ta, _, _) = two(&h).await;
    h.write_as(&ta, &write_by(&a.client_id, TYPE, ID, &[1]))
        .await;
    let get = || Request::get(events_path(ID)).body(Body::empty()).unwrap();
    let r = as_operator(&h, OPERATOR, get()).await;
    assert_eq!(r.json["tip"], 1, "{:?}", r.json);
    let r = as_operator(&h, "wrong-secret-of-at-least-thirty-two-characters", get()).await;
    assert_eq!((r.status.as_u16(), r.code()), (401, 40101));
    let body = serde_json::to_vec(&write_by(&a.client_id, TYPE, ID, &[2])).unwrap();
    let write = Request::post("/v1/write")
        .header("content-type", "application/json")
        .header("content-length", body.len())
        .body(Body::from(body))
        .unwrap();
    let r = as_operator(&h, OPERATOR, write).await;
    assert_eq!((r.status.as_u16(), r.code()), (403, 40302), "{:?}", r.json);
    assert_eq!(h.seqs_as(&ta, TYPE, ID).await, [1]);
    // Without --operator-token-file, no operator secret is accepted.
    let plain = Harness::auth(|_| {});
    let r = as_operator(&plain, OPERATOR, get()).await;
    assert_eq!(r.code(), 40101);
}

#[tokio::test]
async fn a_reader_who_is_not_a_member_is_not_shown_the_owner_or_the_members() {
    for store in STORES {
        a_reader_who_is_not_a_member_is_not_shown_the_owner_or_the_members_on(store).await;
    }
}

async fn a_reader_who_is_not_a_member_is_not_shown_the_owner_or_the_members_on(store: Store) {
    let h = with_policy(store, "default = \"authenticated-read\"").await;
    let (a, ta, _b, tb) = two(&h).await;
    h.write_as(&ta, &write_by(&a.client_id, TYPE, ID, &[1]))
        .await;
    // B may read the aggregate (authenticated-read), but its access list is the owner's.
    assert_eq!(h.seqs_as(&tb, TYPE, ID).await, [1]);
    let r = h
        .get_as(&tb, &format!("/v1/aggregates/{TYPE}/{ID}/members"))
        .await;
    assert_eq!((r.status.as_u16(), r.code()), (403, 40303), "{:?}", r.json);
    let r = h
        .get_as(&ta, &format!("/v1/aggregates/{TYPE}/{ID}/members"))
        .await;
    assert_eq!(r.json["owner"], format!("device:{}", a.client_id));
}

/// A members change is a write upstream: it takes a `--max-inflight` slot, and is answered busy
/// (429, 42900, like a write) when none is free.
#[tokio::test]
async fn a_members_change_takes_a_write_slot() {
    let h = with_policy(Store::Celeriant, "default = \"members\"").await;
    let (a, ta, _, _) = two(&h).await;
    let w = h
        .write_as(&ta, &write_by(&a.client_id, TYPE, ID, &[1]))
        .await;
    assert_eq!(w.outcome(), "landed", "{:?}", w.json);
    let all = h.state.config.limits.max_inflight;
    // Slots held by as many address buckets (IPv6 /56s) as there are slots: each one light, so
    // the reserve goes too.
    let held: Vec<_> = (0..all)
        .map(|i| {
            let ip =
                std::net::IpAddr::from((0x2001_0db8_u128 << 96 | (i as u128) << 72).to_be_bytes());
            h.state.admission.take(ip, None).unwrap()
        })
        .collect();
    let busy = put_member(&h, &ta, ID, "user:carol", "read").await;
    assert_eq!(
        (busy.status.as_u16(), busy.code()),
        (429, 42900),
        "{:?}",
        busy.json
    );
    drop(held);
    let r = put_member(&h, &ta, ID, "user:carol", "read").await;
    assert_eq!(r.status.as_u16(), 200, "{:?}", r.json);
}
