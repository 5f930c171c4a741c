//! The fault injector over HTTP: each fault does what it claims (applied or not, connection
//! broken or answered), the control endpoint reports and changes rates (showing the durations
//! that apply), and the gateway's own timeout answers `unknown` while the write still lands.

mod support;

use axum::body::Body;
use axum::http::{Request, StatusCode};
use celeriant_gateway::backend::embedded::EmbeddedOptions;
use serde_json::{Value, json};
use support::app::*;

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
    // 2013 before commit: retry, not applied. Like a real 2013 (an identical write in flight),
    // it reports that write's highest sequence as the last and its lowest as attempted.
    set_rates(&h, json!({"inflight": 1.0})).await;
    let r = h.write(&write_of(&[4, 5, 7])).await;
    assert_eq!(
        (r.status.as_u16(), r.outcome(), r.code()),
        (503, "retry", 2013)
    );
    assert_eq!(
        (&r.json["lastClientSeq"], &r.json["attemptedClientSeq"]),
        (&json!(7), &json!(4)),
        "{:?}",
        r.json
    );
    assert_eq!(r.json["retryAfterMs"], 1000);
    assert!(r.headers.contains_key("retry-after"));
    let r = h.write(&write_of(&[1])).await;
    assert_eq!(
        (&r.json["lastClientSeq"], &r.json["attemptedClientSeq"]),
        (&json!(1), &json!(1))
    );
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
        json!({"requests": 7, "dropAfterCommit": 1, "timeout": 1, "inflight": 2, "busy": 1,
               "resetBeforeCommit": 1, "rejected": 0, "maxInFlightPerClient": 1,
               "watchStreams": 0, "watchStreamsByClient": {}})
    );
}

#[tokio::test]
async fn drop_after_commit_breaks_the_connection_whatever_the_store_answered() {
    let h = with_faults();
    set_rates(&h, json!({"dropAfterCommit": 1.0})).await;
    // Landed.
    assert!(h.write(&write_of(&[1])).await.broken);
    // A 2002 (the identical resend).
    assert!(h.write(&write_of(&[1])).await.broken);
    // A refusal (2005: the aggregate does not exist and may not be created): nothing written.
    let other = "3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e0555";
    let mut refused = write_to(other, &[1]);
    refused["writes"][0]["allowCreate"] = json!(false);
    assert!(h.write(&refused).await.broken);
    assert!(h.read_all(TYPE, other).await.is_empty());
    // The answers the connection did not carry.
    set_rates(&h, json!({})).await;
    assert_eq!(h.write(&write_of(&[1])).await.code(), 2002);
    assert_eq!(h.read_all(TYPE, ID).await.len(), 1);
    assert_eq!(h.write(&refused).await.code(), 2005);
    assert_eq!(
        h.get("/v1/faults").await.json["counts"]["dropAfterCommit"],
        3
    );
}

#[tokio::test]
async fn left_out_durations_are_reported_as_the_defaults_that_apply() {
    let h = with_faults();
    // At start-up from zero flags.
    let h0 = Harness::with(
        |c| {
            c.faults = true;
            c.fault_delay_ms = 0;
            c.fault_retry_after_ms = 0;
        },
        EmbeddedOptions::default(),
    );
    let rates = &h0.get("/v1/faults").await.json["rates"];
    assert_eq!(
        (&rates["delayMs"], &rates["retryAfterMs"]),
        (&json!(5000), &json!(200))
    );
    // Through PUT, left out or 0.
    for body in [
        json!({"busy": 1.0}),
        json!({"busy": 1.0, "delayMs": 0, "retryAfterMs": 0}),
    ] {
        let report = set_rates(&h, body).await;
        assert_eq!(
            report["rates"],
            json!({"dropAfterCommit": 0.0, "timeout": 0.0, "inflight": 0.0, "busy": 1.0,
                   "resetBeforeCommit": 0.0, "delayMs": 5000, "retryAfterMs": 200, "rejectType": 0})
        );
        assert_eq!(h.get("/v1/faults").await.json["rates"], report["rates"]);
        // And the busy fault indeed answers with 200 ms.
        let r = h.write(&write_of(&[1])).await;
        assert_eq!((r.code(), &r.json["retryAfterMs"]), (2012, &json!(200)));
    }
    // Values that are set are kept.
    let report = set_rates(
        &h,
        json!({"timeout": 0.5, "delayMs": 10, "retryAfterMs": 20}),
    )
    .await;
    assert_eq!(
        (
            &report["rates"]["delayMs"],
            &report["rates"]["retryAfterMs"]
        ),
        (&json!(10), &json!(20))
    );
}

