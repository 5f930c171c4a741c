//! What appends copy into the module is bounded, in a real browser: one call's `data` in all
//! (64 MiB for a plain append, 4 MiB for a write sent as one request: `TOO_MANY_EVENTS`) and
//! what the module's appends hold until stored (256 MiB with a fixed cost per event and call:
//! `BUSY`), each event refused before its copy when its length in bytes shows it goes past. The
//! module's memory (4 GiB at most) is never given back: before these bounds an append of
//! 10,000 valid events of 1 MiB aborted it, and so did appends made in a loop without awaiting.
//! (In a file of their own: the memory they free would hide a copy in `browser_bounds`' tests.)
#![cfg(target_arch = "wasm32")]

mod browser;

use browser::bounds::*;
use browser::*;
use celeriant_sync::SyncClient;
use js_sys::{Array, Function, Uint8Array};
use wasm_bindgen::prelude::*;
use wasm_bindgen_test::*;

wasm_bindgen_test_configure!(run_in_browser);

#[wasm_bindgen_test]
async fn one_append_holds_at_most_64_mib_counted_while_it_is_copied() {
    no_faults().await;
    let db = db_name("bounds-append-total");
    let client = open(&db, "{}").await;
    client.set_offline(true.into()).unwrap();
    let a = aggregate(&uuid(), &uuid());
    let mib = event(Uint8Array::new_with_length(MIB).into());
    let before = memory_bytes();
    // 10,000 events of 1 MiB each are each valid: 10 GiB to copy, which aborted the module.
    // Refused once 64 MiB are counted, having copied no more.
    let e = err(client.append(a.clone(), repeated(&mib, 10_000))).await;
    let (code, message) = code_and_message(&e);
    assert_eq!(code, "TOO_MANY_EVENTS", "{message}");
    assert!(
        message.starts_with("events[64]: an append holds 68157440 bytes of data or more"),
        "{message}"
    );
    assert_eq!(
        num(&e, "index"),
        64.0,
        "the event that went past: {message}"
    );
    let grown = memory_bytes() - before;
    assert!(
        grown < 96.0 * f64::from(MIB),
        "the module grew by {grown} bytes"
    );
    // Nothing of it was stored, no sequence taken; exactly 64 MiB is taken, one byte more not.
    let small = event(Uint8Array::new_with_length(1).into());
    let receipts = ok(client.append(a.clone(), repeated(&small, 1))).await;
    assert_eq!(seqs(&receipts), [1]);
    let over = Array::new();
    for _ in 0..64 {
        over.push(&mib);
    }
    over.push(&small);
    let e = err(client.append(a.clone(), over.clone().into())).await;
    assert_eq!(code_and_message(&e).0, "TOO_MANY_EVENTS");
    assert_eq!(num(&e, "index"), 64.0);
    over.pop();
    let receipts = ok(client.append(a.clone(), over.into())).await;
    assert_eq!(seqs(&receipts), (2..=65).collect::<Vec<u64>>());

    // JSON data is measured in UTF-8 before it is copied (its UTF-16 length alone when that
    // settles it): "é" is one unit and two bytes. A conditional append (one request, 4 MiB): four events of
    // 900,002 bytes, and a fifth whose 450,002 units fit what is left but whose bytes do not.
    let e_acute = event(eval(r#"return "é".repeat(450000)"#));
    let options = object(&[("expectedVersion", 65.into())]);
    let e = err(client.append_with(a.clone(), repeated(&e_acute, 5), options.clone())).await;
    let (code, message) = code_and_message(&e);
    assert_eq!(code, "TOO_MANY_EVENTS", "{message}");
    assert!(
        message.starts_with(
            "events[4]: a conditional append, sent as one request, holds 4500010 bytes"
        ),
        "{message}"
    );
    assert_eq!(num(&e, "index"), 4.0);
    // An event over 1 MiB in UTF-8 (600,002 units, 1,200,002 bytes) is too large, whatever
    // room the call has left: splitting the append would not help.
    let big = event(eval(r#"return "é".repeat(600000)"#));
    let four_and_big = Array::new();
    for _ in 0..4 {
        four_and_big.push(&e_acute);
    }
    four_and_big.push(&big);
    let e = err(client.append_with(a.clone(), four_and_big.into(), options.clone())).await;
    assert_eq!(code_and_message(&e).0, "EVENT_TOO_LARGE");
    assert_eq!(num(&e, "index"), 4.0);
    let e = err(client.append(a.clone(), repeated(&big, 1))).await;
    let (code, message) = code_and_message(&e);
    assert_eq!(code, "EVENT_TOO_LARGE");
    // Counted only until past the bound: the message says what it knows, a lower bound.
    assert!(
        message.starts_with("events[0]: events[0].data is at least 104857")
            && message.ends_with(" bytes of JSON; at most 1048576 are accepted"),
        "{message}"
    );
    let receipts = ok(client.append_with(a.clone(), repeated(&e_acute, 4), options)).await;
    assert_eq!(seqs(&receipts), [66, 67, 68, 69]);
    // Counted in UTF-8 before the copy, surrogate pairs as 4 bytes: 262,143 emoji and the
    // quotes are 1,048,574 bytes, one more emoji 1,048,578.
    let fits = event(eval(r#"return "😀".repeat(262143)"#));
    let receipts = ok(client.append(a.clone(), repeated(&fits, 1))).await;
    assert_eq!(seqs(&receipts), [70]);
    let over = event(eval(r#"return "😀".repeat(262144)"#));
    let e = err(client.append(a.clone(), repeated(&over, 1))).await;
    assert_eq!(code_and_message(&e).0, "EVENT_TOO_LARGE");

    // An append called from inside another's arguments (here `data`'s getter) is refused
    // before it copies anything: each level of such recursion held an event not counted yet.
    let c = JsValue::from(client.clone());
    let nested = Function::new_with_args(
        "client, agg",
        "const out = {}; \
         out.event = { type: 1, get data() { \
             out.inner = client.append(agg, [{ type: 1, data: new Uint8Array(1 << 20) }]); \
             return new Uint8Array(1); } }; \
         return out;",
    )
    .call2(&JsValue::NULL, &c, &a)
    .unwrap();
    let receipts = ok(client.append(a.clone(), repeated(&get(&nested, "event"), 1))).await;
    assert_eq!(seqs(&receipts), [71], "the outer append is taken");
    let inner = err(get(&nested, "inner").unchecked_into()).await;
    assert_eq!(code_and_message(&inner).0, "BUSY");
    // The same through every getter an event has, and between `append` and `appendAtomic`
    // either way round; a refused `appendAtomic` names a write, as its other refusals do.
    let other = aggregate(&uuid(), &uuid());
    let nested = Function::new_with_args(
        "client, agg, other",
        "const out = {};          const one = () => [{ type: 1, data: new Uint8Array(1) }];          out.viaId = { type: 1, data: new Uint8Array(1), get eventId() {              out.byId = client.append(agg, one()); return undefined; } };          out.viaIv = { type: 1, data: new Uint8Array(1), get iv() {              out.byIv = client.appendAtomic([{ aggregate: agg, events: one() },                                              { aggregate: other, events: one() }]);              return undefined; } };          out.inAtomic = { type: 1, get data() {              out.byAtomic = client.append(agg, one()); return new Uint8Array(1); } };          return out;",
    )
    .call3(&JsValue::NULL, &c, &a, &other)
    .unwrap();
    let receipts = ok(client.append(a.clone(), repeated(&get(&nested, "viaId"), 1))).await;
    assert_eq!(seqs(&receipts), [72]);
    let inner = err(get(&nested, "byId").unchecked_into()).await;
    let (code, message) = code_and_message(&inner);
    assert_eq!(code, "BUSY", "{message}");
    assert_eq!(num(&inner, "index"), 0.0, "{message}");
    let receipts = ok(client.append(a.clone(), repeated(&get(&nested, "viaIv"), 1))).await;
    assert_eq!(seqs(&receipts), [73]);
    let inner = err(get(&nested, "byIv").unchecked_into()).await;
    let (code, message) = code_and_message(&inner);
    assert_eq!(code, "BUSY", "{message}");
    assert_eq!(num(&inner, "write"), 0.0, "{message}");
    assert!(
        message.starts_with("writes[0]: append called from inside"),
        "{message}"
    );
    let atomic = Array::of2(
        &object(&[
            ("aggregate", other.clone()),
            ("events", repeated(&get(&nested, "inAtomic"), 1)),
        ]),
        &object(&[
            ("aggregate", aggregate(&uuid(), &uuid())),
            ("events", repeated(&small, 1)),
        ]),
    );
    ok(client.append_atomic(atomic.into())).await;
    let inner = err(get(&nested, "byAtomic").unchecked_into()).await;
    let (code, message) = code_and_message(&inner);
    assert_eq!(code, "BUSY", "{message}");
    assert_eq!(num(&inner, "index"), 0.0, "{message}");
    // None of them left the flag set: the next append is taken.
    let receipts = ok(client.append(a.clone(), repeated(&small, 1))).await;
    assert_eq!(seqs(&receipts), [74]);

    // An atomic write is one request: a later write gets what the earlier ones left.
    let b = aggregate(&uuid(), &uuid());
    let write =
        |agg: &JsValue| object(&[("aggregate", agg.clone()), ("events", repeated(&mib, 3))]);
    let writes = Array::of2(&write(&b), &write(&aggregate(&uuid(), &uuid())));
    let e = err(client.append_atomic(writes.into())).await;
    let (code, message) = code_and_message(&e);
    assert_eq!(code, "TOO_MANY_EVENTS", "{message}");
    assert_eq!(num(&e, "write"), 1.0, "{message}");
    assert_eq!(num(&e, "index"), 1.0, "{message}");
    ok(client.close()).await;
    ok(SyncClient::delete_database_named(db.into())).await;
}

#[wasm_bindgen_test]
async fn what_the_modules_appends_hold_until_stored_is_bounded_across_calls() {
    // Calls made without awaiting, each valid (64 MiB), each copied at once: their events wait
    // for IndexedDB (here: for an encryption key that comes later) and used to pile up until
    // the module aborted. The module's appends hold at most 256 MiB; past it a call is BUSY.
    no_faults().await;
    let db = db_name("bounds-held");
    let gate = eval(
        "const s = {}; s.key = new Promise((_, no) => { s.fail = no; }); \
         s.key.catch(() => {}); s.keyFor = () => s.key; return s;",
    );
    let options = json(&format!(
        r#"{{"gatewayUrl":"{}","databaseName":"{db}"}}"#,
        gateway()
    ));
    js_sys::Reflect::set(&options, &"encryption".into(), &get(&gate, "keyFor")).unwrap();
    let client = SyncClient::open(options).await.unwrap();
    client.set_offline(true.into()).unwrap();
    let a = aggregate(&uuid(), &uuid());
    let mib = event(Uint8Array::new_with_length(MIB).into());
    let mut waiting: Vec<js_sys::Promise> = (0..3)
        .map(|_| client.append(a.clone(), repeated(&mib, 64)))
        .collect();
    // A fourth has room for 63 of its events: each event and call costs a little beyond its
    // data (so appends of empty events are bounded too), and 256 MiB is the whole.
    let e = err(client.append(a.clone(), repeated(&mib, 64))).await;
    let (code, message) = code_and_message(&e);
    assert_eq!(code, "BUSY", "{message}");
    assert_eq!(num(&e, "index"), 63.0, "{message}");
    // 63 of them fit (what the refused call held was given back at once); then not one more.
    waiting.push(client.append(a.clone(), repeated(&mib, 63)));
    let e = err(client.append(a.clone(), repeated(&mib, 1))).await;
    assert_eq!(code_and_message(&e).0, "BUSY");
    assert_eq!(num(&e, "index"), 0.0);
    // Events without data are counted too: 1,011,840 bytes were left, 1,024 for the call and
    // 128 for each event, so the 7,898th is refused.
    let empty = event(Uint8Array::new_with_length(0).into());
    let e = err(client.append(a.clone(), repeated(&empty, 10_000))).await;
    let (code, message) = code_and_message(&e);
    assert_eq!(code, "BUSY", "{message}");
    assert_eq!(num(&e, "index"), 7897.0, "{message}");
    // The key never comes: the four fail, and what they held is given back.
    get(&gate, "fail")
        .unchecked_into::<Function>()
        .call1(&JsValue::NULL, &js_sys::Error::new("no key"))
        .unwrap();
    for w in waiting {
        assert_eq!(code_and_message(&err(w).await).0, "ENCRYPTION_FAILED");
    }
    let e = err(client.append(a.clone(), repeated(&mib, 64))).await;
    assert_eq!(
        code_and_message(&e).0,
        "ENCRYPTION_FAILED",
        "not BUSY any more"
    );
    ok(client.close()).await;
    ok(SyncClient::delete_database_named(db.into())).await;
}
