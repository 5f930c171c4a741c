//! A simulated world for the drain loop: a virtual clock, a Celeriant-like server with the real
//! idempotency rules, and a transport that injects every fault the protocol allows. Used by the
//! native drain tests and the model-based property test.
#![allow(dead_code)]

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;

use celeriant_sync::engine::auth::{AuthFailure, Authenticator, Session};
use celeriant_sync::engine::env::{Env, ReadBack, Reply, Transport, WrittenBatch};
use celeriant_sync::engine::model::AggregateRef;
use celeriant_sync::protocol::outcome::{Failure, WriteOutcome};
use celeriant_sync::protocol::{Event, WriteRequest};
use uuid::Uuid;

/// A small deterministic generator (xorshift64*), so a failing seed replays exactly.
pub struct Rng(Cell<u64>);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Rng(Cell::new(seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1))
    }
    pub fn next(&self) -> u64 {
        let mut x = self.0.get();
        x ^= x >> 12;
        x ^= x << 25;
        x ^= x >> 27;
        self.0.set(x);
        x.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    pub fn float(&self) -> f64 {
        (self.next() >> 11) as f64 / (1u64 << 53) as f64
    }
    pub fn below(&self, n: u64) -> u64 {
        if n == 0 { 0 } else { self.next() % n }
    }
    pub fn chance(&self, p: f64) -> bool {
        self.float() < p
    }
}

/// Called with each sleep's duration.
pub type SleepHook = Box<dyn Fn(u64)>;

/// Virtual time: `sleep` returns at once and advances the clock.
pub struct SimEnv {
    pub now: Cell<u64>,
    pub online: Cell<bool>,
    pub rng: Rng,
    pub slept: RefCell<Vec<u64>>,
    /// Called on every sleep (the harness uses it to stop an idle loop).
    pub on_sleep: RefCell<Option<SleepHook>>,
}

impl SimEnv {
    pub fn new(seed: u64) -> Self {
        SimEnv {
            now: Cell::new(1_790_000_000_000),
            online: Cell::new(true),
            rng: Rng::new(seed ^ 0xE11),
            slept: RefCell::new(Vec::new()),
            on_sleep: RefCell::new(None),
        }
    }
}

impl Env for SimEnv {
    fn now_ms(&self) -> u64 {
        self.now.get()
    }
    fn sleep(&self, ms: u64) -> impl Future<Output = ()> {
        self.now.set(self.now.get() + ms);
        self.slept.borrow_mut().push(ms);
        if let Some(f) = self.on_sleep.borrow().as_ref() {
            f(ms);
        }
        std::future::ready(())
    }
    fn is_online(&self) -> bool {
        self.online.get()
    }
    fn random(&self) -> f64 {
        self.rng.float()
    }
}

/// Celeriant's write rules over an in-memory log, behind a gateway that issues sessions.
#[derive(Default)]
pub struct SimServer {
    /// Every event that landed, per aggregate, in the order it was written.
    pub log: RefCell<BTreeMap<AggregateRef, Vec<Event>>>,
    /// Highest durable sequence per aggregate (one client).
    pub highest: RefCell<BTreeMap<AggregateRef, u64>>,
    /// The session tokens' generation: a token of an older one is refused (401).
    pub session: Cell<u64>,
    /// Every batch written per aggregate, by anyone (version = index + 1): its client id and
    /// sequences.
    pub batches: RefCell<BTreeMap<AggregateRef, Vec<Written>>>,
    /// Every request applied, in order: each aggregate it wrote, with its sequences.
    pub requests: RefCell<Vec<Applied>>,
}

/// One batch of an aggregate's log: who wrote it, its sequences.
pub type Written = (Uuid, Vec<u64>);

/// One request applied: each aggregate it wrote, with its sequences.
pub type Applied = Vec<(AggregateRef, Vec<u64>)>;

/// Event type the server refuses (as a schema validation failure, 2022).
pub const POISON: u64 = 99;

