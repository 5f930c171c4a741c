//! The HTTP surface of protocol v1 over the embedded store, driven without a socket: every
//! outcome row, every validation rule (and that a refused request writes nothing), reads and
//! paging, the JSON bodies of 404/405/413/415/429 (CORS is in `http_cors.rs`).

mod support;

use axum::body::Body;
use axum::http::{Method, Request, StatusCode};
use celeriant_gateway::backend::embedded::EmbeddedOptions;
use serde_json::json;
use support::app::*;

#[tokio::test]
async fn the_same_write_twice_lands_once_then_answers_2002() {
    let h = Harness::new();
    let first = h.write(&write_of(&[1, 2, 3])).await;
    assert_eq!(first.status, StatusCode::OK);
    assert_eq!(
        first.json,
        json!({"outcome": "landed", "duplicate": false, "aggregateVersion": 1})
    );

    let second = h.write(&write_of(&[1, 2, 3])).await;
    assert_eq!(second.status, StatusCode::OK);
    assert_eq!(
        second.json,
        json!({"outcome": "landed", "duplicate": true, "code": 2002, "lastClientSeq": 3, "attemptedClientSeq": 1})
    );
    let events = h.read_all(TYPE, ID).await;
    let seqs: Vec<u64> = events
        .iter()
        .map(|e| e["clientSeq"].as_u64().unwrap())
        .collect();
    assert_eq!(seqs, [1, 2, 3], "stored once");
    assert_eq!(events[1], event(2), "stored as sent");
}

#[tokio::test]
async fn a_gap_is_accepted_and_a_lower_sequence_afterwards_is_a_false_2002() {
    let h = Harness::new();
    assert_eq!(h.write(&write_of(&[1, 2, 3])).await.outcome(), "landed");
    let five = h.write(&write_of(&[5])).await;
    assert_eq!(five.json["duplicate"], false, "{:?}", five.json);
    assert_eq!(five.json["aggregateVersion"], 2);
    let four = h.write(&write_of(&[4])).await;
    assert_eq!(four.json["duplicate"], true);
    assert_eq!(four.json["code"], 2002);
    assert_eq!(four.json["lastClientSeq"], 5);
    assert_eq!(four.json["attemptedClientSeq"], 4);
    let seqs: Vec<u64> = h
        .read_all(TYPE, ID)
        .await
        .iter()
        .map(|e| e["clientSeq"].as_u64().unwrap())
        .collect();
    assert_eq!(
        seqs,
        [1, 2, 3, 5],
        "4 never landed, exactly as Celeriant behaves"
    );
}

#[tokio::test]
async fn another_clients_sequences_are_a_separate_space() {
    let h = Harness::new();
    assert_eq!(h.write(&write_of(&[1])).await.json["duplicate"], false);
    let mut other = write_of(&[1]);
    other["clientId"] = json!("6f1c1c5e-6a4c-4f52-9a37-1e2a8d2f0999");
    let r = h.write(&other).await;
    assert_eq!(r.json["duplicate"], false);
    assert_eq!(r.json["aggregateVersion"], 2);
}

