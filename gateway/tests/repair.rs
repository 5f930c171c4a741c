//! `celeriant-gateway repair-sequence`: a device whose sequence record a stolen token pushed to
//! 2^53−1 (every later write answered 2002 and dropped) is put back at the end of its own run,
//! and its next write lands; the forged event stays in the log and is listed.

use celeriant_gateway::backend::embedded::repair::{Target, repair};
use celeriant_gateway::backend::embedded::verify::verify;
use celeriant_gateway::backend::embedded::{EmbeddedOptions, EmbeddedStore};
use celeriant_gateway::backend::{
    AggregateCommand, AggregateKey, Backend, ReadQuery, WriteCommand,
};
use celeriant_sync_protocol::{AggregateRef, Event};
use uuid::Uuid;

const DEVICE: u128 = 77;
const TYPE: u128 = 2;
const ID: u128 = 5;
/// The highest integer JavaScript holds exactly: what the thief wrote.
const FORGED: u64 = (1 << 53) - 1;

fn key() -> AggregateKey {
    AggregateKey {
        org: Uuid::from_u128(1),
        aggregate: AggregateRef {
            type_id: Uuid::from_u128(TYPE),
            id: Uuid::from_u128(ID),
        },
    }
}

fn write(seqs: &[u64]) -> WriteCommand {
    WriteCommand {
        principal: None,
        policy: None,
        client_id: Uuid::from_u128(DEVICE),
        writes: vec![AggregateCommand {
            key: key(),
            allow_create: true,
            expected_version: None,
            enforce_client_idempotency: true,
            events: seqs
                .iter()
                .map(|&s| Event {
                    client_seq: s,
                    event_id: None,
                    timestamp: 1_700_000_000_000,
                    event_type: 1,
                    minor: 0,
                    data: format!("event {s}").into_bytes(),
                    iv: None,
                })
                .collect(),
        }],
    }
}

fn target() -> Target {
    Target {
        org: Uuid::from_u128(1),
        type_id: Uuid::from_u128(TYPE),
        id: Uuid::from_u128(ID),
        client: Uuid::from_u128(DEVICE),
    }
}

async fn stored_seqs(store: &EmbeddedStore) -> Vec<u64> {
    let page = store
        .read(ReadQuery {
            key: key(),
            from_version: 1,
            max_bytes: usize::MAX,
            max_batches: 1000,
        })
        .await
        .unwrap();
    page.batches
        .iter()
        .flat_map(|b| b.events.iter().map(|e| e.client_seq))
        .collect()
}

#[tokio::test]
async fn a_device_hit_by_a_forged_sequence_is_repaired_and_its_next_write_lands() {
    let dir = tempfile::tempdir().unwrap();
    let open = || EmbeddedStore::open(dir.path(), EmbeddedOptions::default()).unwrap();
    {
        let store = open();
        store.write(write(&[1, 2])).await.unwrap();
        store.write(write(&[3])).await.unwrap();
        // The thief, with the device's stolen token.
        store.write(write(&[FORGED])).await.unwrap();
        // The device's next event is taken for "already landed" and dropped: the harm.
        let dropped = store.write(write(&[4])).await;
        assert!(format!("{dropped:?}").contains("2002"), "{dropped:?}");
        assert_eq!(stored_seqs(&store).await, [1, 2, 3, FORGED]);
        // Refused while a gateway holds the store.
        let busy = repair(dir.path(), target(), false).unwrap_err();
        assert!(busy.contains("stop it first"), "{busy}");
    }
    let dry = repair(dir.path(), target(), true).unwrap();
    assert_eq!(
        (dry.before, dry.after, dry.written),
        (Some(FORGED), 3, false)
    );
    let fixed = repair(dir.path(), target(), false).unwrap();
    assert_eq!(
        (fixed.before, fixed.after, fixed.written),
        (Some(FORGED), 3, true)
    );
    assert_eq!(
        fixed.beyond,
        [(3, FORGED)],
        "the forged event is listed, by version"
    );
    assert!(
        verify(dir.path()).unwrap().problems.is_empty(),
        "the record is sealed"
    );
    // Again: nothing to do.
    assert!(!repair(dir.path(), target(), false).unwrap().written);
    let store = open();
    store.write(write(&[4])).await.unwrap();
    // A resend of an event that landed is still answered 2002, not stored twice.
    let again = store.write(write(&[3])).await;
    assert!(format!("{again:?}").contains("2002"), "{again:?}");
    assert_eq!(stored_seqs(&store).await, [1, 2, 3, FORGED, 4]);
}

#[tokio::test]
async fn a_device_without_events_or_a_missing_store_changes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let e = repair(dir.path(), target(), false).unwrap_err();
    assert!(e.contains("no store"), "{e}");
    drop(EmbeddedStore::open(dir.path(), EmbeddedOptions::default()).unwrap());
    let r = repair(dir.path(), target(), false).unwrap();
    assert_eq!((r.before, r.after, r.written), (None, 0, false));
}
