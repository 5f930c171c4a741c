//! Device identity over HTTP, driven without a socket (gateway defaults: auth on): every way a
//! write, a read or a session can be refused, with its documented status and code and nothing
//! stored; the spoofing attack that used to make a device's writes vanish; app tokens and the
//! per-type access claim.

mod support;

use axum::http::StatusCode;
use celeriant_gateway::auth::token::{SESSION_AUDIENCE, SessionClaims};
use celeriant_sync_protocol::encoding::encode_base64;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use support::app::*;
use support::device::*;

fn status_code(r: &Reply) -> (u16, &str, u64) {
    (r.status.as_u16(), r.outcome(), r.code())
}

#[tokio::test]
async fn writes_without_a_valid_session_are_401_and_store_nothing() {
    let h = Harness::auth(|_| {});
    let victim = Device::a();
    let token = h.open(&victim).await;
    let body = write_by(&victim.client_id, TYPE, ID, &[1]);

    let none = h.write(&body).await;
    assert_eq!(
        status_code(&none),
        (401, "unauthorized", 40100),
        "{:?}",
        none.json
    );
    assert_eq!(
        none.headers["www-authenticate"],
        "Bearer realm=\"celeriant-gateway\""
    );

    let now = jsonwebtoken::get_current_timestamp();
    let claims = |exp| SessionClaims {
        sub: victim.client_id.parse().unwrap(),
        aud: SESSION_AUDIENCE.into(),
        iat: now - 7200,
        exp,
        types: None,
        principal: None,
        jti: None,
    };
    let expired = h.state.auth.keys.issue(&claims(now - 1)).unwrap();
    let r = h.write_as(&expired, &body).await;
    assert_eq!(
        status_code(&r),
        (401, "unauthorized", 40102),
        "{:?}",
        r.json
    );

    // Signed with another secret: what a forger (or a gateway before a rotation) produces.
    let forged = jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &claims(now + 3600),
        &EncodingKey::from_secret(&[7u8; 32]),
    )
    .unwrap();
    let mut tampered = token.clone();
    tampered.replace_range(token.len() - 4.., "AAAA");
    for (what, bad) in [
        ("forged", forged.as_str()),
        ("tampered", tampered.as_str()),
        ("garbage", "not-a-token"),
    ] {
        let r = h.write_as(bad, &body).await;
        assert_eq!(
            status_code(&r),
            (401, "unauthorized", 40101),
            "{what}: {:?}",
            r.json
        );
    }
    // Malformed Authorization headers are a missing session.
    for header in ["Basic abc", "Bearer", "Bearer a b", "token"] {
        let request = axum::http::Request::post("/v1/write")
            .header("content-type", "application/json")
            .header("authorization", header)
            .body(axum::body::Body::from(serde_json::to_vec(&body).unwrap()))
            .unwrap();
        let r = h.send(request).await;
        assert_eq!(status_code(&r), (401, "unauthorized", 40100), "{header}");
    }
    // The session is checked before the body: a 401 even for a body that is not JSON.
    let r = h.post_raw("/v1/write", b"{".to_vec()).await;
    assert_eq!(r.code(), 40100);

    assert!(
        h.seqs_as(&token, TYPE, ID).await.is_empty(),
        "nothing stored"
    );
    assert_eq!(h.write_as(&token, &body).await.json["aggregateVersion"], 1);
}

#[tokio::test]
async fn a_write_under_another_client_id_is_403_and_stores_nothing() {
    let h = Harness::auth(|_| {});
    let (a, b) = (Device::a(), Device::b());
    let token_b = h.open(&b).await;
    let r = h
        .write_as(&token_b, &write_by(&a.client_id, TYPE, ID, &[1]))
        .await;
    assert_eq!(status_code(&r), (403, "rejected", 40300), "{:?}", r.json);
    // Also refused before validation: an invalid body under the wrong id is still a 403.
    let r = h
        .write_as(&token_b, &write_by(&a.client_id, TYPE, ID, &[0]))
        .await;
    assert_eq!(r.code(), 40300);
    assert!(h.seqs_as(&token_b, TYPE, ID).await.is_empty());
}

