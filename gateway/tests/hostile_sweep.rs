//! The bad-input sweep (issue 15): every class of hostile request a client can send, against
//! one real gateway process (device identity on, as deployed), each answered typed, and the
//! store and the gateway healthy after each one and at the end.
//!
//! "Typed" means: wherever a request reaches the gateway's code, the protocol body with its
//! code and the status that code travels with; where hyper refuses the bytes before a request
//! exists (malformed framing, oversized headers), its bare status (400, 414, 431) and a closed
//! connection; where there is nothing to answer (a slow request line, an HTTP/2 preface), the
//! connection closed on time. After every class `/healthz` answers 200; at the end the test
//! aggregate holds exactly the one legitimate write, and `verify` finds the store sound.
//! The number of classes is printed.

mod support;

use std::io::Write;
use std::net::{Ipv4Addr, TcpStream};
use std::time::{Duration, Instant};

use serde_json::{Value, json};
use support::app::TYPE;
use support::device::{Device, fresh_nonce};
use support::hostile::{
    Raw, aggregate, closed_within, connect_from, exchange, healthz, read_all, read_answer,
    read_answers,
};
use support::process::{Process, command, data_dir, post};

/// What a class must get.
#[derive(Debug, Clone, Copy)]
enum Expect {
    /// The protocol body with this status and one of these codes.
    Typed(u16, &'static [u64]),
    /// hyper's bare status, before a request existed.
    Bare(u16),
    /// A static-file answer (no protocol body) with this status.
    Static(u16),
}

struct Sweep {
    addr: String,
    token: String,
    client: String,
    classes: Vec<String>,
}

impl Sweep {
    fn auth(&self) -> String {
        format!("Authorization: Bearer {}\r\n", self.token)
    }

    /// A request with `headers` (each ending in `\r\n`; `Host: 127.0.0.1` unless one is given)
    /// and `body` (with its `Content-Length` unless `headers` frame it otherwise).
    fn http(&self, method: &str, target: &str, headers: &str, body: &[u8]) -> Vec<u8> {
        let mut head = format!("{method} {target} HTTP/1.1\r\n");
        if !headers.to_ascii_lowercase().contains("host:") {
            head.push_str("Host: 127.0.0.1\r\n");
        }
        head.push_str(headers);
        // A request under the session gets its proof, over the bytes sent as the body, so
        // each class meets the check it is about (a proof the sweep does not vary).
        if headers.contains(&self.auth()) && !headers.to_ascii_lowercase().contains("dpop:") {
            // `htu` is the path and query, also for an absolute-form target.
            let path = match target.split_once("://") {
                Some((_, rest)) => rest.find('/').map_or("/", |i| &rest[i..]),
                None => target,
            };
            let proof = support::device::proof_for(&self.token, method, path, body).unwrap();
            head.push_str(&format!("DPoP: {proof}\r\n"));
        }
        head.push_str("Connection: close\r\n");
        let lower = headers.to_ascii_lowercase();
        if !lower.contains("content-length:") && !lower.contains("transfer-encoding:") {
            head.push_str(&format!("Content-Length: {}\r\n", body.len()));
        }
        head.push_str("\r\n");
        [head.as_bytes(), body].concat()
    }

    /// `POST /v1/write` with the session and a JSON content type.
    fn write(&self, body: &[u8]) -> Vec<u8> {
        let headers = format!("Content-Type: application/json\r\n{}", self.auth());
        self.http("POST", "/v1/write", &headers, body)
    }

    /// A valid write of `seq` by this session's client, as a JSON value to spoil.
    fn valid(&self, seq: u64) -> Value {
        json!({"clientId": self.client, "writes": [{"aggregate": {"typeId": TYPE, "id": aggregate(1)},
               "allowCreate": true, "events": [{"clientSeq": seq, "eventId": null, "timestamp": 1_700_000_000_000u64,
               "type": 3, "minor": 0, "data": "c3dlZXA=", "iv": null}]}]})
    }

    fn record(&mut self, class: &str) {
        let health = healthz(&self.addr);
        assert_eq!(health.status, 200, "after {class}: {health:?}");
        self.classes.push(class.to_owned());
    }

