//! The embedded store's integrity, at the backend level: checksums on every stored value
//! (a damaged batch is never served, a damaged version is never trusted by a write), the
//! offline `verify`, the migration of schema 1 stores, the per-client quota, and read pages
//! rendered within their byte budget.

use celeriant_gateway::backend::embedded::verify::verify;
use celeriant_gateway::backend::embedded::{EmbeddedOptions, EmbeddedStore, FILE_NAME};
use celeriant_gateway::backend::{
    AggregateCommand, AggregateKey, Backend, BackendError, JsonPage, ReadQuery, WriteCommand,
};
use celeriant_sync_protocol::codes::gateway as g;
use celeriant_sync_protocol::{AggregateRef, Event, ReadResponse};
use redb::{ReadableTable, TableDefinition};
use uuid::Uuid;

const CLIENT: u128 = 77;

fn key(id: u128) -> AggregateKey {
    AggregateKey {
        org: Uuid::from_u128(1),
        aggregate: AggregateRef {
            type_id: Uuid::from_u128(2),
            id: Uuid::from_u128(id),
        },
    }
}

fn ev(seq: u64, data: Vec<u8>) -> Event {
    Event {
        client_seq: seq,
        event_id: None,
        timestamp: 1_700_000_000_000,
        event_type: 1,
        minor: 0,
        data,
        iv: None,
    }
}

fn cmd_by(client: u128, id: u128, seq: u64, data: Vec<u8>) -> WriteCommand {
    WriteCommand {
        principal: None,
        policy: None,
        client_id: Uuid::from_u128(client),
        writes: vec![AggregateCommand {
            key: key(id),
            allow_create: true,
            expected_version: None,
            enforce_client_idempotency: true,
            events: vec![ev(seq, data)],
        }],
    }
}

fn cmd(id: u128, seq: u64, data: Vec<u8>) -> WriteCommand {
    cmd_by(CLIENT, id, seq, data)
}

fn query(id: u128) -> ReadQuery {
    ReadQuery {
        key: key(id),
        from_version: 1,
        max_bytes: usize::MAX,
        max_batches: 1000,
    }
}

fn code<T: std::fmt::Debug>(r: Result<T, BackendError>) -> u32 {
    match r {
        Err(BackendError::Code { code, .. }) => code,
        other => panic!("expected a code, got {other:?}"),
    }
}

fn open(dir: &std::path::Path) -> EmbeddedStore {
    EmbeddedStore::open(dir, EmbeddedOptions::default()).unwrap()
}

/// Flips one byte in every copy of `needle` in the database file (redb copies pages on
/// write, so a stale copy may sit beside the live one), as rot in the live page would.
fn flip_byte_of(dir: &std::path::Path, needle: &[u8]) {
    let path = dir.join(FILE_NAME);
    let mut file = std::fs::read(&path).unwrap();
    let starts: Vec<usize> = file
        .windows(needle.len())
        .enumerate()
        .filter(|(_, w)| *w == needle)
        .map(|(at, _)| at)
        .collect();
    assert!(!starts.is_empty(), "the payload is in the file");
    for at in starts {
        file[at + needle.len() / 2] ^= 0x01;
    }
    std::fs::write(&path, file).unwrap();
}

#[tokio::test]
async fn a_flipped_byte_in_a_payload_is_never_served_and_verify_names_it() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path());
        store
            .write(cmd(5, 1, b"first payload".to_vec()))
            .await
            .unwrap();
        store
            .write(cmd(5, 2, b"the payload that will rot".to_vec()))
            .await
            .unwrap();
        store
            .write(cmd(6, 1, b"a neighbour".to_vec()))
            .await
            .unwrap();
    }
    assert!(verify(dir.path()).unwrap().problems.is_empty());
    // The payload is stored as base64 in the batch's JSON.
    let b64 = celeriant_sync_protocol::encoding::encode_base64(b"the payload that will rot");
    flip_byte_of(dir.path(), b64.as_bytes());

    let store = open(dir.path());
    let damaged = store.read(query(5)).await;
    assert_eq!(code(damaged), g::DATA_CORRUPT);
    let Err(BackendError::Code { message, .. }) = store.read_json(query(5)).await else {
        panic!("served a damaged page");
    };
    assert!(
        message.contains("batch 2 of aggregate 00000000-0000-0000-0000-000000000002/00000000-0000-0000-0000-000000000005"),
        "{message}"
    );
    // The rest of the store is fine, and counted failures show in the health report.
    assert_eq!(store.read(query(6)).await.unwrap().batches.len(), 1);
    let page = store
        .read(ReadQuery {
            max_batches: 1,
            ..query(5)
        })
        .await
        .unwrap();
    assert_eq!(page.batches.len(), 1, "batch 1 still reads");
    let health = store.store_health().unwrap();
    assert_eq!(health.checksum_failures, 2);
    assert_eq!(health.last_checksum_failure, None, "logged, not reported");
    assert!(store.write_gate().is_ok());
    drop(store);

    let report = verify(dir.path()).unwrap();
    assert_eq!(report.batches, 3);
    assert_eq!(report.problems.len(), 1, "{:?}", report.problems);
    assert!(
        report.problems[0].starts_with("batch 2 of aggregate"),
        "{:?}",
        report.problems
    );
}

