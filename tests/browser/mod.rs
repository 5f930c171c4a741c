//! Support for the browser tests: the gateway's address, fresh names, and bindings to the
//! JavaScript helpers in `support.js`.
#![allow(dead_code)]

pub mod bounds;
pub mod views;
// Not every test file uses them (each is its own crate).
#[allow(unused_imports)]
pub use views::*;

use celeriant_sync::SyncClient;
use js_sys::{Array, Object, Promise, Reflect};
use wasm_bindgen::prelude::*;
use wasm_bindgen_futures::JsFuture;

#[wasm_bindgen(module = "/tests/browser/support.js")]
extern "C" {
    #[wasm_bindgen(js_name = recordWrites)]
    pub fn record_writes() -> JsValue;
    #[wasm_bindgen(js_name = scriptWrites)]
    pub fn script_writes(script: &Array) -> JsValue;
    #[wasm_bindgen(js_name = countPosts)]
    pub fn count_posts() -> JsValue;
    #[wasm_bindgen(js_name = skewClock)]
    pub fn skew_clock(ms: f64) -> JsValue;
    #[wasm_bindgen(js_name = setFaults)]
    fn set_faults_js(gateway: &str, secret: &str, rates: &JsValue) -> Promise;
    #[wasm_bindgen(js_name = readAll)]
    fn read_all_js(gateway: &str, type_id: &str, id: &str) -> Promise;
    #[wasm_bindgen(js_name = setOnline)]
    pub fn set_online(online: bool);
    #[wasm_bindgen(js_name = sleep)]
    fn sleep_js(ms: u32) -> Promise;
    #[wasm_bindgen(js_name = rejection)]
    fn rejection_js(promise: &Promise) -> Promise;
    #[wasm_bindgen(js_name = countOutboxEvents)]
    fn count_outbox_events_js(db: &str) -> Promise;
    #[wasm_bindgen(js_name = countStore)]
    fn count_store_js(db: &str, store: &str) -> Promise;
    #[wasm_bindgen(js_name = base64)]
    pub fn base64(bytes: &[u8]) -> String;
}

/// The gateway the test script started (`CELERIANT_TEST_GATEWAY` at build time).
pub fn gateway() -> &'static str {
    match option_env!("CELERIANT_TEST_GATEWAY") {
        Some(gateway) => gateway,
        None => panic!("run the browser tests through `npm test`, which starts a gateway"),
    }
}

/// The faults secret of that gateway (`CELERIANT_TEST_FAULTS_SECRET` at build time), sent with
/// every `/v1/faults` request.
pub fn faults_secret() -> &'static str {
    match option_env!("CELERIANT_TEST_FAULTS_SECRET") {
        Some(secret) => secret,
        None => {
            panic!("run the browser tests through scripts/browser-tests.sh, which starts a gateway")
        }
    }
}

/// An aggregate type that the browser tests' gateway policy (`tests/browser/policy.toml`) makes
/// `authenticated`: for the tests where two devices (two databases, two client ids) write to
/// one aggregate, which the gateway's default policy (`owner`) would refuse to the second.
pub const SHARED_TYPE: &str = "5a4ed000-0000-4000-8000-00000000b001";

/// A fresh random UUID string.
pub fn uuid() -> String {
    js_sys::eval("crypto.randomUUID()")
        .unwrap()
        .as_string()
        .unwrap()
}

/// A fresh database name.
pub fn db_name(test: &str) -> String {
    format!("test-{test}-{}", uuid())
}

/// Awaits a promise.
pub async fn wait(promise: Promise) -> Result<JsValue, JsValue> {
    JsFuture::from(promise).await
}

/// Awaits a promise that must fulfil.
pub async fn ok(promise: Promise) -> JsValue {
    match wait(promise).await {
        Ok(v) => v,
        Err(e) => panic!("unexpected rejection: {}", describe(&e)),
    }
}

/// The rejection of a promise that must reject.
pub async fn err(promise: Promise) -> JsValue {
    wait(rejection_js(&promise))
        .await
        .expect("expected a rejection")
}

