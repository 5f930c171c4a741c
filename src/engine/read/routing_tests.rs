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
        [Action::Post(ReadMessage::CatchUp(agg(2)))]
    );
    // What other contexts say is for the drainer; a follower only refreshes its views.
    let watch = ReadMessage::Watch {
        context: OTHER,
        list: vec![(agg(3), 1)],
    };
    assert_eq!(handled(&mut r, Input::Message(watch)), []);
    assert_eq!(
        handled(&mut r, Input::Message(ReadMessage::CatchUp(agg(3)))),
        []
    );
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
        [Action::Feed(ReadInput::CatchUp(agg(3)))]
    );
    assert_eq!(
        handled(&mut r, Input::Message(ReadMessage::CatchUp(agg(4)))),
        [Action::Feed(ReadInput::CatchUp(agg(4)))]
    );
    assert_eq!(
        handled(&mut r, Input::ReaderNews(ReaderNews::LogChanged(agg(2)))),
        [
            Action::RefreshViews(agg(2)),
            Action::Post(ReadMessage::LogChanged(agg(2))),
        ]
    );
    let caught_up = |a| Input::ReaderNews(ReaderNews::CaughtUp(a, true));
    let said = |a| {
        Action::Post(ReadMessage::CaughtUp {
            aggregate: a,
            ok: true,
        })
    };
    assert_eq!(
        handled(&mut r, caught_up(agg(4))),
        [said(agg(4))],
        "another context's catch-up: nobody waits here, nobody watches it"
    );
    // This reader's first catch-up of a watched aggregate is announced as a log change (the
    // previous drainer's last store may have been told to nobody); later ones only say they
    // ended, and so does one whose log change this reader told already.
    assert_eq!(
        handled(&mut r, caught_up(agg(1))),
        [
            Action::RefreshViews(agg(1)),
            Action::Post(ReadMessage::LogChanged(agg(1))),
            said(agg(1)),
        ]
    );
    assert_eq!(handled(&mut r, caught_up(agg(1))), [said(agg(1))]);
    assert_eq!(handled(&mut r, caught_up(agg(2))), [said(agg(2))]);
    // The other context's goodbye.
    assert_eq!(
        handled(&mut r, watch(Vec::new())),
        [Action::Feed(ReadInput::Unsubscribe(agg(2)))]
    );
    // Stopped, it forwards as a follower does.
    assert_eq!(handled(&mut r, Input::ReaderStopped), []);
    assert_eq!(
        handled(&mut r, Input::Message(ReadMessage::CatchUp(agg(4)))),
        []
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
            Action::Post(ReadMessage::CatchUp(agg(3))),
            Action::Post(ReadMessage::CatchUp(agg(4))),
            Action::Post(ReadMessage::CatchUp(agg(3))),
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
fn a_read_is_answered_by_the_catch_up_of_its_aggregate_only() {
    let mut r = Routing::new(ME);
    handled(&mut r, read(1, agg(1)));
    handled(&mut r, read(2, agg(2)));
    handled(&mut r, read(3, agg(1)));
    let caught_up = |aggregate, ok| Input::Message(ReadMessage::CaughtUp { aggregate, ok });
    assert_eq!(handled(&mut r, caught_up(agg(5), true)), []);
    assert_eq!(
        handled(&mut r, caught_up(agg(1), false)),
        [
            Action::Answer {
                waiter: 1,
                ok: false
            },
            Action::Answer {
                waiter: 3,
                ok: false
            },
        ]
    );
    assert_eq!(
        handled(&mut r, caught_up(agg(1), true)),
        [],
        "answered once"
    );
    // This context's own reader answers too, and tells the others.
    handled(&mut r, Input::ReaderStarted);
    assert_eq!(
        handled(
            &mut r,
            Input::ReaderNews(ReaderNews::CaughtUp(agg(2), true))
        ),
        [
            Action::Answer {
                waiter: 2,
                ok: true
            },
            Action::Post(ReadMessage::CaughtUp {
                aggregate: agg(2),
                ok: true,
            }),
        ]
    );
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
            Action::Post(ReadMessage::CatchUp(agg(1))),
        ]
    );
    assert_eq!(
        handled(
            &mut r,
            Input::Message(ReadMessage::CaughtUp {
                aggregate: agg(1),
                ok: true
            })
        ),
        [Action::Answer {
            waiter: 2,
            ok: true
        }]
    );
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
            Action::Feed(ReadInput::CatchUp(agg(3))),
            Action::Feed(ReadInput::CatchUp(agg(1))),
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
    // Stopped and started again (a new reader): everything is fed afresh.
    handled(&mut r, Input::ReaderStopped);
    assert_eq!(
        handled(&mut r, Input::ReaderStarted),
        [
            Action::Feed(ReadInput::Subscribe(agg(1))),
            Action::Feed(ReadInput::Subscribe(agg(2))),
            Action::Feed(ReadInput::CatchUp(agg(3))),
            Action::Feed(ReadInput::CatchUp(agg(1))),
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
