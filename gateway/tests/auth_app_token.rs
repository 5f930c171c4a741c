//! The app's own token at `POST /v1/session`: HS256, RS256 and ES256 tokens accepted, expired
//! and forged ones refused, the subject's per-type access list (`celeriant_types`) carried into
//! the session and enforced on writes and reads.

mod support;

use std::path::PathBuf;

use axum::http::StatusCode;
use celeriant_gateway::config::AppTokenAlg;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use support::app::*;
use support::device::*;

const HS_SECRET: &str = "an app secret of at least thirty-two bytes";
const OTHER_TYPE: &str = "0d6c7b1a-2b55-4f0e-8a7d-6c4e9b3a0999";

fn now_s() -> u64 {
    jsonwebtoken::get_current_timestamp()
}

fn harness(alg: AppTokenAlg, key_file: PathBuf) -> (Harness, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let h = Harness::auth(|c| {
        c.app_token_alg = Some(alg);
        c.app_token_key_file = Some(key_file);
        c.app_token_issuer = Some(ISSUER.into());
        c.app_token_audience = Some(AUDIENCE.into());
    });
    (h, dir)
}

fn hs_harness() -> (Harness, tempfile::TempDir) {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("app-secret");
    std::fs::write(&file, format!("{HS_SECRET}\n")).unwrap();
    let (h, _) = harness(AppTokenAlg::Hs256, file);
    (h, dir)
}

/// The issuer and audience every app token must name (the gateway refuses to start without).
const ISSUER: &str = "https://sign-in.example";
const AUDIENCE: &str = "celeriant-sync-tests";

/// Signs `claims`, adding this app's `iss` and `aud` unless the claims set them (`null`: left
/// out).
fn sign(alg: Algorithm, key: &EncodingKey, claims: &Value) -> String {
    let mut claims = claims.clone();
    let map = claims.as_object_mut().unwrap();
    for (name, value) in [("iss", ISSUER), ("aud", AUDIENCE)] {
        match map.get(name) {
            None => {
                map.insert(name.into(), value.into());
            }
            Some(Value::Null) => {
                map.remove(name);
            }
            Some(_) => {}
        }
    }
    jsonwebtoken::encode(&Header::new(alg), &claims, key).unwrap()
}

fn hs(claims: &Value) -> String {
    sign(
        Algorithm::HS256,
        &EncodingKey::from_secret(HS_SECRET.as_bytes()),
        claims,
    )
}

fn pem(name: &str) -> Vec<u8> {
    std::fs::read(keys_dir().join(name)).unwrap()
}

async fn open_with(h: &Harness, app_token: Option<&str>) -> Reply {
    h.session(&Device::a().session_body(fresh_nonce()), app_token)
        .await
}