    fn check(&mut self, class: &str, request: &[u8], expect: Expect) -> Raw {
        let answer = exchange(&self.addr, request, Duration::from_secs(10));
        match expect {
            Expect::Typed(status, codes) => {
                let json = answer.json();
                assert!(
                    answer.status == status
                        && json["outcome"].is_string()
                        && codes.contains(&answer.code()),
                    "{class}: expected {status} with one of {codes:?}, got {answer:?}"
                );
            }
            Expect::Bare(status) | Expect::Static(status) => {
                assert_eq!(answer.status, status, "{class}: {answer:?}");
                assert!(
                    answer.json()["outcome"].is_null(),
                    "{class}: unexpected protocol body"
                );
            }
        }
        self.record(class);
        answer
    }
}

fn spoil(mut value: Value, edit: impl FnOnce(&mut Value)) -> Vec<u8> {
    edit(&mut value);
    serde_json::to_vec(&value).unwrap()
}

#[test]
fn every_class_of_bad_input_is_answered_typed_and_leaves_the_gateway_healthy() {
    let dir = data_dir();
    let mut gw = Process::start(
        dir.path(),
        &[
            "--header-read-timeout-ms",
            "500",
            "--body-read-timeout-ms",
            "500",
            "--idle-timeout-ms",
            "2000",
            "--request-timeout-ms",
            "1500",
            "--max-body-bytes",
            "65536",
            "--max-connections-per-ip",
            "40",
            "--session-rate-per-minute",
            "0",
        ],
    );
    let device = Device::a();
    let session = post(
        &gw.base,
        "/v1/session",
        None,
        &device.session_body(fresh_nonce()),
    );
    assert_eq!(session.status, 200, "{:?}", session.json);
    let mut s = Sweep {
        addr: gw.addr.clone(),
        token: session.json["token"].as_str().unwrap().to_owned(),
        client: device.client_id.clone(),
        classes: Vec::new(),
    };
    let started = Instant::now();
    let legit = s.write(&serde_json::to_vec(&s.valid(1)).unwrap());
    let landed = exchange(&s.addr, &legit, Duration::from_secs(10));
    assert_eq!(landed.json()["outcome"], "landed", "{landed:?}");

    const MALFORMED: &[u64] = &[40000];
    const FIELD: &[u64] = &[40001];
    let valid = serde_json::to_vec(&s.valid(2)).unwrap();

    // Malformed bodies.
    let cases: Vec<(&str, Vec<u8>, Expect)> = vec![
        ("invalid JSON syntax", s.write(br#"{"clientId": nope}"#), Expect::Typed(400, MALFORMED)),
        ("truncated JSON", s.write(&valid[..valid.len() / 2]), Expect::Typed(400, MALFORMED)),
        ("bytes that are not UTF-8", s.write(&[0xFF, 0xFE, 0x7B, 0x80]), Expect::Typed(400, MALFORMED)),
        ("empty body", s.write(b""), Expect::Typed(400, MALFORMED)),
        ("trailing bytes after the JSON", s.write(&[&valid[..], b" {}"].concat()), Expect::Typed(400, MALFORMED)),
        ("duplicate field", s.write(format!(r#"{{"clientId":"{0}","clientId":"{0}","writes":[]}}"#, s.client).as_bytes()), Expect::Typed(400, FIELD)),
        // Wrong types and values.
        ("a string where a number goes", s.write(&spoil(s.valid(2), |v| v["writes"][0]["events"][0]["clientSeq"] = json!("2"))), Expect::Typed(400, FIELD)),
        ("an integer above 2^53 - 1", s.write(&spoil(s.valid(2), |v| v["writes"][0]["events"][0]["clientSeq"] = json!(9_007_199_254_740_992u64))), Expect::Typed(400, FIELD)),
        ("a negative integer", s.write(&spoil(s.valid(2), |v| v["writes"][0]["events"][0]["timestamp"] = json!(-1))), Expect::Typed(400, FIELD)),
        ("a fraction", s.write(&spoil(s.valid(2), |v| v["writes"][0]["events"][0]["type"] = json!(1.5))), Expect::Typed(400, FIELD)),
        ("an array in place of the object", s.write(format!(r#"["{}",[]]"#, s.client).as_bytes()), Expect::Typed(400, FIELD)),
        ("bad base64", s.write(&spoil(s.valid(2), |v| v["writes"][0]["events"][0]["data"] = json!("!!!!"))), Expect::Typed(400, FIELD)),
        ("an unknown field", s.write(&spoil(s.valid(2), |v| v["orgId"] = json!(s.client))), Expect::Typed(400, FIELD)),
        ("null for a required value", s.write(&spoil(s.valid(2), |v| v["writes"][0]["events"][0]["type"] = Value::Null)), Expect::Typed(400, FIELD)),
        ("a UUID that is not one", s.write(&spoil(s.valid(2), |v| v["writes"][0]["aggregate"]["id"] = json!("xyz"))), Expect::Typed(400, FIELD)),
        ("clientSeq 0", s.write(&spoil(s.valid(2), |v| v["writes"][0]["events"][0]["clientSeq"] = json!(0))), Expect::Typed(400, &[40005])),
        ("event type 0", s.write(&spoil(s.valid(2), |v| v["writes"][0]["events"][0]["type"] = json!(0))), Expect::Typed(400, &[40007])),
        ("an 11-byte iv", s.write(&spoil(s.valid(2), |v| v["writes"][0]["events"][0]["iv"] = json!("AAAAAAAAAAAAAAA="))), Expect::Typed(400, &[40008])),
        ("no writes", s.write(&spoil(s.valid(2), |v| v["writes"] = json!([]))), Expect::Typed(400, &[40003])),
        ("17 aggregates", s.write(&spoil(s.valid(2), |v| {
            let one = v["writes"][0].clone();
            v["writes"] = (0..17).map(|i| { let mut w = one.clone(); w["aggregate"]["id"] = json!(aggregate(100 + i)); w }).collect();
        })), Expect::Typed(400, &[40013])),
        // Deep.
        ("10,000 nested arrays", s.write(&[&b"{\"clientId\":"[..], &b"[".repeat(10_000), &b"]".repeat(10_000), b"}"].concat()), Expect::Typed(400, &[40000, 40001])),
        ("10,000 nested objects", s.write(&[b"{\"a\":".repeat(10_000), b"1".to_vec(), b"}".repeat(10_000)].concat()), Expect::Typed(400, &[40000, 40001])),
        // Oversized.
        ("a Content-Length over the limit (body never sent)", s.http("POST", "/v1/write", &format!("Content-Type: application/json\r\n{}Content-Length: 100000000\r\n", s.auth()), b""), Expect::Typed(413, &[41300])),
        ("a chunked body over the limit", s.http("POST", "/v1/write", &format!("Content-Type: application/json\r\n{}Transfer-Encoding: chunked\r\n", s.auth()), &[format!("{:x}\r\n", 70_000).into_bytes(), vec![b' '; 70_000], b"\r\n0\r\n\r\n".to_vec()].concat()), Expect::Typed(413, &[41300])),
        ("a header over 32 KiB", s.http("GET", "/healthz", &format!("X-Big: {}\r\n", "a".repeat(40_000)), b""), Expect::Bare(431)),
        ("more than 100 headers", s.http("GET", "/healthz", &(0..120).map(|i| format!("X-{i}: 1\r\n")).collect::<String>(), b""), Expect::Bare(431)),
        ("a URI over 32 KiB", s.http("GET", &format!("/{}", "a".repeat(40_000)), "", b""), Expect::Bare(431)),
        // Wrong methods.
        ("GET on the write route", s.http("GET", "/v1/write", &s.auth(), b""), Expect::Typed(405, &[40500])),
        ("DELETE on the read route", s.http("DELETE", &format!("/v1/aggregates/{TYPE}/{}/events", aggregate(1)), &s.auth(), b""), Expect::Typed(405, &[40500])),
        ("PUT on /healthz", s.http("PUT", "/healthz", "", b""), Expect::Typed(405, &[40500])),
        ("an unknown method", s.http("BREW", "/v1/write", "", b""), Expect::Typed(405, &[40500])),
        ("GET on the session route", s.http("GET", "/v1/session", "", b""), Expect::Typed(405, &[40500])),
        // Hostile headers.
        ("a text/plain body", s.http("POST", "/v1/write", &format!("Content-Type: text/plain\r\n{}", s.auth()), &valid), Expect::Typed(415, &[41500])),
        ("no content type", s.http("POST", "/v1/write", &s.auth(), &valid), Expect::Typed(415, &[41500])),
        ("a foreign Host (DNS rebinding)", s.http("GET", "/healthz", "Host: evil.example:8080\r\n", b""), Expect::Typed(421, &[42100])),
        ("two Host headers, both the gateway's", s.http("POST", "/v1/write", &format!("Host: 127.0.0.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{}", s.auth()), &valid), Expect::Typed(400, &[40030])),
        ("two Host headers, one foreign", s.http("GET", "/healthz", "Host: 127.0.0.1\r\nHost: evil.example\r\n", b""), Expect::Typed(400, &[40030])),
        ("two Host headers on the session route", s.http("POST", "/v1/session", "Host: evil.example\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n", b"{}"), Expect::Typed(400, &[40030])),
        ("no session", s.http("POST", "/v1/write", "Content-Type: application/json\r\n", &valid), Expect::Typed(401, &[40100])),
        ("two Authorization headers", s.http("POST", "/v1/write", &format!("Content-Type: application/json\r\n{0}{0}", s.auth()), &valid), Expect::Typed(401, &[40100])),
        ("a forged token", s.http("POST", "/v1/write", "Content-Type: application/json\r\nAuthorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiJ4In0.c2lnbmF0dXJl\r\n", &valid), Expect::Typed(401, &[40101])),
        ("an Authorization header over 8 KiB", s.http("POST", "/v1/write", &format!("Content-Type: application/json\r\nAuthorization: Bearer {}\r\n", "a".repeat(9_000)), &valid), Expect::Typed(401, &[40100])),
        ("another device's clientId on this session", s.write(&spoil(s.valid(2), |v| v["clientId"] = json!("5f0c6b2e-8a3d-4c1e-9b7a-2d4e6f8a0b1c"))), Expect::Typed(403, &[40300])),
        ("a Content-Length that is not a number", s.http("POST", "/v1/write", "Content-Type: application/json\r\nContent-Length: abc\r\n", b""), Expect::Bare(400)),
        ("a negative Content-Length", s.http("POST", "/v1/write", "Content-Type: application/json\r\nContent-Length: -1\r\n", b""), Expect::Bare(400)),
        // Smuggling-shaped framing.
        ("two different Content-Lengths", s.http("POST", "/v1/write", "Content-Type: application/json\r\nContent-Length: 5\r\nContent-Length: 6\r\n", b"abcdef"), Expect::Bare(400)),
        ("an obfuscated Transfer-Encoding", s.http("POST", "/v1/write", "Content-Type: application/json\r\nTransfer-Encoding: xchunked\r\n", b"5\r\nabcde\r\n0\r\n\r\n"), Expect::Bare(400)),
        ("chunked not last among the codings", s.http("POST", "/v1/write", "Content-Type: application/json\r\nTransfer-Encoding: chunked, gzip\r\n", b"5\r\nabcde\r\n0\r\n\r\n"), Expect::Bare(400)),
        ("an invalid chunk size", s.http("POST", "/v1/write", &format!("Content-Type: application/json\r\n{}Transfer-Encoding: chunked\r\n", s.auth()), b"zz\r\nabcde\r\n0\r\n\r\n"), Expect::Typed(400, MALFORMED)),
        ("binary garbage for a request line", b"\x00\x01\x02\x16\x03 garbage\r\n\r\n".to_vec(), Expect::Bare(400)),
        // Path tricks.
        ("dot segments under /v1", s.http("GET", "/v1/../v1/write", "", b""), Expect::Typed(404, &[40400])),
        ("encoded traversal out of the static root", s.http("GET", "/%2e%2e/%2e%2e/etc/passwd", "", b""), Expect::Static(404)),
        ("raw traversal out of the static root", s.http("GET", "/../../etc/passwd", "", b""), Expect::Static(404)),
        ("a NUL byte in the path", s.http("GET", "/v1/%00", "", b""), Expect::Typed(404, &[40400])),
        ("a type id that is not a UUID", s.http("GET", &format!("/v1/aggregates/../{}/events", aggregate(1)), &s.auth(), b""), Expect::Typed(400, &[40014])),
        ("an unknown query parameter", s.http("GET", &format!("/v1/aggregates/{TYPE}/{}/events?offset=1", aggregate(1)), &s.auth(), b""), Expect::Typed(400, &[40014])),
        ("a negative from", s.http("GET", &format!("/v1/aggregates/{TYPE}/{}/events?from=-1", aggregate(1)), &s.auth(), b""), Expect::Typed(400, &[40014])),
        ("an absolute-form target naming another host", s.http("POST", "http://evil.example/v1/write", &format!("Content-Type: application/json\r\n{}", s.auth()), &serde_json::to_vec(&s.valid(1)).unwrap()), Expect::Typed(200, &[2002])),
    ];
    for (class, request, expect) in cases {
        s.check(class, &request, expect);
    }

    // Content-Length shorter than the body: the rest is parsed as a second request of its
    // own, and checked like any other (here refused for its Host).
    let proof = support::device::proof_for(&s.token, "POST", "/v1/write", b"{}").unwrap();
    let hidden = format!(
        "POST /v1/write HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{}\
         DPoP: {proof}\r\nContent-Length: 2\r\n\r\n{{}}GET /v1/faults HTTP/1.1\r\nHost: evil.example\r\n\
         Connection: close\r\n\r\n",
        s.auth()
    );
    let mut stream = TcpStream::connect(&s.addr).unwrap();
    stream.write_all(hidden.as_bytes()).unwrap();
    let answers = read_answers(&mut stream, Duration::from_secs(5));
    let codes: Vec<(u16, u64)> = answers.iter().map(|a| (a.status, a.code())).collect();
    assert_eq!(codes, [(400, 40001), (421, 42100)], "{answers:?}");
    s.record("Content-Length shorter than the body (a request hidden in it)");

    // Content-Length with Transfer-Encoding: framed by the chunked coding alone (the body is
    // a write with clientSeq 0, refused), and the connection closed after the answer: the
    // request pipelined behind it is never read.
    let zero = spoil(s.valid(2), |v| {
        v["writes"][0]["events"][0]["clientSeq"] = json!(0)
    });
    let proof = support::device::proof_for(&s.token, "POST", "/v1/write", &zero).unwrap();
    let both = format!(
        "POST /v1/write HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n{}\
         DPoP: {proof}\r\nContent-Length: 4\r\nTransfer-Encoding: chunked\r\n\r\n{:x}\r\n",
        s.auth(),
        zero.len()
    );
    let mut stream = TcpStream::connect(&s.addr).unwrap();
    stream
        .write_all(
            &[
                both.as_bytes(),
                &zero,
                b"\r\n0\r\n\r\nGET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
            ]
            .concat(),
        )
        .unwrap();
    let first = read_answer(&mut stream, Duration::from_secs(5));
    assert_eq!((first.status, first.code()), (400, 40005), "{first:?}");
    assert!(
        closed_within(&mut stream, Duration::from_secs(3)).is_some(),
        "the connection stayed open after an ambiguously framed request"
    );
    s.record("Content-Length with Transfer-Encoding");

    // An HTTP/2 preface on this HTTP/1.1 port: nothing to answer; closed.
    let answer = exchange(
        &s.addr,
        b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n",
        Duration::from_secs(5),
    );
    assert_eq!(answer.status, 0, "{answer:?}");
    s.record("an HTTP/2 preface");

    // A slow body: 408 (40800) at the body timeout.
    let mut slow = TcpStream::connect(&s.addr).unwrap();
    let request = s.write(&valid);
    slow.write_all(&request[..request.len() - valid.len() + 10])
        .unwrap();
    let answer = read_answer(&mut slow, Duration::from_secs(5));
    assert_eq!((answer.status, answer.code()), (408, 40800), "{answer:?}");
    assert!(answer.elapsed < Duration::from_millis(1_500), "{answer:?}");
    s.record("a slow body");

    // A slow request line: closed at the header timeout.
    let mut slow = TcpStream::connect(&s.addr).unwrap();
    slow.write_all(b"POST /v1/wr").unwrap();
    let closed = closed_within(&mut slow, Duration::from_secs(3)).expect("slow headers left open");
    assert!(closed < Duration::from_millis(1_500), "{closed:?}");
    s.record("a slow request line");

    // Many connections from one address: over its cap, 429 (42900) at once.
    let source = Ipv4Addr::new(127, 0, 0, 9);
    let held: Vec<TcpStream> = (0..40).map(|_| connect_from(source, &s.addr)).collect();
    let mut refused = 0;
    for _ in 0..20 {
        let mut over = connect_from(source, &s.addr);
        let answer = read_answer(&mut over, Duration::from_secs(3));
        assert_eq!((answer.status, answer.code()), (429, 42900), "{answer:?}");
        refused += 1;
    }
    drop(held);
    assert_eq!(refused, 20);
    s.record("many connections from one address");

    // Nothing of any of it was stored: the aggregate holds the one legitimate write.
    let events = read_all(&s.addr, &aggregate(1), &s.auth());
    assert_eq!(events.len(), 1, "{events:?}");
    assert_eq!(events[0]["clientSeq"], 1);
    for i in 0..17 {
        assert!(read_all(&s.addr, &aggregate(100 + i), &s.auth()).is_empty());
    }
    let count = s.classes.len();
    gw.stop();
    let verified = command(&["verify", "--data-dir"])
        .arg(dir.path().join("db"))
        .output()
        .unwrap();
    assert!(
        verified.status.success(),
        "{}",
        String::from_utf8_lossy(&verified.stdout)
    );
    println!(
        "bad-input sweep: {count} classes in {:.1?}, each answered typed; /healthz 200 after \
         every one; the store holds only the legitimate write and verifies sound",
        started.elapsed()
    );
    assert!(count >= 30, "{count}");
}