pub fn describe(e: &JsValue) -> String {
    match e.dyn_ref::<js_sys::Error>() {
        Some(err) => format!(
            "{}: {} (code {:?})",
            String::from(err.name()),
            String::from(err.message()),
            get(e, "code")
        ),
        None => format!("{e:?}"),
    }
}

pub async fn sleep(ms: u32) {
    ok(sleep_js(ms)).await;
}

pub async fn set_faults(rates: &str) -> JsValue {
    ok(set_faults_js(
        gateway(),
        faults_secret(),
        &js_sys::JSON::parse(rates).unwrap(),
    ))
    .await
}

pub async fn no_faults() {
    set_faults("{}").await;
}

/// Every event the gateway holds for an aggregate.
pub async fn read_all(type_id: &str, id: &str) -> Vec<JsValue> {
    ok(read_all_js(gateway(), type_id, id))
        .await
        .unchecked_into::<Array>()
        .iter()
        .collect()
}

pub async fn count_store(db: &str, store: &str) -> u32 {
    ok(count_store_js(db, store)).await.as_f64().unwrap() as u32
}

/// The events the `outbox` store of `db` holds (its records may hold several each).
pub async fn outbox_events(db: &str) -> u32 {
    ok(count_outbox_events_js(db)).await.as_f64().unwrap() as u32
}

/// Waits until the `outbox` store of `db` is empty: landed events are deleted (pruned) in the
/// background once the drain is idle. Fails the test after `ms`.
pub async fn pruned_within(db: &str, ms: u32) {
    let mut waited = 0;
    loop {
        let left = count_store(db, "outbox").await;
        if left == 0 {
            return;
        }
        assert!(
            waited < ms,
            "{left} landed events still stored after {ms} ms"
        );
        sleep(50).await;
        waited += 50;
    }
}

/// `object[key]`.
pub fn get(object: &JsValue, key: &str) -> JsValue {
    Reflect::get(object, &key.into()).unwrap_or(JsValue::UNDEFINED)
}

pub fn num(object: &JsValue, key: &str) -> f64 {
    get(object, key)
        .as_f64()
        .unwrap_or_else(|| panic!("{key} is not a number in {object:?}"))
}

pub fn string(object: &JsValue, key: &str) -> String {
    get(object, key)
        .as_string()
        .unwrap_or_else(|| panic!("{key} is not a string in {object:?}"))
}

/// Parses a JSON literal into a JS value.
pub fn json(text: &str) -> JsValue {
    js_sys::JSON::parse(text).unwrap_or_else(|e| panic!("bad JSON {text}: {e:?}"))
}

/// Builds `{ key: value, ... }`.
pub fn object(pairs: &[(&str, JsValue)]) -> JsValue {
    let o = Object::new();
    for (k, v) in pairs {
        Reflect::set(&o, &(*k).into(), v).unwrap();
    }
    o.into()
}

pub fn aggregate(type_id: &str, id: &str) -> JsValue {
    object(&[("typeId", type_id.into()), ("id", id.into())])
}

/// An event `{ type, data }` with bytes as data.
pub fn bytes_event(event_type: u32, data: &[u8]) -> JsValue {
    object(&[
        ("type", event_type.into()),
        ("data", js_sys::Uint8Array::from(data).into()),
    ])
}

/// Opens a client on the test gateway with extra options (a JSON object's fields).
pub async fn open(db: &str, extra: &str) -> SyncClient {
    let options = json(extra);
    Reflect::set(&options, &"gatewayUrl".into(), &gateway().into()).unwrap();
    Reflect::set(&options, &"databaseName".into(), &db.into()).unwrap();
    match SyncClient::open(options).await {
        Ok(client) => client,
        Err(e) => panic!("open failed: {}", describe(&e)),
    }
}

/// Receipts' sequences.
pub fn seqs(receipts: &JsValue) -> Vec<u64> {
    receipts
        .unchecked_ref::<Array>()
        .iter()
        .map(|r| num(&r, "clientSeq") as u64)
        .collect()
}

