//! The attacks of issue 25 re-run against a real gateway process with its default flags (the
//! `owner` policy), on both stores (embedded, and `--backend celeriant` over the fake node):
//! another device with a valid session of its own reads, appends to (with and without
//! `allowCreate`), pre-creates and watches someone else's aggregate. Each is refused, nothing is
//! stored, nothing leaks; the victim's next write lands. Plus two creators racing over real
//! sockets, a revoked member's stream, and the start-up refusals of the policy file.

mod support;

use std::path::Path;
use std::time::Duration;

use serde_json::{Value, json};
use support::app::{STORES, Store};
use support::app::{TYPE, write_by};
use support::device::{Device, fresh_nonce};
use support::fake_celeriant::FakeCeleriant;
use support::process::{Process, data_dir, get, post, run_to_exit};
use support::sse;

const VICTIM_ID: &str = "3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e0301";
const NEVER: &str = "3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e03ff";
const WAIT: Duration = Duration::from_secs(10);

/// A gateway process over `store` with the extra `args`, and the fake node behind it (kept
/// alive with it).
fn start(store: Store, data: &Path, args: &[&str]) -> (Process, Option<FakeCeleriant>) {
    match store {
        Store::Embedded => (Process::start(data, args), None),
        Store::Celeriant => {
            let fake = FakeCeleriant::start();
            let address = fake.address();
            let backend = ["--backend", "celeriant", "--celeriant-addr", &address];
            (
                Process::start(data, &[&backend[..], args].concat()),
                Some(fake),
            )
        }
    }
}

fn session(base: &str, device: &Device) -> String {
    let r = post(
        base,
        "/v1/session",
        None,
        &device.session_body(fresh_nonce()),
    );
    assert_eq!(r.status, 200, "{:?}", r.json);
    r.json["token"].as_str().unwrap().to_owned()
}

fn write(
    base: &str,
    token: &str,
    device: &Device,
    id: &str,
    seq: u64,
    create: bool,
) -> (u16, Value) {
    let mut body = write_by(&device.client_id, TYPE, id, &[seq]);
    body["writes"][0]["allowCreate"] = json!(create);
    let r = post(base, "/v1/write", Some(token), &body);
    (r.status, r.json)
}

fn read(base: &str, token: &str, id: &str) -> (u16, Value) {
    let r = get(
        base,
        &format!("/v1/aggregates/{TYPE}/{id}/events"),
        Some(token),
    );
    (r.status, r.json)
}

#[test]
fn another_device_reads_appends_and_pre_creates_nothing_of_the_victims() {
    for store in STORES {
        another_device_reads_appends_and_pre_creates_nothing_of_the_victims_on(store);
    }
}

fn another_device_reads_appends_and_pre_creates_nothing_of_the_victims_on(store: Store) {
    let dir = data_dir();
    let (gw, _fake) = start(store, dir.path(), &["--session-rate-per-minute", "0"]);
    let (victim, attacker) = (Device::a(), Device::b());
    let (tv, ta) = (session(&gw.base, &victim), session(&gw.base, &attacker));
    let (_, landed) = write(&gw.base, &tv, &victim, VICTIM_ID, 1, true);
    assert_eq!(landed["outcome"], "landed");

    // 1. Read: the page of an aggregate that never existed — no payload, no client id.
    let stolen = read(&gw.base, &ta, VICTIM_ID);
    assert_eq!(stolen, read(&gw.base, &ta, NEVER));
    assert_eq!(stolen.1, json!({"batches": [], "next": null, "tip": 0}));
    let raw = stolen.1.to_string();
    assert!(
        !raw.contains(&victim.client_id) && !raw.contains("data"),
        "{raw}"
    );

    // 2. Append without allowCreate: the 2005 of a missing aggregate, byte for byte.
    let appended = write(&gw.base, &ta, &attacker, VICTIM_ID, 1, false);
    assert_eq!(appended, write(&gw.base, &ta, &attacker, NEVER, 1, false));
    assert_eq!(appended.1["code"], 2005);
    // 3. Append with allowCreate: 403, 40302.
    let appended = write(&gw.base, &ta, &attacker, VICTIM_ID, 2, true);
    assert_eq!(
        (appended.0, appended.1["code"].clone()),
        (403, json!(40302))
    );

    // Nothing was stored: the victim reads its one event and its next write is version 2.
    let mine = read(&gw.base, &tv, VICTIM_ID).1;
    assert_eq!(mine["tip"], 1);
    assert_eq!(mine["batches"][0]["clientId"], victim.client_id);
    let (_, next) = write(&gw.base, &tv, &victim, VICTIM_ID, 2, true);
    assert_eq!(next["aggregateVersion"], 2, "{next}");

    // 4. Pre-creating an id: the attacker owns what it creates, the victim's first write to
    // the id is refused rather than landing inside the attacker's aggregate.
    let squatted = "3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e0302";
    let (_, first) = write(&gw.base, &ta, &attacker, squatted, 1, true);
    assert_eq!(first["outcome"], "landed");
    let refused = write(&gw.base, &tv, &victim, squatted, 1, true);
    assert_eq!((refused.0, refused.1["code"].clone()), (403, json!(40302)));
    let members = get(
        &gw.base,
        &format!("/v1/aggregates/{TYPE}/{squatted}/members"),
        Some(&ta),
    );
    assert_eq!(
        members.json["owner"],
        format!("device:{}", attacker.client_id)
    );
    // The victim learns nothing of its contents.
    assert_eq!(read(&gw.base, &tv, squatted).1["tip"], 0);
    // The attacker's own aggregate holds the attacker's event only.
    let theirs = read(&gw.base, &ta, squatted).1;
    assert_eq!(theirs["batches"].as_array().unwrap().len(), 1);
}