#[tokio::test]
async fn bad_input_gets_a_typed_body_and_writes_nothing() {
    let h = Harness::with(
        |c| c.limits.max_body_bytes = 64 * 1024,
        EmbeddedOptions::default(),
    );
    let good = write_of(&[1, 2]);
    let with = |f: &dyn Fn(&mut serde_json::Value)| {
        let mut v = good.clone();
        f(&mut v);
        serde_json::to_vec(&v).unwrap()
    };
    let cases: Vec<(&str, Vec<u8>, u16, u64)> = vec![
        ("malformed JSON", b"{\"clientId\": ".to_vec(), 400, 40000),
        ("not JSON at all", b"hello".to_vec(), 400, 40000),
        (
            "trailing garbage",
            [serde_json::to_vec(&good).unwrap(), b"x".to_vec()].concat(),
            400,
            40000,
        ),
        (
            "wrong type",
            with(&|v| v["writes"][0]["events"][0]["type"] = json!("3")),
            400,
            40001,
        ),
        (
            "bad client UUID",
            with(&|v| v["clientId"] = json!("not-a-uuid")),
            400,
            40001,
        ),
        (
            "bad aggregate UUID",
            with(&|v| v["writes"][0]["aggregate"]["id"] = json!("1234")),
            400,
            40001,
        ),
        (
            "type 0",
            with(&|v| v["writes"][0]["events"][1]["type"] = json!(0)),
            400,
            40007,
        ),
        (
            "empty events",
            with(&|v| v["writes"][0]["events"] = json!([])),
            400,
            40004,
        ),
        ("no writes", with(&|v| v["writes"] = json!([])), 400, 40003),
        (
            "non-increasing",
            with(&|v| v["writes"][0]["events"][1]["clientSeq"] = json!(1)),
            400,
            40006,
        ),
        (
            "clientSeq 0",
            with(&|v| v["writes"][0]["events"][0]["clientSeq"] = json!(0)),
            400,
            40005,
        ),
        (
            "iv of 11 bytes",
            with(&|v| v["writes"][0]["events"][0]["iv"] = json!("AAAAAAAAAAAAAAA=")),
            400,
            40008,
        ),
        (
            "bad base64",
            with(&|v| v["writes"][0]["events"][0]["data"] = json!("abc")),
            400,
            40001,
        ),
        (
            "above 2^53",
            with(&|v| v["writes"][0]["events"][0]["clientSeq"] = json!(9007199254740992u64)),
            400,
            40001,
        ),
        (
            "negative",
            with(&|v| v["writes"][0]["events"][0]["timestamp"] = json!(-1)),
            400,
            40001,
        ),
        (
            "fraction",
            with(&|v| v["writes"][0]["events"][0]["clientSeq"] = json!(1.5)),
            400,
            40001,
        ),
        (
            "unknown field",
            with(&|v| v["writes"][0]["events"][0]["colour"] = json!("red")),
            400,
            40001,
        ),
        (
            "missing field",
            with(&|v| {
                v["writes"][0]["events"][0]
                    .as_object_mut()
                    .unwrap()
                    .remove("data");
            }),
            400,
            40001,
        ),
        (
            "positional array instead of object",
            serde_json::to_vec(&json!([
                CLIENT,
                [[
                    [TYPE, ID],
                    true,
                    [[1, null, 1_700_000_000_001u64, 3, 0, "AQID", null]]
                ]]
            ]))
            .unwrap(),
            400,
            40001,
        ),
        (
            "positional event inside an object",
            with(&|v| {
                v["writes"][0]["events"][0] =
                    json!([1, null, 1_700_000_000_001u64, 3, 0, "AQID", null])
            }),
            400,
            40001,
        ),
        (
            "positional aggregate inside an object",
            with(&|v| v["writes"][0]["aggregate"] = json!([TYPE, ID])),
            400,
            40001,
        ),
        (
            "duplicate aggregate",
            with(&|v| {
                let w = v["writes"][0].clone();
                v["writes"].as_array_mut().unwrap().push(w);
            }),
            400,
            40009,
        ),
        (
            "body over the limit",
            with(&|v| {
                v["writes"][0]["events"][0]["data"] = json!(
                    celeriant_sync_protocol::encoding::encode_base64(&[7u8; 70_000])
                )
            }),
            413,
            41300,
        ),
    ];
    for (what, body, status, code) in cases {
        let r = h.post_raw("/v1/write", body).await;
        assert_eq!(r.status.as_u16(), status, "{what}: {:?}", r.json);
        assert_eq!(r.outcome(), "rejected", "{what}");
        assert_eq!(r.code(), code, "{what}: {:?}", r.json);
        assert!(!r.json["message"].as_str().unwrap().is_empty(), "{what}");
    }
    // The field path is named for shape errors.
    let r = h
        .post_raw(
            "/v1/write",
            with(&|v| v["writes"][0]["events"][1]["minor"] = json!("x")),
        )
        .await;
    assert!(
        r.json["message"]
            .as_str()
            .unwrap()
            .contains("invalid field writes[0].events[1].minor"),
        "{:?}",
        r.json
    );
    // A positional form is refused by name, with its path.
    let r = h
        .post_raw(
            "/v1/write",
            with(&|v| v["writes"][0]["events"][1] = json!([2, null, 1, 3, 0, "AQID", null])),
        )
        .await;
    let message = r.json["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "invalid field writes[0].events[1]: invalid type: array, expected a JSON object for struct Event"
        ),
        "{message}"
    );
    let r = h.post_json("/v1/write", &json!([CLIENT, []])).await;
    let message = r.json["message"].as_str().unwrap();
    assert!(
        message.starts_with(
            "invalid body: invalid type: array, expected a JSON object for struct WriteRequest"
        ),
        "{message}"
    );
    // Without the JSON content type.
    let r = h
        .send(
            Request::post("/v1/write")
                .body(Body::from(serde_json::to_vec(&good).unwrap()))
                .unwrap(),
        )
        .await;
    assert_eq!((r.status.as_u16(), r.code()), (415, 41500));
    // Nothing of any of them was written.
    assert!(h.read_all(TYPE, ID).await.is_empty());
    // And the aggregate is still writable from 1.
    assert_eq!(h.write(&good).await.json["aggregateVersion"], 1);
}

