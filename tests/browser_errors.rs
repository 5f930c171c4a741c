//! Typed errors in a real browser: what `append` (bad input), `open` (bad options), `flush` (a
//! parked aggregate), `whenSynced` (a bad id), `read` (a bad aggregate), `subscribe` (thrown,
//! not rejected) and a closed client give are all instances of the exported
//! `CeleriantSyncError` class — and of `Error` — with their `name` and `code`, and
//! `isCeleriantSyncError` agrees; parked events decode with `json()`; `ServerCode` holds the
//! protocol's numbers. What an app passes in is never read as absent because reading it threw
//! (a getter, a revoked Proxy): that is refused too.
#![cfg(target_arch = "wasm32")]

mod browser;

use browser::bounds::memory_bytes;
use browser::*;
use celeriant_sync::{CeleriantSyncError, ServerCode, SyncClient, is_celeriant_sync_error};
use js_sys::{Array, Function};
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen(inline_js = r#"
export function throwingGetter(base, key) {
    const o = Object.assign({}, base);
    Object.defineProperty(o, key, { enumerable: true, get() { throw new Error("no"); } });
    return o;
}
export function throwingElement(ev) {
    const a = [ev];
    Object.defineProperty(a, 0, { get() { throw new Error("no"); } });
    return a;
}
export function lyingBytes() {
    const u = new Uint8Array(64).fill(7);
    let n = 0;
    Object.defineProperty(u, "length", { get() { return ++n === 1 ? 16 : 4096; } });
    return u;
}
export function detachedBytes() {
    const u = new Uint8Array(8);
    structuredClone(u.buffer, { transfer: [u.buffer] });
    return u;
}
// Calls `client[method](...args)` through the package's JS class, as an app does (a Rust test
// calling the Rust method skips wasm-bindgen's argument conversion): `{ value }` or `{ threw }`.
export function callAsApp(client, method, args) {
    try {
        return { value: client[method](...args) };
    } catch (e) {
        return { threw: e };
    }
}
// A decide callback whose array says length 1 on the first read and 0 after, counting reads.
export function flipFlopDecide(event) {
    const f = () => new Proxy([event], {
        get(t, k, r) {
            if (k === "length") return ++f.lengthReads === 1 ? 1 : 0;
            return Reflect.get(t, k, r);
        },
    });
    f.lengthReads = 0;
    return f;
}
// An Error whose `message` and `name` getters throw.
export function nastyError() {
    const e = new Error("x");
    Object.defineProperty(e, "message", { get() { throw new Error("no"); } });
    Object.defineProperty(e, "name", { get() { throw new Error("no"); } });
    return e;
}
// Data whose `toJSON` throws a nasty error.
export function nastyData(error) { return { toJSON() { throw error; } }; }
// A status listener that, the first time it runs, replaces its target's `dispatchEvent` with
// one whose result throws when converted; it counts its calls in `seen.calls`.
export function sabotagingListener(seen) {
    seen.calls = 0;
    return function (e) {
        if (seen.calls++ === 0) {
            seen.target = e.currentTarget;
            e.currentTarget.dispatchEvent = () => ({ valueOf() { throw 1; } });
        }
    };
}
// A `status` event of the app's own, whose `detail` getter throws, dispatched on the target.
export function fakeStatus(target) {
    const ev = new Event("status");
    Object.defineProperty(ev, "detail", { get() { throw new Error("no"); } });
    EventTarget.prototype.dispatchEvent.call(target, ev);
}
// A subscribe listener that replaces every view's `events` with a revoked Proxy.
export function spoilingListener() {
    return (view) => {
        const { proxy, revoke } = Proxy.revocable([], {});
        revoke();
        view.events = proxy;
    };
}
export function revokedProxy() {
    const { proxy, revoke } = Proxy.revocable({}, {});
    revoke();
    return proxy;
}
"#)]
extern "C" {
    #[wasm_bindgen(js_name = throwingGetter)]
    fn throwing_getter(base: &JsValue, key: &str) -> JsValue;
    #[wasm_bindgen(js_name = revokedProxy)]
    fn revoked_proxy() -> JsValue;
    #[wasm_bindgen(js_name = throwingElement)]
    fn throwing_element(event: &JsValue) -> JsValue;
    #[wasm_bindgen(js_name = lyingBytes)]
    fn lying_bytes() -> JsValue;
    #[wasm_bindgen(js_name = detachedBytes)]
    fn detached_bytes() -> JsValue;
    #[wasm_bindgen(js_name = callAsApp)]
    fn call_as_app(client: &JsValue, method: &str, args: &Array) -> JsValue;
    #[wasm_bindgen(js_name = flipFlopDecide)]
    fn flip_flop_decide(event: &JsValue) -> Function;
    #[wasm_bindgen(js_name = nastyError)]
    fn nasty_error() -> JsValue;
    #[wasm_bindgen(js_name = nastyData)]
    fn nasty_data(error: &JsValue) -> JsValue;
    #[wasm_bindgen(js_name = sabotagingListener)]
    fn sabotaging_listener(seen: &JsValue) -> Function;
    #[wasm_bindgen(js_name = fakeStatus)]
    fn fake_status(target: &JsValue);
    #[wasm_bindgen(js_name = spoilingListener)]
    fn spoiling_listener() -> Function;
}

/// `value instanceof class`, as JavaScript computes it.
fn instance_of(value: &JsValue, class: &JsValue) -> bool {
    Function::new_with_args("v, c", "return v instanceof c")
        .call2(&JsValue::NULL, value, class)
        .unwrap()
        .as_bool()
        .unwrap()
}

/// Asserts everything a thrown value must be, and returns its code.
fn typed(e: &JsValue, what: &str) -> String {
    let class = CeleriantSyncError::class();
    assert!(class.is_function(), "the class is exported");
    assert_eq!(string(&class, "name"), "CeleriantSyncError");
    assert!(
        instance_of(e, &class),
        "{what}: not a CeleriantSyncError: {}",
        describe(e)
    );
    assert!(e.is_instance_of::<js_sys::Error>(), "{what}: not an Error");
    assert!(is_celeriant_sync_error(e), "{what}: the guard says no");
    assert_eq!(string(e, "name"), "CeleriantSyncError", "{what}");
    // The platform made it: a message, a stack, and `String(e)` names it.
    assert!(!string(e, "message").is_empty(), "{what}");
    let text = String::from(e.unchecked_ref::<js_sys::Error>().to_string());
    assert!(text.starts_with("CeleriantSyncError: "), "{what}: {text}");
    string(e, "code")
}

#[wasm_bindgen_test]
async fn every_error_is_an_instance_of_the_exported_class() {
    // open: bad options.
    let Err(e) = SyncClient::open(json(r#"{"gatewayUrl": 5}"#)).await else {
        panic!("bad options must be refused");
    };
    assert_eq!(typed(&e, "open"), "INVALID_OPTIONS");

    let db = db_name("errors");
    let client = open(&db, "{}").await;
    let t = uuid();
    // append: bad input (a synchronous check, rejected).
    let bad = Array::of1(&object(&[("type", 0.into()), ("data", json("1"))]));
    let e = err(client.append(aggregate(&t, &uuid()), bad.into())).await;
    assert_eq!(typed(&e, "append, bad type"), "INVALID_EVENT_TYPE");
    assert_eq!(num(&e, "index"), 0.0);
    let e = err(client.append(aggregate("not-a-uuid", &uuid()), Array::new().into())).await;
    assert_eq!(typed(&e, "append, bad aggregate"), "INVALID_AGGREGATE");
    // whenSynced, read: bad arguments.
    let e = err(client.when_synced("nope".into())).await;
    assert_eq!(typed(&e, "whenSynced"), "INVALID_EVENT_ID");
    let e = err(client.read(aggregate(&t, "nope"))).await;
    assert_eq!(typed(&e, "read"), "INVALID_AGGREGATE");
    // subscribe throws synchronously.
    let e = client
        .subscribe(aggregate(&t, "nope"), Function::new_no_args(""))
        .expect_err("a bad aggregate");
    assert_eq!(typed(&e, "subscribe"), "INVALID_AGGREGATE");

    // flush: parked (the gateway's fault injection refuses type 13 with 2022).
    set_faults(r#"{"rejectType":13}"#).await;
    let a = uuid();
    ok(client.append(
        aggregate(&t, &a),
        Array::of1(&object(&[
            ("type", 13.into()),
            ("data", json(r#"{"n":7}"#)),
        ]))
        .into(),
    ))
    .await;
    let e = within(client.flush(), 15_000, "flush")
        .await
        .expect_err("flush rejects while parked");
    no_faults().await;
    assert_eq!(typed(&e, "flush"), "PARKED");
    assert_eq!(
        num(&e, "parkCode"),
        ServerCode::SCHEMA_VALIDATION_FAILED as u32 as f64
    );
    // The parked event decodes like a view event.
    let parked: Array = ok(client.parked_events()).await.unchecked_into();
    assert_eq!(parked.length(), 1);
    let json_of: Function = get(&parked.get(0), "json").unchecked_into();
    let value = json_of.call0(&parked.get(0)).unwrap();
    assert_eq!(num(&value, "n"), 7.0);

    // A closed client.
    ok(client.close()).await;
    let e = err(client.flush()).await;
    assert_eq!(typed(&e, "flush, closed"), "CLOSED");
    let e = err(client.append(aggregate(&t, &a), Array::of1(&json_event()).into())).await;
    assert_eq!(typed(&e, "append, closed"), "CLOSED");
    ok(SyncClient::delete_database_named(db.into())).await;
}

fn json_event() -> JsValue {
    object(&[("type", 1.into()), ("data", json("1"))])
}

#[wasm_bindgen_test]
fn the_guard_refuses_look_alikes_and_accepts_other_copies() {
    assert!(!is_celeriant_sync_error(&JsValue::NULL));
    assert!(!is_celeriant_sync_error(&"CeleriantSyncError".into()));
    assert!(!is_celeriant_sync_error(
        &js_sys::Error::new("plain").into()
    ));
    // A plain object with the right fields is not an Error.
    let fake = object(&[
        ("name", "CeleriantSyncError".into()),
        ("code", "CLOSED".into()),
    ]);
    assert!(!is_celeriant_sync_error(&fake));
    // An Error named so with a code (another copy of the package made it) is one; it is not
    // an instance of this copy's class.
    let other = js_sys::Error::new("from another copy");
    other.set_name("CeleriantSyncError");
    js_sys::Reflect::set(&other, &"code".into(), &"CLOSED".into()).unwrap();
    assert!(is_celeriant_sync_error(&other));
    assert!(!instance_of(&other, &CeleriantSyncError::class()));
    // The server codes are the protocol's numbers.
    assert_eq!(ServerCode::CLIENT_IDEMPOTENCY_VIOLATION as u32, 2002);
    assert_eq!(ServerCode::AGGREGATE_FORBIDDEN as u32, 40302);
}

/// A getter that throws, or a revoked Proxy, is refused with a typed error, never read as
/// absent: an `encryption` getter that threw used to open the client without encryption, a
/// `user` one without the user binding, an `expectedVersion` one appended without the guard.
#[wasm_bindgen_test]
async fn options_and_events_whose_reading_throws_are_refused_not_read_as_absent() {
    no_faults().await;
    let db = db_name("errors-throwing");
    let base = object(&[
        ("gatewayUrl", gateway().into()),
        ("databaseName", db.clone().into()),
    ]);
    for key in ["encryption", "user", "databaseName", "auth"] {
        let Err(e) = SyncClient::open(throwing_getter(&base, key)).await else {
            panic!("open with a throwing {key} getter: accepted");
        };
        assert_eq!(typed(&e, key), "INVALID_OPTIONS", "{key}: {}", describe(&e));
        assert!(string(&e, "message").contains(key), "{}", describe(&e));
    }
    let Err(e) = SyncClient::open(revoked_proxy()).await else {
        panic!("open with a revoked Proxy: accepted");
    };
    assert_eq!(typed(&e, "revoked proxy"), "INVALID_OPTIONS");

    let client = open(&db, "{}").await;
    let a = aggregate(&uuid(), &uuid());
    let events = || Array::of1(&bytes_event(1, &[1])).into();
    let guard = throwing_getter(&JsValue::from(js_sys::Object::new()), "expectedVersion");
    let e = err(client.append_with(a.clone(), events(), guard)).await;
    assert_eq!(typed(&e, "expectedVersion"), "INVALID_OPTIONS");
    let e = err(client.append_with(a.clone(), events(), revoked_proxy())).await;
    assert_eq!(typed(&e, "append options proxy"), "INVALID_OPTIONS");
    let event = throwing_getter(&bytes_event(1, &[1]), "eventId");
    let e = err(client.append(a.clone(), Array::of1(&event).into())).await;
    assert_eq!(typed(&e, "eventId"), "INVALID_EVENT_ID");
    // An events array whose element getter throws, or a revoked Proxy as the array.
    let e = err(client.append(a.clone(), throwing_element(&bytes_event(1, &[1])))).await;
    assert_eq!(typed(&e, "element getter"), "INVALID_EVENTS");
    let e = err(client.append(a.clone(), revoked_proxy())).await;
    assert_eq!(typed(&e, "events proxy"), "INVALID_EVENTS");
    // A detached buffer as data: its bytes cannot be read.
    let event = object(&[("type", 1.into()), ("data", detached_bytes())]);
    let e = err(client.append(a.clone(), Array::of1(&event).into())).await;
    assert_eq!(typed(&e, "detached"), "DATA_NOT_SERIALIZABLE");
    assert_eq!(outbox_events(&db).await, 0, "nothing stored");
    // A Uint8Array whose own `length` lies (16, then 4,096): its 64 real bytes are stored, and
    // the module lives on (js-sys' copy trusted that getter and wrote past its buffer).
    let event = object(&[("type", 1.into()), ("data", lying_bytes())]);
    ok(client.append(a.clone(), Array::of1(&event).into())).await;
    ok(client.append(a.clone(), events())).await;
    assert_eq!(outbox_events(&db).await, 2, "both stored");
    flush_within(&client, 30).await;
    let stored = read_all(&string(&a, "typeId"), &string(&a, "id")).await;
    assert_eq!(stored.len(), 2);
    assert_eq!(
        string(&stored[0], "data"),
        base64(&[7u8; 64]),
        "the real bytes, not what length said"
    );
    ok(client.close()).await;
}

/// Exported methods taking a string are given `{ length: 2 ** 28 }` sixteen times (4 GiB in
/// all): each is refused as it should be, and the module lives on. Taken as `&str`, wasm-bindgen's
/// JS allocated `length` bytes in the module before finding no string there, and never freed
/// them. `inspect`'s `payloads` getter that throws is refused, not read as `false`; `decide`'s
/// result is read once, so a `length` that changes between reads cannot make the check and the
/// append disagree.
#[wasm_bindgen_test]
async fn exported_methods_read_what_an_app_passes_once_and_allocate_nothing_for_it() {
    no_faults().await;
    let db = db_name("errors-strings");
    let client = open(&db, "{}").await;
    let app = JsValue::from(client.clone());
    let huge = || json(r#"{"length": 268435456}"#);
    let listener = Function::new_no_args("");
    for round in 0..16 {
        let got = call_as_app(&app, "whenSynced", &Array::of1(&huge()));
        assert!(
            get(&got, "threw").is_undefined(),
            "whenSynced threw: {}",
            describe(&get(&got, "threw"))
        );
        let e = err(get(&got, "value").unchecked_into()).await;
        assert_eq!(typed(&e, "whenSynced"), "INVALID_EVENT_ID", "round {round}");
        let got = call_as_app(&app, "addEventListener", &Array::of2(&huge(), &listener));
        let threw = get(&got, "threw");
        assert!(
            threw.is_instance_of::<js_sys::TypeError>(),
            "round {round}: {}",
            describe(&threw)
        );
        assert_eq!(
            string(&threw, "message"),
            "the event type must be a string of at most 256 characters"
        );
        let got = call_as_app(&app, "removeEventListener", &Array::of2(&huge(), &listener));
        assert!(get(&got, "threw").is_instance_of::<js_sys::TypeError>());
        let class = get(&app, "constructor");
        let got = call_as_app(&class, "deleteDatabase", &Array::of1(&huge()));
        let e = err(get(&got, "value").unchecked_into()).await;
        assert_eq!(
            typed(&e, "deleteDatabase"),
            "INVALID_OPTIONS",
            "round {round}"
        );
    }
    // The module still works: an append lands, and its id is waited for through the JS class.
    let a = aggregate(&uuid(), &uuid());
    let receipts: Array = ok(client.append(a.clone(), Array::of1(&bytes_event(1, &[1])).into()))
        .await
        .unchecked_into();
    let id = get(&receipts.get(0), "eventId");
    let got = call_as_app(&app, "whenSynced", &Array::of1(&id));
    within(get(&got, "value").unchecked_into(), 20_000, "whenSynced")
        .await
        .map_err(|e| describe(&e))
        .unwrap();

    // inspect: a throwing `payloads` getter is refused.
    let options = throwing_getter(&JsValue::from(js_sys::Object::new()), "payloads");
    let e = err(client.inspect(Some(options))).await;
    assert_eq!(typed(&e, "inspect payloads"), "INVALID_OPTIONS");

    // decide: the result's `length` says 1, then 0. Read once: one event appended.
    let decide = flip_flop_decide(&bytes_event(1, &[2]));
    let done = ok(client.decide(a.clone(), decide.clone(), JsValue::UNDEFINED)).await;
    let receipts: Array = get(&done, "receipts").unchecked_into();
    assert_eq!(receipts.length(), 1, "{}", describe(&done));
    assert_eq!(num(&decide, "lengthReads"), 1.0, "length read once");
    ok(client.close()).await;
    ok(SyncClient::delete_database_named(db.into())).await;
}

/// What an app can hand the module through other doors is read catching too, and the client
/// lives on: a non-boolean `setOffline` (wasm-bindgen converted a `bool` after reading the
/// client's pointer, running `valueOf`), `isCeleriantSyncError` of a revoked Proxy (js-sys'
/// `isPrototypeOf` threw through the module, leaking a table slot each time: 1,024 broke every
/// call taking a borrowed value), an error whose getters throw (from `toJSON`, from a
/// projection's `apply`), the client's target with its `dispatchEvent` replaced, fake `status`
/// events whose `detail` throws, and a view whose `events` a listener spoiled.
#[wasm_bindgen_test]
async fn other_doors_into_the_module_are_read_catching_and_the_client_lives_on() {
    no_faults().await;
    let db = db_name("errors-doors");
    let client = open(&db, "{}").await;
    let app = JsValue::from(client.clone());
    for bad in [json(r#""true""#), json("{}"), json("1")] {
        let got = call_as_app(&app, "setOffline", &Array::of1(&bad));
        let threw = get(&got, "threw");
        assert!(
            threw.is_instance_of::<js_sys::TypeError>(),
            "{}",
            describe(&threw)
        );
    }
    assert!(!client.offline(), "still online");
    for _ in 0..1100 {
        assert!(!is_celeriant_sync_error(&revoked_proxy()));
    }
    let e = err(client.when_synced("nope".into())).await;
    assert!(
        is_celeriant_sync_error(&e),
        "still answers after 1,100 revoked Proxies"
    );

    // An error whose getters throw, from `toJSON`: refused with its code.
    let a = aggregate(&uuid(), &uuid());
    let event = object(&[("type", 1.into()), ("data", nasty_data(&nasty_error()))]);
    let e = err(client.append(a.clone(), Array::of1(&event).into())).await;
    assert_eq!(typed(&e, "toJSON"), "DATA_NOT_SERIALIZABLE");

    // The target's `dispatchEvent` replaced by a listener: events still reach listeners.
    let seen = JsValue::from(js_sys::Object::new());
    let listener = sabotaging_listener(&seen);
    client
        .add_event_listener("status".into(), &listener, JsValue::UNDEFINED)
        .unwrap();
    // Each append changes the status (pending, then synced).
    for n in 0..2u8 {
        ok(client.append(a.clone(), Array::of1(&bytes_event(1, &[n])).into())).await;
        flush_within(&client, 20).await;
    }
    for _ in 0..100 {
        if num(&seen, "calls") >= 2.0 {
            break;
        }
        gloo_timers::future::TimeoutFuture::new(20).await;
    }
    assert!(
        num(&seen, "calls") >= 2.0,
        "status events after the replacement"
    );

    // A projection whose `apply` throws an error whose getters throw: PROJECTION_FAILED.
    ok(client.append(a.clone(), Array::of1(&bytes_event(1, &[1])).into())).await;
    let thrower = Function::new_with_args("e", "return { initial: 0, apply() { throw e; } };")
        .call1(&JsValue::NULL, &nasty_error())
        .unwrap();
    let projection = client.project(a.clone(), thrower).unwrap();
    let value: Function = get(&projection, "value").unchecked_into();
    let e = err(value.call0(&projection).unwrap().unchecked_into()).await;
    assert_eq!(typed(&e, "apply"), "PROJECTION_FAILED");
    // Fake `status` events with a throwing `detail`, dispatched on the client's target (which
    // the projection listens on): ignored, and borrowed values still cross afterwards.
    for _ in 0..1100 {
        fake_status(&get(&seen, "target"));
    }
    assert!(is_celeriant_sync_error(&e));

    // A `subscribe` listener that spoils `view.events` before the projection reads it: the
    // projection folds what it could read (nothing), and nothing throws through the module.
    let b = aggregate(&uuid(), &uuid());
    let _unsubscribe = client.subscribe(b.clone(), spoiling_listener()).unwrap();
    let counting = Function::new_no_args("return { initial: 0, apply(s) { return s + 1; } };")
        .call0(&JsValue::NULL)
        .unwrap();
    let folded = client.project(b.clone(), counting).unwrap();
    ok(client.append(b.clone(), Array::of1(&bytes_event(1, &[1])).into())).await;
    let value: Function = get(&folded, "value").unchecked_into();
    let state = ok(value.call0(&folded).unwrap().unchecked_into()).await;
    assert_eq!(state.as_f64(), Some(0.0), "{}", describe(&state));

    // A forged `closed` status on the client's target (whose own `dispatchEvent` the listener
    // above replaced) does not close a live projection: the client's own state decides.
    let c = aggregate(&uuid(), &uuid());
    let counting = Function::new_no_args("return { initial: 0, apply(s) { return s + 1; } };")
        .call0(&JsValue::NULL)
        .unwrap();
    let live = client.project(c.clone(), counting).unwrap();
    Function::new_with_args(
        "t",
        "EventTarget.prototype.dispatchEvent.call(t, \
         new CustomEvent('status', { detail: { state: 'closed' } }))",
    )
    .call1(&JsValue::NULL, &get(&seen, "target"))
    .unwrap();
    ok(client.append(c.clone(), Array::of1(&bytes_event(1, &[1])).into())).await;
    let value: Function = get(&live, "value").unchecked_into();
    ok(value.call0(&live).unwrap().unchecked_into()).await; // not CLOSED
    let mut state = JsValue::UNDEFINED;
    for _ in 0..100 {
        state = get(&get(&live, "current"), "state");
        if state.as_f64() == Some(1.0) {
            break;
        }
        gloo_timers::future::TimeoutFuture::new(20).await;
    }
    assert_eq!(state.as_f64(), Some(1.0), "{}", describe(&state));
    ok(client.close()).await;
    ok(SyncClient::delete_database_named(db.into())).await;
}

/// The bytes of the module's memory.
#[wasm_bindgen_test]
async fn data_over_the_limit_is_refused_before_it_is_copied_into_the_module() {
    // 128 MiB as bytes and as JSON text: copied first (as before), each would grow the module's
    // memory by as much, for good (wasm memory never shrinks).
    no_faults().await;
    let db = db_name("errors-large-data");
    let client = open(&db, "{}").await;
    let a = aggregate(&uuid(), &uuid());
    let before = memory_bytes();
    assert!(before < 128.0 * 1024.0 * 1024.0, "memory already {before}");
    let bytes = js_sys::Uint8Array::new_with_length(128 << 20);
    let text = Function::new_no_args("return 'x'.repeat(128 * 1024 * 1024 - 2)")
        .call0(&JsValue::NULL)
        .unwrap();
    for (what, data) in [("bytes", JsValue::from(bytes)), ("JSON", text)] {
        let event = object(&[("type", 1.into()), ("data", data)]);
        let e = err(client.append(a.clone(), Array::of1(&event).into())).await;
        assert_eq!(typed(&e, what), "EVENT_TOO_LARGE", "{what}");
        assert_eq!(num(&e, "index"), 0.0, "{what}");
    }
    // An `iv` longer than 12 bytes is refused before it is copied too.
    let iv = js_sys::Uint8Array::new_with_length(128 << 20);
    let event = object(&[
        ("type", 1.into()),
        ("data", js_sys::Uint8Array::new_with_length(1).into()),
        ("iv", iv.into()),
    ]);
    let e = err(client.append(a.clone(), Array::of1(&event).into())).await;
    assert_eq!(typed(&e, "iv"), "INVALID_IV");
    let grown = memory_bytes() - before;
    assert!(
        grown < 16.0 * 1024.0 * 1024.0,
        "the module grew by {grown} bytes"
    );
    // Data with no JSON text: refused with its code, nothing thrown through the module.
    for source in [
        "return () => 1",
        "return Symbol('s')",
        "return { toJSON() { return undefined; } }",
    ] {
        let data = Function::new_no_args(source).call0(&JsValue::NULL).unwrap();
        let event = object(&[("type", 1.into()), ("data", data)]);
        let e = err(client.append(a.clone(), Array::of1(&event).into())).await;
        assert_eq!(typed(&e, source), "DATA_NOT_SERIALIZABLE", "{source}");
    }
    // Just over the limit is refused too, and at the limit it is taken.
    for (n, code) in [(1 << 20, None), ((1 << 20) + 1, Some("EVENT_TOO_LARGE"))] {
        let data = js_sys::Uint8Array::new_with_length(n);
        let event = object(&[("type", 1.into()), ("data", data.into())]);
        let got = client.append(a.clone(), Array::of1(&event).into());
        match code {
            None => drop(ok(got).await),
            Some(code) => assert_eq!(typed(&err(got).await, "limit"), code),
        }
    }
    ok(client.close()).await;
    ok(SyncClient::delete_database_named(db.into())).await;
}
