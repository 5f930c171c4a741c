//! Request proofs (`DPoP`, `crate::auth::proof`): every write, read, watch and members request
//! under a session must carry a proof signed by the session's device key for exactly that
//! request, fresh and used once. Each refusal is a 401 with its own code, and nothing is
//! stored: every refused write is followed by a read of the aggregate.

mod support;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use celeriant_gateway::config::ProofMode;
use celeriant_sync_protocol::codes::gateway as g;
use serde_json::{Value, json};
use support::app::{Harness, Reply, TYPE, write_by};
use support::device::{Device, ProofClaims, now_ms};

const AGG: &str = "3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e0077";

fn write_body(device: &Device, seqs: &[u64]) -> Vec<u8> {
    let mut body = write_by(&device.client_id, TYPE, AGG, seqs);
    for event in body["writes"][0]["events"].as_array_mut().unwrap() {
        event["timestamp"] = json!(1_700_000_000_000u64);
    }
    serde_json::to_vec(&body).unwrap()
}

/// `POST /v1/write` with `body`, the token and exactly the proof given (none: no header).
async fn write_raw(h: &Harness, token: &str, proof: Option<&str>, body: &[u8]) -> Reply {
    let mut request = Request::post("/v1/write")
        .header("content-type", "application/json")
        .header("content-length", body.len())
        .header("authorization", format!("Bearer {token}"));
    if let Some(proof) = proof {
        request = request.header("dpop", proof);
    }
    h.send_as_is(request.body(Body::from(body.to_vec())).unwrap())
        .await
}

async fn get_raw(h: &Harness, token: &str, proof: Option<&str>, path: &str) -> Reply {
    let mut request = Request::get(path).header("authorization", format!("Bearer {token}"));
    if let Some(proof) = proof {
        request = request.header("dpop", proof);
    }
    h.send_as_is(request.body(Body::empty()).unwrap()).await
}

fn events_path() -> String {
    format!("/v1/aggregates/{TYPE}/{AGG}/events")
}

/// The stored `clientSeq`s, read with a proper proof.
async fn stored(h: &Harness, token: &str) -> Vec<u64> {
    let r = h.get_as(token, &events_path()).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    r.json["batches"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|b| b["events"].as_array().unwrap().clone())
        .map(|e: Value| e["clientSeq"].as_u64().unwrap())
        .collect()
}

fn refused(r: &Reply, code: u32) {
    assert_eq!(r.status, StatusCode::UNAUTHORIZED, "{:?}", r.json);
    assert_eq!(r.code(), u64::from(code), "{:?}", r.json);
    assert_eq!(r.json["outcome"], "unauthorized", "{:?}", r.json);
}

