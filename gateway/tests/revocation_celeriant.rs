//! Revocations on the Celeriant backend (issue 25), against real gateway processes over one fake
//! Celeriant node, as replicas of one fleet: a device revoked through one replica is refused on
//! the other within `--revocation-refresh-secs` (upstream watch silenced), and at watch latency
//! when the watch works; a subject (`user:<sub>`) revocation; a lift; two replicas revoking at
//! once lose no change; the node holds the list as one record in the reserved type (its stored
//! bytes are checked), which no client may read, write or watch; and a replica whose node is
//! unreachable refuses sessions (fail closed).

mod support;

use std::path::Path;
use std::time::{Duration, Instant};

use celeriant_gateway::access::RESERVED_TYPE;
use celeriant_wal::aggregate_key::AggregateKey;
use serde_json::{Value, json};
use support::app::{TYPE, write_by};
use support::device::{Device, fresh_nonce};
use support::fake_celeriant::{FakeCeleriant, dead_address};
use support::process::{Answer, Process, data_dir, get, post, with_authorization};
use uuid::Uuid;

const OPERATOR: &str = "operator-secret-of-at-least-thirty-two-characters";
const SESSION_SECRET: &str = "a session secret every replica of the fleet shares";
const APP_SECRET: &str = "an app secret of at least thirty-two bytes";
const ID_A: &str = "6d3b1c2f-8e4a-4f7b-a0c9-2e3f4a5b6c01";
/// The revocations' aggregate id, computed independently of the gateway (Python hashlib: the
/// first 16 bytes of SHA-256 over `celeriant-sync revocations v1\0`, big-endian).
const REVOCATIONS_ID: &str = "edc65025-5763-27cd-9099-11bb34fbd6b2";
/// The client id the gateway writes its records under.
const RECORD_WRITER: u128 = 0xac0e_55ed_0000_4000_8000_0000_0000_0001;
const REVOKED: (u16, u64) = (401, 40103);

fn the_record() -> AggregateKey {
    // `--org-id` default: 00000000-0000-0000-0000-000000000001.
    AggregateKey::new(
        1,
        RESERVED_TYPE.as_u128(),
        Uuid::parse_str(REVOCATIONS_ID).unwrap().as_u128(),
    )
}

/// One replica over `fake`, reloading every `refresh` seconds, with `extra` flags.
fn replica(fake: &FakeCeleriant, refresh: &str, extra: &[&str]) -> (Process, tempfile::TempDir) {
    let dir = data_dir();
    let opf = dir.path().join("operator");
    std::fs::write(&opf, format!("{OPERATOR}\n")).unwrap();
    let address = fake.address();
    let args = [
        &[
            "--backend",
            "celeriant",
            "--celeriant-addr",
            &address,
            "--session-secret",
            SESSION_SECRET,
            "--session-rate-per-minute",
            "0",
            "--operator-token-file",
            opf.to_str().unwrap(),
            "--revocation-refresh-secs",
            refresh,
        ][..],
        extra,
    ]
    .concat();
    (Process::start(dir.path(), &args), dir)
}

fn app_token_flags(dir: &Path) -> Vec<String> {
    let secret = dir.join("app-secret");
    std::fs::write(&secret, APP_SECRET).unwrap();
    [
        "--app-token-alg",
        "hs256",
        "--app-token-key-file",
        secret.to_str().unwrap(),
        "--app-token-issuer",
        "https://sign-in.example",
        "--app-token-audience",
        "celeriant-sync-tests",
    ]
    .map(str::to_owned)
    .to_vec()
}

fn app_token(sub: &str) -> String {
    use jsonwebtoken::{Algorithm, EncodingKey, Header};
    let exp = jsonwebtoken::get_current_timestamp() + 300;
    jsonwebtoken::encode(
        &Header::new(Algorithm::HS256),
        &json!({"sub": sub, "exp": exp, "iss": "https://sign-in.example", "aud": "celeriant-sync-tests"}),
        &EncodingKey::from_secret(APP_SECRET.as_bytes()),
    )
    .unwrap()
}

fn op(base: &str, method: &str, path: &str, body: Option<&Value>) -> Answer {
    let auth = format!("Operator {OPERATOR}");
    with_authorization(method, base, path, Some(&auth), body)
}