#[tokio::test]
async fn a_refused_aggregate_refuses_the_whole_request() {
    let h = Harness::new();
    let other = "3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e0444";
    let mut body = write_of(&[1]);
    let mut second = write_to(other, &[1])["writes"][0].clone();
    second["allowCreate"] = json!(false);
    body["writes"].as_array_mut().unwrap().push(second);
    let r = h.write(&body).await;
    assert_eq!(
        (r.status.as_u16(), r.outcome(), r.code()),
        (422, "rejected", 2005)
    );
    assert!(
        h.read_all(TYPE, ID).await.is_empty(),
        "the first aggregate was not written either"
    );
    // Both at once when allowed.
    body["writes"][1]["allowCreate"] = json!(true);
    let r = h.write(&body).await;
    assert_eq!(
        r.json,
        json!({"outcome": "landed", "duplicate": false}),
        "no single version for two"
    );
    assert_eq!(h.read_all(TYPE, ID).await.len(), 1);
    assert_eq!(h.read_all(TYPE, other).await.len(), 1);
}

#[tokio::test]
async fn reads_page_by_size_and_unknown_aggregates_are_empty() {
    let h = Harness::new();
    for seq in 1..=5 {
        assert_eq!(
            h.write(&write_of(&[seq])).await.json["aggregateVersion"],
            seq
        );
    }
    let base = format!("/v1/aggregates/{TYPE}/{ID}/events");
    let p1 = h.get(&format!("{base}?limit=2")).await;
    assert_eq!(p1.json["batches"].as_array().unwrap().len(), 2);
    assert_eq!(p1.json["batches"][0]["version"], 1);
    assert_eq!(p1.json["batches"][0]["clientId"], CLIENT);
    assert!(p1.json["batches"][0]["serverTimestamp"].as_u64().unwrap() > 1_600_000_000_000);
    assert_eq!(p1.json["next"], 3);
    let p3 = h.get(&format!("{base}?from=5&limit=2")).await;
    assert_eq!(p3.json["batches"][0]["version"], 5);
    assert_eq!(p3.json["next"], json!(null));
    let past = h.get(&format!("{base}?from=6")).await;
    assert_eq!(past.json, json!({"batches": [], "next": null, "tip": 5}));
    let unknown = h
        .get(&format!(
            "/v1/aggregates/{TYPE}/{}/events",
            uuid::Uuid::nil()
        ))
        .await;
    assert_eq!(
        (unknown.status, unknown.json.clone()),
        (
            StatusCode::OK,
            json!({"batches": [], "next": null, "tip": 0})
        )
    );
    let bad = h.get(&format!("/v1/aggregates/{TYPE}/nope/events")).await;
    assert_eq!((bad.status.as_u16(), bad.code()), (400, 40014));
    let bad = h.get(&format!("{base}?from=x")).await;
    assert_eq!((bad.status.as_u16(), bad.code()), (400, 40014));
    let bad = h.get(&format!("{base}?form=2")).await;
    assert_eq!((bad.status.as_u16(), bad.code()), (400, 40014));
    // Numbers are ASCII digits only: a sign (`%2B` is `+`; a bare `+` is a space), Arabic-Indic
    // and fullwidth digits, spaces and empty values are refused, not read as 1.
    for query in [
        "from=%2B1",
        "from=+1",
        "limit=%2B2",
        "from=%D9%A1",
        "from=%EF%BC%91",
        "limit=%DB%B2",
        "from=1%20",
        "from=",
        "from=-0",
    ] {
        let bad = h.get(&format!("{base}?{query}")).await;
        assert_eq!(
            (bad.status.as_u16(), bad.code()),
            (400, 40014),
            "{query}: {:?}",
            bad.json
        );
    }
    let leading_zeros = h.get(&format!("{base}?from=05&limit=0002")).await;
    assert_eq!(leading_zeros.json["batches"][0]["version"], 5);
}