#[tokio::test]
async fn the_spoofing_attack_is_refused_and_the_victims_next_write_lands() {
    let h = Harness::auth(|_| {});
    let (victim, attacker) = (Device::a(), Device::b());
    let victim_token = h.open(&victim).await;
    let v1 = h
        .write_as(&victim_token, &write_by(&victim.client_id, TYPE, ID, &[1]))
        .await;
    assert_eq!(
        v1.json,
        json!({"outcome": "landed", "duplicate": false, "aggregateVersion": 1})
    );

    // The attacker has a valid session of its own. It can no longer read the victim's id off
    // the aggregate (the owner policy answers as if it did not exist), but suppose it learnt
    // it elsewhere.
    let attacker_token = h.open(&attacker).await;
    let page = h
        .get_as(
            &attacker_token,
            &format!("/v1/aggregates/{TYPE}/{ID}/events"),
        )
        .await;
    assert_eq!(page.json, json!({"batches": [], "next": null, "tip": 0}));
    // It claims the victim's id with a high sequence on the victim's aggregate.
    let spoof = h
        .write_as(
            &attacker_token,
            &write_by(&victim.client_id, TYPE, ID, &[1_000_000]),
        )
        .await;
    assert_eq!(
        status_code(&spoof),
        (403, "rejected", 40300),
        "{:?}",
        spoof.json
    );

    // Before device identity, the victim's next writes were answered 2002 and never stored.
    for seq in 2..=4 {
        let r = h
            .write_as(
                &victim_token,
                &write_by(&victim.client_id, TYPE, ID, &[seq]),
            )
            .await;
        assert_eq!(r.json["duplicate"], false, "seq {seq}: {:?}", r.json);
        assert_eq!(r.json["aggregateVersion"], seq);
    }
    assert_eq!(h.seqs_as(&victim_token, TYPE, ID).await, [1, 2, 3, 4]);
}

#[tokio::test]
async fn reads_need_a_session() {
    let h = Harness::auth(|_| {});
    let path = format!("/v1/aggregates/{TYPE}/{ID}/events");
    let r = h.get(&path).await;
    assert_eq!(status_code(&r), (401, "unauthorized", 40100));
    let r = h.get_as("forged", &path).await;
    assert_eq!(status_code(&r), (401, "unauthorized", 40101));
    let token = h.open(&Device::a()).await;
    assert_eq!(h.get_as(&token, &path).await.status, StatusCode::OK);
    // Health and the static files need none.
    assert_eq!(h.get("/healthz").await.status, StatusCode::OK);
}

/// Sends a session body and checks the refusal: status, outcome, code, and `serverTime`.
async fn refused(h: &Harness, what: &str, body: &Value, expected: (u16, &str, u64)) {
    let before = now_ms();
    let r = h.session(body, None).await;
    assert_eq!(status_code(&r), expected, "{what}: {:?}", r.json);
    let server_time = r.json["serverTime"].as_u64().unwrap_or(0);
    assert!(
        server_time >= before && server_time <= now_ms(),
        "{what}: serverTime {:?}",
        r.json
    );
    assert!(r.json.get("token").is_none(), "{what}");
}

#[tokio::test]
async fn bad_proofs_are_refused_with_their_codes_and_open_nothing() {
    let h = Harness::auth(|_| {});
    let device = Device::a();
    let now = fresh_nonce();

    let mut bad_signature = device.session_body(now);
    bad_signature["signature"] = json!(Device::b().sign(&now.to_string()));
    refused(
        &h,
        "bad signature",
        &bad_signature,
        (401, "unauthorized", 40110),
    )
    .await;
    let mut other_nonce = device.session_body(now);
    other_nonce["nonce"] = json!((now + 1).to_string());
    refused(
        &h,
        "signature of another nonce",
        &other_nonce,
        (401, "unauthorized", 40110),
    )
    .await;

    let stale = now - 3 * 60_000;
    refused(
        &h,
        "stale nonce",
        &device.session_body(stale),
        (401, "unauthorized", 40111),
    )
    .await;
    let future = now + 61_000;
    refused(
        &h,
        "future nonce",
        &device.session_body(future),
        (401, "unauthorized", 40111),
    )
    .await;

    // A nonce that failed verification was not remembered: the real proof still works once.
    let good = device.session_body(now);
    let r = h.session(&good, None).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    refused(&h, "replayed nonce", &good, (401, "unauthorized", 40112)).await;

    let rsa_1024 = Device::load("rsa-1024");
    refused(
        &h,
        "RSA-1024",
        &rsa_1024.session_body(fresh_nonce()),
        (400, "rejected", 40015),
    )
    .await;
    let mut ec = device.session_body(fresh_nonce());
    ec["publicKey"] = json!(ec_spki());
    refused(&h, "EC P-256", &ec, (400, "rejected", 40015)).await;
    for (what, key) in [
        ("garbage", json!("bm90IGEga2V5")),
        ("not base64", json!("???")),
        (
            "url-safe base64",
            json!(device.public_key.replace('+', "-").replace('/', "_")),
        ),
        ("oversized", json!("A".repeat(1_100))),
        ("empty", json!("")),
    ] {
        let mut body = device.session_body(fresh_nonce());
        body["publicKey"] = key;
        refused(&h, what, &body, (400, "rejected", 40015)).await;
    }
    // A key in non-canonical DER: the same key, another id; refused.
    let mut body = device.session_body(fresh_nonce());
    body["publicKey"] = json!(non_canonical(&device.public_key));
    refused(&h, "non-canonical DER", &body, (400, "rejected", 40015)).await;

    for nonce in [
        "",
        "abc",
        "+1764450000000",
        "0123",
        "1.5",
        "12345678901234567",
    ] {
        let mut body = device.session_body(now);
        body["nonce"] = json!(nonce);
        refused(
            &h,
            &format!("nonce {nonce:?}"),
            &body,
            (400, "rejected", 40016),
        )
        .await;
    }
    for signature in ["AAAA".to_owned(), "x".repeat(600), encode_base64(&[0; 255])] {
        let mut body = device.session_body(fresh_nonce());
        body["signature"] = json!(signature);
        refused(&h, "signature shape", &body, (400, "rejected", 40017)).await;
    }
    refused(&h, "unknown field", &json!({"publicKey": device.public_key, "nonce": "1", "signature": "x", "clientId": device.client_id}), (400, "rejected", 40001)).await;
    refused(
        &h,
        "positional",
        &json!([device.public_key, "1", "x"]),
        (400, "rejected", 40001),
    )
    .await;
    refused(
        &h,
        "body over 4 KiB",
        &json!({"publicKey": "A".repeat(5_000), "nonce": "1", "signature": "x"}),
        (413, "rejected", 41300),
    )
    .await;

    // Wrong method and content type carry serverTime too.
    let r = h.get("/v1/session").await;
    assert_eq!((r.status.as_u16(), r.code()), (405, 40500));
    assert_eq!(r.headers["allow"], "POST");
    assert!(r.json["serverTime"].as_u64().is_some());
    let r = h
        .send(
            axum::http::Request::post("/v1/session")
                .body(axum::body::Body::from("{}"))
                .unwrap(),
        )
        .await;
    assert_eq!((r.status.as_u16(), r.code()), (415, 41500));
    assert!(r.json["serverTime"].as_u64().is_some());
}

