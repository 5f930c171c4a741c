//! The read executor's streams, run natively on `run_tests.rs`'s fake platform: a stream's end
//! read for what it means, what a stream no longer wanted says ignored, and what the gateway
//! refused to watch published with the aggregates that fit in no stream, for as long as the
//! stream that said it is there. Kept apart from `run_tests.rs` (its size).

use super::super::WATCH_TOO_MANY_AGGREGATES;
use super::{READY, Rig, agg};
use crate::engine::read::machine::{Input, ReadState};
use crate::engine::status::Refused;

#[test]
fn a_stream_refused_as_too_large_halves_the_streams() {
    let mut rig = Rig::new();
    rig.run.feed(Input::Subscribe(agg(1)));
    rig.run.feed(Input::Subscribe(agg(2)));
    rig.settle();
    let per_stream = rig.run.machine.borrow().per_stream();
    // The stream of both (the one of the first alone was replaced).
    assert_eq!(rig.fake().open.borrow().len(), 1);
    let id = rig.fake().open.borrow()[0];
    // What the replaced stream says is ignored: its refusals are not published, nor its
    // `ready` and tips fed.
    let first = *rig.fake().sinks.borrow().keys().next().unwrap();
    assert_ne!(first, id);
    let replaced = rig.sink(first);
    assert!(!replaced.wanted());
    let refused = vec![Refused {
        aggregate: agg(1),
        code: 40302,
    }];
    let tips = vec![(agg(1), 5)];
    let requests = rig.fake().requests.get();
    assert!(replaced.chunk(READY, |_| (refused.clone(), Some(tips.clone()))));
    rig.settle();
    assert!(
        rig.refused().is_empty(),
        "a replaced stream's refusals were published"
    );
    assert_eq!(rig.hub.status().read, ReadState::Connecting);
    assert_eq!(rig.fake().requests.get(), requests);
    let sink = rig.sink(id);
    assert!(sink.ended(400, || Some(40020)));
    rig.settle();
    assert_eq!(rig.run.machine.borrow().per_stream(), per_stream / 2);
    assert!(!rig.fake().open.borrow().contains(&id));
    // What the ended stream says later is ignored; a 429 without its code is a plain end.
    assert!(!sink.wanted());
    let streams = rig.run.machine.borrow().max_streams();
    let sink = rig.last_sink();
    let last = sink.id;
    assert!(sink.ended(429, || None));
    rig.settle();
    assert_eq!(rig.run.machine.borrow().max_streams(), streams);
    assert!(!rig.fake().open.borrow().contains(&last));
}

#[test]
fn refusals_are_published_with_the_unwatched_until_their_stream_goes() {
    // One stream of one aggregate: `b` fits in none.
    let mut rig = Rig::limited(1, 1);
    let (a, b) = (agg(1), agg(2));
    rig.run.feed(Input::Subscribe(a));
    rig.run.feed(Input::Subscribe(b));
    rig.settle();
    let too_many = WATCH_TOO_MANY_AGGREGATES;
    assert_eq!(rig.refused(), vec![(b, too_many)]);
    let refused = vec![Refused {
        aggregate: a,
        code: 40302,
    }];
    let sink = rig.last_sink();
    assert!(sink.chunk(READY, |_| (refused.clone(), None)));
    rig.settle();
    assert_eq!(rig.refused(), vec![(a, 40302), (b, too_many)]);
    // Its stream's end takes its refusals with it.
    assert!(sink.ended(0, || None));
    rig.settle();
    assert_eq!(
        rig.refused(),
        vec![(b, too_many)],
        "an ended stream's refusals are still published"
    );
    // Reopened after its backoff, and refused again.
    rig.advance(60_000);
    let reopened = rig.last_sink();
    assert_ne!(reopened.id, sink.id);
    assert!(reopened.chunk(READY, |_| (refused.clone(), None)));
    rig.settle();
    assert_eq!(rig.refused(), vec![(a, 40302), (b, too_many)]);
    // The network switched off: the stream is closed, its refusals with it (it reopens under a
    // new id, so nothing else would remove them), and they come back with its next `ready`.
    rig.run.switched_off();
    rig.settle();
    assert_eq!(
        rig.refused(),
        vec![(b, too_many)],
        "a switched-off stream's refusals are still published"
    );
    rig.advance(60_000);
    let reopened = rig.last_sink();
    assert!(reopened.chunk(READY, |_| (refused.clone(), None)));
    rig.settle();
    assert_eq!(rig.refused(), vec![(a, 40302), (b, too_many)]);
    // `a` unwatched, `b` takes its place: the stream is closed, its refusals with it.
    rig.run.feed(Input::Unsubscribe(a));
    rig.settle();
    assert!(rig.run.machine.borrow().unwatched().is_empty());
    assert_ne!(rig.last_sink().id, reopened.id);
    assert!(
        rig.refused().is_empty(),
        "a closed stream's refusals are still published"
    );
}
