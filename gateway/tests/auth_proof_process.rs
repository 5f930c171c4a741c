//! The stolen-token sequence attack against a real `celeriant-gateway` process: a session token
//! copied off a device (a log, a proxy, an XSS) used to write `clientSeq` 2^53−1 as the device,
//! which would have made every later write of the device answered 2002 and lost. With request
//! proofs (the default under `--auth device`) the token alone, the token with a proof signed by
//! another key, and the token with a captured proof of another request are all refused, nothing
//! is stored, and the device's next write lands.

mod support;

use serde_json::{Value, json};
use support::app::TYPE;
use support::device::{Device, fresh_nonce};
use support::process::*;

const AGGREGATE: &str = "3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e0099";
const MAX_SEQ: u64 = (1 << 53) - 1;

fn write_body(client: &str, seq: u64) -> Vec<u8> {
    serde_json::to_vec(&json!({"clientId": client, "writes": [{
        "aggregate": {"typeId": TYPE, "id": AGGREGATE}, "allowCreate": true,
        "events": [{"clientSeq": seq, "eventId": null, "timestamp": 1_700_000_000_000u64,
                    "type": 3, "minor": 0, "data": "aGk=", "iv": null}]}]}))
    .unwrap()
}

fn seqs(base: &str, token: &str) -> Vec<u64> {
    let r = get(
        base,
        &format!("/v1/aggregates/{TYPE}/{AGGREGATE}/events"),
        Some(token),
    );
    assert_eq!(r.status, 200, "{:?}", r.json);
    r.json["batches"]
        .as_array()
        .unwrap()
        .iter()
        .flat_map(|b| b["events"].as_array().unwrap().clone())
        .map(|e: Value| e["clientSeq"].as_u64().unwrap())
        .collect()
}

#[test]
fn a_stolen_token_cannot_write_the_last_sequence_and_the_device_keeps_writing() {
    let dir = data_dir();
    let gw = Process::start(dir.path(), &[]);
    let (device, thief_key) = (Device::a(), Device::b());
    let r = post(
        &gw.base,
        "/v1/session",
        None,
        &device.session_body(fresh_nonce()),
    );
    assert_eq!(r.status, 200, "{:?}", r.json);
    let token = r.json["token"].as_str().unwrap().to_owned();
    let bearer = format!("Bearer {token}");
    let json = ("content-type", "application/json");

    // The device writes seq 1 with its proof; the thief captures that request whole.
    let first = write_body(&device.client_id, 1);
    let captured = device.proof("POST", "/v1/write", &token, &first);
    let r = send_with(
        "POST",
        &gw.base,
        "/v1/write",
        &[json, ("authorization", &bearer), ("dpop", &captured)],
        &first,
    );
    assert_eq!(r.status, 200, "{:?}", r.json);

    let attack = write_body(&device.client_id, MAX_SEQ);
    // 1. The token alone.
    let r = send_with(
        "POST",
        &gw.base,
        "/v1/write",
        &[json, ("authorization", &bearer)],
        &attack,
    );
    assert_eq!((r.status, r.code()), (401, 40130), "{:?}", r.json);
    // 2. The token with a proof signed by the thief's own key.
    let forged = thief_key.proof("POST", "/v1/write", &token, &attack);
    let r = send_with(
        "POST",
        &gw.base,
        "/v1/write",
        &[json, ("authorization", &bearer), ("dpop", &forged)],
        &attack,
    );
    assert_eq!((r.status, r.code()), (401, 40131), "{:?}", r.json);
    // 3. The token with the captured proof, over the attack's body.
    let r = send_with(
        "POST",
        &gw.base,
        "/v1/write",
        &[json, ("authorization", &bearer), ("dpop", &captured)],
        &attack,
    );
    assert_eq!(r.status, 401, "{:?}", r.json);
    assert!([40132, 40134].contains(&r.code()), "{:?}", r.json);
    // 4. The captured request replayed whole: refused (and it would have been idempotent).
    let r = send_with(
        "POST",
        &gw.base,
        "/v1/write",
        &[json, ("authorization", &bearer), ("dpop", &captured)],
        &first,
    );
    assert_eq!((r.status, r.code()), (401, 40134), "{:?}", r.json);

    assert_eq!(
        seqs(&gw.base, &token),
        vec![1],
        "nothing of the thief's was stored"
    );
    // The device's next write lands.
    let r = post(
        &gw.base,
        "/v1/write",
        Some(&token),
        &serde_json::from_slice(&write_body(&device.client_id, 2)).unwrap(),
    );
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(r.json["outcome"], "landed", "{:?}", r.json);
    assert_eq!(seqs(&gw.base, &token), vec![1, 2]);
}