#[tokio::test]
async fn large_batches_close_a_page_early() {
    let h = Harness::new();
    let big = celeriant_sync_protocol::encoding::encode_base64(&vec![1u8; 700_000]);
    for seq in 1..=3 {
        let mut w = write_of(&[seq]);
        w["writes"][0]["events"][0]["data"] = json!(big);
        assert_eq!(h.write(&w).await.outcome(), "landed");
    }
    let page = h.get(&format!("/v1/aggregates/{TYPE}/{ID}/events")).await;
    assert_eq!(
        page.json["batches"].as_array().unwrap().len(),
        2,
        "1 MiB page budget"
    );
    assert_eq!(page.json["next"], 3);
    assert_eq!(h.read_all(TYPE, ID).await.len(), 3);
}

#[tokio::test]
async fn health_and_unknown_routes_answer_json() {
    let h = Harness::new();
    let health = h.get("/healthz").await;
    assert_eq!(health.status, StatusCode::OK);
    let mut fields = health.json.clone();
    let store = fields.as_object_mut().unwrap().remove("store").unwrap();
    assert_eq!(
        fields,
        json!({"status": "ok", "backend": "embedded", "protocol": 1, "faults": false})
    );
    assert_eq!(store["state"], "ok");
    assert_eq!(store["checksumFailures"], 0);
    assert_eq!(store["recoveries"], 0);
    assert!(store["freeBytes"].as_u64().unwrap() > 0, "{store}");
    let missing = h.get("/v1/nothing-here").await;
    assert_eq!(
        (missing.status.as_u16(), missing.outcome(), missing.code()),
        (404, "rejected", 40400)
    );
    let wrong = h.get("/v1/write").await;
    assert_eq!(
        (wrong.status.as_u16(), wrong.code()),
        (405, 40500),
        "{:?}",
        wrong.json
    );
    let faults = h.get("/v1/faults").await;
    assert_eq!(
        (faults.status.as_u16(), faults.code()),
        (404, 40400),
        "no control endpoint without --faults"
    );
    // The API prefix itself is an API route too, with any method.
    for (method, path) in [
        (Method::GET, "/v1"),
        (Method::GET, "/v1/"),
        (Method::POST, "/v1"),
        (Method::PUT, "/v1/"),
    ] {
        let r = h
            .send(
                Request::builder()
                    .method(method.clone())
                    .uri(path)
                    .body(Body::empty())
                    .unwrap(),
            )
            .await;
        assert_eq!(
            (r.status.as_u16(), r.outcome(), r.code()),
            (404, "rejected", 40400),
            "{method} {path}"
        );
        assert_eq!(
            r.headers["content-type"], "application/json",
            "{method} {path}"
        );
        assert_eq!(
            r.json["message"],
            format!("no route for {method} {path}"),
            "{method} {path}"
        );
    }
}

