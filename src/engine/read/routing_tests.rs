//! Unit tests of the read side's routing between contexts: one path each, exact actions.

use super::*;
use uuid::Uuid;

const ME: u64 = 7;
const OTHER: u64 = 9;

fn agg(n: u128) -> AggregateRef {
    AggregateRef {
        type_id: Uuid::from_u128(1),
        id: Uuid::from_u128(n),
    }
}

fn actions(r: &mut Routing) -> Vec<Action> {
    std::iter::from_fn(|| r.poll()).collect()
}

fn handled(r: &mut Routing, input: Input) -> Vec<Action> {
    r.handle(input);
    actions(r)
}

fn read(waiter: u64, aggregate: AggregateRef) -> Input {
    Input::Read {
        waiter,
        aggregate,
        online: true,
    }
}

fn tag(context: u64, waiter: u64) -> ReadTag {
    ReadTag { context, waiter }
}

/// The catch-up a read of context `context` asks over the channel.
fn ask(aggregate: AggregateRef, context: u64, waiter: u64) -> ReadMessage {
    ReadMessage::CatchUp {
        aggregate,
        read: Some(tag(context, waiter)),
    }
}

/// A catch-up's end, as another context's message.
fn caught_up(aggregate: AggregateRef, ok: bool, reads: &[ReadTag]) -> ReadMessage {
    ReadMessage::CaughtUp {
        aggregate,
        ok,
        reads: Some(reads.to_vec()),
    }
}

/// A catch-up's end, as this context's reader reports it.
fn news(aggregate: AggregateRef, ok: bool, reads: &[ReadTag]) -> Input {
    Input::ReaderNews(ReaderNews::CaughtUp {
        aggregate,
        ok,
        reads: reads.to_vec(),
    })
}

fn answer(waiter: u64, ok: bool) -> Action {
    Action::Answer { waiter, ok }
}

fn drainer() -> Routing {
    let mut r = Routing::new(ME);
    assert_eq!(
        handled(&mut r, Input::ReaderStarted),
        [Action::Post(ReadMessage::WhoWatches)]
    );
    r
}

#[test]
fn a_follower_forwards_its_catch_ups_and_subscriptions() {
    let mut r = Routing::new(ME);
    assert_eq!(
        handled(&mut r, Input::WatchChanged(vec![(agg(1), 1)])),
        [Action::Post(ReadMessage::Watch {
            context: ME,
            list: vec![(agg(1), 1)],
        })]
    );
    // A second listener of the same aggregate changes nothing the drainer needs.
    assert_eq!(handled(&mut r, Input::WatchChanged(vec![(agg(1), 2)])), []);
    assert_eq!(
        handled(&mut r, read(1, agg(2))),
        [Action::Post(ask(agg(2), ME, 1))],
        "asked under its tag"
    );
    // What other contexts say is for the drainer; a follower only refreshes its views.
    let watch = ReadMessage::Watch {
        context: OTHER,
        list: vec![(agg(3), 1)],
    };
    assert_eq!(handled(&mut r, Input::Message(watch)), []);
    assert_eq!(handled(&mut r, Input::Message(ask(agg(3), OTHER, 1))), []);
    assert_eq!(
        handled(&mut r, Input::Message(ReadMessage::LogChanged(agg(3)))),
        [Action::RefreshViews(agg(3))]
    );
    assert_eq!(
        handled(&mut r, Input::Touched(agg(1))),
        [
            Action::RefreshViews(agg(1)),
            Action::Post(ReadMessage::Touched(agg(1))),
        ]
    );
    assert_eq!(
        handled(&mut r, Input::WatchChanged(Vec::new())),
        [Action::Post(ReadMessage::Watch {
            context: ME,
            list: Vec::new(),
        })]
    );
}

