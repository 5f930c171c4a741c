//! Fair share, memory budgets, the body limit, the quota and the store's gate, over HTTP
//! without a socket: each bound answers typed at its edge and not before it.

mod support;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use celeriant_gateway::backend::embedded::EmbeddedOptions;
use celeriant_sync_protocol::body_size::max_write_body_bytes;
use celeriant_sync_protocol::encoding::{MAX_SAFE_INTEGER, encode_base64};
use celeriant_sync_protocol::{AggregateRef, AggregateWrite, Event, Limits, WriteRequest};
use serde_json::{Value, json};
use support::app::*;
use support::device::Device;
use tower::ServiceExt;
use uuid::Uuid;

/// The largest request the protocol allows: 16 aggregates, 10,000 events, 4 MiB of payload in
/// sizes that maximise base64 padding, every integer at 2^53 − 1, every optional field present.
fn largest_request(client: Uuid) -> WriteRequest {
    let limits = Limits::default();
    let per = limits.max_events / limits.max_aggregates;
    let last = limits.max_request_bytes - (limits.max_events - 1) * 418;
    let mut seq = MAX_SAFE_INTEGER - limits.max_events as u64;
    WriteRequest {
        client_id: client,
        writes: (0..limits.max_aggregates)
            .map(|w| AggregateWrite {
                aggregate: AggregateRef {
                    type_id: Uuid::parse_str(TYPE).unwrap(),
                    id: Uuid::from_u128(u128::MAX - w as u128),
                },
                allow_create: true,
                expected_version: None,
                events: (0..per)
                    .map(|e| {
                        seq += 1;
                        let is_last = w + 1 == limits.max_aggregates && e + 1 == per;
                        Event {
                            client_seq: seq,
                            event_id: Some(Uuid::from_u128(u128::MAX - seq as u128)),
                            timestamp: MAX_SAFE_INTEGER,
                            event_type: MAX_SAFE_INTEGER,
                            minor: MAX_SAFE_INTEGER,
                            data: vec![0xAB; if is_last { last } else { 418 }],
                            iv: Some(vec![7; 12]),
                        }
                    })
                    .collect(),
            })
            .collect(),
    }
}

#[tokio::test]
async fn the_largest_legal_request_fits_the_default_body_limit_and_lands() {
    let h = Harness::new();
    let limit = h.state.config.limits.max_body_bytes;
    assert_eq!(limit, max_write_body_bytes(&Limits::default()));
    assert!(limit < 8 << 20, "smaller than the old 8 MiB");
    let body = serde_json::to_vec(&largest_request(Uuid::parse_str(CLIENT).unwrap())).unwrap();
    // `allowCreate: true` is a byte shorter than the bound's `false`, once per aggregate, and
    // the bound counts an `"expectedVersion":9007199254740991,` (35 bytes) per aggregate, which
    // this unconditional request leaves out (a guard at 2^53 - 1 could not land).
    assert_eq!(body.len() + 16 + 16 * 35, limit);
    let r = h.post_raw("/v1/write", body.clone()).await;
    assert_eq!(
        (r.status, r.outcome()),
        (StatusCode::OK, "landed"),
        "{:?}",
        r.json
    );
    // One byte more than the limit is refused by its Content-Length, unread.
    let mut over = body;
    over.resize(limit + 1, b' ');
    let r = h.post_raw("/v1/write", over).await;
    assert_eq!((r.status.as_u16(), r.code()), (413, 41300));
}