impl SimServer {
    /// The aggregate's version (its batch count).
    pub fn version(&self, aggregate: &AggregateRef) -> u64 {
        self.batches
            .borrow()
            .get(aggregate)
            .map_or(0, |b| b.len() as u64)
    }

    /// Another device writes a batch to `aggregate` (under its own client id).
    pub fn foreign_write(&self, aggregate: AggregateRef) {
        self.batches
            .borrow_mut()
            .entry(aggregate)
            .or_default()
            .push((Uuid::from_u128(0xF0E1), vec![1]));
    }

    /// Celeriant's checks before anything is appended, in its order: every aggregate's version
    /// guard (2003), then idempotency (2002).
    pub fn precheck(&self, request: &WriteRequest) -> Option<WriteOutcome> {
        for write in &request.writes {
            let current = self.version(&write.aggregate);
            if let Some(expected) = write.expected_version
                && expected != current
            {
                return Some(WriteOutcome::conflict(
                    "version guard failed",
                    write.aggregate,
                    expected,
                    current,
                ));
            }
        }
        self.duplicate_of(request)
    }

    /// Applies one request as Celeriant would, atomically across its aggregates; returns the
    /// protocol outcome.
    pub fn apply(&self, request: &WriteRequest) -> WriteOutcome {
        for write in &request.writes {
            let mut previous = 0;
            for e in &write.events {
                assert!(
                    e.client_seq > previous,
                    "sequences strictly increasing inside a request"
                );
                previous = e.client_seq;
            }
        }
        if let Some(refused) = self.precheck(request) {
            return refused;
        }
        let poisoned = request
            .writes
            .iter()
            .any(|w| w.events.iter().any(|e| e.event_type == POISON));
        if poisoned {
            return WriteOutcome::Rejected(Failure::new(2022, "schema validation failed"));
        }
        let mut applied = Vec::new();
        let mut version = None;
        for write in &request.writes {
            self.log
                .borrow_mut()
                .entry(write.aggregate)
                .or_default()
                .extend(write.events.iter().cloned());
            let last = write.events.last().map_or(0, |e| e.client_seq);
            self.highest.borrow_mut().insert(write.aggregate, last);
            let seqs: Vec<u64> = write.events.iter().map(|e| e.client_seq).collect();
            let mut batches = self.batches.borrow_mut();
            let batches = batches.entry(write.aggregate).or_default();
            batches.push((request.client_id, seqs.clone()));
            version = Some(batches.len() as u64);
            applied.push((write.aggregate, seqs));
        }
        self.requests.borrow_mut().push(applied);
        WriteOutcome::landed(version.filter(|_| request.writes.len() == 1))
    }

    /// Lands events `..= through` of a one-aggregate request on their own, as an earlier
    /// attempt with other boundaries would have.
    pub fn land_prefix(&self, request: &WriteRequest, through: u64) {
        let mut prefix = request.clone();
        prefix.writes[0].events.retain(|e| e.client_seq <= through);
        if !prefix.writes[0].events.is_empty()
            && !prefix.writes[0]
                .events
                .iter()
                .any(|e| e.event_type == POISON)
        {
            self.apply(&prefix);
        }
    }

    /// The 2002 this request would get: the first aggregate whose lowest sequence already
    /// landed (a 2002 names no aggregate).
    pub fn duplicate_of(&self, request: &WriteRequest) -> Option<WriteOutcome> {
        request.writes.iter().find_map(|write| {
            let lowest = write.events[0].client_seq;
            let highest = self
                .highest
                .borrow()
                .get(&write.aggregate)
                .copied()
                .unwrap_or(0);
            (lowest <= highest).then(|| WriteOutcome::duplicate(highest, lowest))
        })
    }

    pub fn seqs(&self, aggregate: &AggregateRef) -> Vec<u64> {
        self.log
            .borrow()
            .get(aggregate)
            .map(|v| v.iter().map(|e| e.client_seq).collect())
            .unwrap_or_default()
    }
}