#[test]
fn a_watch_of_anothers_aggregate_is_refused_and_never_notified() {
    for store in STORES {
        a_watch_of_anothers_aggregate_is_refused_and_never_notified_on(store);
    }
}

fn a_watch_of_anothers_aggregate_is_refused_and_never_notified_on(store: Store) {
    let dir = data_dir();
    let (gw, _fake) = start(store, dir.path(), &["--session-rate-per-minute", "0"]);
    let (victim, attacker) = (Device::a(), Device::b());
    let (tv, ta) = (session(&gw.base, &victim), session(&gw.base, &attacker));
    write(&gw.base, &tv, &victim, VICTIM_ID, 1, true);

    // The existing aggregate is refused, typed; one that does not exist yet is accepted, and
    // so is the attacker's own.
    let later = "3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e0303";
    let own = "3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e0304";
    let body = json!({"aggregates": [
        {"typeId": TYPE, "id": VICTIM_ID}, {"typeId": TYPE, "id": later}, {"typeId": TYPE, "id": own}
    ]});
    let mut s = sse::open(&gw.addr, "POST", "/v1/watch", Some(&ta), Some(&body));
    assert_eq!(s.status, 200, "{}", s.body);
    let ready = s.expect(WAIT);
    assert_eq!(ready.event, "ready");
    assert_eq!(
        ready.data["refused"],
        json!([{"typeId": TYPE, "id": VICTIM_ID, "code": 40302}])
    );
    // No version of the refused one, nor of the two nobody owns yet (watched, not readable: a
    // read would say nothing of them either), on either store.
    assert_eq!(
        ready.data["tips"],
        json!([null, null, null]),
        "{}",
        ready.data
    );

    // The victim writes its aggregate and creates `later` after the stream started; then the
    // attacker writes its own. The attacker's stream hears of its own write only.
    write(&gw.base, &tv, &victim, VICTIM_ID, 2, true);
    write(&gw.base, &tv, &victim, later, 1, true);
    write(&gw.base, &ta, &attacker, own, 1, true);
    let e = s.expect(WAIT);
    assert_eq!(
        (e.event.as_str(), e.data.clone()),
        ("changed", json!({"typeId": TYPE, "id": own, "version": 1}))
    );
    write(&gw.base, &tv, &victim, later, 2, true);
    match s.next(Duration::from_millis(1500)) {
        sse::Next::Quiet => {}
        sse::Next::Event(e) if e.event == "heartbeat" => {}
        other => panic!("the attacker heard {other:?}"),
    }

    // The victim's own stream is told of both.
    let body =
        json!({"aggregates": [{"typeId": TYPE, "id": VICTIM_ID}, {"typeId": TYPE, "id": later}]});
    let mut v = sse::open(&gw.addr, "POST", "/v1/watch", Some(&tv), Some(&body));
    // Its own versions (on Celeriant read on the node of the upstream watch, open since the
    // attacker's stream heard of its write).
    assert_eq!(
        v.expect(WAIT).data,
        json!({"tips": [2, 2], "deletedResets": true})
    );
    write(&gw.base, &tv, &victim, later, 3, true);
    assert_eq!(v.expect(WAIT).data["version"], 3);
}

