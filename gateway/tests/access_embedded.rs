//! Access records in the embedded store: two creators racing inside one commit group, the owners
//! an older store is given on open, and a damaged record (refused, reported by verify).

mod support;

use std::sync::Arc;

use celeriant_gateway::backend::embedded::{EmbeddedOptions, EmbeddedStore};
use celeriant_gateway::backend::{AggregateCommand, AggregateKey, Backend, WriteCommand};
use celeriant_sync_protocol::{AggregateRef, Event};
use support::app::*;
use support::device::*;
use uuid::Uuid;

fn events_path(id: &str) -> String {
    format!("/v1/aggregates/{TYPE}/{id}/events")
}

async fn two(h: &Harness) -> (Device, String, Device, String) {
    let (a, b) = (Device::a(), Device::b());
    let (ta, tb) = (h.open(&a).await, h.open(&b).await);
    (a, ta, b, tb)
}

#[tokio::test]
async fn two_creators_racing_in_one_commit_group_one_wins() {
    // A linger puts both writes in one transaction: the second sees the first's record.
    let h = Harness::with_options(
        |c| c.session_rate_per_minute = 0,
        EmbeddedOptions {
            linger: ms(200),
            ..EmbeddedOptions::default()
        },
    );
    let (a, ta, b, tb) = two(&h).await;
    let wa = write_by(&a.client_id, TYPE, ID, &[1]);
    let wb = write_by(&b.client_id, TYPE, ID, &[1]);
    let (ra, rb) = tokio::join!(h.write_as(&ta, &wa), h.write_as(&tb, &wb));
    let outcomes = [ra.outcome(), rb.outcome()];
    assert!(
        outcomes == ["landed", "rejected"] || outcomes == ["rejected", "landed"],
        "{:?} {:?}",
        ra.json,
        rb.json
    );
    let (winner, loser, tw, tl) = if ra.outcome() == "landed" {
        (&a, &rb, &ta, &tb)
    } else {
        (&b, &ra, &tb, &ta)
    };
    assert_eq!(loser.code(), 40302);
    let page = h.get_as(tw, &events_path(ID)).await;
    assert_eq!(page.json["batches"].as_array().unwrap().len(), 1);
    assert_eq!(page.json["batches"][0]["clientId"], winner.client_id);
    assert_eq!(h.get_as(tl, &events_path(ID)).await.json["tip"], 0);
}

fn event(seq: u64) -> Event {
    serde_json::from_value(support::app::event(seq)).unwrap()
}

#[tokio::test]
async fn an_older_store_gives_each_aggregate_the_writer_of_its_first_batch() {
    let dir = tempfile::tempdir().unwrap();
    let key = |id: u128| AggregateKey {
        org: Uuid::from_u128(1),
        aggregate: AggregateRef {
            type_id: Uuid::from_u128(5),
            id: Uuid::from_u128(id),
        },
    };
    {
        let store = EmbeddedStore::open(dir.path(), EmbeddedOptions::default()).unwrap();
        // As a gateway before owners wrote: no principal, so no record.
        for (client, id) in [(77u128, 1u128), (78, 2)] {
            let command = WriteCommand {
                principal: None,
                policy: None,
                client_id: Uuid::from_u128(client),
                writes: vec![AggregateCommand {
                    key: key(id),
                    allow_create: true,
                    expected_version: None,
                    enforce_client_idempotency: true,
                    events: vec![event(1)],
                }],
            };
            store.write(command).await.unwrap();
        }
        assert_eq!(store.access(key(1)).await.unwrap(), None);
    }
    let store: Arc<dyn Backend> =
        Arc::new(EmbeddedStore::open(dir.path(), EmbeddedOptions::default()).unwrap());
    for (client, id) in [(77u128, 1u128), (78, 2)] {
        let record = store.access(key(id)).await.unwrap().unwrap();
        assert_eq!(
            record.owner.as_str(),
            format!("device:{}", Uuid::from_u128(client))
        );
    }
    assert_eq!(store.access(key(3)).await.unwrap(), None);
}

#[tokio::test]
async fn a_damaged_access_record_is_refused_and_reported_by_verify() {
    use celeriant_gateway::backend::embedded::access::ACCESS;
    use celeriant_gateway::backend::embedded::{FILE_NAME, verify};
    use redb::ReadableTable as _;
    let dir = tempfile::tempdir().unwrap();
    let key = AggregateKey {
        org: Uuid::from_u128(1),
        aggregate: AggregateRef {
            type_id: Uuid::from_u128(5),
            id: Uuid::from_u128(9),
        },
    };
    let owner = celeriant_gateway::access::Principal::device(Uuid::from_u128(77));
    {
        let store = EmbeddedStore::open(dir.path(), EmbeddedOptions::default()).unwrap();
        let command = WriteCommand {
            principal: Some(owner.clone()),
            policy: None,
            client_id: Uuid::from_u128(77),
            writes: vec![AggregateCommand {
                key,
                allow_create: true,
                expected_version: None,
                enforce_client_idempotency: true,
                events: vec![event(1)],
            }],
        };
        store.write(command).await.unwrap();
        assert_eq!(store.access(key).await.unwrap().unwrap().owner, owner);
    }
    assert_eq!(verify::verify(dir.path()).unwrap().owners, 1);
    {
        let db = redb::Database::open(dir.path().join(FILE_NAME)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut table = txn.open_table(ACCESS).unwrap();
            let k = (1u128, 5u128, 9u128);
            let mut stored = table.get(k).unwrap().unwrap().value().to_vec();
            // Someone else's name where the owner's was: the checksum no longer matches.
            let at = stored.len() - 3;
            stored[at] ^= 0x01;
            table.insert(k, stored.as_slice()).unwrap();
        }
        txn.commit().unwrap();
    }
    let report = verify::verify(dir.path()).unwrap();
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert!(
        report.problems[0].contains("access record"),
        "{:?}",
        report.problems
    );
    let store = EmbeddedStore::open(dir.path(), EmbeddedOptions::default()).unwrap();
    // Never trusted: the read is refused as damaged data (50001).
    let refused = store.access(key).await.unwrap_err();
    assert!(
        matches!(
            refused,
            celeriant_gateway::backend::BackendError::Code { code: 50001, .. }
        ),
        "{refused}"
    );
}