/// What the transport does with one request.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fault {
    None,
    /// Applied, then the connection broke.
    DropAfterCommit,
    /// Applied, then no answer within the timeout.
    TimeoutAfterCommit,
    /// Not applied, connection broke.
    ResetBeforeCommit,
    /// Not applied, 502 without a body.
    BadGateway,
    /// Not applied, 2013.
    Inflight,
    /// Not applied, 503 with Retry-After.
    Busy,
    /// A prefix landed earlier under other boundaries; the server answers 2002 mid-batch.
    PrefixLanded,
    /// Not applied, rejected (2022) though the events are fine.
    Rejected,
    /// Not applied: the session expired (the gateway's secret rotated), 401.
    Unauthorized,
    /// The tab dies mid-request (applied or not), before the answer is processed.
    Crash {
        applied: bool,
    },
}

/// A transport over the simulated server with scripted faults.
pub struct SimTransport {
    pub server: Rc<SimServer>,
    pub choose: Box<dyn Fn(&WriteRequest) -> Fault>,
    /// Runs before each request is answered (the app appending meanwhile).
    pub before: Box<dyn Fn()>,
    /// Called when a crash fault fires (the harness closes the hub).
    pub crash: Box<dyn Fn()>,
    pub sent: RefCell<Vec<(String, Fault)>>,
    /// The body the next request must repeat byte for byte (after an ambiguous failure or a
    /// retry), shared across restarts.
    pub must_repeat: Rc<RefCell<Option<String>>>,
    /// Whether a read-back fails (the harness decides, per read).
    pub read_back_fails: Box<dyn Fn() -> bool>,
    /// Whether a read-back lags (shows nothing at or after the version, as a replica behind
    /// the write would).
    pub read_back_lags: Box<dyn Fn() -> bool>,
    /// Whether a read-back finds the version trimmed away (410).
    pub read_back_trimmed: Box<dyn Fn() -> bool>,
    /// Whether a read-back is refused for good (a 403: the policy changed).
    pub read_back_refused: Box<dyn Fn() -> bool>,
    /// How many read-backs were made.
    pub read_backs: Cell<usize>,
}

impl SimTransport {
    pub fn new(server: Rc<SimServer>, must_repeat: Rc<RefCell<Option<String>>>) -> Self {
        SimTransport {
            server,
            choose: Box::new(|_| Fault::None),
            before: Box::new(|| {}),
            crash: Box::new(|| {}),
            sent: RefCell::new(Vec::new()),
            must_repeat,
            read_back_fails: Box::new(|| false),
            read_back_lags: Box::new(|| false),
            read_back_trimmed: Box::new(|| false),
            read_back_refused: Box::new(|| false),
            read_backs: Cell::new(0),
        }
    }
}

fn http(outcome: &WriteOutcome) -> Reply {
    let retry_after = match outcome {
        WriteOutcome::Retry(f) => f.retry_after_ms.map(|ms| ms.div_ceil(1000).to_string()),
        _ => None,
    };
    Reply::Http {
        status: outcome.http_status(),
        retry_after,
        body: Ok(serde_json::to_string(outcome).unwrap()),
    }
}

impl Transport for SimTransport {
    fn read_back(
        &self,
        aggregate: AggregateRef,
        version: u64,
        token: String,
    ) -> impl Future<Output = ReadBack> {
        let found = if token != format!("session-{}", self.server.session.get()) {
            ReadBack::Failed("401".into())
        } else if (self.read_back_fails)() {
            ReadBack::Failed("network".into())
        } else if (self.read_back_trimmed)() {
            ReadBack::Trimmed
        } else if (self.read_back_refused)() {
            ReadBack::Refused("HTTP 403".into())
        } else if (self.read_back_lags)() {
            ReadBack::Found(None)
        } else {
            let batches = self.server.batches.borrow();
            ReadBack::Found(
                batches
                    .get(&aggregate)
                    .and_then(|b| b.get(version.max(1) as usize - 1))
                    .map(|(client_id, seqs)| WrittenBatch {
                        version: version.max(1),
                        client_id: *client_id,
                        client_seqs: seqs.clone(),
                    }),
            )
        };
        self.read_backs.set(self.read_backs.get() + 1);
        std::future::ready(found)
    }