#[test]
fn two_creators_racing_over_sockets_one_owns_each_id() {
    for store in STORES {
        two_creators_racing_over_sockets_one_owns_each_id_on(store);
    }
}

fn two_creators_racing_over_sockets_one_owns_each_id_on(store: Store) {
    let dir = data_dir();
    let (gw, _fake) = start(
        store,
        dir.path(),
        &["--session-rate-per-minute", "0", "--commit-linger-ms", "5"],
    );
    let (a, b) = (Device::a(), Device::b());
    let (ta, tb) = (session(&gw.base, &a), session(&gw.base, &b));
    for n in 0..20u32 {
        let id = format!("3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e{n:04x}");
        let (ra, rb) = std::thread::scope(|scope| {
            let ha = scope.spawn(|| write(&gw.base, &ta, &a, &id, 1, true));
            let hb = scope.spawn(|| write(&gw.base, &tb, &b, &id, 1, true));
            (ha.join().unwrap(), hb.join().unwrap())
        });
        let landed: Vec<bool> = [&ra, &rb]
            .iter()
            .map(|r| r.1["outcome"] == "landed")
            .collect();
        assert_eq!(
            landed.iter().filter(|l| **l).count(),
            1,
            "{id}: {ra:?} {rb:?}"
        );
        let (winner, token, loser) = if landed[0] {
            (&a, &ta, &rb)
        } else {
            (&b, &tb, &ra)
        };
        assert_eq!(loser.1["code"], 40302, "{loser:?}");
        let page = read(&gw.base, token, &id).1;
        assert_eq!(page["tip"], 1, "{page}");
        assert_eq!(page["batches"][0]["clientId"], winner.client_id);
    }
}

