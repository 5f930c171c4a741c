//! Shared helpers for the gateway's HTTP tests: an app over a fresh embedded store, and a way to
//! send one request through it without a socket.
//!
//! [`Harness::new`] and [`Harness::with`] run with `--auth none`: the tests built on them are
//! about write and read semantics, which do not depend on who writes. [`Harness::auth`] runs
//! with device identity on (the gateway's default), with helpers to open sessions and send
//! tokens; the auth tests use it.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use celeriant_gateway::auth::faults_secret::HEADER as FAULTS_SECRET_HEADER;
use celeriant_gateway::backend::AggregateKey;
use celeriant_gateway::backend::celeriant::{CeleriantBackend, CeleriantOptions};
use celeriant_gateway::backend::embedded::{EmbeddedOptions, EmbeddedStore};
use celeriant_gateway::config::{AuthMode, BackendKind, Config};
use celeriant_gateway::{AppState, app};
use celeriant_msg::process_client_requests::ClientRequest;
use celeriant_sync_protocol::AggregateRef;
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;
use uuid::Uuid;

use super::device::{Device, fresh_nonce};
use super::fake_celeriant::FakeCeleriant;

/// A router over a fresh embedded store (the tempdir lives as long as the harness), or over the
/// Celeriant backend and a fake node ([`Harness::auth_on`]).
pub struct Harness {
    pub router: Router,
    pub state: AppState,
    /// The fake node behind a Celeriant-backed harness.
    pub fake: Option<Arc<FakeCeleriant>>,
    _dir: tempfile::TempDir,
}

/// Which store a harness runs over.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Store {
    /// A fresh embedded store.
    Embedded,
    /// The Celeriant backend over a fresh fake node.
    Celeriant,
}

/// Both stores, for tests that must hold on each.
pub const STORES: [Store; 2] = [Store::Embedded, Store::Celeriant];

impl Harness {
    pub fn new() -> Self {
        Self::with(|_| {}, EmbeddedOptions::default())
    }

    pub fn with(configure: impl FnOnce(&mut Config), options: EmbeddedOptions) -> Self {
        Self::build(
            |c| {
                c.auth = AuthMode::None;
                configure(c)
            },
            options,
        )
    }

    /// Device identity on (the default), no session rate limit unless `configure` sets one.
    pub fn auth(configure: impl FnOnce(&mut Config)) -> Self {
        Self::build(
            |c| {
                c.session_rate_per_minute = 0;
                configure(c)
            },
            EmbeddedOptions::default(),
        )
    }

    /// Device identity on (the default) with `options` for the store.
    pub fn with_options(configure: impl FnOnce(&mut Config), options: EmbeddedOptions) -> Self {
        Self::build(configure, options)
    }

