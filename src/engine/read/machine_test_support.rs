//! What the read machine's floor and read tests (`machine_floor_tests.rs`,
//! `machine_floor_reset_tests.rs`, `machine_read_tests.rs`) build their scenarios from: one
//! aggregate type, reads of one context, a reader driven at a fixed time with its reports left
//! out, last pages, `changed`s and a reader already watching an aggregate. Kept once so that
//! the three files drive the reader the same way.

use super::*;
use crate::engine::read::message::ReadTag;
use uuid::Uuid;

/// The time the tests drive the reader at, unless they say otherwise.
pub(super) const T: u64 = 1_000_000;

/// A `ready` of the gateway as it is now: its resets say deletions (`deletedResets`).
pub(super) const READY: Note = Note::Ready {
    deleted_resets: true,
};

/// Aggregate `n` (of one type).
pub(super) fn agg(n: u128) -> AggregateRef {
    AggregateRef {
        type_id: Uuid::from_u128(7),
        id: Uuid::from_u128(n),
    }
}

/// Read `waiter` of one context.
pub(super) fn tag(waiter: u64) -> ReadTag {
    ReadTag { context: 3, waiter }
}

/// Handles `input`; what it does, reports left out.
pub(super) fn on(r: &mut Reader, input: Input) -> Vec<Action> {
    at(r, input, T)
}

/// Handles `input` at `now`; what it does, reports left out.
pub(super) fn at(r: &mut Reader, input: Input, now: u64) -> Vec<Action> {
    r.handle(input, now, 0.5);
    std::iter::from_fn(|| r.poll())
        .filter(|a| !matches!(a, Action::Report(_)))
        .collect()
}

/// The catch-up's last page, its log at `version`.
pub(super) fn last(aggregate: AggregateRef, version: u64) -> Input {
    Input::Page {
        aggregate,
        end: PageEnd::Stored {
            more: false,
            version,
        },
    }
}

/// The stream says `aggregate` reached `version`.
pub(super) fn changed(r: &mut Reader, aggregate: AggregateRef, version: u64) -> Vec<Action> {
    let id = r.streams()[0].0;
    on(r, Input::Stream(id, Note::Changed { aggregate, version }))
}

pub(super) fn caught_up(aggregate: AggregateRef, ok: bool, reads: &[ReadTag]) -> Action {
    Action::CaughtUp {
        aggregate,
        ok,
        reads: reads.to_vec(),
    }
}

pub(super) fn retry(aggregate: AggregateRef, ms: u64) -> Action {
    Action::RetryLater { aggregate, ms }
}

/// A reader watching `a` over a ready stream ([`READY`]), caught up at version 0.
pub(super) fn watching(a: AggregateRef) -> Reader {
    watching_with(a, true)
}

/// A reader watching `a` over a ready stream (whose `ready` says `deleted_resets`), caught up
/// at version 0.
pub(super) fn watching_with(a: AggregateRef, deleted_resets: bool) -> Reader {
    let mut r = Reader::new(Backoff::default());
    on(&mut r, Input::Subscribe(a));
    on(&mut r, last(a, 0));
    let id = r.streams()[0].0;
    assert_eq!(
        on(&mut r, Input::Stream(id, Note::Ready { deleted_resets })),
        [Action::FetchPage(a)]
    );
    assert_eq!(on(&mut r, last(a, 0)), [caught_up(a, true, &[])]);
    r
}