const AGGREGATES_V2: TableDefinition<(u128, u128, u128), (u64, u32)> =
    TableDefinition::new("aggregates.v2");

#[tokio::test]
async fn a_damaged_version_is_not_trusted_by_a_write() {
    let dir = tempfile::tempdir().unwrap();
    {
        let store = open(dir.path());
        store.write(cmd(5, 1, vec![1])).await.unwrap();
        store.write(cmd(6, 1, vec![1])).await.unwrap();
    }
    {
        // Version 1 → 0 with the old checksum: a write trusting it would overwrite batch 1.
        let db = redb::Database::create(dir.path().join(FILE_NAME)).unwrap();
        let txn = db.begin_write().unwrap();
        {
            let mut table = txn.open_table(AGGREGATES_V2).unwrap();
            let k = (1u128, 2u128, 5u128);
            let (_, crc) = table.get(k).unwrap().unwrap().value();
            table.insert(k, (0, crc)).unwrap();
        }
        txn.commit().unwrap();
    }
    let store = open(dir.path());
    assert_eq!(code(store.write(cmd(5, 2, vec![2])).await), g::DATA_CORRUPT);
    assert_eq!(
        store
            .write(cmd(6, 2, vec![2]))
            .await
            .unwrap()
            .aggregate_version,
        Some(2),
        "other aggregates are written"
    );
    let batches = store.read(query(5)).await.unwrap().batches;
    assert_eq!(batches.len(), 1, "batch 1 was not overwritten");
    assert_eq!(batches[0].events[0].data, vec![1]);
    drop(store);
    let problems = verify(dir.path()).unwrap().problems;
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(
        problems[0].starts_with("the version of aggregate"),
        "{problems:?}"
    );
}

const AGGREGATES_V1: TableDefinition<(u128, u128, u128), u64> = TableDefinition::new("aggregates");
const BATCHES_V1: TableDefinition<(u128, u128, u128, u64), &[u8]> = TableDefinition::new("batches");
const CLIENT_SEQS_V1: TableDefinition<(u128, u128, u128, u128), u64> =
    TableDefinition::new("client_seqs");

/// A store as the gateway wrote it before checksums: bare numbers, bare JSON, no `meta`.
fn write_schema_1(dir: &std::path::Path, aggregates: u128, versions: u64) -> Vec<Vec<u8>> {
    std::fs::create_dir_all(dir).unwrap();
    let db = redb::Database::create(dir.join(FILE_NAME)).unwrap();
    let txn = db.begin_write().unwrap();
    let mut jsons = Vec::new();
    {
        let mut aggs = txn.open_table(AGGREGATES_V1).unwrap();
        let mut batches = txn.open_table(BATCHES_V1).unwrap();
        let mut seqs = txn.open_table(CLIENT_SEQS_V1).unwrap();
        for id in 0..aggregates {
            for v in 1..=versions {
                let batch = celeriant_sync_protocol::ReadBatch {
                    version: v,
                    client_id: Uuid::from_u128(CLIENT),
                    server_timestamp: 1_700_000_000_000 + v,
                    events: vec![ev(v, vec![v as u8; 10])],
                };
                let json = serde_json::to_vec(&batch).unwrap();
                batches.insert((1, 2, id, v), json.as_slice()).unwrap();
                jsons.push(json);
            }
            aggs.insert((1, 2, id), versions).unwrap();
            seqs.insert((1, 2, id, CLIENT), versions).unwrap();
        }
    }
    txn.commit().unwrap();
    jsons
}

#[tokio::test]
async fn a_schema_1_store_is_migrated_on_open_and_keeps_working() {
    let dir = tempfile::tempdir().unwrap();
    // More batches than one migration step rewrites.
    let jsons = write_schema_1(dir.path(), 30, 20);
    let store = open(dir.path());
    // Reads answer exactly what they answered before.
    let JsonPage::Body(body) = store.read_json(query(3)).await.unwrap() else {
        panic!("needs more")
    };
    let page: ReadResponse = serde_json::from_slice(&body).unwrap();
    assert_eq!(page.batches.len(), 20);
    let expected: Vec<u8> = [
        br#"{"batches":["#.as_slice(),
        &jsons[60..80].join(&b","[..]),
        br#"],"next":null,"tip":20}"#,
    ]
    .concat();
    assert_eq!(body, expected, "byte for byte");
    // Versions and sequences carried over: the next write is version 21, an old one a 2002.
    assert_eq!(
        store
            .write(cmd(3, 21, vec![9]))
            .await
            .unwrap()
            .aggregate_version,
        Some(21)
    );
    assert_eq!(
        code(store.write(cmd(4, 20, vec![9])).await),
        celeriant_sync_protocol::codes::celeriant::CLIENT_IDEMPOTENCY_VIOLATION
    );
    drop(store);
    let report = verify(dir.path()).unwrap();
    assert!(report.problems.is_empty(), "{:?}", report.problems);
    assert_eq!(
        (report.batches, report.aggregates, report.clients),
        (601, 30, 1)
    );
    // Opening again does not migrate twice.
    drop(open(dir.path()));
    assert!(verify(dir.path()).unwrap().problems.is_empty());
}