#[tokio::test]
async fn hs256_tokens_are_required_checked_and_honour_exp() {
    let (h, _dir) = hs_harness();
    let r = open_with(&h, None).await;
    assert_eq!(
        (r.status.as_u16(), r.outcome(), r.code()),
        (401, "unauthorized", 40120),
        "{:?}",
        r.json
    );
    assert!(r.json["serverTime"].as_u64().is_some());

    let ok = hs(&json!({"sub": "user-1", "exp": now_s() + 300}));
    let r = open_with(&h, Some(&ok)).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    // The session never outlives the app token.
    let expires = r.json["expiresAt"].as_u64().unwrap();
    assert!(expires <= (now_s() + 300) * 1000, "{expires}");

    let expired = hs(&json!({"sub": "user-1", "exp": now_s() - 5}));
    let r = open_with(&h, Some(&expired)).await;
    assert_eq!((r.status.as_u16(), r.code()), (401, 40122), "{:?}", r.json);

    let forged = sign(
        Algorithm::HS256,
        &EncodingKey::from_secret(b"another secret, also long enough to sign"),
        &json!({"sub": "user-1", "exp": now_s() + 300}),
    );
    let no_sub = hs(&json!({"exp": now_s() + 300}));
    let no_exp = hs(&json!({"sub": "user-1"}));
    let not_yet = hs(&json!({"sub": "user-1", "exp": now_s() + 300, "nbf": now_s() + 100}));
    let bad_types =
        hs(&json!({"sub": "user-1", "exp": now_s() + 300, "celeriant_types": ["nope"]}));
    // An RS256 token where HS256 is configured (no algorithm confusion).
    let rs = sign(
        Algorithm::RS256,
        &EncodingKey::from_rsa_pem(&pem("app-rs256.pem")).unwrap(),
        &json!({"sub": "user-1", "exp": now_s() + 300}),
    );
    let exp = now_s() + 300;
    let other_issuer = hs(&json!({"sub": "user-1", "exp": exp, "iss": "https://evil.example"}));
    let no_issuer = hs(&json!({"sub": "user-1", "exp": exp, "iss": null}));
    let other_audience = hs(&json!({"sub": "user-1", "exp": exp, "aud": "another-service"}));
    let no_audience = hs(&json!({"sub": "user-1", "exp": exp, "aud": null}));
    for (what, token) in [
        ("another issuer", other_issuer),
        ("no issuer", no_issuer),
        ("minted for another service", other_audience),
        ("no audience", no_audience),
        ("forged", forged),
        ("no sub", no_sub),
        ("no exp", no_exp),
        ("not yet valid", not_yet),
        ("malformed types claim", bad_types),
        ("other algorithm", rs),
        ("garbage", "x.y.z".into()),
    ] {
        let r = open_with(&h, Some(&token)).await;
        assert_eq!(
            (r.status.as_u16(), r.outcome(), r.code()),
            (401, "unauthorized", 40121),
            "{what}: {:?}",
            r.json
        );
    }
}

#[tokio::test]
async fn rs256_and_es256_tokens_verify_with_the_public_key() {
    for (alg, jwt_alg, private, public) in [
        (
            AppTokenAlg::Rs256,
            Algorithm::RS256,
            "app-rs256.pem",
            "app-rs256.pub.pem",
        ),
        (
            AppTokenAlg::Es256,
            Algorithm::ES256,
            "app-es256.pem",
            "app-es256.pub.pem",
        ),
    ] {
        let (h, _dir) = harness(alg, keys_dir().join(public));
        let key = match jwt_alg {
            Algorithm::RS256 => EncodingKey::from_rsa_pem(&pem(private)).unwrap(),
            _ => EncodingKey::from_ec_pem(&pem(private)).unwrap(),
        };
        let ok = sign(
            jwt_alg,
            &key,
            &json!({"sub": "user-2", "exp": now_s() + 300}),
        );
        let r = open_with(&h, Some(&ok)).await;
        assert_eq!(r.status, StatusCode::OK, "{alg:?}: {:?}", r.json);
        let expired = sign(jwt_alg, &key, &json!({"sub": "user-2", "exp": now_s() - 5}));
        assert_eq!(open_with(&h, Some(&expired)).await.code(), 40122, "{alg:?}");
        // Signed by someone else's key of the same kind.
        let other = match jwt_alg {
            Algorithm::RS256 => EncodingKey::from_rsa_pem(&pem("device-b.pem")).unwrap(),
            _ => EncodingKey::from_ec_pem(&pem("ec-p256.pem")).unwrap(),
        };
        let forged = sign(
            jwt_alg,
            &other,
            &json!({"sub": "user-2", "exp": now_s() + 300}),
        );
        assert_eq!(open_with(&h, Some(&forged)).await.code(), 40121, "{alg:?}");
        let hs = hs(&json!({"sub": "user-2", "exp": now_s() + 300}));
        assert_eq!(
            open_with(&h, Some(&hs)).await.code(),
            40121,
            "{alg:?}: HS256 refused"
        );
    }
}