    fn build(configure: impl FnOnce(&mut Config), options: EmbeddedOptions) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::defaults();
        config.data_dir = dir.path().to_owned();
        configure(&mut config);
        let store = EmbeddedStore::open(&config.data_dir, options).unwrap();
        let state = AppState::new(config, Arc::new(store)).unwrap();
        Harness {
            router: app(state.clone()),
            state,
            fake: None,
            _dir: dir,
        }
    }

    /// Device identity on (as [`Harness::auth`]) over `store`; over a fresh fake node for
    /// [`Store::Celeriant`].
    pub async fn auth_on(store: Store, configure: impl FnOnce(&mut Config)) -> Self {
        match store {
            Store::Embedded => Self::auth(configure),
            Store::Celeriant => Self::celeriant(Arc::new(FakeCeleriant::start()), configure).await,
        }
    }

    /// Device identity on, over the Celeriant backend and `fake` (shared by harnesses that
    /// play replicas of one gateway), with the members TTL of `configure`'s config.
    pub async fn celeriant(fake: Arc<FakeCeleriant>, configure: impl FnOnce(&mut Config)) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::defaults();
        config.data_dir = dir.path().to_owned();
        config.session_rate_per_minute = 0;
        config.backend = BackendKind::Celeriant;
        config.celeriant_addrs = vec![fake.address()];
        // The revocations are loaded once at start (waited for below); a periodic reload
        // would send requests between a test's scripted replies.
        config.revocation_refresh_secs = 3600;
        configure(&mut config);
        let watches_before = watches(&fake);
        let backend = CeleriantBackend::connect(CeleriantOptions {
            addresses: config.celeriant_addrs.clone(),
            api_key: None,
            request_timeout: Duration::from_secs(5),
        })
        .await
        .unwrap()
        .with_watch(Some(config.org_id), Duration::from_secs(300))
        .with_org(config.org_id)
        .with_members_ttl(Duration::from_millis(config.members_cache_ms));
        let state = AppState::new(config, Arc::new(backend)).unwrap();
        state
            .auth
            .revocations
            .wait_loaded(Duration::from_secs(5))
            .await;
        settle(&fake, watches_before).await;
        Harness {
            router: app(state.clone()),
            state,
            fake: Some(fake),
            _dir: dir,
        }
    }

    /// Sends one request; the body is parsed as JSON when there is one. A request to
    /// `/v1/faults*` without the faults secret header gets the gateway's secret, and a request
    /// with a bearer token of a loaded device and no `DPoP` header gets a proof signed by that
    /// device (use [`Harness::send_as_is`] to send it without either).
    pub async fn send(&self, request: Request<Body>) -> Reply {
        let mut request = with_proof(request).await;
        if request.uri().path().starts_with("/v1/faults")
            && let Some(secret) = &self.state.faults_secret
            && !request.headers().contains_key(FAULTS_SECRET_HEADER)
        {
            request
                .headers_mut()
                .insert(FAULTS_SECRET_HEADER, secret.expose().parse().unwrap());
        }
        self.send_as_is(request).await
    }

    /// Sends one request exactly as given.
    pub async fn send_as_is(&self, request: Request<Body>) -> Reply {
        let response = self.router.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let headers = response.headers().clone();
        let body = response.into_body().collect().await.map(|b| b.to_bytes());
        match body {
            Ok(bytes) => Reply {
                status,
                headers,
                json: serde_json::from_slice(&bytes).unwrap_or(Value::Null),
                broken: false,
            },
            Err(_) => Reply {
                status,
                headers,
                json: Value::Null,
                broken: true,
            },
        }
    }

    pub async fn post_json(&self, path: &str, body: &Value) -> Reply {
        self.post_raw(path, serde_json::to_vec(body).unwrap()).await
    }

    pub async fn post_raw(&self, path: &str, body: Vec<u8>) -> Reply {
        let request = Request::builder()
            .method(Method::POST)
            .uri(path)
            .header("content-type", "application/json")
            // As every real client sends it for a body it holds whole.
            .header("content-length", body.len())
            .body(Body::from(body))
            .unwrap();
        self.send(request).await
    }

    pub async fn get(&self, path: &str) -> Reply {
        self.send(Request::get(path).body(Body::empty()).unwrap())
            .await
    }

    pub async fn write(&self, body: &Value) -> Reply {
        self.post_json("/v1/write", body).await
    }

    /// `POST /v1/session` with `body` and, when given, the app token.
    pub async fn session(&self, body: &Value, app_token: Option<&str>) -> Reply {
        let mut request = Request::builder()
            .method(Method::POST)
            .uri("/v1/session")
            .header("content-type", "application/json");
        if let Some(token) = app_token {
            request = request.header("authorization", format!("Bearer {token}"));
        }
        self.send(
            request
                .body(Body::from(serde_json::to_vec(body).unwrap()))
                .unwrap(),
        )
        .await
    }

    /// A session for `device` (a fresh nonce); panics unless it is opened. Returns the token.
    pub async fn open(&self, device: &Device) -> String {
        let r = self
            .session(&device.session_body(fresh_nonce()), None)
            .await;
        assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
        assert_eq!(r.json["clientId"], device.client_id);
        r.json["token"].as_str().unwrap().to_owned()
    }

    /// `POST /v1/write` with `Authorization: Bearer <token>`.
    pub async fn write_as(&self, token: &str, body: &Value) -> Reply {
        let body = serde_json::to_vec(body).unwrap();
        let request = Request::post("/v1/write")
            .header("content-type", "application/json")
            .header("content-length", body.len())
            .header("authorization", format!("Bearer {token}"))
            .body(Body::from(body))
            .unwrap();
        self.send(request).await
    }

    /// `GET path` with `Authorization: Bearer <token>`.
    pub async fn get_as(&self, token: &str, path: &str) -> Reply {
        let request = Request::get(path)
            .header("authorization", format!("Bearer {token}"))
            .body(Body::empty())
            .unwrap();
        self.send(request).await
    }

    /// The `clientSeq`s stored on an aggregate, read with `token`.
    pub async fn seqs_as(&self, token: &str, type_id: &str, id: &str) -> Vec<u64> {
        let page = self
            .get_as(
                token,
                &format!("/v1/aggregates/{type_id}/{id}/events?limit=1000"),
            )
            .await;
        assert_eq!(page.status, StatusCode::OK, "{:?}", page.json);
        page.json["batches"]
            .as_array()
            .unwrap()
            .iter()
            .flat_map(|b| b["events"].as_array().unwrap().clone())
            .map(|e| e["clientSeq"].as_u64().unwrap())
            .collect()
    }

    /// Every event of the aggregate, following `next` through all pages.
    pub async fn read_all(&self, type_id: &str, id: &str) -> Vec<Value> {
        let mut from = 1u64;
        let mut events = Vec::new();
        loop {
            let page = self
                .get(&format!("/v1/aggregates/{type_id}/{id}/events?from={from}"))
                .await;
            assert_eq!(page.status, StatusCode::OK, "{:?}", page.json);
            for batch in page.json["batches"].as_array().unwrap() {
                events.extend(batch["events"].as_array().unwrap().iter().cloned());
            }
            match page.json["next"].as_u64() {
                Some(next) => from = next,
                None => return events,
            }
        }
    }

    /// The key of aggregate `id` of [`TYPE`] in this gateway's org.
    pub fn key_of(&self, id: &str) -> AggregateKey {
        AggregateKey {
            org: self.state.config.org_id,
            aggregate: AggregateRef {
                type_id: Uuid::parse_str(TYPE).unwrap(),
                id: Uuid::parse_str(id).unwrap(),
            },
        }
    }
}