#[test]
fn the_drainer_feeds_its_reader() {
    let mut r = drainer();
    assert_eq!(
        handled(&mut r, Input::WatchChanged(vec![(agg(1), 1)])),
        [Action::Feed(ReadInput::Subscribe(agg(1)))]
    );
    let watch = |list| {
        Input::Message(ReadMessage::Watch {
            context: OTHER,
            list,
        })
    };
    assert_eq!(
        handled(&mut r, watch(vec![(agg(1), 3), (agg(2), 1)])),
        [Action::Feed(ReadInput::Subscribe(agg(2)))],
        "agg(1) is watched already"
    );
    assert_eq!(
        handled(&mut r, read(1, agg(3))),
        [Action::Feed(ReadInput::Read(agg(3), tag(ME, 1)))]
    );
    assert_eq!(
        handled(&mut r, Input::Message(ask(agg(4), OTHER, 5))),
        [Action::Feed(ReadInput::Read(agg(4), tag(OTHER, 5)))]
    );
    // A `read` of a context of an older release comes untagged: caught up untagged.
    let untagged = ReadMessage::CatchUp {
        aggregate: agg(4),
        read: None,
    };
    assert_eq!(
        handled(&mut r, Input::Message(untagged)),
        [Action::Feed(ReadInput::CatchUp(agg(4)))]
    );
    assert_eq!(
        handled(&mut r, Input::ReaderNews(ReaderNews::LogChanged(agg(2)))),
        [
            Action::RefreshViews(agg(2)),
            Action::Post(ReadMessage::LogChanged(agg(2))),
        ]
    );
    let ended = |a| news(a, true, &[]);
    let said = |a| Action::Post(caught_up(a, true, &[]));
    assert_eq!(
        handled(&mut r, news(agg(4), true, &[tag(OTHER, 5)])),
        [Action::Post(caught_up(agg(4), true, &[tag(OTHER, 5)]))],
        "another context's catch-up: nobody waits here, nobody watches it; its read is named"
    );
    assert_eq!(
        handled(&mut r, ended(agg(4))),
        [said(agg(4))],
        "posted though it names no read: an older release answers by aggregate"
    );
    // This reader's first catch-up of a watched aggregate is announced as a log change (the
    // previous drainer's last store may have been told to nobody); later ones only say they
    // ended, and so does one whose log change this reader told already.
    assert_eq!(
        handled(&mut r, ended(agg(1))),
        [
            Action::RefreshViews(agg(1)),
            Action::Post(ReadMessage::LogChanged(agg(1))),
            said(agg(1)),
        ]
    );
    assert_eq!(handled(&mut r, ended(agg(1))), [said(agg(1))]);
    assert_eq!(handled(&mut r, ended(agg(2))), [said(agg(2))]);
    // The other context's goodbye.
    assert_eq!(
        handled(&mut r, watch(Vec::new())),
        [Action::Feed(ReadInput::Unsubscribe(agg(2)))]
    );
    // Stopped, it asks its waiting read again of whoever drains now, and forwards as a
    // follower does.
    assert_eq!(
        handled(&mut r, Input::ReaderStopped),
        [Action::Post(ask(agg(3), ME, 1))]
    );
    assert_eq!(handled(&mut r, Input::Message(ask(agg(4), OTHER, 6))), []);
    assert_eq!(
        handled(&mut r, Input::WatchChanged(Vec::new())),
        [Action::Post(ReadMessage::Watch {
            context: ME,
            list: Vec::new(),
        })]
    );
}

#[test]
fn a_new_drainer_hears_each_context_s_list_and_waiting_reads_again() {
    let mut r = Routing::new(ME);
    handled(&mut r, Input::WatchChanged(vec![(agg(1), 1), (agg(2), 2)]));
    handled(&mut r, read(1, agg(3)));
    handled(&mut r, read(2, agg(4)));
    handled(&mut r, read(3, agg(3)));
    assert_eq!(
        handled(&mut r, Input::Message(ReadMessage::WhoWatches)),
        [
            Action::Post(ReadMessage::Watch {
                context: ME,
                list: vec![(agg(1), 1), (agg(2), 2)],
            }),
            Action::Post(ask(agg(3), ME, 1)),
            Action::Post(ask(agg(4), ME, 2)),
            Action::Post(ask(agg(3), ME, 3)),
        ]
    );
    // The counts told are the current ones, though only a change of the set is posted.
    handled(&mut r, Input::WatchChanged(vec![(agg(1), 4), (agg(2), 2)]));
    let mut answers = handled(&mut r, Input::Message(ReadMessage::WhoWatches));
    answers.truncate(1);
    assert_eq!(
        answers,
        [Action::Post(ReadMessage::Watch {
            context: ME,
            list: vec![(agg(1), 4), (agg(2), 2)],
        })]
    );
}

#[test]
fn a_read_is_answered_only_by_a_catch_up_that_names_it() {
    let mut r = Routing::new(ME);
    handled(&mut r, read(1, agg(1)));
    handled(&mut r, read(2, agg(2)));
    handled(&mut r, read(3, agg(1)));
    let message = |a, ok, reads: &[ReadTag]| Input::Message(caught_up(a, ok, reads));
    assert_eq!(handled(&mut r, message(agg(5), true, &[])), []);
    // A catch-up of its aggregate that names no read here: one that began before they asked
    // (the bug: it answered both), or a stream's.
    assert_eq!(handled(&mut r, message(agg(1), true, &[])), []);
    assert_eq!(
        handled(
            &mut r,
            message(agg(1), true, &[tag(OTHER, 1), tag(OTHER, 3)])
        ),
        [],
        "the same waiter ids of another context"
    );
    assert_eq!(
        handled(&mut r, message(agg(2), true, &[tag(ME, 3)])),
        [],
        "a tag names a read of its own aggregate only"
    );
    assert_eq!(
        handled(&mut r, message(agg(1), false, &[tag(ME, 3)])),
        [answer(3, false)],
        "only the read it names"
    );
    assert_eq!(
        handled(&mut r, message(agg(1), true, &[tag(ME, 1), tag(ME, 3)])),
        [answer(1, true)],
        "answered once"
    );
    // This context's own reader answers what it names here, and names the rest to the others.
    handled(&mut r, Input::ReaderStarted);
    assert_eq!(
        handled(&mut r, news(agg(2), true, &[])),
        [Action::Post(caught_up(agg(2), true, &[]))],
        "a catch-up of its reader that names no read answers none"
    );
    assert_eq!(
        handled(&mut r, news(agg(2), true, &[tag(OTHER, 2), tag(ME, 2)])),
        [
            answer(2, true),
            Action::Post(caught_up(agg(2), true, &[tag(OTHER, 2)])),
        ]
    );
}