#[tokio::test]
async fn the_types_claim_limits_writes_and_reads_to_those_types() {
    let (h, _dir) = hs_harness();
    let device = Device::a();
    let app = hs(&json!({"sub": "user-3", "exp": now_s() + 300, "celeriant_types": [TYPE]}));
    let r = open_with(&h, Some(&app)).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    let token = r.json["token"].as_str().unwrap().to_owned();

    let allowed = h
        .write_as(&token, &write_by(&device.client_id, TYPE, ID, &[1]))
        .await;
    assert_eq!(allowed.outcome(), "landed", "{:?}", allowed.json);
    let outside = h
        .write_as(&token, &write_by(&device.client_id, OTHER_TYPE, ID, &[1]))
        .await;
    assert_eq!(
        (outside.status.as_u16(), outside.outcome(), outside.code()),
        (403, "rejected", 40301)
    );
    // One forbidden aggregate refuses the whole request.
    let mut both = write_by(
        &device.client_id,
        TYPE,
        "3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e0777",
        &[1],
    );
    let second = write_by(&device.client_id, OTHER_TYPE, ID, &[1])["writes"][0].clone();
    both["writes"].as_array_mut().unwrap().push(second);
    assert_eq!(h.write_as(&token, &both).await.code(), 40301);

    assert_eq!(h.seqs_as(&token, TYPE, ID).await, [1]);
    let read = h
        .get_as(&token, &format!("/v1/aggregates/{OTHER_TYPE}/{ID}/events"))
        .await;
    assert_eq!((read.status.as_u16(), read.code()), (403, 40301));
    // Nothing was written outside: an unrestricted session sees the other type empty.
    let all = hs(&json!({"sub": "admin", "exp": now_s() + 300}));
    let r = h
        .session(&Device::b().session_body(fresh_nonce()), Some(&all))
        .await;
    let admin = r.json["token"].as_str().unwrap().to_owned();
    assert!(h.seqs_as(&admin, OTHER_TYPE, ID).await.is_empty());
    assert!(
        h.seqs_as(&admin, TYPE, "3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e0777")
            .await
            .is_empty()
    );

    // An empty list allows nothing.
    let none = hs(&json!({"sub": "nobody", "exp": now_s() + 300, "celeriant_types": []}));
    let r = h
        .session(&Device::b().session_body(fresh_nonce()), Some(&none))
        .await;
    let nothing = r.json["token"].as_str().unwrap().to_owned();
    let read = h
        .get_as(&nothing, &format!("/v1/aggregates/{TYPE}/{ID}/events"))
        .await;
    assert_eq!(read.code(), 40301);
}

#[tokio::test]
async fn one_users_token_opens_a_bounded_number_of_devices_and_sessions() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("app-secret");
    std::fs::write(&file, HS_SECRET).unwrap();
    let h = Harness::auth(|c| {
        c.app_token_alg = Some(AppTokenAlg::Hs256);
        c.app_token_key_file = Some(file);
        c.app_token_issuer = Some(ISSUER.into());
        c.app_token_audience = Some(AUDIENCE.into());
        c.max_devices_per_subject = 1;
        c.max_sessions_per_subject = 2;
    });
    let token = |sub: &str| hs(&json!({"sub": sub, "exp": now_s() + 300}));
    let alice = token("alice");
    let open = |device: Device, app: String| {
        let h = &h;
        async move {
            h.session(&device.session_body(fresh_nonce()), Some(&app))
                .await
        }
    };
    let r = open(Device::a(), alice.clone()).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(r.json["principal"], "user:alice");
    // A second device under the same user is refused while the first holds a live session.
    let r = open(Device::b(), alice.clone()).await;
    assert_eq!(
        (r.status.as_u16(), r.outcome(), r.code()),
        (429, "retry", 42902),
        "{:?}",
        r.json
    );
    assert!(
        r.json["retryAfterMs"].as_u64().unwrap() > 200_000,
        "{:?}",
        r.json
    );
    // Another user's device is not affected; the held device renews past the session cap (a
    // thief with the token cannot lock it out), and the second device is still refused.
    let r = open(Device::b(), token("bob")).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    assert_eq!(r.json["principal"], "user:bob");
    assert_eq!(
        open(Device::a(), alice.clone()).await.status,
        StatusCode::OK
    );
    for _ in 0..3 {
        assert_eq!(
            open(Device::a(), alice.clone()).await.status,
            StatusCode::OK
        );
    }
    assert_eq!(open(Device::b(), alice).await.code(), 42902);
}