#[tokio::test]
async fn each_client_id_has_its_own_rate_and_writes_and_reads_apart() {
    let h = Harness::auth(|c| {
        c.limits.rate_per_client = 1;
        c.limits.burst_per_client = 2;
    });
    let (a, b) = (Device::a(), Device::b());
    let (ta, tb) = (h.open(&a).await, h.open(&b).await);
    let write = |device: &Device, seq| write_by(&device.client_id, TYPE, ID, &[seq]);
    assert_eq!(h.write_as(&ta, &write(&a, 1)).await.outcome(), "landed");
    assert_eq!(h.write_as(&ta, &write(&a, 2)).await.outcome(), "landed");
    let r = h.write_as(&ta, &write(&a, 3)).await;
    assert_eq!(
        (r.status.as_u16(), r.outcome(), r.code()),
        (429, "retry", 42910)
    );
    let wait = r.json["retryAfterMs"].as_u64().unwrap();
    assert!((1..=1000).contains(&wait), "{wait}");
    assert_eq!(r.headers["retry-after"], "1");
    assert!(
        r.json["message"]
            .as_str()
            .unwrap()
            .contains("too many writes from this client id")
    );
    // Another client id, and reads, have budgets of their own. (B writes an aggregate of its
    // own: under the default `owner` policy A's is not B's to write.)
    let b_write = write_by(
        &b.client_id,
        TYPE,
        "3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e00b0",
        &[1],
    );
    assert_eq!(h.write_as(&tb, &b_write).await.outcome(), "landed");
    let read = h
        .get_as(&ta, &format!("/v1/aggregates/{TYPE}/{ID}/events"))
        .await;
    assert_eq!(read.status, StatusCode::OK);
    // Nothing of the refused write was stored.
    assert_eq!(h.seqs_as(&ta, TYPE, ID).await, vec![1, 2]);
}

#[tokio::test]
async fn the_address_share_refuses_before_the_session_is_even_checked() {
    let h = Harness::auth(|c| {
        c.limits.rate_per_ip = 1;
        c.limits.burst_per_ip = 3;
    });
    for _ in 0..3 {
        assert_eq!(h.write(&write_of(&[1])).await.code(), 40100);
    }
    let r = h.write(&write_of(&[1])).await;
    assert_eq!((r.status.as_u16(), r.code()), (429, 42910), "{:?}", r.json);
    assert!(r.json["message"].as_str().unwrap().contains("this address"));
}