#[tokio::test]
async fn a_write_needs_a_proof_for_exactly_that_request_and_nothing_is_stored_otherwise() {
    let h = Harness::auth(|_| {});
    let (a, b) = (Device::a(), Device::b());
    let token = h.open(&a).await;
    // Tokens are issued per second: a second later, the same device gets another one.
    tokio::time::sleep(std::time::Duration::from_millis(1_100)).await;
    let other_token = h.open(&a).await;
    assert_ne!(token, other_token);
    let body = write_body(&a, &[1]);
    let attack = write_body(&a, &[(1 << 53) - 1]);

    // No proof at all: the stolen-token case.
    refused(
        &write_raw(&h, &token, None, &attack).await,
        g::PROOF_REQUIRED,
    );
    // Garbage, and a proof signed by another device's key (over the right request).
    refused(
        &write_raw(&h, &token, Some("a.b.c"), &attack).await,
        g::PROOF_INVALID,
    );
    let by_b = b.proof("POST", "/v1/write", &token, &attack);
    refused(
        &write_raw(&h, &token, Some(&by_b), &attack).await,
        g::PROOF_INVALID,
    );
    // Proofs of the device's key, made for another request.
    for (what, claims) in [
        (
            "method",
            ProofClaims::new("PUT", "/v1/write", &token, &attack),
        ),
        (
            "path",
            ProofClaims::new("POST", "/v1/watch", &token, &attack),
        ),
        (
            "query",
            ProofClaims::new("POST", "/v1/write?x=1", &token, &attack),
        ),
        ("body", ProofClaims::new("POST", "/v1/write", &token, &body)),
        (
            "token",
            ProofClaims::new("POST", "/v1/write", &other_token, &attack),
        ),
    ] {
        let r = write_raw(&h, &token, Some(&a.proof_of(&claims)), &attack).await;
        assert_eq!(
            r.code(),
            u64::from(g::PROOF_MISMATCH),
            "{what}: {:?}",
            r.json
        );
        refused(&r, g::PROOF_MISMATCH);
    }
    // Stale and future timestamps (the window is 30 s back, 5 s ahead).
    let now = now_ms() / 1000;
    for iat in [now - 32, now + 7] {
        let claims = ProofClaims {
            iat,
            ..ProofClaims::new("POST", "/v1/write", &token, &attack)
        };
        let r = write_raw(&h, &token, Some(&a.proof_of(&claims)), &attack).await;
        refused(&r, g::PROOF_STALE);
    }
    // Two proofs, an unsigned one and one without the typ.
    let good = a.proof("POST", "/v1/write", &token, &attack);
    let request = Request::post("/v1/write")
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {token}"))
        .header("dpop", &good)
        .header("dpop", &good)
        .body(Body::from(attack.clone()))
        .unwrap();
    refused(&h.send_as_is(request).await, g::PROOF_REQUIRED);
    let parts: Vec<&str> = good.split('.').collect();
    let none_header = "eyJ0eXAiOiJkcG9wK2p3dCIsImFsZyI6Im5vbmUifQ";
    let unsigned = format!("{none_header}.{}.", parts[1]);
    refused(
        &write_raw(&h, &token, Some(&unsigned), &attack).await,
        g::PROOF_INVALID,
    );
    let spliced = format!(
        "{}.{}.{}",
        parts[0],
        parts[1],
        &parts[2][..parts[2].len() - 4]
    );
    refused(
        &write_raw(&h, &token, Some(&spliced), &attack).await,
        g::PROOF_INVALID,
    );

    assert_eq!(
        stored(&h, &token).await,
        Vec::<u64>::new(),
        "nothing stored"
    );

    // The device's own write, with its proof, lands; the same proof again is a replay.
    let proof = a.proof("POST", "/v1/write", &token, &body);
    let r = write_raw(&h, &token, Some(&proof), &body).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(r.json["aggregateVersion"], 1);
    refused(
        &write_raw(&h, &token, Some(&proof), &body).await,
        g::PROOF_REPLAYED,
    );
    // A proof a few seconds old or ahead is fine.
    let claims = ProofClaims {
        iat: now - 20,
        ..ProofClaims::new("POST", "/v1/write", &token, &write_body(&a, &[2]))
    };
    let r = write_raw(
        &h,
        &token,
        Some(&a.proof_of(&claims)),
        &write_body(&a, &[2]),
    )
    .await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(stored(&h, &token).await, vec![1, 2]);
}

