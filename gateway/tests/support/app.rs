//! Shared helpers for the gateway's HTTP tests: an app over a fresh embedded store, and a way to
//! send one request through it without a socket.

use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::body::Body;
use axum::http::{HeaderMap, Method, Request, StatusCode};
use celeriant_gateway::backend::embedded::{EmbeddedOptions, EmbeddedStore};
use celeriant_gateway::config::Config;
use celeriant_gateway::{AppState, app};
use http_body_util::BodyExt;
use serde_json::{Value, json};
use tower::ServiceExt;

/// A router over a fresh embedded store (the tempdir lives as long as the harness).
pub struct Harness {
    pub router: Router,
    pub state: AppState,
    _dir: tempfile::TempDir,
}

impl Harness {
    pub fn new() -> Self {
        Self::with(|_| {}, EmbeddedOptions::default())
    }

    pub fn with(configure: impl FnOnce(&mut Config), options: EmbeddedOptions) -> Self {
        let dir = tempfile::tempdir().unwrap();
        let mut config = Config::defaults();
        config.data_dir = dir.path().to_owned();
        configure(&mut config);
        let store = EmbeddedStore::open(&config.data_dir, options).unwrap();
        let state = AppState::new(config, Arc::new(store)).unwrap();
        Harness {
            router: app(state.clone()),
            state,
            _dir: dir,
        }
    }

    /// Sends one request; the body is parsed as JSON when there is one.
    pub async fn send(&self, request: Request<Body>) -> Reply {
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
    json!({"clientId": CLIENT, "writes": [{"aggregate": {"typeId": TYPE, "id": id},
           "allowCreate": true, "events": seqs.iter().map(|s| event(*s)).collect::<Vec<_>>()}]})
}

pub fn ms(n: u64) -> Duration {
    Duration::from_millis(n)
}