#[tokio::test]
async fn concurrency_per_address_is_capped_while_a_write_is_held() {
    let h = Harness::with(
        |c| {
            c.faults = true;
            c.limits.concurrency_per_ip = 1;
        },
        EmbeddedOptions::default(),
    );
    let set = Request::put("/v1/faults")
        .header("content-type", "application/json")
        .body(Body::from(r#"{"timeout":1,"delayMs":400}"#))
        .unwrap();
    assert_eq!(h.send(set).await.status, StatusCode::OK);
    let held = {
        let router = h.router.clone();
        let body = serde_json::to_vec(&write_of(&[1])).unwrap();
        tokio::spawn(async move {
            router
                .oneshot(
                    Request::post("/v1/write")
                        .header("content-type", "application/json")
                        .body(Body::from(body))
                        .unwrap(),
                )
                .await
                .unwrap()
                .status()
        })
    };
    tokio::time::sleep(ms(100)).await;
    let r = h.write(&write_to(&other_id(), &[1])).await;
    assert_eq!((r.status.as_u16(), r.code()), (429, 42910), "{:?}", r.json);
    assert!(r.json["message"].as_str().unwrap().contains("in progress"));
    assert_eq!(held.await.unwrap(), StatusCode::OK);
    // Its place came back with its answer.
    let set = Request::put("/v1/faults")
        .header("content-type", "application/json")
        .body(Body::from("{}"))
        .unwrap();
    h.send(set).await;
    assert_eq!(
        h.write(&write_to(&other_id(), &[1])).await.outcome(),
        "landed"
    );
}

fn other_id() -> String {
    "3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e0999".into()
}

#[tokio::test]
async fn write_bodies_are_admitted_against_their_budget_before_they_are_read() {
    let h = Harness::with(
        |c| {
            c.limits.max_body_bytes = 64 * 1024;
            c.limits.write_buffer_bytes = 100 * 1024;
            // The budget itself, not one address's share of it (hostile_budgets.rs).
            c.limits.write_buffer_bytes_per_ip = Some(0);
        },
        EmbeddedOptions::default(),
    );
    // A body still arriving holds its declared length: a stream that never ends.
    let (_tx, rx) = futures_channel_like();
    let first = tokio::spawn({
        let router = h.router.clone();
        async move {
            router
                .oneshot(
                    Request::post("/v1/write")
                        .header("content-type", "application/json")
                        .header("content-length", "60000")
                        .body(Body::from_stream(rx))
                        .unwrap(),
                )
                .await
                .unwrap()
        }
    });
    tokio::time::sleep(ms(100)).await;
    // 60,000 + 60,000 > 100 KiB: refused before a byte of it is read.
    let request = Request::post("/v1/write")
        .header("content-type", "application/json")
        .header("content-length", "60000")
        .body(Body::from("not even JSON"))
        .unwrap();
    let r = h.send(request).await;
    assert_eq!((r.status.as_u16(), r.code()), (429, 42900), "{:?}", r.json);
    assert!(r.json["message"].as_str().unwrap().contains("write bodies"));
    // A small one still fits (it reserves its Content-Length; one without reserves the limit).
    let small = serde_json::to_vec(&write_of(&[1])).unwrap();
    let request = Request::post("/v1/write")
        .header("content-type", "application/json")
        .header("content-length", small.len())
        .body(Body::from(small))
        .unwrap();
    assert_eq!(h.send(request).await.outcome(), "landed");
    first.abort();
}

type Chunk = Result<Vec<u8>, std::io::Error>;

/// A body stream that stays open until its sender is dropped.
fn futures_channel_like() -> (
    tokio::sync::mpsc::Sender<Chunk>,
    impl futures_util::Stream<Item = Chunk>,
) {
    let (tx, mut rx) = tokio::sync::mpsc::channel(1);
    let stream = futures_util::stream::poll_fn(move |cx| rx.poll_recv(cx));
    (tx, stream)
}

fn read_budget(budget: usize) -> Harness {
    Harness::with(
        |c| {
            c.limits.read_page_bytes = 64 * 1024;
            c.limits.max_body_bytes = 64 * 1024;
            c.limits.read_buffer_bytes = budget;
        },
        EmbeddedOptions::default(),
    )
}

#[tokio::test]
async fn a_read_reserves_its_page_before_reading_and_holds_what_it_took_until_sent() {
    let path = format!("/v1/aggregates/{TYPE}/{ID}/events");
    let unsent = |h: &Harness| {
        h.router
            .clone()
            .oneshot(Request::get(&path).body(Body::empty()).unwrap())
    };
    // A budget of exactly one page: while one answer is not yet taken by its connection,
    // another read cannot reserve its page.
    let tight = read_budget(64 * 1024);
    assert_eq!(tight.write(&write_of(&[1])).await.outcome(), "landed");
    let held = unsent(&tight).await.unwrap();
    assert_eq!(held.status(), StatusCode::OK);
    let r = tight.get(&path).await;
    assert_eq!((r.status.as_u16(), r.code()), (429, 42900), "{:?}", r.json);
    assert!(
        r.json["message"]
            .as_str()
            .unwrap()
            .contains("read responses")
    );
    drop(held);
    assert_eq!(tight.get(&path).await.status, StatusCode::OK);
    // A held answer keeps only its own size, not its page: small pages do not starve others.
    let roomy = read_budget(100 * 1024);
    assert_eq!(roomy.write(&write_of(&[1])).await.outcome(), "landed");
    let mut held = Vec::new();
    for _ in 0..20 {
        held.push(unsent(&roomy).await.unwrap());
    }
    assert_eq!(roomy.get(&path).await.status, StatusCode::OK);
}

#[tokio::test]
async fn a_batch_larger_than_the_page_budget_is_served_alone() {
    let h = Harness::new();
    let big = encode_base64(&vec![9u8; 1 << 20]);
    let mut w = write_of(&[1, 2, 3]);
    for e in 0..3 {
        w["writes"][0]["events"][e]["data"] = json!(big);
    }
    assert_eq!(h.write(&w).await.outcome(), "landed");
    assert_eq!(h.write(&write_of(&[4])).await.outcome(), "landed");
    let page = h.get(&format!("/v1/aggregates/{TYPE}/{ID}/events")).await;
    assert_eq!(page.status, StatusCode::OK);
    assert_eq!(page.json["batches"].as_array().unwrap().len(), 1);
    assert_eq!(page.json["next"], 2, "the page ends after the big batch");
    assert_eq!(h.read_all(TYPE, ID).await.len(), 4);
}

#[tokio::test]
async fn the_quota_answers_rejected_403() {
    let h = Harness::with(
        |_| {},
        EmbeddedOptions {
            quota_bytes: 600,
            ..EmbeddedOptions::default()
        },
    );
    assert_eq!(h.write(&write_of(&[1])).await.outcome(), "landed");
    let mut r = h.write(&write_of(&[2])).await;
    for seq in 3..10 {
        if r.code() == 40310 {
            break;
        }
        r = h.write(&write_of(&[seq])).await;
    }
    assert_eq!(
        (r.status.as_u16(), r.outcome(), r.code()),
        (403, "rejected", 40310),
        "{:?}",
        r.json
    );
}

#[tokio::test]
async fn a_disk_under_the_floor_refuses_writes_before_reading_them_and_healthz_says_why() {
    let h = Harness::with(
        |_| {},
        EmbeddedOptions {
            min_free_bytes: u64::MAX,
            ..EmbeddedOptions::default()
        },
    );
    let r = h.post_raw("/v1/write", b"not even JSON".to_vec()).await;
    assert_eq!(
        (r.status.as_u16(), r.outcome(), r.code()),
        (507, "retry", 50700),
        "{:?}",
        r.json
    );
    assert_eq!(r.json["retryAfterMs"], 30_000);
    let health = h.get("/healthz").await;
    assert_eq!(health.status.as_u16(), 507);
    let body: &Value = &health.json;
    assert_eq!(body["status"], "degraded");
    assert_eq!(body["outcome"], "retry");
    assert_eq!(body["store"]["state"], "lowSpace");
    assert!(
        body["reason"]
            .as_str()
            .unwrap()
            .contains("under the 18446744073709551615-byte floor"),
        "{body}"
    );
    // Reads go on.
    let read = h.get(&format!("/v1/aggregates/{TYPE}/{ID}/events")).await;
    assert_eq!(read.status, StatusCode::OK);
}

/// A store that never answers.
struct Stuck;

#[async_trait::async_trait]
impl celeriant_gateway::backend::Backend for Stuck {
    fn name(&self) -> &'static str {
        "stuck"
    }
    async fn write(
        &self,
        _: celeriant_gateway::backend::WriteCommand,
    ) -> Result<celeriant_gateway::backend::WriteAck, celeriant_gateway::backend::BackendError>
    {
        std::future::pending().await
    }
    async fn read(
        &self,
        _: celeriant_gateway::backend::ReadQuery,
    ) -> Result<celeriant_gateway::backend::ReadPage, celeriant_gateway::backend::BackendError>
    {
        std::future::pending().await
    }
    async fn health(&self) -> Result<(), celeriant_gateway::backend::BackendError> {
        std::future::pending().await
    }
}

#[tokio::test]
async fn every_route_answers_by_the_deadline_reads_included() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = celeriant_gateway::config::Config::defaults();
    config.data_dir = dir.path().to_owned();
    config.auth = celeriant_gateway::config::AuthMode::None;
    config.limits.request_timeout_ms = 300;
    let state = celeriant_gateway::AppState::new(config, std::sync::Arc::new(Stuck)).unwrap();
    let router = celeriant_gateway::app(state);
    for (request, what) in [
        (
            Request::get(format!("/v1/aggregates/{TYPE}/{ID}/events"))
                .body(Body::empty())
                .unwrap(),
            "a read",
        ),
        (
            Request::get("/healthz").body(Body::empty()).unwrap(),
            "/healthz",
        ),
        (
            Request::post("/v1/write")
                .header("content-type", "application/json")
                .body(Body::from(serde_json::to_vec(&write_of(&[1])).unwrap()))
                .unwrap(),
            "a write",
        ),
    ] {
        let started = std::time::Instant::now();
        let response = router.clone().oneshot(request).await.unwrap();
        let elapsed = started.elapsed();
        assert_eq!(response.status(), StatusCode::GATEWAY_TIMEOUT, "{what}");
        assert!(
            elapsed >= ms(300) && elapsed < ms(1_000),
            "{what}: {elapsed:?}"
        );
        let body = http_body_util::BodyExt::collect(response.into_body())
            .await
            .unwrap()
            .to_bytes();
        let json: Value = serde_json::from_slice(&body).unwrap();
        assert_eq!(
            (&json["outcome"], &json["code"]),
            (&json!("unknown"), &json!(50400))
        );
    }
}

