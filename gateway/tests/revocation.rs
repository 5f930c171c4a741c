//! Revocation (`/v1/revocations`) against real gateway processes: revoking a device refuses its
//! existing tokens and its new sessions (40103) and leaves other devices alone; revoking a
//! principal refuses every device of that app user; revocations survive a restart; only the
//! operator may revoke; lifting lets new sessions in while old tokens stay dead; one token can be
//! revoked by its `jti`; the cap refuses rather than evicts. Plus two gateways over one store
//! (in process): a revocation made through one is in force on the other within
//! `--revocation-refresh-secs`. The Celeriant backend's revocations: `revocation_celeriant.rs`.

mod support;

use std::sync::Arc;
use std::time::{Duration, Instant};

use axum::body::Body;
use axum::http::Request;
use celeriant_gateway::backend::embedded::{EmbeddedOptions, EmbeddedStore};
use celeriant_gateway::config::Config;
use celeriant_gateway::{AppState, app};
use http_body_util::BodyExt;
use jsonwebtoken::{Algorithm, EncodingKey, Header};
use serde_json::{Value, json};
use support::app::{TYPE, write_by};
use support::device::{Device, fresh_nonce};
use support::process::{Answer, Process, data_dir, get, post, with_authorization};
use tower::ServiceExt;

const OPERATOR: &str = "operator-secret-of-at-least-thirty-two-characters";
const APP_SECRET: &str = "an app secret of at least thirty-two bytes";
const ID_A: &str = "5c2a0b1e-7d3f-4e6a-9b8c-1d2e3f4a5b01";
const ID_B: &str = "5c2a0b1e-7d3f-4e6a-9b8c-1d2e3f4a5b02";

fn operator_file(dir: &std::path::Path) -> String {
    let path = dir.join("operator");
    std::fs::write(&path, format!("{OPERATOR}\n")).unwrap();
    path.to_str().unwrap().to_owned()
}

fn op(base: &str, method: &str, path: &str, body: Option<&Value>) -> Answer {
    let auth = format!("Operator {OPERATOR}");
    with_authorization(method, base, path, Some(&auth), body)
}

fn open(base: &str, device: &Device, app_token: Option<&str>) -> Answer {
    match app_token {
        None => post(
            base,
            "/v1/session",
            None,
            &device.session_body(fresh_nonce()),
        ),
        Some(t) => with_authorization(
            "POST",
            base,
            "/v1/session",
            Some(&format!("Bearer {t}")),
            Some(&device.session_body(fresh_nonce())),
        ),
    }
}

fn session(base: &str, device: &Device, app_token: Option<&str>) -> String {
    let r = open(base, device, app_token);
    assert_eq!(r.status, 200, "{:?}", r.json);
    r.json["token"].as_str().unwrap().to_owned()
}

/// A write of `seq` to `id` by `device`: (status, code or 0, outcome).
fn write(base: &str, token: &str, device: &Device, id: &str, seq: u64) -> (u16, u64, String) {
    let r = post(
        base,
        "/v1/write",
        Some(token),
        &write_by(&device.client_id, TYPE, id, &[seq]),
    );
    let outcome = r.json["outcome"].as_str().unwrap_or("").to_owned();
    (r.status, r.code(), outcome)
}

fn read(base: &str, token: &str, id: &str) -> (u16, u64) {
    let r = get(
        base,
        &format!("/v1/aggregates/{TYPE}/{id}/events"),
        Some(token),
    );
    (r.status, r.code())
}

const REVOKED: (u16, u64) = (401, 40103);

fn revoke(base: &str, kind: &str, id: &str) -> Answer {
    op(
        base,
        "POST",
        "/v1/revocations",
        Some(&json!({"kind": kind, "id": id})),
    )
}

