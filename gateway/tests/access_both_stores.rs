//! Ownership rules both stores must keep alike, each test run on the embedded store and on the
//! Celeriant backend over the fake node: two principals racing to create the same ids many
//! times (exactly one owns each), and the gateway's reserved type refused to everyone on every
//! route (kept apart from `access_celeriant.rs`, which holds what only the Celeriant backend
//! does).

mod support;

use std::sync::Arc;

use axum::body::Body;
use axum::http::Request;
use celeriant_gateway::access::RESERVED_TYPE;
use celeriant_sync_protocol::codes::gateway as g;
use support::app::*;
use support::device::*;
use support::policy::{OPERATOR, with_policy};

fn events(type_id: &str, id: &str) -> String {
    format!("/v1/aggregates/{type_id}/{id}/events")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn of_two_principals_creating_the_same_ids_at_once_exactly_one_owns_each() {
    for store in STORES {
        let h = Arc::new(Harness::auth_on(store, |_| {}).await);
        let (a, b) = (Device::a(), Device::b());
        let (ta, tb) = (h.open(&a).await, h.open(&b).await);
        for n in 0..24u32 {
            let id = format!("3b1f8e2c-9d4a-4c6b-b5e7-2a9c8d1e{n:04x}");
            // Several first writes from each principal, all at once.
            let mut tries = Vec::new();
            for k in 0..3u64 {
                for (device, token) in [(&a, &ta), (&b, &tb)] {
                    let (h, token) = (h.clone(), token.clone());
                    let body = write_by(&device.client_id, TYPE, &id, &[k + 1]);
                    let who = device.client_id.clone();
                    tries.push(tokio::spawn(async move {
                        (who, h.write_as(&token, &body).await)
                    }));
                }
            }
            // Every answer to the loser is 40302; none to the winner is (its own writes may
            // meet each other's sequences: duplicate, in flight).
            let (mut refused, mut served) = (Vec::new(), Vec::new());
            for t in tries {
                let (who, r) = t.await.unwrap();
                if r.code() == 40302 {
                    refused.push(who);
                } else {
                    served.push((who, r.json));
                }
            }
            refused.sort();
            refused.dedup();
            let answers = format!("{served:?}");
            let mut served: Vec<String> = served
                .into_iter()
                .map(|(who, answer)| {
                    assert!(
                        matches!(
                            answer["outcome"].as_str(),
                            Some("landed" | "duplicate" | "retry")
                        ),
                        "{store:?} {id}: {answer}"
                    );
                    who
                })
                .collect();
            served.sort();
            served.dedup();
            assert_eq!(served.len(), 1, "{store:?} {id}: {answers}");
            assert_eq!(refused.len(), 1, "{store:?} {id}: {refused:?}");
            assert_ne!(served, refused);
            let landed_by = served;
            let winner = &landed_by[0];
            let owner = h.state.backend.access(h.key_of(&id)).await.unwrap();
            assert_eq!(owner.unwrap().owner.as_str(), format!("device:{winner}"));
            // Nothing of the loser's was stored.
            let token = if *winner == a.client_id { &ta } else { &tb };
            let page = h.get_as(token, &events(TYPE, &id)).await;
            for batch in page.json["batches"].as_array().unwrap() {
                assert_eq!(&batch["clientId"], winner, "{store:?} {id}");
            }
        }
    }
}

#[tokio::test]
async fn the_reserved_type_is_refused_to_everyone_on_every_route() {
    let reserved = RESERVED_TYPE.to_string();
    for store in STORES {
        let h = with_policy(store, "default = \"authenticated\"").await;
        let a = Device::a();
        let ta = h.open(&a).await;
        let refused = |r: &Reply| {
            assert_eq!(
                (r.status.as_u16(), r.code()),
                (403, u64::from(g::AGGREGATE_TYPE_FORBIDDEN)),
                "{store:?}: {:?}",
                r.json
            )
        };
        refused(
            &h.write_as(&ta, &write_by(&a.client_id, &reserved, ID, &[1]))
                .await,
        );
        refused(&h.get_as(&ta, &events(&reserved, ID)).await);
        refused(
            &h.get_as(&ta, &format!("/v1/aggregates/{reserved}/{ID}/members"))
                .await,
        );
        refused(
            &h.get_as(&ta, &format!("/v1/watch?aggregate={reserved}/{ID}"))
                .await,
        );
        let operator = Request::get(events(&reserved, ID))
            .header("authorization", format!("Operator {OPERATOR}"))
            .body(Body::empty())
            .unwrap();
        refused(&h.send(operator).await);
    }
}
