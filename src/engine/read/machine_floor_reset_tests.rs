//! Unit tests of the read machine's floors across what may look like the aggregate going
//! back: a page or probe that finds it `Gone` (perhaps only a replica behind the cursor), and
//! a `changed` below the floor, taken for a recreation only on the stream that raised the
//! floor and only when that stream's `ready` said its resets say deletions (kept apart from
//! `machine_floor_tests.rs`, which holds the retries and give-up).

use super::*;
use crate::engine::read::message::ReadTag;
use uuid::Uuid;

const T: u64 = 1_000_000;

fn agg(n: u128) -> AggregateRef {
    AggregateRef {
        type_id: Uuid::from_u128(7),
        id: Uuid::from_u128(n),
    }
}

fn tag(waiter: u64) -> ReadTag {
    ReadTag { context: 3, waiter }
}

/// Handles `input`; what it does, reports left out.
fn on(r: &mut Reader, input: Input) -> Vec<Action> {
    r.handle(input, T, 0.5);
    std::iter::from_fn(|| r.poll())
        .filter(|a| !matches!(a, Action::Report(_)))
        .collect()
}

/// The catch-up's last page, its log at `version`.
fn last(aggregate: AggregateRef, version: u64) -> Input {
    Input::Page {
        aggregate,
        end: PageEnd::Stored {
            more: false,
            version,
        },
    }
}

/// The stream says `aggregate` reached `version`.
fn changed(r: &mut Reader, aggregate: AggregateRef, version: u64) -> Vec<Action> {
    let id = r.streams()[0].0;
    on(r, Input::Stream(id, Note::Changed { aggregate, version }))
}

fn caught_up(aggregate: AggregateRef, ok: bool, reads: &[ReadTag]) -> Action {
    Action::CaughtUp {
        aggregate,
        ok,
        reads: reads.to_vec(),
    }
}

fn retry(aggregate: AggregateRef, ms: u64) -> Action {
    Action::RetryLater { aggregate, ms }
}

/// A reader watching `a` over a ready stream, caught up at version 0.
fn watching(a: AggregateRef) -> Reader {
    let mut r = Reader::new(Backoff::default());
    on(&mut r, Input::Subscribe(a));
    on(&mut r, last(a, 0));
    let id = r.streams()[0].0;
    assert_eq!(
        on(&mut r, Input::Stream(id, Note::Ready)),
        [Action::FetchPage(a)]
    );
    assert_eq!(on(&mut r, last(a, 0)), [caught_up(a, true, &[])]);
    r
}

/// Round 5's SF1: a probe after a trim's `reset` answered by a replica at 8, below the cursor
/// at 9, finds the aggregate `Gone`; the floor went with it, and the re-read from that replica,
/// ending at 8, answered a read boarded with 10 fresh at 8. The floor and the read's need now
/// stay: the re-read ending at 8 is a miss, retried, and the read waits for 10.
#[test]
fn a_replica_behind_the_cursor_answers_no_read_below_its_floor() {
    let a = agg(1);
    let mut r = watching(a);
    assert_eq!(changed(&mut r, a, 10), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 9)), [retry(a, 250)]);
    assert_eq!(on(&mut r, Input::Read(a, tag(1))), [Action::FetchPage(a)]);
    let id = r.streams()[0].0;
    let trim = Note::Reset {
        aggregate: a,
        deleted: false,
    };
    assert_eq!(on(&mut r, Input::Stream(id, trim)), []);
    // The page in flight ends at 9: below 10, the read waits; then the probe.
    assert_eq!(on(&mut r, last(a, 9)), [Action::Probe(a)]);
    let gone = Input::Page {
        aggregate: a,
        end: PageEnd::Gone,
    };
    assert_eq!(
        on(&mut r, gone),
        [Action::ResetLog {
            aggregate: a,
            min_version: 1,
            gone: true
        }]
    );
    assert_eq!(on(&mut r, Input::LogReset(a)), [Action::FetchPage(a)]);
    // The re-read from the replica at 8: not fresh for a read that boarded with 10.
    assert_eq!(on(&mut r, last(a, 8)), []);
    assert_eq!(on(&mut r, Input::Retry(a)), [Action::FetchPage(a)]);
    assert_eq!(on(&mut r, last(a, 10)), [caught_up(a, true, &[tag(1)])]);
}