fn change(base: &str, path: &str, kind: &str, id: &str) -> Answer {
    op(base, "POST", path, Some(&json!({"kind": kind, "id": id})))
}

fn open(base: &str, device: &Device, app: Option<&str>) -> Answer {
    let body = device.session_body(fresh_nonce());
    match app {
        None => post(base, "/v1/session", None, &body),
        Some(t) => with_authorization(
            "POST",
            base,
            "/v1/session",
            Some(&format!("Bearer {t}")),
            Some(&body),
        ),
    }
}

fn session(base: &str, device: &Device, app: Option<&str>) -> String {
    let r = open(base, device, app);
    assert_eq!(r.status, 200, "{:?}", r.json);
    r.json["token"].as_str().unwrap().to_owned()
}

fn write(base: &str, token: &str, device: &Device, id: &str, seq: u64) -> String {
    let r = post(
        base,
        "/v1/write",
        Some(token),
        &write_by(&device.client_id, TYPE, id, &[seq]),
    );
    r.json["outcome"].as_str().unwrap_or("").to_owned()
}

fn read(base: &str, token: &str, id: &str) -> (u16, u64) {
    let r = get(
        base,
        &format!("/v1/aggregates/{TYPE}/{id}/events"),
        Some(token),
    );
    (r.status, r.code())
}

