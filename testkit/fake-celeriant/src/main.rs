//! `fake-celeriant`: the fake cluster as a process, for the end-to-end scripts (Node), which
//! cannot link the crate.
//!
//! `fake-celeriant [--nodes N] [--api-key KEY]` starts N nodes (3 by default) on `127.0.0.1`
//! and prints one JSON line, `{"nodes":["127.0.0.1:P0",...],"leader":0}`. It then reads one
//! command per line on stdin and answers each with one JSON line on stdout:
//!
//! | command | effect |
//! |---|---|
//! | `leader N applied\|lost\|refused [drop]` | node N becomes the leader; held writes settled so ([`Held`]); `drop`: the old leader closes its connections |
//! | `election` | no leader until the next `leader`: every node answers writes 2011 without an address |
//! | `hold` | the leader holds the writes it receives until the next `leader` |
//! | `held` | `{"held":n}` |
//! | `drop N` | node N closes every connection it holds |
//! | `stats` | leader, changes, writes and 2011 answers per node, open watches |
//! | `dump` | every stored aggregate: type, id, and per batch its version, client id and events (client sequence, event id) |
//! | `dump data` | the same, each event also with its `data` and `iv` as the node received and stored them, in hex (`iv` null when absent) |
//!
//! It exits when stdin closes, so a test harness that dies takes it along.

use std::io::{BufRead, Write};

use fake_celeriant::{FakeCluster, Held};
use serde_json::{Value, json};

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mut nodes = 3;
    let mut api_key = None;
    let mut i = 0;
    while i < args.len() {
        match (args[i].as_str(), args.get(i + 1)) {
            ("--nodes", Some(n)) => nodes = n.parse().expect("--nodes takes a number"),
            ("--api-key", Some(key)) => api_key = Some(key.clone()),
            (other, _) => {
                eprintln!("fake-celeriant: unknown argument {other}");
                std::process::exit(2);
            }
        }
        i += 2;
    }
    let cluster = match api_key {
        Some(key) => FakeCluster::with_api_key(nodes, &key),
        None => FakeCluster::start(nodes),
    };
    let mut out = std::io::stdout().lock();
    let mut say = |value: Value| {
        writeln!(out, "{value}").unwrap();
        out.flush().unwrap();
    };
    say(json!({"nodes": cluster.addresses(), "leader": cluster.leader()}));
    for line in std::io::stdin().lock().lines() {
        let Ok(line) = line else { break };
        let words: Vec<&str> = line.split_whitespace().collect();
        say(command(&cluster, &words).unwrap_or_else(|e| json!({ "error": e })));
    }
}

fn node(cluster: &FakeCluster, word: Option<&&str>) -> Result<usize, String> {
    let n: usize = word
        .ok_or("a node number is needed")?
        .parse()
        .map_err(|_| "a node number is needed")?;
    if n >= cluster.addresses().len() {
        return Err(format!("no node {n}"));
    }
    Ok(n)
}

fn command(cluster: &FakeCluster, words: &[&str]) -> Result<Value, String> {
    match words.first().copied() {
        Some("leader") => {
            let to = node(cluster, words.get(1))?;
            let held = match words.get(2).copied() {
                Some("applied") => Held::Applied,
                Some("lost") => Held::Lost,
                Some("refused") | None => Held::Refused,
                Some(other) => return Err(format!("unknown settlement {other}")),
            };
            cluster.change_leader(to, held, words.get(3) == Some(&"drop"));
            Ok(json!({"leader": to, "changes": cluster.changes()}))
        }
        Some("election") => {
            cluster.start_election();
            Ok(json!({"electing": true}))
        }
        Some("hold") => {
            cluster.hold_writes();
            Ok(json!({"hold": true}))
        }
        Some("held") => Ok(json!({"held": cluster.held()})),
        Some("drop") => {
            let n = node(cluster, words.get(1))?;
            cluster.drop_connections(n);
            Ok(json!({"dropped": n}))
        }
        Some("stats") => Ok(json!({
            "leader": cluster.leader(),
            "changes": cluster.changes(),
            "writesPerNode": cluster.writes_per_node(),
            "notLeaderPerNode": cluster.not_leader_per_node(),
            "watches": cluster.watches(),
        })),
        Some("dump") => match words.get(1).copied() {
            None => Ok(dump(cluster, false)),
            Some("data") => Ok(dump(cluster, true)),
            Some(other) => Err(format!("unknown dump option {other}")),
        },
        _ => Err(format!("unknown command {:?}", words.join(" "))),
    }
}

/// A `u128` as a hyphenated UUID, as the gateway shows ids.
fn uuid(v: u128) -> String {
    let h = format!("{v:032x}");
    format!(
        "{}-{}-{}-{}-{}",
        &h[..8],
        &h[8..12],
        &h[12..16],
        &h[16..20],
        &h[20..]
    )
}

/// Bytes as lowercase hex: what the node holds, byte for byte, in a JSON line.
fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// The store; with `data`, each event also carries its payload and nonce (test-only: the
/// end-to-end scripts check that what reached the node is ciphertext).
fn dump(cluster: &FakeCluster, data: bool) -> Value {
    let aggregates: Vec<Value> = cluster
        .dump()
        .into_iter()
        .map(|(key, batches)| {
            let batches: Vec<Value> = batches
                .iter()
                .map(|b| {
                    let events: Vec<Value> = b
                        .events
                        .iter()
                        .map(|e| {
                            if data {
                                json!([
                                    e.client_seq,
                                    e.event_id.map(uuid),
                                    hex(&e.event_value),
                                    e.iv.map(|iv| hex(&iv)),
                                ])
                            } else {
                                json!([e.client_seq, e.event_id.map(uuid)])
                            }
                        })
                        .collect();
                    json!({"v": b.aggregate_version, "clientId": uuid(b.client_id), "events": events})
                })
                .collect();
            json!({
                "org": uuid(key.org_id),
                "type": uuid(key.aggregate_type_id),
                "id": uuid(key.aggregate_id),
                "batches": batches,
            })
        })
        .collect();
    json!({ "aggregates": aggregates })
}