/// Waits until `check` holds, polling every 20 ms, at most `ms`.
pub async fn until(ms: u32, what: &str, mut check: impl FnMut() -> bool) {
    let mut waited = 0;
    while !check() {
        assert!(waited < ms, "timed out after {ms} ms waiting for {what}");
        sleep(20).await;
        waited += 20;
    }
}

#[wasm_bindgen(module = "/tests/browser/support.js")]
extern "C" {
    #[wasm_bindgen(js_name = insertRaw)]
    fn insert_raw_js(db: &str, store: &str, record: &JsValue, key: &JsValue) -> Promise;
    #[wasm_bindgen(js_name = createV1)]
    fn create_v1_js(db: &str, content: &JsValue) -> Promise;
    #[wasm_bindgen(js_name = storeNames)]
    fn store_names_js(db: &str) -> Promise;
}

/// Puts `record` into `store` of `db` directly (under `key` for stores without a key path).
pub async fn insert_raw(db: &str, store: &str, record: &JsValue, key: Option<&JsValue>) {
    ok(insert_raw_js(
        db,
        store,
        record,
        key.unwrap_or(&JsValue::UNDEFINED),
    ))
    .await;
}

/// Creates `db` as version 1 of the client laid it out (see `createV1` in support.js).
pub async fn create_v1(db: &str, content: &JsValue) {
    ok(create_v1_js(db, content)).await;
}

/// The names of `db`'s object stores.
pub async fn store_names(db: &str) -> Vec<String> {
    ok(store_names_js(db))
        .await
        .unchecked_into::<Array>()
        .iter()
        .filter_map(|n| n.as_string())
        .collect()
}

#[wasm_bindgen(module = "/tests/browser/support.js")]
extern "C" {
    #[wasm_bindgen(js_name = getRaw)]
    fn get_raw_js(db: &str, store: &str, key: &JsValue) -> Promise;
    /// Collects the client's event details: `{ status: [], synced: [], parked: [], syncedAt: [] }`.
    #[wasm_bindgen(js_name = listen)]
    pub fn listen(client: &JsValue) -> JsValue;
    #[wasm_bindgen(js_name = within)]
    fn within_js(promise: &Promise, ms: u32, what: &str) -> Promise;
}

pub async fn get_raw(db: &str, store: &str, key: &JsValue) -> JsValue {
    ok(get_raw_js(db, store, key)).await
}

/// Awaits `promise`, failing the test after `ms`.
pub async fn within(promise: Promise, ms: u32, what: &str) -> Result<JsValue, JsValue> {
    wait(within_js(&promise, ms, what)).await
}

/// The elements of a JS array property, e.g. `list(&seen, "synced")`.
pub fn list(object: &JsValue, key: &str) -> Vec<JsValue> {
    get(object, key).unchecked_into::<Array>().iter().collect()
}

/// The recorded request bodies, parsed.
pub fn bodies(log: &JsValue) -> Vec<JsValue> {
    list(log, "bodies")
        .iter()
        .map(|b| json(&b.as_string().unwrap()))
        .collect()
}

/// The raw recorded request bodies.
pub fn raw_bodies(log: &JsValue) -> Vec<String> {
    list(log, "bodies")
        .iter()
        .map(|b| b.as_string().unwrap())
        .collect()
}

/// When each recorded write was sent (`performance.now()`, ms), in order.
pub fn request_times(log: &JsValue) -> Vec<f64> {
    list(log, "times")
        .iter()
        .map(|t| t.as_f64().unwrap())
        .collect()
}

/// `(aggregate id, [clientSeq])` of a parsed write body.
pub fn body_seqs(body: &JsValue) -> (String, Vec<u64>) {
    let writes = get(body, "writes").unchecked_into::<Array>();
    assert_eq!(writes.length(), 1, "one aggregate per request");
    let write = writes.get(0);
    let id = string(&get(&write, "aggregate"), "id");
    let seqs = list(&write, "events")
        .iter()
        .map(|e| num(e, "clientSeq") as u64)
        .collect();
    (id, seqs)
}