/// Polls `check` every 50 ms until it holds; panics after `within`. Returns how long it took.
fn within(within: Duration, what: &str, mut check: impl FnMut() -> bool) -> Duration {
    let started = Instant::now();
    loop {
        if check() {
            return started.elapsed();
        }
        assert!(
            started.elapsed() < within,
            "{what}: not after {:?}",
            started.elapsed()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The list in the node's newest batch of the record, and the record's batch count.
fn stored_list(fake: &FakeCeleriant) -> (Vec<Value>, usize) {
    let batches = fake.stored(&the_record());
    let Some(last) = batches.last() else {
        return (Vec::new(), 0);
    };
    assert_eq!(last.client_id, RECORD_WRITER);
    let [event] = last.events.as_slice() else {
        panic!("a record batch is one event: {last:?}");
    };
    assert_eq!(event.event_type_major, 1);
    let value: Value = serde_json::from_slice(&event.event_value).unwrap();
    let list = value["revocations"]
        .as_array()
        .expect("{revocations: [..]}");
    (list.clone(), batches.len())
}

/// Waits until both replicas opened their upstream watch, then makes them hang: a change then
/// reaches the other replica only through the periodic reload.
fn silence_watches(fake: &FakeCeleriant) {
    within(Duration::from_secs(10), "both watches open", || {
        fake.watches() >= 2
    });
    fake.silence_watches();
}

#[test]
fn a_device_revoked_through_one_replica_is_refused_on_the_other_within_the_refresh_and_lifted() {
    let fake = FakeCeleriant::start();
    let (one, _d1) = replica(&fake, "2", &[]);
    let (two, _d2) = replica(&fake, "2", &[]);
    silence_watches(&fake);
    let (a, b) = (Device::a(), Device::b());
    let ta = session(&one.base, &a, None);
    let tb = session(&two.base, &b, None);
    assert_eq!(write(&one.base, &ta, &a, ID_A, 1), "landed");
    assert_eq!(read(&two.base, &ta, ID_A).0, 200, "two accepts one's token");

    let r = change(&one.base, "/v1/revocations", "device", &a.client_id);
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert_eq!(read(&one.base, &ta, ID_A), REVOKED, "at once where made");
    let took = within(Duration::from_millis(4_000), "two refuses", || {
        read(&two.base, &ta, ID_A) == REVOKED
    });
    eprintln!("refused on replica two after {took:?} (refresh 2 s, watch silenced)");
    assert_eq!(open(&two.base, &a, None).code(), 40103, "no new session");
    // B is not revoked (another's aggregate reads as empty to it).
    assert_eq!(read(&two.base, &tb, ID_A).0, 200, "b is not revoked");
    // The list, from either replica, read from the node.
    let listed = op(&two.base, "GET", "/v1/revocations", None);
    assert_eq!(listed.status, 200, "{:?}", listed.json);
    assert_eq!(listed.json["revocations"][0]["id"], a.client_id.as_str());
    assert_eq!(listed.json["refreshSecs"], 2);

    // Lifted through two: one lets the device open sessions again within the refresh, while
    // the token issued before stays refused.
    let r = change(&two.base, "/v1/revocations/lift", "device", &a.client_id);
    assert_eq!(r.status, 200, "{:?}", r.json);
    assert!(r.json["liftedAt"].is_u64(), "{:?}", r.json);
    within(
        Duration::from_millis(4_000),
        "one admits new sessions",
        || open(&one.base, &a, None).status == 200,
    );
    assert_eq!(
        read(&one.base, &ta, ID_A),
        REVOKED,
        "the old token stays dead"
    );
    within(
        Duration::from_secs(5),
        "a token issued after the lift",
        || {
            let fresh = session(&one.base, &a, None);
            read(&one.base, &fresh, ID_A).0 == 200
        },
    );
    let (list, batches) = stored_list(&fake);
    assert_eq!(batches, 2, "revoke, lift: one batch each");
    assert!(list[0]["liftedAt"].is_u64(), "{list:?}");
}

#[test]
fn the_upstream_watch_makes_the_other_replica_reload_at_once() {
    let fake = FakeCeleriant::start();
    // An hour between reloads: only the watch can bring the change in time.
    let (one, _d1) = replica(&fake, "3600", &[]);
    let (two, _d2) = replica(&fake, "3600", &[]);
    within(Duration::from_secs(10), "both watches open", || {
        fake.watches() >= 2
    });
    let a = Device::a();
    let ta = session(&one.base, &a, None);
    assert_eq!(write(&one.base, &ta, &a, ID_A, 1), "landed");
    assert_eq!(read(&two.base, &ta, ID_A).0, 200);
    let r = change(&one.base, "/v1/revocations", "device", &a.client_id);
    assert_eq!(r.status, 200, "{:?}", r.json);
    let took = within(Duration::from_secs(3), "two refuses by the watch", || {
        read(&two.base, &ta, ID_A) == REVOKED
    });
    eprintln!("refused on replica two after {took:?} (watch)");
}

#[test]
fn a_subject_revoked_on_one_replica_is_refused_on_the_other_and_the_record_is_reserved() {
    let fake = FakeCeleriant::start();
    let flags_dir = data_dir();
    let flags = app_token_flags(flags_dir.path());
    let flags: Vec<&str> = flags.iter().map(String::as_str).collect();
    let (one, _d1) = replica(&fake, "2", &flags);
    let (two, _d2) = replica(&fake, "2", &flags);
    silence_watches(&fake);
    let (a, b) = (Device::a(), Device::b());
    let alice = app_token("alice");
    let ta = session(&one.base, &a, Some(&alice));
    let tb = session(&two.base, &b, Some(&alice));
    assert_eq!(write(&one.base, &ta, &a, ID_A, 1), "landed");
    assert_eq!(read(&two.base, &tb, ID_A).0, 200, "alice's devices share");

    let r = change(&two.base, "/v1/revocations", "principal", "user:alice");
    assert_eq!(r.status, 200, "{:?}", r.json);
    within(Duration::from_millis(4_000), "one refuses alice", || {
        read(&one.base, &ta, ID_A) == REVOKED
    });
    assert_eq!(read(&two.base, &tb, ID_A), REVOKED);
    assert_eq!(open(&one.base, &b, Some(&alice)).code(), 40103);
    // Bob, on one of alice's devices, is not alice.
    let bob = session(&one.base, &b, Some(&app_token("bob")));
    assert_eq!(read(&one.base, &bob, ID_A).0, 200, "bob is not revoked");

    // The node holds the list as one record of the reserved type: one event, the whole list.
    let (list, batches) = stored_list(&fake);
    assert_eq!(batches, 1);
    assert_eq!(list.len(), 1, "{list:?}");
    assert_eq!(list[0]["kind"], "principal");
    assert_eq!(list[0]["id"], "user:alice");
    assert!(list[0]["revokedAt"].is_u64());
    let guarded: Vec<_> = fake
        .writes()
        .into_iter()
        .filter_map(|w| w.writes.get(&the_record()).map(|s| s.expected_version))
        .collect();
    assert_eq!(guarded, vec![Some(0)], "created under the version guard");

    // No client reads, writes or watches it (the operator neither).
    let reserved = RESERVED_TYPE.to_string();
    let events = format!("/v1/aggregates/{reserved}/{REVOCATIONS_ID}/events");
    let forbidden = (403, 40301);
    let r = get(&one.base, &events, Some(&bob));
    assert_eq!((r.status, r.code()), forbidden, "{:?}", r.json);
    let r = op(&one.base, "GET", &events, None);
    assert_eq!((r.status, r.code()), forbidden, "{:?}", r.json);
    let w = write_by(&b.client_id, &reserved, REVOCATIONS_ID, &[1]);
    let r = post(&one.base, "/v1/write", Some(&bob), &w);
    assert_eq!((r.status, r.code()), forbidden, "{:?}", r.json);
    let watch = json!({"aggregates": [{"typeId": reserved, "id": REVOCATIONS_ID}]});
    let r = post(&one.base, "/v1/watch", Some(&bob), &watch);
    assert_eq!((r.status, r.code()), forbidden, "{:?}", r.json);
    assert_eq!(stored_list(&fake).1, 1, "nothing was written to it");
}

#[test]
fn two_replicas_revoking_at_once_lose_no_change() {
    let fake = FakeCeleriant::start();
    let (one, _d1) = replica(&fake, "2", &[]);
    let (two, _d2) = replica(&fake, "2", &[]);
    const EACH: u128 = 8;
    let targets = |replica: u128| {
        (0..EACH)
            .map(move |i| Uuid::from_u128(0x7000 + replica * 100 + i).to_string())
            .collect::<Vec<_>>()
    };
    let started = Instant::now();
    let threads: Vec<_> = [(one.base.clone(), 1), (two.base.clone(), 2)]
        .into_iter()
        .flat_map(|(base, r)| {
            targets(r).into_iter().map(move |id| {
                let base = base.clone();
                std::thread::spawn(move || {
                    // 503/11000 (lost the guard five times) is a retry, as documented.
                    loop {
                        let r = change(&base, "/v1/revocations", "device", &id);
                        match (r.status, r.code()) {
                            (200, _) => return,
                            (503, 11000) => std::thread::sleep(Duration::from_millis(20)),
                            other => panic!("{other:?}: {:?}", r.json),
                        }
                    }
                })
            })
        })
        .collect();
    for t in threads {
        t.join().unwrap();
    }
    assert!(started.elapsed() < Duration::from_secs(30));
    let mut want: Vec<String> = targets(1).into_iter().chain(targets(2)).collect();
    want.sort();
    let (list, batches) = stored_list(&fake);
    let mut stored: Vec<String> = list
        .iter()
        .map(|r| r["id"].as_str().unwrap().to_owned())
        .collect();
    stored.sort();
    assert_eq!(stored, want, "every revocation is in the stored list");
    assert_eq!(batches, want.len(), "each change appended exactly once");
    let conflicts = fake
        .writes()
        .iter()
        .filter(|w| w.writes.contains_key(&the_record()))
        .count()
        - batches;
    eprintln!("{batches} changes, {conflicts} writes lost the version guard and were redone");
    for base in [&one.base, &two.base] {
        let listed = op(base, "GET", "/v1/revocations", None);
        assert_eq!(
            listed.json["revocations"].as_array().unwrap().len(),
            want.len()
        );
    }
}

#[test]
fn a_replica_that_cannot_read_the_revocations_refuses_sessions() {
    let dir = data_dir();
    let opf = dir.path().join("operator");
    std::fs::write(&opf, format!("{OPERATOR}\n")).unwrap();
    let dead = dead_address();
    let gw = Process::start(
        dir.path(),
        &[
            "--backend",
            "celeriant",
            "--celeriant-addr",
            &dead,
            "--session-rate-per-minute",
            "0",
            "--operator-token-file",
            opf.to_str().unwrap(),
        ],
    );
    let r = open(&gw.base, &Device::a(), None);
    assert_eq!((r.status, r.code()), (503, 50301), "{:?}", r.json);
    let r = op(&gw.base, "GET", "/v1/revocations", None);
    assert_eq!(r.status, 503, "{:?}", r.json);
}

#[test]
fn a_higher_cap_than_one_request_holds_is_refused_at_start() {
    let dir = data_dir();
    let out = support::process::run_to_exit(
        dir.path(),
        &[
            "--backend",
            "celeriant",
            "--celeriant-addr",
            &dead_address(),
            "--max-revocations",
            "12001",
        ],
    );
    assert!(!out.status.success());
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("--max-revocations is at most 12000"),
        "{stderr}"
    );
}