#[test]
fn an_older_release_s_catch_up_answers_every_read_of_its_aggregate() {
    // A drainer of an older release names no read (`reads` absent): its `CaughtUp` answers
    // every read of the aggregate waiting, as that release's own contexts do, rather than
    // leaving each to wait out its timeout while the old tab drains.
    let mut r = Routing::new(ME);
    handled(&mut r, read(1, agg(1)));
    handled(&mut r, read(2, agg(2)));
    handled(&mut r, read(3, agg(1)));
    let older = |a, ok| {
        Input::Message(ReadMessage::CaughtUp {
            aggregate: a,
            ok,
            reads: None,
        })
    };
    assert_eq!(
        handled(&mut r, older(agg(1), true)),
        [answer(1, true), answer(3, true)]
    );
    assert_eq!(handled(&mut r, older(agg(1), true)), [], "answered once");
    assert_eq!(handled(&mut r, older(agg(2), false)), [answer(2, false)]);
}

#[test]
fn a_read_that_timed_out_is_forgotten() {
    let mut r = Routing::new(ME);
    handled(&mut r, read(1, agg(1)));
    handled(&mut r, read(2, agg(1)));
    assert_eq!(handled(&mut r, Input::ReadTimedOut(1)), []);
    assert_eq!(
        handled(&mut r, Input::Message(ReadMessage::WhoWatches)),
        [
            Action::Post(ReadMessage::Watch {
                context: ME,
                list: Vec::new(),
            }),
            Action::Post(ask(agg(1), ME, 2)),
        ]
    );
    let both = caught_up(agg(1), true, &[tag(ME, 1), tag(ME, 2)]);
    assert_eq!(handled(&mut r, Input::Message(both)), [answer(2, true)]);
}

#[test]
fn an_offline_read_is_answered_at_once_and_never_waits() {
    let mut r = Routing::new(ME);
    let offline = Input::Read {
        waiter: 1,
        aggregate: agg(1),
        online: false,
    };
    assert_eq!(
        handled(&mut r, offline),
        [Action::Answer {
            waiter: 1,
            ok: false
        }]
    );
    assert_eq!(
        handled(&mut r, Input::ReaderStarted),
        [Action::Post(ReadMessage::WhoWatches)]
    );
}

#[test]
fn a_context_that_starts_draining_feeds_its_waiting_reads_and_every_subscription() {
    let mut r = Routing::new(ME);
    handled(&mut r, Input::WatchChanged(vec![(agg(1), 1), (agg(2), 1)]));
    handled(&mut r, read(1, agg(3)));
    handled(&mut r, read(2, agg(1)));
    assert_eq!(
        handled(&mut r, Input::ReaderStarted),
        [
            Action::Feed(ReadInput::Subscribe(agg(1))),
            Action::Feed(ReadInput::Subscribe(agg(2))),
            Action::Feed(ReadInput::Read(agg(3), tag(ME, 1))),
            Action::Feed(ReadInput::Read(agg(1), tag(ME, 2))),
            Action::Post(ReadMessage::WhoWatches),
        ]
    );
    // The answers to its WhoWatches are merged with its own list.
    let watch = ReadMessage::Watch {
        context: OTHER,
        list: vec![(agg(2), 1), (agg(4), 1)],
    };
    assert_eq!(
        handled(&mut r, Input::Message(watch)),
        [Action::Feed(ReadInput::Subscribe(agg(4)))]
    );
    // Stopped, its waiting reads are asked of whoever drains now (their tags went with the
    // reader); started again (a new reader), everything is fed afresh.
    assert_eq!(
        handled(&mut r, Input::ReaderStopped),
        [
            Action::Post(ask(agg(3), ME, 1)),
            Action::Post(ask(agg(1), ME, 2)),
        ]
    );
    assert_eq!(
        handled(&mut r, Input::ReaderStarted),
        [
            Action::Feed(ReadInput::Subscribe(agg(1))),
            Action::Feed(ReadInput::Subscribe(agg(2))),
            Action::Feed(ReadInput::Read(agg(3), tag(ME, 1))),
            Action::Feed(ReadInput::Read(agg(1), tag(ME, 2))),
            Action::Post(ReadMessage::WhoWatches),
        ]
    );
}

#[test]
fn closing_says_goodbye_and_answers_every_waiting_read() {
    let mut r = drainer();
    handled(&mut r, Input::WatchChanged(vec![(agg(1), 1)]));
    handled(&mut r, read(1, agg(2)));
    handled(&mut r, read(2, agg(3)));
    assert_eq!(
        handled(&mut r, Input::Close),
        [
            Action::Post(ReadMessage::Watch {
                context: ME,
                list: Vec::new(),
            }),
            Action::Answer {
                waiter: 1,
                ok: false
            },
            Action::Answer {
                waiter: 2,
                ok: false
            },
        ]
    );
}