#[tokio::test]
async fn past_three_quarters_of_the_read_budget_only_light_addresses_get_a_page() {
    // Pages of about 41 KB (one 30 KiB event), reserved as 64 KiB at first, from a budget of
    // 16 of those; the address's share raised to the whole budget, so one address can be heavy.
    const PAGE: usize = 64 * 1024;
    let harness = |per_ip: usize| {
        Harness::with(
            |c| {
                c.limits.read_page_bytes = PAGE;
                c.limits.max_body_bytes = PAGE;
                c.limits.read_buffer_bytes = 16 * PAGE;
                c.limits.read_buffer_bytes_per_ip = Some(per_ip);
            },
            EmbeddedOptions::default(),
        )
    };
    let path = format!("/v1/aggregates/{TYPE}/{ID}/events");
    let request_from = |last: u8| {
        let mut request = Request::get(&path).body(Body::empty()).unwrap();
        let from = std::net::SocketAddr::from(([192, 0, 2, last], 4000));
        request
            .extensions_mut()
            .insert(axum::extract::ConnectInfo(from));
        request
    };
    // A page whose answer is not taken (its reservation held), or the refusal, read whole.
    let hold = |h: &Harness, last: u8| {
        let router = h.router.clone();
        let request = request_from(last);
        async move {
            let answer = router.oneshot(request).await.unwrap();
            if answer.status() == StatusCode::OK {
                return Ok(answer);
            }
            let body = http_body_util::BodyExt::collect(answer.into_body()).await;
            let json: Value = serde_json::from_slice(&body.unwrap().to_bytes()).unwrap();
            let message = json["message"].as_str().unwrap_or("").to_owned();
            Err((json["code"].as_u64().unwrap_or(0), message))
        }
    };
    let by_reserve = |e: &(u64, String)| e.0 == 42900 && e.1.contains("this address holds");
    let by_budget = |e: &(u64, String)| e.0 == 42900 && e.1.contains("as many bytes");
    let mut seed = write_of(&[1]);
    seed["writes"][0]["events"][0]["data"] = json!(encode_base64(&vec![7u8; 30 << 10]));

    let h = harness(16 * PAGE);
    assert_eq!(h.write(&seed).await.outcome(), "landed");
    // One address holds pages it does not read until the reserve refuses it: three quarters
    // of the budget, less at most one reservation.
    let mut heavy = Vec::new();
    let refused = loop {
        match hold(&h, 1).await {
            Ok(answer) => heavy.push(answer),
            Err(e) => break e,
        }
    };
    assert!(by_reserve(&refused), "{refused:?}");
    let held = 16 * PAGE - h.state.read_bytes.available();
    assert!(
        (11 * PAGE..12 * PAGE).contains(&held),
        "the heavy address holds three quarters of the budget: {held} of {}",
        16 * PAGE
    );
    // A light address gets a page from the last quarter, not two.
    let mut light = vec![hold(&h, 2).await.unwrap()];
    let again = hold(&h, 2).await.unwrap_err();
    assert!(by_reserve(&again), "{again:?}");
    // Other light addresses get one each, until the budget itself is full.
    let full = loop {
        match hold(&h, 3 + light.len() as u8).await {
            Ok(answer) => light.push(answer),
            Err(e) => break e,
        }
    };
    assert!(by_budget(&full), "{full:?}");
    assert!(light.len() >= 5, "{} light addresses served", light.len());
    // Once the heavy address's pages are taken, it reads again.
    drop(heavy);
    assert!(hold(&h, 1).await.is_ok());
    drop(light);

    // Without a per-address share there is no reserve: one address takes the whole budget.
    let h = harness(0);
    assert_eq!(h.write(&seed).await.outcome(), "landed");
    let mut all = Vec::new();
    let full = loop {
        match hold(&h, 1).await {
            Ok(answer) => all.push(answer),
            Err(e) => break e,
        }
    };
    assert!(by_budget(&full), "{full:?}");
    assert!(h.state.read_bytes.available() < PAGE);
}