#[tokio::test]
async fn reads_watches_and_members_need_proofs_too() {
    let h = Harness::auth(|_| {});
    let a = Device::a();
    let token = h.open(&a).await;
    assert_eq!(
        h.write_as(&token, &write_by(&a.client_id, TYPE, AGG, &[1]))
            .await
            .status,
        StatusCode::OK
    );
    let path = format!("{}?from=1", events_path());
    refused(&get_raw(&h, &token, None, &path).await, g::PROOF_REQUIRED);
    let for_other_query = a.proof("GET", &format!("{}?from=2", events_path()), &token, b"");
    refused(
        &get_raw(&h, &token, Some(&for_other_query), &path).await,
        g::PROOF_MISMATCH,
    );
    let with_body = a.proof("GET", &path, &token, b"{}");
    refused(
        &get_raw(&h, &token, Some(&with_body), &path).await,
        g::PROOF_MISMATCH,
    );
    let proof = a.proof("GET", &path, &token, b"");
    let r = get_raw(&h, &token, Some(&proof), &path).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    refused(
        &get_raw(&h, &token, Some(&proof), &path).await,
        g::PROOF_REPLAYED,
    );

    let members = format!("/v1/aggregates/{TYPE}/{AGG}/members");
    refused(
        &get_raw(&h, &token, None, &members).await,
        g::PROOF_REQUIRED,
    );
    let proof = a.proof("GET", &members, &token, b"");
    assert_eq!(
        get_raw(&h, &token, Some(&proof), &members).await.status,
        StatusCode::OK
    );
    // PUT members: the body the proof names is the one that counts.
    let grant = serde_json::to_vec(
        &json!({"principal": "device:00000000-0000-0000-0000-000000000009", "access": "read"}),
    )
    .unwrap();
    let other = serde_json::to_vec(
        &json!({"principal": "device:00000000-0000-0000-0000-000000000008", "access": "write"}),
    )
    .unwrap();
    let request = Request::put(&members)
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {token}"))
        .header("dpop", a.proof("PUT", &members, &token, &grant))
        .body(Body::from(other))
        .unwrap();
    refused(&h.send_as_is(request).await, g::PROOF_MISMATCH);
    let r = h.get_as(&token, &members).await;
    assert_eq!(r.json["members"], json!({}), "no grant was stored");
    // POST members/accept: a proof is required, and it names the body `{}`.
    let accept = format!("{members}/accept");
    let post = |proof: Option<String>| {
        let mut request = Request::post(&accept)
            .header("content-type", "application/json")
            .header("authorization", format!("Bearer {token}"));
        if let Some(proof) = proof {
            request = request.header("dpop", proof);
        }
        request.body(Body::from("{}")).unwrap()
    };
    refused(&h.send_as_is(post(None)).await, g::PROOF_REQUIRED);
    let for_other_body = a.proof("POST", &accept, &token, b"{ }");
    refused(
        &h.send_as_is(post(Some(for_other_body))).await,
        g::PROOF_MISMATCH,
    );
    // HEAD members is a read like GET, never the PUT handler (which would refuse its empty
    // body as a malformed grant).
    let request = Request::head(&members)
        .header("authorization", format!("Bearer {token}"))
        .header("dpop", a.proof("HEAD", &members, &token, b""))
        .body(Body::empty())
        .unwrap();
    let r = h.send_as_is(request).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);

    let watch = format!("/v1/watch?aggregate={TYPE}/{AGG}");
    refused(&get_raw(&h, &token, None, &watch).await, g::PROOF_REQUIRED);
    let body = serde_json::to_vec(&json!({"aggregates": [{"typeId": TYPE, "id": AGG}]})).unwrap();
    let request = Request::post("/v1/watch")
        .header("content-type", "application/json")
        .header("authorization", format!("Bearer {token}"))
        .header("dpop", a.proof("POST", "/v1/watch", &token, b"{}"))
        .body(Body::from(body))
        .unwrap();
    refused(&h.send_as_is(request).await, g::PROOF_MISMATCH);
}

#[tokio::test]
async fn the_replay_memory_is_bounded_per_device_and_refuses_when_full() {
    let h = Harness::auth(|c| {
        c.proof_replay_per_device = 3;
        c.proof_replay_capacity = 100;
    });
    let (a, b) = (Device::a(), Device::b());
    let (ta, tb) = (h.open(&a).await, h.open(&b).await);
    let path = events_path();
    for _ in 0..3 {
        let r = h.get_as(&ta, &path).await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    }
    let r = h.get_as(&ta, &path).await;
    assert_eq!(r.status, StatusCode::TOO_MANY_REQUESTS, "{:?}", r.json);
    assert_eq!(r.code(), u64::from(g::PROOF_REPLAY_FULL));
    let retry: u64 = r.headers["retry-after"].to_str().unwrap().parse().unwrap();
    assert!((30..=37).contains(&retry), "{retry}");
    // Another device is not affected by a's flood.
    assert_eq!(h.get_as(&tb, &path).await.status, StatusCode::OK);
}

#[tokio::test]
async fn with_proofs_off_a_token_alone_is_enough() {
    let h = Harness::auth(|c| c.proofs = ProofMode::Off);
    let a = Device::a();
    let token = h.open(&a).await;
    let r = write_raw(&h, &token, None, &write_body(&a, &[1])).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
}
