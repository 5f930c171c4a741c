//! A park holds the aggregates that share a pending atomic write with it (transitively), and
//! `flush_aggregate` and `when_synced_unblocked` — what `decide` waits with — reject with that
//! park instead of waiting for ever; `when_synced` of an event not itself parked keeps waiting.

use futures_executor::block_on;
use futures_util::FutureExt;

use super::*;
use crate::engine::conformance::{aggregate, events, rejected};
use crate::engine::memory::MemoryOutbox;
use crate::engine::status::{Observer, Status, SyncedNotice};

struct Quiet;

impl Observer for Quiet {
    fn status(&self, _: &Status) {}
    fn synced(&self, _: &SyncedNotice) {}
    fn parked(&self, _: &ParkRecord) {}
}

#[test]
fn a_park_holds_every_aggregate_behind_an_atomic_write_it_stops() {
    let outbox = MemoryOutbox::new();
    let (a, b, c) = (aggregate(1), aggregate(2), aggregate(3));
    block_on(async {
        outbox.append(a, events(0..1)).await.unwrap();
        outbox
            .append_atomic(&[(a, &events(1..2), None), (b, &events(2..3), None)])
            .await
            .unwrap();
        let later = outbox.append(b, events(3..4)).await.unwrap();
        outbox
            .append_atomic(&[(c, &events(4..5), None), (b, &events(5..6), None)])
            .await
            .unwrap();
        let hub = Hub::new(Box::new(Quiet));
        // Nothing parked: nothing holds B (its head is the transfer, which waits for A's event 1).
        assert_eq!(holding_park(&outbox, &hub, b).await.unwrap(), None);
        // A's event 1 is rejected: A is parked, and with it the transfer, B, and C behind B.
        hub.parked(rejected(&Batch::plain(a, 1, 1, 1), false));
        for held in [a, b, c] {
            let record = holding_park(&outbox, &hub, held).await.unwrap();
            assert_eq!(record.map(|r| r.aggregate), Some(a), "{held:?}");
            assert!(matches!(
                flush_aggregate(&outbox, &hub, held).await,
                Err(FlushError::Parked { aggregate, code: 2022, .. }) if aggregate == a
            ));
        }
        assert!(matches!(
            when_synced_unblocked(&outbox, &hub, later[0].event_id).await,
            Err(FlushError::Parked { aggregate, .. }) if aggregate == a
        ));
        // Not itself parked: `whenSynced` waits (the app may still discard the park).
        assert!(
            when_synced(&outbox, &hub, later[0].event_id)
                .now_or_never()
                .is_none()
        );
        // Discarded: nothing holds them any more.
        outbox.discard_parked(a).await.unwrap();
        hub.discarded(&a, 1, None);
        for free in [a, b, c] {
            assert_eq!(holding_park(&outbox, &hub, free).await.unwrap(), None);
        }
    });
}