/// Calls `log.restore()`.
pub fn restore(log: &JsValue) {
    let f: js_sys::Function = get(log, "restore").unchecked_into();
    f.call0(log).unwrap();
}

#[wasm_bindgen(module = "/tests/browser/support.js")]
extern "C" {
    #[wasm_bindgen(js_name = upgradeRaw)]
    fn upgrade_raw_js(db: &str) -> Promise;
}

/// Upgrades `db` to its next version as a newer tab would; fails the test after `ms`.
pub async fn upgrade_raw(db: &str, ms: u32) -> JsValue {
    match within(upgrade_raw_js(db), ms, "the upgrade").await {
        Ok(v) => v,
        Err(e) => panic!("upgrade failed: {}", describe(&e)),
    }
}

/// A gateway address nothing listens on: every send fails, nothing ever syncs.
pub const NOWHERE: &str = "http://127.0.0.1:9";

/// Opens a client on `db` whose gateway is unreachable, with extra options (a JSON object).
pub async fn open_nowhere(db: &str, extra: &str) -> SyncClient {
    let options = json(extra);
    Reflect::set(&options, &"gatewayUrl".into(), &NOWHERE.into()).unwrap();
    Reflect::set(&options, &"databaseName".into(), &db.into()).unwrap();
    match SyncClient::open(options).await {
        Ok(client) => client,
        Err(e) => panic!("open failed: {}", describe(&e)),
    }
}

/// Awaits `client.flush()`, failing the test (with the status) after `seconds`.
///
/// On failure the client is closed first (not awaited): a failed test never closes its client,
/// and the tests of a file share one page, so its drain loop would otherwise go on competing with
/// the next tests for the page's IndexedDB (in WebKit one long settle blocks every database).
pub async fn flush_within(client: &SyncClient, seconds: u32) {
    if let Err(e) = within(client.flush(), seconds * 1000, "flush").await {
        let status = js_sys::JSON::stringify(&client.status());
        let _ = client.close();
        panic!("flush failed: {} (status {:?})", describe(&e), status);
    }
}

/// Collects the client's event details (see `listen`).
pub fn listened(client: &SyncClient) -> JsValue {
    listen(&JsValue::from(client.clone()))
}

/// Whether a `synced` event for aggregate `id` was seen (in what [`listened`] collects).
pub fn synced_for(seen: &JsValue, id: &str) -> bool {
    list(seen, "synced")
        .iter()
        .any(|s| string(&get(s, "aggregate"), "id") == id)
}

/// A binary payload that starts with `tag`.
pub fn payload(tag: &str) -> Vec<u8> {
    let mut bytes = tag.as_bytes().to_vec();
    bytes.extend((0..=255u8).step_by(7)); // binary, not just text
    bytes
}

/// Version 1 content for `create_v1`: five events (sequences 1–5, ids `ids`) of one aggregate,
/// its counter, a random client id, and — with `pinned` — a pin over sequences 1 and 2.
pub fn v1_content(t: &str, a: &str, ids: &[String], pinned: bool) -> JsValue {
    let events = Array::new();
    for (i, id) in ids.iter().enumerate() {
        let seq = i as u32 + 1;
        let wire = format!(
            r#"{{"clientSeq":{seq},"eventId":"{id}","timestamp":1790000000000,"type":1,"minor":0,"data":"{}","iv":null}}"#,
            base64(&[seq as u8])
        );
        events.push(&object(&[
            ("t", t.into()),
            ("a", a.into()),
            ("s", seq.into()),
            ("e", id.as_str().into()),
            ("w", wire.into()),
        ]));
    }
    let counter = object(&[
        ("t", t.into()),
        ("a", a.into()),
        ("last", (ids.len() as u32).into()),
    ]);
    let pin = object(&[
        ("t", t.into()),
        ("a", a.into()),
        ("first", 1.into()),
        ("last", 2.into()),
        ("count", 2.into()),
    ]);
    object(&[
        ("clientId", uuid().into()),
        ("events", events.into()),
        ("counters", Array::of1(&counter).into()),
        ("pin", if pinned { pin } else { JsValue::UNDEFINED }),
    ])
}