#[test]
fn a_revoked_device_is_refused_until_lifted_others_are_not_and_it_survives_a_restart() {
    let dir = data_dir();
    let opf = operator_file(dir.path());
    let args = [
        "--session-rate-per-minute",
        "0",
        "--operator-token-file",
        &opf,
    ];
    let mut gw = Process::start(dir.path(), &args);
    let (a, b) = (Device::a(), Device::b());
    let (ta, tb) = (session(&gw.base, &a, None), session(&gw.base, &b, None));
    assert_eq!(write(&gw.base, &ta, &a, ID_A, 1).2, "landed");
    assert_eq!(write(&gw.base, &tb, &b, ID_B, 1).2, "landed");

    // Only the operator: a device's session, no credential, a wrong secret.
    let body = json!({"kind": "device", "id": a.client_id});
    let path = "/v1/revocations";
    let r = with_authorization(
        "POST",
        &gw.base,
        path,
        Some(&format!("Bearer {tb}")),
        Some(&body),
    );
    assert_eq!((r.status, r.code()), (403, 40305), "{:?}", r.json);
    let r = with_authorization("POST", &gw.base, path, None, Some(&body));
    assert_eq!((r.status, r.code()), (403, 40305));
    let r = with_authorization(
        "POST",
        &gw.base,
        path,
        Some("Operator wrong-secret-of-at-least-thirty-two-characters"),
        Some(&body),
    );
    assert_eq!((r.status, r.code()), (401, 40101));
    let r = with_authorization("GET", &gw.base, path, Some(&format!("Bearer {ta}")), None);
    assert_eq!((r.status, r.code()), (403, 40305));
    assert_eq!(
        write(&gw.base, &ta, &a, ID_A, 2).2,
        "landed",
        "nothing was revoked"
    );

    // Strict bodies.
    for bad in [
        json!({"kind": "device", "id": "not-a-uuid"}),
        json!({"kind": "device", "id": a.client_id.to_uppercase()}),
        json!({"kind": "principal", "id": "alice"}),
        json!({"kind": "device", "id": a.client_id, "extra": 1}),
        json!({"kind": "everyone", "id": "x"}),
    ] {
        let r = op(&gw.base, "POST", path, Some(&bad));
        assert_eq!((r.status, r.code()), (400, 40001), "{bad}: {:?}", r.json);
    }

    // Revoke A: its token, and its new sessions, are refused at once on this gateway.
    let r = revoke(&gw.base, "device", &a.client_id);
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(r.json["kind"], "device");
    assert_eq!(r.json["id"], a.client_id.as_str());
    assert!(r.json["revokedAt"].as_u64().unwrap() > 0);
    let w = write(&gw.base, &ta, &a, ID_A, 3);
    assert_eq!((w.0, w.1, w.2.as_str()), (401, 40103, "unauthorized"));
    assert_eq!(read(&gw.base, &ta, ID_A), REVOKED);
    let r = open(&gw.base, &a, None);
    assert_eq!((r.status, r.code()), REVOKED, "{:?}", r.json);
    // B is not touched.
    assert_eq!(write(&gw.base, &tb, &b, ID_B, 2).2, "landed");
    assert_eq!(read(&gw.base, &tb, ID_B).0, 200);
    let _ = session(&gw.base, &b, None);

    let listed = op(&gw.base, "GET", path, None);
    assert_eq!(listed.status, 200);
    assert_eq!(listed.json["revocations"].as_array().unwrap().len(), 1);
    assert_eq!(listed.json["max"], 10_000);
    assert_eq!(listed.json["refreshSecs"], 5);

    // A restart keeps it.
    gw.stop();
    let gw = Process::start(dir.path(), &args);
    assert_eq!(read(&gw.base, &ta, ID_A), REVOKED);
    assert_eq!(write(&gw.base, &ta, &a, ID_A, 3).1, 40103);
    assert_eq!((open(&gw.base, &a, None).code()), 40103);
    assert_eq!(
        write(&gw.base, &tb, &b, ID_B, 3).2,
        "landed",
        "B's token still works"
    );

    // Lift: new sessions again, the old token stays refused; A's next write lands.
    let r = op(&gw.base, "POST", "/v1/revocations/lift", Some(&body));
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert!(r.json["liftedAt"].as_u64().is_some(), "{:?}", r.json);
    assert!(r.json["forgetAt"].as_u64().unwrap() > r.json["revokedAt"].as_u64().unwrap() + 3600);
    assert_eq!(read(&gw.base, &ta, ID_A), REVOKED);
    // A session opened in the second of the revocation is refused like every token issued up
    // to it; the lift came at least a second after, as an operator's would.
    let fresh = loop {
        let t = session(&gw.base, &a, None);
        if read(&gw.base, &t, ID_A).0 == 200 {
            break t;
        }
        std::thread::sleep(Duration::from_millis(200));
    };
    assert_eq!(write(&gw.base, &fresh, &a, ID_A, 3).2, "landed");
    // Lifting what is not revoked is a 404.
    let none = json!({"kind": "device", "id": b.client_id});
    let r = op(&gw.base, "POST", "/v1/revocations/lift", Some(&none));
    assert_eq!((r.status, r.code()), (404, 40400));
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

#[test]
fn revoking_a_user_refuses_every_one_of_its_devices_and_no_one_else() {
    let dir = data_dir();
    let opf = operator_file(dir.path());
    let secret = dir.path().join("app-secret");
    std::fs::write(&secret, APP_SECRET).unwrap();
    let gw = Process::start(
        dir.path(),
        &[
            "--session-rate-per-minute",
            "0",
            "--operator-token-file",
            &opf,
            "--app-token-alg",
            "hs256",
            "--app-token-key-file",
            secret.to_str().unwrap(),
            "--app-token-issuer",
            "https://sign-in.example",
            "--app-token-audience",
            "celeriant-sync-tests",
        ],
    );
    let (a, b) = (Device::a(), Device::b());
    let alice = app_token("alice");
    let (ta, tb) = (
        session(&gw.base, &a, Some(&alice)),
        session(&gw.base, &b, Some(&alice)),
    );
    assert_eq!(write(&gw.base, &ta, &a, ID_A, 1).2, "landed");
    assert_eq!(read(&gw.base, &tb, ID_A).0, 200, "alice's devices share");
    let r = revoke(&gw.base, "principal", "user:alice");
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(read(&gw.base, &ta, ID_A), REVOKED);
    assert_eq!(read(&gw.base, &tb, ID_A), REVOKED);
    assert_eq!(write(&gw.base, &tb, &b, ID_B, 1).1, 40103);
    assert_eq!(open(&gw.base, &a, Some(&alice)).code(), 40103);
    assert_eq!(open(&gw.base, &b, Some(&alice)).code(), 40103);
    // Bob, on one of alice's former devices, is not alice.
    let bob = session(&gw.base, &b, Some(&app_token("bob")));
    assert_eq!(write(&gw.base, &bob, &b, ID_B, 1).2, "landed");
    assert_eq!(read(&gw.base, &bob, ID_B).0, 200);
    // `principal device:<id>` names the device even though its tokens act for `user:bob`.
    let r = revoke(&gw.base, "principal", &format!("device:{}", b.client_id));
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(r.json["kind"], "device", "{:?}", r.json);
    assert_eq!(read(&gw.base, &bob, ID_B), REVOKED);
    assert_eq!(open(&gw.base, &b, Some(&app_token("bob"))).code(), 40103);
}

fn jti_of(token: &str) -> String {
    // The payload is unpadded base64url; the protocol's decoder takes padded standard base64.
    let mut payload = token
        .split('.')
        .nth(1)
        .unwrap()
        .replace('-', "+")
        .replace('_', "/");
    while payload.len() % 4 != 0 {
        payload.push('=');
    }
    let bytes = celeriant_sync_protocol::encoding::decode_base64(&payload).unwrap();
    let claims: Value = serde_json::from_slice(&bytes).unwrap();
    claims["jti"].as_str().expect("a jti").to_owned()
}

#[test]
fn one_token_can_be_revoked_and_the_cap_refuses_rather_than_evicts() {
    let dir = data_dir();
    let opf = operator_file(dir.path());
    let gw = Process::start(
        dir.path(),
        &[
            "--session-rate-per-minute",
            "0",
            "--operator-token-file",
            &opf,
            "--max-revocations",
            "2",
        ],
    );
    let (a, b) = (Device::a(), Device::b());
    let (t1, t2) = (session(&gw.base, &a, None), session(&gw.base, &a, None));
    let (j1, j2) = (jti_of(&t1), jti_of(&t2));
    assert_ne!(j1, j2, "every token has its own id");
    assert_eq!(revoke(&gw.base, "session", &j1).status, 200);
    assert_eq!(read(&gw.base, &t1, ID_A), REVOKED);
    assert_eq!(read(&gw.base, &t2, ID_A).0, 200, "the other token of A");
    let _ = session(&gw.base, &a, None);
    // Two kept; a third is refused, and the first two still hold.
    assert_eq!(
        revoke(
            &gw.base,
            "principal",
            "device:00000000-0000-4000-8000-000000000001"
        )
        .status,
        200
    );
    let r = revoke(&gw.base, "device", &b.client_id);
    assert_eq!((r.status, r.code()), (400, 40022), "{:?}", r.json);
    let tb = session(&gw.base, &b, None);
    assert_eq!(
        read(&gw.base, &tb, ID_B).0,
        200,
        "nothing about B was stored"
    );
    assert_eq!(read(&gw.base, &t1, ID_A), REVOKED);
    // Revoking again what is revoked is not a new record.
    assert_eq!(revoke(&gw.base, "session", &j1).status, 200);
    // Lifting a token's revocation removes it: room again.
    let r = op(
        &gw.base,
        "POST",
        "/v1/revocations/lift",
        Some(&json!({"kind": "session", "id": j1})),
    );
    assert_eq!(r.json["removed"], true, "{:?}", r.json);
    assert_eq!(read(&gw.base, &t1, ID_A).0, 200);
    assert_eq!(revoke(&gw.base, "device", &b.client_id).status, 200);
    assert_eq!(read(&gw.base, &tb, ID_B), REVOKED);
}

async fn call(router: &axum::Router, request: Request<Body>) -> (u16, Value) {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status().as_u16();
    let bytes = response.into_body().collect().await.unwrap().to_bytes();
    (
        status,
        serde_json::from_slice(&bytes).unwrap_or(Value::Null),
    )
}

/// Two gateways sharing one store (and one session secret), as replicas do: a revocation made
/// through one is in force on the other within `--revocation-refresh-secs` (1 here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn another_replica_applies_a_revocation_within_the_refresh_time() {
    let dir = tempfile::tempdir().unwrap();
    let opf = operator_file(dir.path());
    let store: Arc<EmbeddedStore> =
        Arc::new(EmbeddedStore::open(&dir.path().join("db"), EmbeddedOptions::default()).unwrap());
    let replica = |_: u8| {
        let mut c = Config::defaults();
        c.data_dir = dir.path().join("db");
        c.session_rate_per_minute = 0;
        c.session_secret = Some("a shared session secret of at least 32 bytes".into());
        c.operator_token_file = Some(opf.clone().into());
        c.revocation_refresh_secs = 1;
        app(AppState::new(c, store.clone()).unwrap())
    };
    let (one, two) = (replica(1), replica(2));
    let a = Device::a();
    let session = Request::post("/v1/session")
        .header("content-type", "application/json")
        .body(Body::from(a.session_body(fresh_nonce()).to_string()))
        .unwrap();
    let (status, opened) = call(&one, session).await;
    assert_eq!(status, 200, "{opened}");
    let token = opened["token"].as_str().unwrap().to_owned();
    let read_on = |router: &axum::Router| {
        let target = format!("/v1/aggregates/{TYPE}/{ID_A}/events");
        // A fresh proof for every request, as proofs are required by default.
        let proof = a.proof("GET", &target, &token, b"");
        let request = Request::get(target)
            .header("authorization", format!("Bearer {token}"))
            .header("dpop", proof)
            .body(Body::empty())
            .unwrap();
        let router = router.clone();
        async move { call(&router, request).await }
    };
    assert_eq!(
        read_on(&two).await.0,
        200,
        "replica two accepts one's token"
    );
    let revoke = Request::post("/v1/revocations")
        .header("content-type", "application/json")
        .header("authorization", format!("Operator {OPERATOR}"))
        .body(Body::from(
            json!({"kind": "device", "id": a.client_id}).to_string(),
        ))
        .unwrap();
    let (status, body) = call(&one, revoke).await;
    assert_eq!(status, 200, "{body}");
    let revoked_at = Instant::now();
    assert_eq!(
        read_on(&one).await.1["code"],
        40103,
        "at once where it was made"
    );
    loop {
        let (status, body) = read_on(&two).await;
        if status == 401 {
            assert_eq!(body["code"], 40103);
            break;
        }
        assert!(
            revoked_at.elapsed() < Duration::from_millis(2_500),
            "replica two still accepts the token after {:?}",
            revoked_at.elapsed()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A change stream opened before the revocation: once revoked, it delivers nothing more (a
/// write by another device to the watched aggregate is not notified to it, while a stream of
/// that other device hears it); a new stream with the token is refused 401/40103.
#[test]
fn an_open_change_stream_of_a_revoked_device_hears_nothing_more() {
    use support::sse;
    let dir = data_dir();
    let opf = operator_file(dir.path());
    // Every type `authenticated`, so that B may write A's aggregate after A is revoked.
    let policy = dir.path().join("policy.toml");
    std::fs::write(&policy, "default = \"authenticated\"\n").unwrap();
    let gw = Process::start(
        dir.path(),
        &[
            "--session-rate-per-minute",
            "0",
            "--operator-token-file",
            &opf,
            "--policy",
            policy.to_str().unwrap(),
            "--watch-heartbeat-secs",
            "1",
        ],
    );
    let (a, b) = (Device::a(), Device::b());
    let (ta, tb) = (session(&gw.base, &a, None), session(&gw.base, &b, None));
    let body = json!({"aggregates": [{"typeId": TYPE, "id": ID_A}]});
    let wait = Duration::from_secs(10);
    let mut s = sse::open(&gw.addr, "POST", "/v1/watch", Some(&ta), Some(&body));
    assert_eq!(s.status, 200, "{}", s.body);
    assert_eq!(s.expect(wait).event, "ready");
    let mut sb = sse::open(&gw.addr, "POST", "/v1/watch", Some(&tb), Some(&body));
    assert_eq!(sb.expect(wait).event, "ready");
    assert_eq!(write(&gw.base, &ta, &a, ID_A, 1).2, "landed");
    assert_eq!(
        s.expect(wait).data["version"],
        1,
        "heard before the revocation"
    );
    assert_eq!(sb.expect(wait).data["version"], 1);

    assert_eq!(revoke(&gw.base, "device", &a.client_id).status, 200);
    assert_eq!(write(&gw.base, &tb, &b, ID_A, 1).2, "landed");
    assert_eq!(sb.expect(wait).data["version"], 2, "B's stream hears it");
    // A's stream ends at its next wake (this notification, or at the latest the next
    // heartbeat, 1 s here) rather than holding its slots until the token expires.
    match s.next(Duration::from_millis(2500)) {
        sse::Next::Closed => {}
        other => panic!("A's revoked stream is still open: {other:?}"),
    }
    let again = sse::open(&gw.addr, "POST", "/v1/watch", Some(&ta), Some(&body));
    assert_eq!(again.status, 401);
    assert_eq!(again.json()["code"], 40103);
}