#[test]
fn a_policy_that_cannot_be_read_or_enforced_stops_the_gateway() {
    let dir = data_dir();
    let write_file = |name: &str, text: &str| {
        let path = dir.path().join(name);
        std::fs::write(&path, text).unwrap();
        path.to_str().unwrap().to_owned()
    };
    for (file, needle) in [
        (
            write_file("a.toml", "default = \"owner\"\nextra = 1\n"),
            "extra",
        ),
        (
            write_file("b.toml", "[types]\n\"not-a-uuid\" = \"owner\"\n"),
            "not-a-uuid",
        ),
        (
            write_file("c.json", r#"{"default":"owner","default":"members"}"#),
            "duplicate",
        ),
        (write_file("d.toml", "default = \"everyone\"\n"), "everyone"),
        (write_file("e.yaml", "default: owner\n"), ".toml or .json"),
    ] {
        let out = run_to_exit(&dir.path().join("db"), &["--policy", &file]);
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(!out.status.success(), "{file} was accepted");
        assert!(stderr.contains(needle), "{file}: {stderr}");
    }
    // --auth none has nobody to enforce a policy on.
    let ok = write_file("ok.toml", "default = \"owner\"\n");
    let out = run_to_exit(&dir.path().join("db"), &["--policy", &ok, "--auth", "none"]);
    assert!(!out.status.success());
    assert!(String::from_utf8_lossy(&out.stderr).contains("--policy needs sessions"));
}

/// The Celeriant backend records owners (in Celeriant): it starts under the default `owner`
/// policy, and a policy mixing presets, and enforces them; the access records it keeps there are
/// not reachable through the API.
#[test]
fn the_celeriant_backend_starts_and_enforces_any_policy() {
    let dir = data_dir();
    let mixed = dir.path().join("mixed.toml");
    std::fs::write(
        &mixed,
        format!("default = \"authenticated\"\n[types]\n\"{TYPE}\" = \"owner\"\n"),
    )
    .unwrap();
    let mixed = mixed.to_str().unwrap().to_owned();
    for args in [vec![], vec!["--policy", mixed.as_str()]] {
        let (gw, fake) = start(
            Store::Celeriant,
            dir.path(),
            &[&["--session-rate-per-minute", "0"][..], &args].concat(),
        );
        let fake = fake.unwrap();
        let (a, b) = (Device::a(), Device::b());
        let (ta, tb) = (session(&gw.base, &a), session(&gw.base, &b));
        let (_, landed) = write(&gw.base, &ta, &a, VICTIM_ID, 1, true);
        assert_eq!(landed["outcome"], "landed", "{landed}");
        assert_eq!(read(&gw.base, &tb, VICTIM_ID).1["tip"], 0, "{args:?}");
        let (status, _) = write(&gw.base, &tb, &b, VICTIM_ID, 1, true);
        assert_eq!(status, 403, "{args:?}");
        // The record went to Celeriant, under the reserved type; that type is refused here.
        let reserved = celeriant_gateway::access::RESERVED_TYPE;
        let recorded = fake
            .writes()
            .iter()
            .flat_map(|w| w.writes.keys())
            .filter(|k| k.aggregate_type_id == reserved.as_u128())
            .count();
        assert_eq!(recorded, 1, "{args:?}");
        let r = get(
            &gw.base,
            &format!("/v1/aggregates/{reserved}/{VICTIM_ID}/events"),
            Some(&ta),
        );
        assert_eq!((r.status, r.json["code"].clone()), (403, json!(40301)));
    }
}

/// Under `members`, an invited principal's stream is refused the aggregate until it accepts; a
/// member's stream hears of the aggregate while it is a member, and stops hearing of it once
/// the owner revokes it (delivery re-checks every time).
#[test]
fn a_revoked_members_stream_stops_hearing_of_the_aggregate() {
    for store in STORES {
        a_revoked_members_stream_stops_hearing_of_the_aggregate_on(store);
    }
}

fn a_revoked_members_stream_stops_hearing_of_the_aggregate_on(store: Store) {
    let dir = data_dir();
    let policy = dir.path().join("members.toml");
    std::fs::write(&policy, "default = \"members\"\n").unwrap();
    let (gw, _fake) = start(
        store,
        dir.path(),
        &[
            "--session-rate-per-minute",
            "0",
            "--policy",
            policy.to_str().unwrap(),
        ],
    );
    let (owner, member) = (Device::a(), Device::b());
    let (to, tm) = (session(&gw.base, &owner), session(&gw.base, &member));
    write(&gw.base, &to, &owner, VICTIM_ID, 1, true);
    let members = format!("/v1/aggregates/{TYPE}/{VICTIM_ID}/members");
    let grant = |access: &str| {
        let body = json!({"principal": format!("device:{}", member.client_id), "access": access});
        let body = body.to_string();
        let proof = owner.proof("PUT", &members, &to, body.as_bytes());
        let r = ureq::put(&format!("{}{members}", gw.base))
            .header("authorization", &format!("Bearer {to}"))
            .header("dpop", &proof)
            .header("content-type", "application/json")
            .send(body)
            .unwrap();
        assert_eq!(r.status().as_u16(), 200);
    };
    grant("read");
    let body = json!({"aggregates": [{"typeId": TYPE, "id": VICTIM_ID}]});
    // Invited, not accepted yet: a stranger to change streams too.
    let mut early = sse::open(&gw.addr, "POST", "/v1/watch", Some(&tm), Some(&body));
    assert_eq!(early.expect(WAIT).data["refused"][0]["code"], 40302);
    drop(early);
    let accept = format!("{members}/accept");
    let proof = member.proof("POST", &accept, &tm, b"{}");
    let r = ureq::post(&format!("{}{accept}", gw.base))
        .header("authorization", &format!("Bearer {tm}"))
        .header("dpop", &proof)
        .header("content-type", "application/json")
        .send("{}")
        .unwrap();
    assert_eq!(r.status().as_u16(), 200);
    let mut s = sse::open(&gw.addr, "POST", "/v1/watch", Some(&tm), Some(&body));
    let ready = s.expect(WAIT).data;
    assert_eq!(
        ready.get("refused"),
        None,
        "a member's entry is accepted: {ready}"
    );
    write(&gw.base, &to, &owner, VICTIM_ID, 2, true);
    // On Celeriant the owner's first write may reach the stream late, through the upstream
    // watch, after the stream registered: version 1 may come first, then 2 must.
    let mut heard = s.expect(WAIT).data;
    if heard["version"] == 1 {
        heard = s.expect(WAIT).data;
    }
    assert_eq!(heard["version"], 2, "{heard}");
    grant("none");
    write(&gw.base, &to, &owner, VICTIM_ID, 3, true);
    match s.next(Duration::from_millis(1500)) {
        sse::Next::Quiet => {}
        sse::Next::Event(e) if e.event == "heartbeat" => {}
        other => panic!("the revoked member heard {other:?}"),
    }
    // A new stream of the revoked member is refused the entry.
    let mut again = sse::open(&gw.addr, "POST", "/v1/watch", Some(&tm), Some(&body));
    assert_eq!(again.expect(WAIT).data["refused"][0]["code"], 40302);
}