#[tokio::test]
async fn the_gateway_timeout_answers_unknown_and_the_write_still_lands() {
    let h = Harness::with(
        |c| {
            c.faults = true;
            c.limits.request_timeout_ms = 50;
        },
        EmbeddedOptions::default(),
    );
    set_rates(&h, json!({"timeout": 1.0, "delayMs": 150})).await;
    let r = h.write(&write_of(&[1])).await;
    assert_eq!(
        (r.status.as_u16(), r.outcome(), r.code()),
        (504, "unknown", 50400)
    );
    // The deadline ended the delay (its slot is not held for the rest of it): the write goes
    // on without the client, at once.
    let started = std::time::Instant::now();
    while h.read_all(TYPE, ID).await.is_empty() {
        assert!(started.elapsed() < ms(2_000), "the write never landed");
        tokio::time::sleep(ms(10)).await;
    }
    assert_eq!(h.read_all(TYPE, ID).await.len(), 1);
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
        json!([0.1, 0.0, 0.0, 0.0, 0.0, 0, 0]),
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

#[tokio::test]
async fn a_reject_type_refuses_matching_writes_without_applying_them() {
    let h = with_faults();
    set_rates(&h, json!({"rejectType": 13})).await;
    let mut poisoned = write_of(&[1, 2]);
    poisoned["writes"][0]["events"][1]["type"] = json!(13);
    let r = h.write(&poisoned).await;
    assert_eq!(
        (r.status.as_u16(), r.outcome(), r.code()),
        (422, "rejected", 2022)
    );
    assert!(h.read_all(TYPE, ID).await.is_empty(), "not applied");
    let r = h.write(&write_of(&[1, 2])).await;
    assert_eq!(r.outcome(), "landed", "other types pass");
    let counts = &h.get("/v1/faults").await.json["counts"];
    assert_eq!(
        (&counts["requests"], &counts["rejected"]),
        (&json!(2), &json!(1))
    );
}

#[tokio::test]
async fn concurrent_writes_of_one_client_are_counted() {
    let h = with_faults();
    set_rates(&h, json!({"timeout": 1.0, "delayMs": 200})).await;
    let (first, second) = (
        write_of(&[1]),
        write_to("3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e0999", &[1]),
    );
    let (a, b) = tokio::join!(h.write(&first), h.write(&second));
    assert_eq!((a.outcome(), b.outcome()), ("landed", "landed"));
    let counts = &h.get("/v1/faults").await.json["counts"];
    assert_eq!(
        counts["maxInFlightPerClient"], 2,
        "two requests of one client at once"
    );
}

/// Every faults request without the secret, or with another one, is refused (401, 40190)
/// before anything is read or changed: the rates stay, nothing is trimmed.
#[tokio::test]
async fn the_faults_endpoints_need_the_secret_on_every_request() {
    let h = with_faults();
    let secret = h.state.faults_secret.as_ref().unwrap().expose().to_owned();
    let r = h.write(&write_of(&[1, 2])).await;
    assert_eq!(r.outcome(), "landed");
    let wrong_ones: [Option<String>; 5] = [
        None,
        Some(String::new()),
        Some(format!("{secret}x")),
        Some(secret[..secret.len() - 1].to_owned()),
        Some(format!("Bearer {secret}")),
    ];
    for wrong in &wrong_ones {
        let requests = [
            Request::get("/v1/faults"),
            Request::put("/v1/faults").header("content-type", "application/json"),
            Request::post("/v1/faults/trim").header("content-type", "application/json"),
        ];
        let bodies = [
            String::new(),
            r#"{"busy":1.0}"#.to_owned(),
            format!(r#"{{"typeId":"{TYPE}","id":"{ID}","before":2}}"#),
        ];
        for (request, body) in requests.into_iter().zip(bodies) {
            let request = match wrong {
                Some(w) => request.header("celeriant-faults-secret", w.as_str()),
                None => request,
            };
            let r = h.send_as_is(request.body(Body::from(body)).unwrap()).await;
            assert_eq!(
                (r.status.as_u16(), r.outcome(), r.code()),
                (401, "unauthorized", 40190),
                "{wrong:?}: {:?}",
                r.json
            );
            assert!(!r.json.to_string().contains(&secret), "never echoed");
        }
    }
    // Two headers, one of them right: refused too.
    let two = Request::get("/v1/faults")
        .header("celeriant-faults-secret", "nope")
        .header("celeriant-faults-secret", secret.as_str())
        .body(Body::empty())
        .unwrap();
    assert_eq!(h.send_as_is(two).await.code(), 40190);
    // Nothing changed: no busy rate, both events still there.
    let report = h.get("/v1/faults").await;
    assert_eq!(report.status, StatusCode::OK);
    assert_eq!(report.json["rates"]["busy"], json!(0.0));
    assert_eq!(h.read_all(TYPE, ID).await.len(), 2);
    assert_eq!(h.write(&write_of(&[3])).await.outcome(), "landed");
}