#[tokio::test]
async fn verify_refuses_a_store_in_use_or_unmigrated() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    let e = verify(dir.path()).unwrap_err();
    assert!(e.contains("open in another process"), "{e}");
    drop(store);
    let old = tempfile::tempdir().unwrap();
    write_schema_1(old.path(), 1, 1);
    let e = verify(old.path()).unwrap_err();
    assert!(e.contains("schema 1 (no checksums)"), "{e}");
    let e = verify(&old.path().join("nothing")).unwrap_err();
    assert!(e.contains("no store at"), "{e}");
}

#[tokio::test]
async fn the_quota_refuses_a_client_over_it_but_not_its_duplicates_or_others() {
    let dir = tempfile::tempdir().unwrap();
    let store = EmbeddedStore::open(
        dir.path(),
        EmbeddedOptions {
            quota_bytes: 1_000,
            ..EmbeddedOptions::default()
        },
    )
    .unwrap();
    store.write(cmd(5, 1, vec![0; 300])).await.unwrap();
    let refused = store.write(cmd(5, 2, vec![0; 300])).await;
    let Err(BackendError::Code {
        code: refusal,
        message,
        ..
    }) = refused
    else {
        panic!("{refused:?}")
    };
    assert_eq!(refusal, g::STORAGE_QUOTA_EXCEEDED);
    assert!(message.contains("over the 1000-byte quota"), "{message}");
    assert_eq!(
        code_of_outcome(BackendError::code(refusal, message)),
        ("rejected", 403)
    );
    // The sequence that landed is still answered 2002, and another client has its own quota.
    assert_eq!(
        code(store.write(cmd(5, 1, vec![0; 300])).await),
        celeriant_sync_protocol::codes::celeriant::CLIENT_IDEMPOTENCY_VIOLATION
    );
    store
        .write(cmd_by(78, 5, 1, vec![0; 300]))
        .await
        .expect("another client");
    assert_eq!(store.read(query(5)).await.unwrap().batches.len(), 2);
    drop(store);
    assert!(verify(dir.path()).unwrap().problems.is_empty());
}

fn code_of_outcome(e: BackendError) -> (&'static str, u16) {
    let outcome = e.into_outcome();
    (outcome.tag(), outcome.http_status())
}

#[tokio::test]
async fn a_page_stays_within_its_byte_budget_or_says_what_one_batch_needs() {
    let dir = tempfile::tempdir().unwrap();
    let store = open(dir.path());
    for seq in 1..=4 {
        store.write(cmd(5, seq, vec![7; 3_000])).await.unwrap();
    }
    let store = &store;
    let full = |max_bytes| async move {
        store
            .read_json(ReadQuery {
                max_bytes,
                ..query(5)
            })
            .await
            .unwrap()
    };
    let JsonPage::Body(all) = full(usize::MAX).await else {
        panic!()
    };
    let one = (all.len() - 30) / 4;
    // Two batches' worth: two batches, next 3, and the body within the budget.
    let JsonPage::Body(two) = full(2 * one + 60).await else {
        panic!()
    };
    assert!(two.len() <= 2 * one + 60);
    let page: ReadResponse = serde_json::from_slice(&two).unwrap();
    assert_eq!((page.batches.len(), page.next), (2, Some(3)));
    // Less than one batch: nothing copied, the size it needs instead.
    let JsonPage::Needs(needed) = full(100).await else {
        panic!("a batch over the budget was served")
    };
    let JsonPage::Body(first) = full(needed).await else {
        panic!("the size it asked for is not enough")
    };
    let page: ReadResponse = serde_json::from_slice(&first).unwrap();
    assert_eq!((page.batches.len(), page.next), (1, Some(2)));
    // The rendered page is the typed page, serialised.
    let typed = store.read(query(5)).await.unwrap();
    assert_eq!(
        serde_json::to_vec(&ReadResponse {
            batches: typed.batches,
            next: typed.next,
            tip: typed.tip,
        })
        .unwrap(),
        all
    );
}
