//! A write that may not create its aggregate (`allowCreate: false`), racing the owner's creation
//! on the Celeriant backend: judged while the aggregate is absent, it must never land in the
//! aggregate the owner creates in between (the data write itself is not guarded by a record).
//! Two replicas over one fake node with the attacker's request held, and one replica spammed.

mod support;

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use celeriant_sync_protocol::codes::celeriant as cc;
use serde_json::{Value, json};
use support::app::*;
use support::device::*;
use support::fake_celeriant::{FakeCeleriant, Reply as Node};

const VICTIMS: &str = "3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e";

fn configure(c: &mut celeriant_gateway::config::Config) {
    let file = c.data_dir.join("policy.toml");
    std::fs::write(&file, "default = \"owner\"").unwrap();
    c.policy = Some(file);
}

fn no_create(client: &str, id: &str, seq: u64) -> Value {
    let mut w = write_by(client, TYPE, id, &[seq]);
    w["writes"][0]["allowCreate"] = json!(false);
    w
}

async fn writers(h: &Harness, token: &str, id: &str) -> Vec<Value> {
    let seen = h
        .get_as(token, &format!("/v1/aggregates/{TYPE}/{id}/events"))
        .await;
    seen.json["batches"]
        .as_array()
        .unwrap()
        .iter()
        .map(|b| b["clientId"].clone())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_no_create_write_never_lands_in_the_aggregate_created_meanwhile() {
    let fake = Arc::new(FakeCeleriant::start());
    let h1 = Arc::new(Harness::celeriant(fake.clone(), configure).await);
    let h2 = Harness::celeriant(fake.clone(), configure).await;
    let (victim, attacker) = (Device::a(), Device::b());
    let (tv, ta) = (h2.open(&victim).await, h1.open(&attacker).await);
    let id = format!("{VICTIMS}0777");
    // The attacker's record read and existence check are answered, a third request (the data
    // write, if one were sent) is held by the network while the victim creates the aggregate.
    fake.script([
        Node::Store,
        Node::Store,
        Node::slow(Duration::from_millis(800), Node::Store),
    ]);
    let (hh, w) = (h1.clone(), no_create(&attacker.client_id, &id, 1));
    let attack = tokio::spawn(async move { hh.write_as(&ta, &w).await });
    while fake.requests().len() < 3 && !attack.is_finished() {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    let r = h2
        .write_as(&tv, &write_by(&victim.client_id, TYPE, &id, &[1]))
        .await;
    assert_eq!(r.outcome(), "landed", "{:?}", r.json);
    let a = attack.await.unwrap();
    assert_eq!(
        a.code(),
        u64::from(cc::AGGREGATE_NOT_EXISTS),
        "{:?}",
        a.json
    );
    assert_eq!(a.json["message"], "aggregate does not exist");
    let seen = writers(&h2, &tv, &id).await;
    assert_eq!(seen, vec![json!(victim.client_id)]);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_spammed_no_create_write_never_lands_in_a_new_aggregate() {
    let fake = Arc::new(FakeCeleriant::start());
    let h = Arc::new(Harness::celeriant(fake.clone(), configure).await);
    let (victim, attacker) = (Device::a(), Device::b());
    let (tv, ta) = (h.open(&victim).await, h.open(&attacker).await);
    // Before the fix the attacker landed in 17-18 of 20.
    for n in 0..20 {
        let id = format!("{VICTIMS}{n:04}");
        let stop = Arc::new(AtomicBool::new(false));
        let mut tasks = Vec::new();
        // Three spammers with a breath between attempts: enough to hit the creation window
        // every round, not so many that the victim's own write queues for the store's timeout
        // on a loaded 2-core machine (six in a tight loop did, once).
        for _ in 0..3 {
            let (h, ta, id, stop) = (h.clone(), ta.clone(), id.clone(), stop.clone());
            let client = attacker.client_id.clone();
            tasks.push(tokio::spawn(async move {
                let mut landed = 0;
                while !stop.load(Ordering::Relaxed) {
                    let r = h.write_as(&ta, &no_create(&client, &id, 1 + landed)).await;
                    if r.outcome() == "landed" {
                        landed += 1;
                    }
                    tokio::time::sleep(Duration::from_millis(1)).await;
                }
            }));
        }
        tokio::time::sleep(Duration::from_millis(30)).await;
        let r = h
            .write_as(&tv, &write_by(&victim.client_id, TYPE, &id, &[1]))
            .await;
        assert_eq!(r.outcome(), "landed", "{:?}", r.json);
        tokio::time::sleep(Duration::from_millis(30)).await;
        stop.store(true, Ordering::Relaxed);
        for t in tasks {
            t.await.unwrap();
        }
        let seen = writers(&h, &tv, &id).await;
        assert_eq!(seen, vec![json!(victim.client_id)], "aggregate {n}");
    }
}