/// The P-256 key's SPKI, from the fixture's PKCS#8 PEM (the public key is embedded in it).
fn ec_spki() -> String {
    let out = std::process::Command::new("openssl")
        .args(["pkey", "-pubout", "-outform", "DER", "-in"])
        .arg(keys_dir().join("ec-p256.pem"))
        .output()
        .expect("openssl");
    assert!(out.status.success());
    encode_base64(&out.stdout)
}

/// The same SPKI with its outer SEQUENCE length in a longer (valid BER, not DER) form.
fn non_canonical(spki_b64: &str) -> String {
    let der = celeriant_sync_protocol::encoding::decode_base64(spki_b64).unwrap();
    // 30 82 01 22 ... → 30 83 00 01 22 ...
    assert_eq!(&der[..2], &[0x30, 0x82]);
    let mut ber = vec![0x30, 0x83, 0x00];
    ber.extend_from_slice(&der[2..]);
    encode_base64(&ber)
}

#[tokio::test]
async fn a_session_says_its_client_id_expiry_and_the_servers_time() {
    let h = Harness::auth(|c| c.session_ttl_secs = 600);
    let device = Device::a();
    let before = now_ms();
    let r = h.session(&device.session_body(fresh_nonce()), None).await;
    assert_eq!(r.status, StatusCode::OK);
    let keys: Vec<&String> = r.json.as_object().unwrap().keys().collect();
    assert_eq!(
        keys,
        ["clientId", "expiresAt", "principal", "serverTime", "token"],
        "sorted"
    );
    // Without app tokens the session acts for the device itself.
    assert_eq!(
        r.json["principal"].as_str().unwrap(),
        format!("device:{}", r.json["clientId"].as_str().unwrap())
    );
    assert_eq!(r.json["clientId"], device.client_id);
    assert_eq!(
        r.json["principal"],
        format!("device:{}", device.client_id),
        "without app tokens, the device is the principal"
    );
    let server_time = r.json["serverTime"].as_u64().unwrap();
    assert!(server_time >= before);
    let expires = r.json["expiresAt"].as_u64().unwrap();
    assert!(
        expires > server_time + 598_000 && expires <= server_time + 600_000,
        "{expires}"
    );
    // The id is Celeriant's derivation: u128::from_le_bytes(SHA-256(SPKI DER)[..16]).
    use rsa::sha2::Digest as _;
    let der = celeriant_sync_protocol::encoding::decode_base64(&device.public_key).unwrap();
    let hash = rsa::sha2::Sha256::digest(&der);
    let id = u128::from_le_bytes(hash[..16].try_into().unwrap());
    assert_eq!(uuid::Uuid::from_u128(id).to_string(), device.client_id);
}
