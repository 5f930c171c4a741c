//! The fault injector over HTTP: each fault does what it claims (applied or not, connection
//! broken or answered), the control endpoint reports and changes rates, and the gateway's own
//! timeout answers `unknown` while the write still lands.

mod common;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use celeriant_gateway::backend::embedded::EmbeddedOptions;
use common::*;
use serde_json::{Value, json};

fn with_faults() -> Harness {
    Harness::with(
        |c| {
            c.faults = true;
            c.fault_seed = Some(5);
        },
        EmbeddedOptions::default(),
    )
}

async fn set_rates(h: &Harness, rates: Value) -> Value {
    let request = Request::put("/v1/faults")
        .header("content-type", "application/json")
        .body(Body::from(serde_json::to_vec(&rates).unwrap()))
        .unwrap();
    let r = h.send(request).await;
    assert_eq!(r.status, StatusCode::OK, "{:?}", r.json);
    r.json
}

#[tokio::test]
async fn each_fault_applies_or_not_as_documented() {
    let h = with_faults();
    // 2013 before commit: retry, not applied.
    set_rates(&h, json!({"inflight": 1.0})).await;
    let r = h.write(&write_of(&[1])).await;
    assert_eq!(
        (r.status.as_u16(), r.outcome(), r.code()),
        (503, "retry", 2013)
    );
    assert!(r.headers.contains_key("retry-after"));
    assert!(h.read_all(TYPE, ID).await.is_empty());

    // 503 with Retry-After: retry, not applied.
    set_rates(&h, json!({"busy": 1.0, "retryAfterMs": 1500})).await;
    let r = h.write(&write_of(&[1])).await;
    assert_eq!((r.status.as_u16(), r.outcome()), (503, "retry"));
    assert_eq!(r.json["retryAfterMs"], 1500);
    assert_eq!(r.headers["retry-after"], "2");
    assert!(h.read_all(TYPE, ID).await.is_empty());

    // Reset before commit: broken connection, not applied.
    set_rates(&h, json!({"resetBeforeCommit": 1.0})).await;
    let r = h.write(&write_of(&[1])).await;
    assert!(r.broken, "{r:?}");
    assert!(h.read_all(TYPE, ID).await.is_empty());

    // Commit then drop: broken connection, applied.
    set_rates(&h, json!({"dropAfterCommit": 1.0})).await;
    let r = h.write(&write_of(&[1])).await;
    assert!(r.broken, "{r:?}");
    assert_eq!(h.read_all(TYPE, ID).await.len(), 1);

    // The identical resend is recognised as landed.
    set_rates(&h, json!({})).await;
    let r = h.write(&write_of(&[1])).await;
    assert_eq!((r.outcome(), r.code()), ("landed", 2002));

    // Delay: answered late, applied.
    set_rates(&h, json!({"timeout": 1.0, "delayMs": 200})).await;
    let started = std::time::Instant::now();
    let r = h.write(&write_of(&[2])).await;
    assert!(started.elapsed() >= ms(200));
    assert_eq!(r.json["aggregateVersion"], 2);

    let report = h.get("/v1/faults").await.json;
    assert_eq!(report["seed"], 5);
    assert_eq!(
        report["counts"],
        json!({"requests": 6, "dropAfterCommit": 1, "timeout": 1, "inflight": 1, "busy": 1, "resetBeforeCommit": 1})
    );
}

#[tokio::test]
async fn the_gateway_timeout_answers_unknown_and_the_write_still_lands() {
    let h = Harness::with(
        |c| {
            c.faults = true;
            c.request_timeout_ms = 50;
        },
        EmbeddedOptions::default(),
    );
    set_rates(&h, json!({"timeout": 1.0, "delayMs": 150})).await;
    let r = h.write(&write_of(&[1])).await;
    assert_eq!(
        (r.status.as_u16(), r.outcome(), r.code()),
        (504, "unknown", 50400)
    );
    assert!(h.read_all(TYPE, ID).await.is_empty(), "not yet");
    tokio::time::sleep(ms(300)).await;
    assert_eq!(
        h.read_all(TYPE, ID).await.len(),
        1,
        "the write went on without the client"
    );
}

#[tokio::test]
async fn mixed_rates_are_reproducible_and_counted() {
    let run = || async {
        let h = with_faults();
        set_rates(
            &h,
            json!({"inflight": 0.3, "busy": 0.3, "resetBeforeCommit": 0.2}),
        )
        .await;
        let mut outcomes = Vec::new();
        for seq in 1..=40 {
            let r = h.write(&write_of(&[seq])).await;
            outcomes.push(if r.broken {
                "broken".to_owned()
            } else {
                r.outcome().to_owned()
            });
        }
        (outcomes, h.get("/v1/faults").await.json["counts"].clone())
    };
    let (a, counts) = run().await;
    let (b, _) = run().await;
    assert_eq!(a, b, "same seed, same faults");
    let n = |k: &str| counts[k].as_u64().unwrap();
    assert_eq!(n("requests"), 40);
    assert_eq!(
        a.iter().filter(|o| *o == "broken").count() as u64,
        n("resetBeforeCommit")
    );
    assert_eq!(
        a.iter().filter(|o| *o == "retry").count() as u64,
        n("inflight") + n("busy")
    );
    assert!(
        n("inflight") > 0 && n("busy") > 0 && n("resetBeforeCommit") > 0,
        "{counts}"
    );
}

#[tokio::test]
async fn invalid_rates_are_refused() {
    let h = with_faults();
    for bad in [
        json!({"busy": 0.7, "inflight": 0.7}),
        json!({"busy": -1}),
        json!({"bogus": 1}),
    ] {
        let request = Request::put("/v1/faults")
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(&bad).unwrap()))
            .unwrap();
        let r = h.send(request).await;
        assert_eq!(
            (r.status.as_u16(), r.code()),
            (400, 40001),
            "{bad}: {:?}",
            r.json
        );
    }
}
