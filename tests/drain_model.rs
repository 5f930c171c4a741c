//! The model-based property test of the drain loop: random interleavings of appends, restarts
//! and every outcome (landed, 2002 with any `lastClientSeq`, 2013, retry, unknown where the
//! write did or did not land, rejected) against a simulated Celeriant never produce a duplicate,
//! a loss or a reorder, and every resend after an ambiguous failure is byte-identical.
//!
//! Some appends are conditional (`expectedVersion`, the aggregate's version as the server has
//! it when the app appends) and another device writes to the aggregates now and then, so some
//! guards go stale for real; with commit-then-drop, lost answers and crashes the trap of
//! `docs/protocol.md` 6.1 comes up constantly. Checked besides: a conditional append lands whole
//! or not at all, only on exactly its expected version, at most once; a conflict is parked as
//! not landed only when it really did not land (never a false conflict).
#![cfg(not(target_arch = "wasm32"))]

mod sim;

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;

use celeriant_sync::engine::drain::{Drain, Edge, Policy, run as drain};
use celeriant_sync::engine::memory::MemoryOutbox;
use celeriant_sync::engine::model::{AggregateRef, NewEvent, ParkRecord};
use celeriant_sync::engine::outbox::{Appended, Outbox};
use celeriant_sync::engine::status::{Hub, Observer, Status, SyncState, SyncedNotice};
use futures_executor::block_on;
use futures_util::FutureExt;
use proptest::prelude::*;
use sim::{Fault, POISON, Rng, SimAuth, SimEnv, SimServer, SimTransport};
use uuid::Uuid;

#[derive(Default)]
struct Seen {
    synced: Vec<SyncedNotice>,
    parked: Vec<ParkRecord>,
}

struct Recorder(Rc<RefCell<Seen>>);

impl Observer for Recorder {
    fn status(&self, _: &Status) {}
    fn synced(&self, n: &SyncedNotice) {
        self.0.borrow_mut().synced.push(n.clone());
    }
    fn parked(&self, r: &ParkRecord) {
        self.0.borrow_mut().parked.push(r.clone());
    }
}

/// A conditional append: aggregate, first and last sequence, expected version.
type Conditional = (AggregateRef, u64, u64, u64);

/// An atomic write: per leg, its aggregate, first and last sequence, and expected version.
type AtomicWrite = Vec<(AggregateRef, u64, u64, Option<u64>)>;

#[derive(Debug, Clone, Copy)]
struct Params {
    seed: u64,
    aggregates: u128,
    appends: usize,
    fault_rate: f64,
    max_batch_events: usize,
    /// Share of appends that are conditional.
    conditional_rate: f64,
    /// Chance, per request, that another device writes to an aggregate first.
    foreign_rate: f64,
    /// Share of appends that are atomic writes across 2 or 3 aggregates (`appendAtomic`).
    atomic_rate: f64,
}

fn pick_fault(rng: &Rng, rate: f64) -> Fault {
    if !rng.chance(rate) {
        return Fault::None;
    }
    match rng.below(11) {
        10 => Fault::Unauthorized,
        0 => Fault::DropAfterCommit,
        1 => Fault::TimeoutAfterCommit,
        2 => Fault::ResetBeforeCommit,
        3 => Fault::BadGateway,
        4 => Fault::Inflight,
        5 => Fault::Busy,
        6 => Fault::PrefixLanded,
        7 => Fault::Rejected,
        8 => Fault::Crash { applied: true },
        _ => Fault::Crash { applied: false },
    }
}