    fn send(&self, body: String, token: String) -> impl Future<Output = Reply> {
        (self.before)();
        let request: WriteRequest =
            serde_json::from_str(&body).expect("the client sends valid JSON");
        celeriant_sync::protocol::validate::validate_write(&request, &Default::default())
            .expect("the client sends valid requests");
        if let Some(expected) = self.must_repeat.borrow_mut().take() {
            assert_eq!(
                body, expected,
                "a resend after an ambiguous failure or a retry must be byte-identical"
            );
        }
        let fault = if token != format!("session-{}", self.server.session.get()) {
            // A token of an earlier session: refused whatever was chosen.
            Fault::Unauthorized
        } else {
            (self.choose)(&request)
        };
        let repeat = !matches!(fault, Fault::None | Fault::PrefixLanded | Fault::Rejected);
        *self.must_repeat.borrow_mut() = repeat.then(|| body.clone());
        self.sent.borrow_mut().push((body, fault));
        let reply = match fault {
            Fault::None => Some(http(&self.server.apply(&request))),
            Fault::DropAfterCommit => {
                self.server.apply(&request);
                Some(Reply::network("connection reset"))
            }
            Fault::TimeoutAfterCommit => {
                self.server.apply(&request);
                Some(Reply::timeout())
            }
            Fault::ResetBeforeCommit => Some(Reply::network("connection reset")),
            Fault::BadGateway => Some(Reply::Http {
                status: 502,
                retry_after: None,
                body: Ok(String::new()),
            }),
            Fault::Inflight => Some(http(&WriteOutcome::from_code(2013, "in flight"))),
            Fault::Unauthorized => {
                self.server.session.set(self.server.session.get() + 1);
                Some(http(&WriteOutcome::from_code(40102, "the session expired")))
            }
            Fault::Busy => Some(http(&WriteOutcome::Retry(Failure {
                retry_after_ms: Some(1500),
                ..Failure::new(2012, "busy")
            }))),
            // A conditional append or an atomic write is always sent whole: no earlier attempt
            // had other bounds.
            Fault::PrefixLanded
                if request.writes.len() > 1 || request.writes[0].expected_version.is_some() =>
            {
                Some(http(&self.server.apply(&request)))
            }
            Fault::PrefixLanded => {
                let events = &request.writes[0].events;
                let pick = events[(events.len() - 1) / 2].client_seq;
                self.server.land_prefix(&request, pick);
                Some(http(&self.server.apply(&request)))
            }
            // A rejection like schema validation (2022) comes after Celeriant's idempotency check:
            // a batch that already landed gets its 2002 instead.
            Fault::Rejected => Some(http(&match self.server.precheck(&request) {
                Some(duplicate) => duplicate,
                None => WriteOutcome::from_code(2022, "rejected by chance"),
            })),
            Fault::Crash { applied } => {
                if applied {
                    self.server.apply(&request);
                }
                (self.crash)();
                None
            }
        };
        let fut: Pin<Box<dyn Future<Output = Reply>>> = match reply {
            Some(reply) => Box::pin(std::future::ready(reply)),
            None => Box::pin(std::future::pending()),
        };
        fut
    }
}

/// Opens sessions on the simulated gateway; `fail` decides, per attempt, whether the gateway
/// (or the app's own authentication) refuses.
pub struct SimAuth {
    pub server: Rc<SimServer>,
    pub env: Rc<SimEnv>,
    pub fail: Box<dyn Fn() -> bool>,
    pub opened: Cell<u64>,
}

impl Authenticator for SimAuth {
    fn open_session(&self) -> impl Future<Output = Result<Session, AuthFailure>> {
        let result = if (self.fail)() {
            Err(AuthFailure {
                code: Some(40121),
                message: "the app token was refused".into(),
                retry_after_ms: None,
                wrong_user: false,
            })
        } else {
            self.opened.set(self.opened.get() + 1);
            Ok(Session {
                token: format!("session-{}", self.server.session.get()),
                expires_at: self.env.now.get() + 3_600_000,
            })
        };
        std::future::ready(result)
    }
}