#[tokio::test]
async fn uuids_are_read_in_any_spelling_and_always_answered_canonically() {
    let h = Harness::new();
    let upper = |u: &str| u.to_uppercase();
    let simple = |u: &str| u.replace('-', "");
    // Uppercase client id, unhyphenated type id, braced aggregate id.
    let mut body = write_of(&[1]);
    body["clientId"] = json!(upper(CLIENT));
    body["writes"][0]["aggregate"] = json!({"typeId": simple(TYPE), "id": format!("{{{ID}}}")});
    let r = h.write(&body).await;
    assert_eq!(r.json["aggregateVersion"], 1, "{:?}", r.json);
    // The same ids in the canonical spelling name the same client and aggregate.
    let r = h.write(&write_of(&[1])).await;
    assert_eq!(r.code(), 2002, "{:?}", r.json);
    // Read paths are lenient too; what comes back is lowercase and hyphenated.
    for path in [
        format!("/v1/aggregates/{}/{}/events", upper(TYPE), simple(ID)),
        format!("/v1/aggregates/urn:uuid:{TYPE}/{ID}/events"),
    ] {
        let page = h.get(&path).await;
        assert_eq!(page.status, StatusCode::OK, "{path}: {:?}", page.json);
        assert_eq!(page.json["batches"][0]["clientId"], CLIENT, "{path}");
    }
    let mut with_event_id = write_of(&[2]);
    with_event_id["writes"][0]["events"][0]["eventId"] =
        json!("urn:uuid:A1B2C3D4-E5F6-4A7B-8C9D-0E1F2A3B4C5D");
    assert_eq!(h.write(&with_event_id).await.outcome(), "landed");
    assert_eq!(
        h.read_all(TYPE, ID).await[1]["eventId"],
        "a1b2c3d4-e5f6-4a7b-8c9d-0e1f2a3b4c5d"
    );
}

#[tokio::test]
async fn over_the_admission_limit_is_429_with_retry_after() {
    let h = Harness::with(|c| c.limits.max_inflight = 0, EmbeddedOptions::default());
    let r = h.write(&write_of(&[1])).await;
    assert_eq!(
        (r.status.as_u16(), r.outcome(), r.code()),
        (429, "retry", 42900)
    );
    assert_eq!(r.headers["retry-after"], "1");
    assert_eq!(r.json["retryAfterMs"], 1000);
    assert!(h.read_all(TYPE, ID).await.is_empty());
}

/// An unknown API path needs no session and costs as little as `/healthz`: it is charged to the
/// same per-address rate (`--static-rate-per-ip`), so a flood of 404s is refused, 429 42911,
/// before it can slow the writes (a hostile review reproduced the `/healthz` flood with
/// `GET /v1/x` once `/healthz` was limited). Fails if the 404 routes lose the layer.
#[tokio::test]
async fn unknown_api_paths_are_charged_to_the_cheap_rate() {
    let h = Harness::auth(|c| {
        c.limits.static_rate_per_ip = 1;
        c.limits.static_burst_per_ip = 3;
    });
    let mut answers = Vec::new();
    for path in ["/v1/x", "/v1", "/v1/", "/v1/y/z", "/v1/x"] {
        answers.push(h.get(path).await.code());
    }
    assert_eq!(answers[..3], [40400, 40400, 40400], "{answers:?}");
    assert_eq!(answers[3..], [42911, 42911], "{answers:?}");
}