/// `request` with a `DPoP` proof when it carries the bearer token of a loaded device and no
/// proof of its own.
pub async fn with_proof(request: Request<Body>) -> Request<Body> {
    let token = request
        .headers()
        .get("authorization")
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.strip_prefix("Bearer "))
        .map(str::to_owned);
    let Some(token) = token else {
        return request;
    };
    if request.headers().contains_key("dpop") {
        return request;
    }
    let (mut parts, body) = request.into_parts();
    let bytes = body.collect().await.unwrap().to_bytes();
    let target = parts.uri.path_and_query().map_or("/", |p| p.as_str());
    if let Some(proof) = super::device::proof_for(&token, parts.method.as_str(), target, &bytes) {
        parts.headers.insert("dpop", proof.parse().unwrap());
    }
    Request::from_parts(parts, Body::from(bytes))
}

/// One answer.
#[derive(Debug)]
pub struct Reply {
    pub status: StatusCode,
    pub headers: HeaderMap,
    pub json: Value,
    /// The body failed mid-stream: the client would have seen a broken connection.
    pub broken: bool,
}

impl Reply {
    pub fn outcome(&self) -> &str {
        self.json["outcome"].as_str().unwrap_or("<none>")
    }
    pub fn code(&self) -> u64 {
        self.json["code"].as_u64().unwrap_or(0)
    }
}

pub const CLIENT: &str = "6f1c1c5e-6a4c-4f52-9a37-1e2a8d2f0001";
pub const TYPE: &str = "0d6c7b1a-2b55-4f0e-8a7d-6c4e9b3a0002";
pub const ID: &str = "3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e0003";

/// An event with `seq` and a payload derived from it.
pub fn event(seq: u64) -> Value {
    json!({"clientSeq": seq, "eventId": null, "timestamp": 1_700_000_000_000u64 + seq,
           "type": 3, "minor": 0, "data": celeriant_sync_protocol::encoding::encode_base64(format!("event {seq}").as_bytes()),
           "iv": null})
}

/// A write of `seqs` to the standard aggregate.
pub fn write_of(seqs: &[u64]) -> Value {
    write_to(ID, seqs)
}

pub fn write_to(id: &str, seqs: &[u64]) -> Value {
    write_by(CLIENT, TYPE, id, seqs)
}

/// A write of `seqs` by `client` to aggregate (`type_id`, `id`).
pub fn write_by(client: &str, type_id: &str, id: &str, seqs: &[u64]) -> Value {
    json!({"clientId": client, "writes": [{"aggregate": {"typeId": type_id, "id": id},
           "allowCreate": true, "events": seqs.iter().map(|s| event(*s)).collect::<Vec<_>>()}]})
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}

/// The upstream watches `fake` has been asked for.
fn watches(fake: &FakeCeleriant) -> usize {
    fake.requests()
        .iter()
        .filter(|r| matches!(r, ClientRequest::Watch(_)))
        .count()
}

/// Waits until a new backend's start-up requests are over: its upstream watch opened (the
/// `before + 1`-th watch) and the revocations reload that the watch's first resync triggers
/// (`Change::Resync`) sent (a request after the watch; or 1 s after the watch, in case the
/// node saw the reload first), then no request for 150 ms. A test's scripted replies
/// (`FakeCeleriant::script`) answer the next requests whoever sends them; that reload, racing
/// a test's first write on a loaded machine, once took a scripted `Close` meant for the write
/// (access_celeriant: "landed" where "unknown" was scripted).
async fn settle(fake: &FakeCeleriant, before: usize) {
    let started = std::time::Instant::now();
    let mut watch_seen: Option<std::time::Instant> = None;
    loop {
        let requests = fake.requests();
        let watch = requests
            .iter()
            .enumerate()
            .filter(|(_, r)| matches!(r, ClientRequest::Watch(_)))
            .nth(before)
            .map(|(i, _)| i);
        if let Some(i) = watch {
            let seen = *watch_seen.get_or_insert_with(std::time::Instant::now);
            if requests.len() > i + 1 || seen.elapsed() > Duration::from_secs(1) {
                tokio::time::sleep(Duration::from_millis(150)).await;
                if fake.requests().len() == requests.len() {
                    return;
                }
                continue;
            }
        }
        assert!(
            started.elapsed() < Duration::from_secs(10),
            "the backend's upstream watch never opened: {} requests",
            requests.len()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}
