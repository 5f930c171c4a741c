//! Request proofs in the browser, against the real gateway (which requires them by default):
//! every write, read and change-stream request the page makes carries a `DPoP` proof and
//! works; a session token taken from the page and replayed from outside it — alone, with a
//! proof captured from the page, or with a proof signed by another key — is refused (401) and
//! stores nothing, and the device's next write lands.
#![cfg(target_arch = "wasm32")]

mod browser;

use browser::*;
use js_sys::{Array, Promise};
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen(module = "/tests/browser/support.js")]
extern "C" {
    #[wasm_bindgen(js_name = captureRequests)]
    fn capture_requests() -> JsValue;
    #[wasm_bindgen(js_name = sendRaw)]
    fn send_raw(method: &str, url: &str, headers: &JsValue, body: &str) -> Promise;
    #[wasm_bindgen(js_name = foreignProof)]
    fn foreign_proof(token: &str, method: &str, url: &str, body: &str) -> Promise;
    #[wasm_bindgen(js_name = recordViews)]
    fn record_views(client: &JsValue, aggregate: &JsValue) -> JsValue;
}

fn requests(log: &JsValue) -> Vec<JsValue> {
    Array::from(&get(log, "requests")).iter().collect()
}

fn restore(log: &JsValue) {
    let f: js_sys::Function = get(log, "restore").unchecked_into();
    f.call0(log).unwrap();
}

fn headers(token: &str, proof: Option<&str>) -> JsValue {
    let mut pairs = vec![("authorization", JsValue::from(format!("Bearer {token}")))];
    if let Some(proof) = proof {
        pairs.push(("dpop", proof.into()));
    }
    object(&pairs)
}

async fn code_of(method: &str, url: &str, headers: &JsValue, body: &str) -> (f64, f64) {
    let r = ok(send_raw(method, url, headers, body)).await;
    (num(&r, "status"), num(&r, "code"))
}

#[wasm_bindgen_test]
async fn every_request_of_the_page_carries_a_proof_and_a_token_taken_from_it_is_useless() {
    no_faults().await;
    let db = db_name("proof");
    let (t, a) = (uuid(), uuid());
    let log = capture_requests();
    let client = open(&db, "{}").await;
    let agg = aggregate(&t, &a);
    let views = record_views(&JsValue::from(client.clone()), &agg);
    ok(client.append(agg.clone(), Array::of1(&bytes_event(1, &[1])).into())).await;
    flush_within(&client, 30).await;
    ok(client.read(agg.clone())).await;
    // Until the change stream has been asked for too.
    for _ in 0..100 {
        if requests(&log)
            .iter()
            .any(|r| string(r, "url").ends_with("/v1/watch"))
        {
            break;
        }
        sleep(100).await;
    }
    restore(&log);
    let _ = views;
    let seen = requests(&log);
    for kind in ["/v1/write", "/v1/aggregates/", "/v1/watch"] {
        assert!(
            seen.iter().any(|r| string(r, "url").contains(kind)),
            "the page made no {kind} request"
        );
    }
    for r in &seen {
        let proof = get(r, "dpop").as_string().unwrap_or_default();
        assert_eq!(
            proof.split('.').count(),
            3,
            "{} {} has no proof",
            string(r, "method"),
            string(r, "url")
        );
        assert!(
            get(r, "authorization")
                .as_string()
                .unwrap()
                .starts_with("Bearer ")
        );
    }
    assert_eq!(read_all(&t, &a).await.len(), 1, "the page's write landed");

    // A thief has the page's token and a captured write request (token, proof, body).
    let write = seen
        .iter()
        .find(|r| string(r, "url").ends_with("/v1/write"))
        .unwrap();
    let url = string(write, "url");
    let token = string(write, "authorization")["Bearer ".len()..].to_owned();
    let captured_proof = string(write, "dpop");
    let captured_body = string(write, "body");
    let attack = captured_body.replacen("\"clientSeq\":1", "\"clientSeq\":9007199254740991", 1);
    assert_ne!(attack, captured_body);
    // The token alone.
    assert_eq!(
        code_of("POST", &url, &headers(&token, None), &attack).await,
        (401.0, 40130.0)
    );
    // The token with the captured proof over the attack's body, or over the captured body.
    let (status, code) = code_of(
        "POST",
        &url,
        &headers(&token, Some(&captured_proof)),
        &attack,
    )
    .await;
    assert_eq!(status, 401.0);
    assert!(code == 40132.0 || code == 40134.0, "{code}");
    assert_eq!(
        code_of(
            "POST",
            &url,
            &headers(&token, Some(&captured_proof)),
            &captured_body
        )
        .await,
        (401.0, 40134.0),
        "a replay"
    );
    // The token with a proof the thief signed with its own key.
    let forged = ok(foreign_proof(&token, "POST", &url, &attack))
        .await
        .as_string()
        .unwrap();
    assert_eq!(
        code_of("POST", &url, &headers(&token, Some(&forged)), &attack).await,
        (401.0, 40131.0)
    );
    // A read with the token alone.
    let read_url = format!("{}/v1/aggregates/{t}/{a}/events?from=1", gateway());
    assert_eq!(
        code_of("GET", &read_url, &headers(&token, None), "").await,
        (401.0, 40130.0)
    );

    // Nothing of the thief's was stored, and the device's next write lands.
    ok(client.append(agg.clone(), Array::of1(&bytes_event(1, &[2])).into())).await;
    flush_within(&client, 30).await;
    let seqs: Vec<f64> = read_all(&t, &a)
        .await
        .iter()
        .map(|e| num(e, "clientSeq"))
        .collect();
    assert_eq!(seqs, [1.0, 2.0]);
    ok(client.close()).await;
}