fn run(p: Params) {
    let rng = Rc::new(Rng::new(p.seed));
    let outbox = Rc::new(MemoryOutbox::new());
    let server = Rc::new(SimServer::default());
    let env = Rc::new(SimEnv::new(p.seed));
    let seen = Rc::new(RefCell::new(Seen::default()));
    let must_repeat = Rc::new(RefCell::new(None));
    let requests = Rc::new(RefCell::new(0usize));
    let client_id = Uuid::from_u128(0xC11E);
    let aggregate = |n: u64| AggregateRef {
        type_id: Uuid::from_u128(7),
        id: Uuid::from_u128(u128::from(n)),
    };

    // The script: per append, each aggregate it writes and its events (one: an append; more:
    // an atomic write).
    let event = |i: usize, j: usize| NewEvent {
        event_id: Uuid::from_u128((i * 10 + j) as u128 + 1),
        timestamp: 1_790_000_000_000 + i as u64,
        event_type: if rng.chance(0.02) {
            POISON
        } else {
            1 + rng.below(5)
        },
        minor: 0,
        data: format!("append {i} event {j}").into_bytes(),
        iv: None,
    };
    let mut script = VecDeque::new();
    for i in 0..p.appends {
        let mut writes: Vec<(AggregateRef, Vec<NewEvent>)> = Vec::new();
        if p.aggregates >= 2 && rng.chance(p.atomic_rate) {
            let legs = 2 + rng.below(2.min(p.aggregates as u64 - 1)) as usize;
            while writes.len() < legs {
                let agg = aggregate(rng.below(p.aggregates as u64));
                if writes.iter().all(|(a, _)| *a != agg) {
                    let at = writes.len() * 3;
                    let n = 1 + rng.below(3) as usize;
                    writes.push((agg, (0..n).map(|j| event(i, at + j)).collect()));
                }
            }
        } else {
            let agg = aggregate(rng.below(p.aggregates as u64));
            let n = 1 + rng.below(4) as usize;
            writes.push((agg, (0..n).map(|j| event(i, j)).collect()));
        }
        script.push_back(writes);
    }
    let script = Rc::new(RefCell::new(script));
    // Every appended event, by (aggregate, seq).
    let appended: Rc<RefCell<BTreeMap<(AggregateRef, u64), NewEvent>>> = Rc::default();
    // Every conditional append: aggregate, first and last sequence, expected version.
    let conditional: Rc<RefCell<Vec<Conditional>>> = Rc::default();
    // Every atomic write.
    let atomics: Rc<RefCell<Vec<AtomicWrite>>> = Rc::default();

    let append_next = {
        let (outbox, script, appended) = (outbox.clone(), script.clone(), appended.clone());
        let (rng, server, conditional) = (rng.clone(), server.clone(), conditional.clone());
        let atomics = atomics.clone();
        let rate = p.conditional_rate;
        move |hub: Option<&Hub>| -> bool {
            let Some(writes) = script.borrow_mut().pop_front() else {
                return false;
            };
            let guards: Vec<Option<u64>> = writes
                .iter()
                .map(|(agg, _)| rng.chance(rate).then(|| server.version(agg)))
                .collect();
            let items: Vec<_> = writes
                .iter()
                .zip(&guards)
                .map(|((agg, events), guard)| (*agg, &events[..], *guard))
                .collect();
            let stored = if writes.len() > 1 {
                outbox.append_atomic(&items).now_or_never()
            } else {
                outbox.append_group(&items).now_or_never()
            };
            let Appended { receipts, begun } = stored.unwrap().unwrap();
            let spans: AtomicWrite = writes
                .iter()
                .zip(&receipts)
                .zip(&guards)
                .map(|(((agg, _), r), guard)| {
                    (*agg, r[0].client_seq, r[r.len() - 1].client_seq, *guard)
                })
                .collect();
            if writes.len() > 1 {
                atomics.borrow_mut().push(spans);
            } else if let [(agg, first, last, Some(expected))] = spans[..] {
                conditional.borrow_mut().push((agg, first, last, expected));
            }
            for ((agg, events), r) in writes.iter().zip(&receipts) {
                for (r, e) in r.iter().zip(events) {
                    assert_eq!(r.event_id, e.event_id);
                    appended
                        .borrow_mut()
                        .insert((*agg, r.client_seq), e.clone());
                }
            }
            let receipts = receipts.concat();
            if let Some(hub) = hub {
                hub.appended(receipts.len() as u64, Some(begun));
            }
            true
        }
    };
    let append_next = Rc::new(append_next);
    for _ in 0..(p.appends / 3).max(1) {
        append_next(None);
    }

    let mut discarded: Vec<(AggregateRef, u64)> = Vec::new();
    let mut may_have_landed: Vec<(AggregateRef, u64)> = Vec::new();
    let policy = Policy {
        max_batch_events: p.max_batch_events,
        max_batch_bytes: 2_000,
        ..Policy::default()
    };
    for session in 0.. {
        assert!(session < 5_000, "did not converge: {p:?}");
        let hub = Rc::new(Hub::new(Box::new(Recorder(seen.clone()))));
        let mut transport = SimTransport::new(server.clone(), must_repeat.clone());
        transport.choose = {
            let (rng, requests, rate) = (rng.clone(), requests.clone(), p.fault_rate);
            Box::new(move |_| {
                *requests.borrow_mut() += 1;
                // Faults stop after a while so every run terminates.
                if *requests.borrow() > 3_000 {
                    Fault::None
                } else {
                    pick_fault(&rng, rate)
                }
            })
        };
        transport.read_back_fails = {
            let (rng, rate) = (rng.clone(), p.fault_rate);
            Box::new(move || rng.chance(rate * 0.3))
        };
        transport.read_back_lags = {
            let (rng, rate) = (rng.clone(), p.fault_rate);
            Box::new(move || rng.chance(rate * 0.4))
        };
        transport.read_back_trimmed = {
            let (rng, rate) = (rng.clone(), p.fault_rate);
            Box::new(move || rng.chance(rate * 0.02))
        };
        transport.read_back_refused = {
            let (rng, rate) = (rng.clone(), p.fault_rate);
            Box::new(move || rng.chance(rate * 0.01))
        };
        transport.before = {
            let (rng, append_next, hub) = (rng.clone(), append_next.clone(), Rc::downgrade(&hub));
            let (server, foreign, aggregates) = (server.clone(), p.foreign_rate, p.aggregates);
            Box::new(move || {
                // Another device writes now and then: some guards go stale for real.
                if rng.chance(foreign) {
                    server.foreign_write(aggregate(rng.below(aggregates as u64)));
                }
                if rng.chance(0.3)
                    && let Some(hub) = hub.upgrade()
                {
                    append_next(Some(&hub));
                }
            })
        };
        transport.crash = {
            let hub = Rc::downgrade(&hub);
            Box::new(move || hub.upgrade().unwrap().close())
        };
        *env.on_sleep.borrow_mut() = Some({
            let (hub, append_next) = (Rc::downgrade(&hub), append_next.clone());
            Box::new(move |_| {
                let hub = hub.upgrade().unwrap();
                if matches!(hub.status().state, SyncState::Idle | SyncState::Parked)
                    && !append_next(Some(&hub))
                {
                    hub.close(); // the app has nothing more to append: end the session
                }
            })
        });
        // The gateway sometimes refuses a session too (an app token that expired, a rate
        // limit): the events must simply wait.
        let auth = SimAuth {
            server: server.clone(),
            env: env.clone(),
            fail: {
                let (rng, rate) = (rng.clone(), p.fault_rate);
                Box::new(move || rng.chance(rate * 0.3))
            },
            opened: Default::default(),
        };
        block_on(drain(
            Drain::new(policy, client_id),
            Edge {
                outbox: &*outbox,
                transport: &transport,
                auth: &auth,
                env: &*env,
                hub: &hub,
            },
        ));
        *env.on_sleep.borrow_mut() = None;

        // The app discards whatever was parked (it was told, through `parked`).
        for record in block_on(outbox.parked()).unwrap() {
            let told = seen.borrow().parked.iter().any(|r| r == &record);
            assert!(told, "parked without telling the app: {record:?}");
            for seq in record.first_seq..=record.last_seq {
                if appended.borrow().contains_key(&(record.aggregate, seq)) {
                    discarded.push((record.aggregate, seq));
                    if record.may_have_landed {
                        may_have_landed.push((record.aggregate, seq));
                    }
                }
            }
            block_on(outbox.discard_parked(record.aggregate)).unwrap();
        }
        if script.borrow().is_empty() && block_on(outbox.count()).unwrap() == 0 {
            break;
        }
    }

    // Nothing lost, nothing duplicated, nothing reordered, payloads intact.
    let appended = appended.borrow();
    let log = server.log.borrow();
    for agg in (0..p.aggregates as u64).map(aggregate) {
        let landed: Vec<u64> = log
            .get(&agg)
            .map(|v| v.iter().map(|e| e.client_seq).collect())
            .unwrap_or_default();
        // Discarded events are absent unless their park record said they may have landed.
        let expected: Vec<u64> = appended
            .range((agg, 0)..=(agg, u64::MAX))
            .map(|((_, s), _)| *s)
            .filter(|s| {
                !discarded.contains(&(agg, *s))
                    || (may_have_landed.contains(&(agg, *s)) && landed.contains(s))
            })
            .collect();
        assert_eq!(landed, expected, "aggregate {agg:?}, {p:?}");
        for e in log.get(&agg).into_iter().flatten() {
            let original = &appended[&(agg, e.client_seq)];
            assert_eq!(e.data, original.data, "payload of seq {}", e.client_seq);
            assert_eq!(e.event_id, Some(original.event_id));
            assert_eq!(e.event_type, original.event_type);
        }
    }
    // A discarded event that landed was flagged as possibly landed when it was parked.
    for (agg, seq) in &discarded {
        if log
            .get(agg)
            .is_some_and(|v| v.iter().any(|e| e.client_seq == *seq))
        {
            assert!(
                may_have_landed.contains(&(*agg, *seq)),
                "{agg:?} {seq} landed but was parked as not landed"
            );
        }
    }
    for ((agg, seq), e) in appended.iter() {
        if e.event_type == POISON {
            assert!(
                discarded.contains(&(*agg, *seq)),
                "a poison event must be parked, never landed"
            );
        }
    }
    // Every synced notice names events that really landed, each once.
    let mut notified = BTreeMap::new();
    for n in &seen.borrow().synced {
        for id in &n.event_ids {
            *notified.entry(*id).or_insert(0) += 1;
        }
    }
    let landed_ids: Vec<Uuid> = log
        .iter()
        .flat_map(|(agg, events)| events.iter().map(move |e| (agg, e)))
        .filter(|(agg, e)| !discarded.contains(&(**agg, e.client_seq)))
        .filter_map(|(_, e)| e.event_id)
        .collect();
    for id in &landed_ids {
        assert_eq!(notified.get(id), Some(&1), "synced notified once for {id}");
    }
    assert_eq!(
        notified.len(),
        landed_ids.len(),
        "no synced notice for an event that did not land"
    );
    assert_eq!(block_on(outbox.pinned()).unwrap(), None);

    // Conditional appends: whole or nothing, only on their expected version, at most once; a
    // 2003 park only for one that did not land.
    let batches = server.batches.borrow();
    for &(agg, first, last, expected) in conditional.borrow().iter() {
        let ours: Vec<(usize, &Vec<u64>)> = batches
            .get(&agg)
            .into_iter()
            .flatten()
            .enumerate()
            .filter(|(_, (client, seqs))| {
                *client == client_id && seqs.iter().any(|s| (first..=last).contains(s))
            })
            .map(|(i, (_, seqs))| (i, seqs))
            .collect();
        match &ours[..] {
            [] => {}
            [(index, seqs)] => {
                assert_eq!(
                    *index as u64,
                    expected,
                    "a conditional append of {agg:?} landed at version {}, not {}",
                    index + 1,
                    expected + 1
                );
                assert_eq!(
                    **seqs,
                    (first..=last).collect::<Vec<_>>(),
                    "landed whole, alone"
                );
            }
            _ => panic!("a conditional append of {agg:?} landed twice: {ours:?}"),
        }
    }
    // Atomic writes: landed whole, in one request of exactly their legs, at most once, each
    // guarded leg on exactly its expected version; or not at all.
    let requests = server.requests.borrow();
    for write in atomics.borrow().iter() {
        let legs: Vec<(AggregateRef, Vec<u64>)> = write
            .iter()
            .map(|&(agg, first, last, _)| (agg, (first..=last).collect()))
            .collect();
        let touching: Vec<_> = requests
            .iter()
            .filter(|r| {
                r.iter().any(|(agg, seqs)| {
                    write.iter().any(|&(a, first, last, _)| {
                        a == *agg && seqs.iter().any(|s| (first..=last).contains(s))
                    })
                })
            })
            .collect();
        match &touching[..] {
            [] => {}
            [request] => assert_eq!(**request, legs, "an atomic write landed whole, alone"),
            _ => panic!("an atomic write landed more than once, or in parts: {touching:?}"),
        }
        for &(agg, first, _, expected) in write {
            let index = batches
                .get(&agg)
                .into_iter()
                .flatten()
                .position(|(c, seqs)| *c == client_id && seqs.first() == Some(&first));
            if let (Some(index), Some(expected)) = (index, expected) {
                assert_eq!(index as u64, expected, "a guarded leg off its version");
            }
        }
    }
    for record in &seen.borrow().parked {
        if record.code == 2003 && !record.may_have_landed {
            let landed = log
                .get(&record.aggregate)
                .is_some_and(|v| v.iter().any(|e| e.client_seq == record.first_seq));
            assert!(!landed, "a false conflict: {record:?} landed");
            // The version is the guarded aggregate's: on an atomic write, the leg the 2003 named.
            let parked = seen.borrow();
            let with_version = parked.parked.iter().any(|r| {
                r.code == 2003 && r.atomic == record.atomic && r.current_version.is_some()
            });
            assert!(
                record.current_version.is_some() || (record.atomic.is_some() && with_version),
                "{record:?}"
            );
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]

    #[test]
    fn no_duplicate_no_loss_no_reorder(
        seed in any::<u64>(),
        aggregates in 1u128..6,
        appends in 1usize..120,
        fault_rate in prop_oneof![Just(0.0), 0.1f64..0.9, Just(0.95)],
        max_batch_events in 1usize..12,
        conditional_rate in prop_oneof![Just(0.0), 0.1f64..0.6],
        foreign_rate in prop_oneof![Just(0.0), 0.01f64..0.2],
        atomic_rate in prop_oneof![Just(0.0), 0.1f64..0.5],
    ) {
        run(Params { seed, aggregates, appends, fault_rate, max_batch_events, conditional_rate, foreign_rate, atomic_rate });
    }
}

#[test]
fn a_long_run_under_heavy_faults() {
    for seed in 0..4 {
        run(Params {
            seed,
            aggregates: 5,
            appends: 600,
            fault_rate: 0.7,
            max_batch_events: 8,
            conditional_rate: 0.3,
            foreign_rate: 0.05,
            atomic_rate: 0.25,
        });
    }
}
