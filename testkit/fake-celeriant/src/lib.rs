//! An in-process Celeriant node that speaks the real 0.3.0 wire protocol, for the gateway's tests.
//!
//! A crate of its own (not a module under `gateway/tests/support`) so that a process can run it
//! too: the end-to-end scripts start it as a binary and drive it over loopback.
//!
//! The Celeriant server is not published, so the Celeriant backend is tested against this: a TCP
//! listener on `127.0.0.1:0` built only from the published crates' public APIs (`WireHeader`, the
//! Identify helpers, `ClientRequest::read_from_header`, `ClientResponse::write_response`), the
//! same way `celeriant_client_tokio`'s own `tests/common/mod.rs` builds its fakes. It answers the
//! Identify every connection sends first, echoes each request's correlation id, records what it
//! received, and answers each request from a per-test script; with nothing scripted it behaves as
//! a tiny store (writes append a batch, reads and aggregate details return them, unknown
//! aggregates answer 1001 / 7001) that
//! checks existence, the version guard (2003) and client idempotency (2002) in the server's
//! order (see `State::write`).
//!
//! A `Watch` request turns its connection into a watch stream, as on a single-shard node: an
//! empty `WatchResponse` acknowledges it, then every stored write is notified on it, and a test
//! can push notifications ([`FakeCeleriant::notify`]), end every watch
//! ([`FakeCeleriant::end_watches`]), end them part-way through a frame
//! ([`FakeCeleriant::break_watches_mid_frame`]) or make them hang
//! ([`FakeCeleriant::silence_watches`]).
//!
//! `DictCodec` is `!Sync`, so the server owns a thread with a current-thread runtime and a
//! `LocalSet`; dropping the [`FakeCeleriant`] stops it and closes its connections.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use celeriant_msg::error_codes;
use celeriant_msg::process_client_requests::ClientRequest;
use celeriant_msg::process_client_responses::ClientResponse;
use celeriant_msg::process_identify::{
    IDENTIFY_REQUEST_TYPE_ID, read_identify_request, write_identify_response,
};
use celeriant_msg::request::requests::{
    AggregateDetailsRequest, IdentifyRequest, ReadRequest, WriteRequest,
};
use celeriant_msg::response::aggregate_event_batch::AggregateEventBatch;
use celeriant_msg::response::responses::{
    AggregateConflict, AggregateDetailsResponse, ErrorResponse, IdentifyResponse, ReadResponse,
    WatchResponse, WriteConflictResponse, WriteResponse,
};
use celeriant_msg::response::watch_event::WatchResponseEvent;
use celeriant_wal::aggregate_key::AggregateKey;
use celeriant_wal::builtin_dict::BUILTIN_DICT_BYTES;
use celeriant_wire::codec::compression::DictCodec;
use celeriant_wire::network::wire_header::{PROTOCOL_VERSION_V4, WireHeader};
use futures_util::io::AsyncWriteExt;
use tokio_util::compat::{Compat, TokioAsyncReadCompatExt};

mod cluster;
pub use cluster::{FakeCluster, Held};

/// Largest frame the fake reads or writes (the server's default).
const MAX_FRAME: u64 = 64 * 1024 * 1024;

/// How the fake answers one request.
#[derive(Debug, Clone)]
pub enum Reply {
    /// Behave like a node: apply the write, serve the read.
    Store,
    /// Acknowledge a write with this aggregate version, storing nothing.
    Written(u64),
    /// Answer with an error code and message.
    Error {
        /// The Celeriant code.
        code: u32,
        /// The message (JSON for 2002/2013).
        message: String,
    },
    /// Read the whole request, then close the connection without answering.
    Close,
    /// Wait, then answer as the inner reply.
    Delay(Duration, Box<Reply>),
}

impl Reply {
    /// An error answer.
    pub fn error(code: u32, message: &str) -> Self {
        Reply::Error {
            code,
            message: message.to_owned(),
        }
    }

    /// 2002 or 2013, with the sequences in the message as the server writes them.
    pub fn sequence_error(code: u32, last_client_seq: u64, attempted_client_seq: u64) -> Self {
        Reply::Error {
            code,
            message: format!(
                r#"{{"last_client_seq":{last_client_seq},"attempted_client_seq":{attempted_client_seq}}}"#
            ),
        }
    }

    /// Answer `then` after `delay`.
    pub fn slow(delay: Duration, then: Reply) -> Self {
        Reply::Delay(delay, Box::new(then))
    }
}

#[derive(Default)]
struct State {
    required_api_key: Option<String>,
    script: VecDeque<Reply>,
    identifies: Vec<IdentifyRequest>,
    requests: Vec<ClientRequest>,
    store: HashMap<AggregateKey, Vec<AggregateEventBatch>>,
    /// Highest `client_seq` stored per (aggregate, client id), for idempotency.
    seqs: HashMap<(AggregateKey, u128), u64>,
    read_page_limit: Option<usize>,
    watchers: Vec<tokio::sync::mpsc::UnboundedSender<WatchMsg>>,
    /// Watches that hang: open, told nothing ever again.
    silenced: Vec<tokio::sync::mpsc::UnboundedSender<WatchMsg>>,
    /// Roles when the node is one of a [`FakeCluster`] (a lone node is its own leader).
    cluster: cluster::Roles,
}

/// What a watch connection is told to do.
#[derive(Debug, Clone)]
enum WatchMsg {
    Events(Vec<WatchResponseEvent>),
    End,
    BreakMidFrame,
}

impl State {
    fn tell_watchers(&mut self, msg: WatchMsg) {
        self.watchers.retain(|w| w.send(msg.clone()).is_ok());
    }
}

/// A running fake node.
pub struct FakeCeleriant {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    _stop: tokio::sync::oneshot::Sender<()>,
}

impl FakeCeleriant {
    /// A node that accepts any (or no) API key.
    pub fn start() -> Self {
        Self::spawn(State::default())
    }

    /// A node that refuses an Identify without this API key (10006, as Celeriant does).
    pub fn with_api_key(key: &str) -> Self {
        Self::spawn(State {
            required_api_key: Some(key.to_owned()),
            ..State::default()
        })
    }

    fn spawn(state: State) -> Self {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        Self::serve(listener, Arc::new(Mutex::new(state)), 0)
    }

    /// Serves `listener` as node `node` of the (possibly shared) `state`.
    fn serve(listener: std::net::TcpListener, state: Arc<Mutex<State>>, node: usize) -> Self {
        listener.set_nonblocking(true).unwrap();
        let addr = listener.local_addr().unwrap();
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let shared = state.clone();
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .unwrap();
            let local = tokio::task::LocalSet::new();
            local.block_on(&runtime, async move {
                let listener = tokio::net::TcpListener::from_std(listener).unwrap();
                let accept = async {
                    while let Ok((socket, _)) = listener.accept().await {
                        let shared = shared.clone();
                        let born = cluster::generation(&shared, node);
                        tokio::task::spawn_local(async move {
                            tokio::select! {
                                _ = connection(socket.compat(), shared.clone(), node) => {}
                                _ = cluster::dropped(&shared, node, born) => {}
                            }
                        });
                    }
                };
                tokio::select! {
                    _ = accept => {}
                    _ = stopped => {}
                }
            });
        });
        FakeCeleriant {
            addr,
            state,
            _stop: stop,
        }
    }

    /// `HOST:PORT` to dial.
    pub fn address(&self) -> String {
        self.addr.to_string()
    }

    /// Queues answers for the next requests, in order (Identify excluded); when the queue is
    /// empty the fake answers as [`Reply::Store`].
    pub fn script(&self, replies: impl IntoIterator<Item = Reply>) {
        self.lock().script.extend(replies);
    }

    /// Makes a stored read return at most `batches` batches, with `next_aggregate_version` set
    /// when more are in the requested range.
    pub fn limit_read_pages(&self, batches: usize) {
        self.lock().read_page_limit = Some(batches);
    }

    /// Every Identify received.
    pub fn identifies(&self) -> Vec<IdentifyRequest> {
        self.lock().identifies.clone()
    }

    /// Every request received (Identify excluded), in order.
    pub fn requests(&self) -> Vec<ClientRequest> {
        self.lock().requests.clone()
    }

    /// Every write request received, in order.
    pub fn writes(&self) -> Vec<WriteRequest> {
        self.requests()
            .into_iter()
            .filter_map(|r| match r {
                ClientRequest::Write(w) => Some(w),
                _ => None,
            })
            .collect()
    }

    /// The batches stored under `key` (empty when it does not exist), as the node holds them.
    pub fn stored(&self, key: &AggregateKey) -> Vec<AggregateEventBatch> {
        self.lock().store.get(key).cloned().unwrap_or_default()
    }

    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap()
    }

    /// Watch connections open now.
    pub fn watches(&self) -> usize {
        let mut state = self.lock();
        state.watchers.retain(|w| !w.is_closed());
        state.watchers.len()
    }

    /// Sends these notifications on every open watch.
    pub fn notify(&self, events: Vec<WatchResponseEvent>) {
        self.lock().tell_watchers(WatchMsg::Events(events));
    }

    /// Every open watch hangs: its connection stays open, and nothing more is sent on it (a
    /// node that hung, a half-open connection). Later watches are served as usual.
    pub fn silence_watches(&self) {
        let mut state = self.lock();
        let hung = std::mem::take(&mut state.watchers);
        state.silenced.extend(hung);
    }

    /// Closes every open watch connection (cleanly, between frames).
    pub fn end_watches(&self) {
        self.lock().tell_watchers(WatchMsg::End);
    }

    /// Sends half a frame on every open watch, then closes it: the client is left mid-message.
    pub fn break_watches_mid_frame(&self) {
        self.lock().tell_watchers(WatchMsg::BreakMidFrame);
    }
}

/// A notification as the server sends it after a write.
pub fn written(key: &AggregateKey, version: u64) -> WatchResponseEvent {
    WatchResponseEvent {
        org_id: key.org_id,
        aggregate_type_id: key.aggregate_type_id,
        aggregate_id: key.aggregate_id,
        operation: 1,
        from_aggregate_version: Some(version),
        to_aggregate_version: Some(version),
        keep_from_aggregate_version: None,
    }
}

/// A frame holding `response`, as bytes.
async fn frame(response: &ClientResponse, codec: &DictCodec) -> Vec<u8> {
    let mut bytes = Vec::new();
    ClientResponse::write_response(
        &mut bytes,
        response,
        false,
        codec,
        MAX_FRAME,
        PROTOCOL_VERSION_V4,
    )
    .await
    .unwrap();
    bytes
}

/// Serves a watch on `stream` until told to end or the client goes away.
async fn watch_stream(mut stream: Stream, state: Arc<Mutex<State>>, codec: DictCodec) {
    let (sender, mut messages) = tokio::sync::mpsc::unbounded_channel();
    state.lock().unwrap().watchers.push(sender);
    let ack = frame(
        &ClientResponse::Watch(WatchResponse { events: vec![] }),
        &codec,
    )
    .await;
    if stream.write_all(&ack).await.is_err() {
        return;
    }
    while let Some(message) = messages.recv().await {
        match message {
            WatchMsg::Events(events) => {
                let bytes = frame(&ClientResponse::Watch(WatchResponse { events }), &codec).await;
                if stream.write_all(&bytes).await.is_err() {
                    return;
                }
            }
            WatchMsg::End => return,
            WatchMsg::BreakMidFrame => {
                let event = written(&AggregateKey::new(0, 0, 0), 1);
                let bytes = frame(
                    &ClientResponse::Watch(WatchResponse {
                        events: vec![event],
                    }),
                    &codec,
                )
                .await;
                let _ = stream.write_all(&bytes[..bytes.len() / 2]).await;
                let _ = stream.flush().await;
                return;
            }
        }
    }
}

/// An address nothing listens on: bound to claim a free port, then released.
pub fn dead_address() -> String {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .to_string()
}

type Stream = Compat<tokio::net::TcpStream>;

async fn connection(mut stream: Stream, state: Arc<Mutex<State>>, node: usize) {
    let codec = DictCodec::new(BUILTIN_DICT_BYTES, 3).unwrap();
    loop {
        let Ok(header) = WireHeader::from_reader(&mut stream, MAX_FRAME).await else {
            return;
        };
        if header.message_type == IDENTIFY_REQUEST_TYPE_ID {
            if identify(header, &mut stream, &state, &codec)
                .await
                .is_none()
            {
                return;
            }
            continue;
        }
        let Ok(request) = ClientRequest::read_from_header(header, &mut stream, &codec).await else {
            return;
        };
        if matches!(request, ClientRequest::Watch(_)) {
            state.lock().unwrap().requests.push(request);
            return watch_stream(stream, state, codec).await;
        }
        let response = match cluster::intercept(&request, &state, node).await {
            cluster::Intercept::Pass => {
                let reply = {
                    let mut state = state.lock().unwrap();
                    state.requests.push(request.clone());
                    state.script.pop_front().unwrap_or(Reply::Store)
                };
                answer(&request, reply, &state).await
            }
            cluster::Intercept::Answer(response) => Some(response),
            cluster::Intercept::Close => None,
        };
        let Some(response) = response else {
            return;
        };
        let written = ClientResponse::write_response(
            &mut stream,
            &response,
            false,
            &codec,
            MAX_FRAME,
            PROTOCOL_VERSION_V4,
        )
        .await;
        if written.is_err() {
            return;
        }
    }
}

/// Answers an Identify (echoing its correlation id); `None` when the connection is done.
async fn identify(
    header: WireHeader,
    stream: &mut Stream,
    state: &Mutex<State>,
    codec: &DictCodec,
) -> Option<()> {
    let request = read_identify_request(header, stream).await.ok()?;
    let refused = {
        let mut state = state.lock().unwrap();
        state.identifies.push(request.clone());
        state
            .required_api_key
            .as_ref()
            .is_some_and(|key| request.api_key.as_ref() != Some(key))
    };
    if refused {
        let error = ClientResponse::GenericError(ErrorResponse {
            correlation_id: request.correlation_id,
            error_code: error_codes::AUTH_INVALID_KEY,
            error_message: "invalid API key".into(),
        });
        let _ = ClientResponse::write_response(
            stream,
            &error,
            false,
            codec,
            MAX_FRAME,
            PROTOCOL_VERSION_V4,
        )
        .await;
        return None;
    }
    let response = IdentifyResponse {
        correlation_id: request.correlation_id,
        client_id: None,
        access_level: None,
        compression_dict_sha256: None,
        compression_dict_bytes: None,
    };
    write_identify_response(stream, &response, PROTOCOL_VERSION_V4)
        .await
        .ok()
}

async fn answer(
    request: &ClientRequest,
    mut reply: Reply,
    state: &Mutex<State>,
) -> Option<ClientResponse> {
    let correlation_id = request.correlation_id();
    loop {
        return match reply {
            Reply::Delay(delay, then) => {
                tokio::time::sleep(delay).await;
                reply = *then;
                continue;
            }
            Reply::Close => None,
            Reply::Error { code, message } => Some(error(correlation_id, code, message)),
            Reply::Written(version) => Some(ClientResponse::Write(WriteResponse {
                correlation_id,
                max_aggregate_version: Some(version),
            })),
            Reply::Store => Some(state.lock().unwrap().apply(request)),
        };
    }
}

fn error(correlation_id: Option<u128>, code: u32, message: String) -> ClientResponse {
    ClientResponse::GenericError(ErrorResponse {
        correlation_id,
        error_code: code,
        error_message: message,
    })
}

impl State {
    fn apply(&mut self, request: &ClientRequest) -> ClientResponse {
        match request {
            ClientRequest::Write(write) => self.write(write),
            ClientRequest::Read(read) => self.read(read),
            ClientRequest::AggregateDetails(details) => self.details(details),
            other => error(
                other.correlation_id(),
                error_codes::SHARD_ROUTING_NO_KEY,
                "the fake serves only reads, details and writes".into(),
            ),
        }
    }

    /// Atomic across the request's aggregates, like the server. Per aggregate, in the server's
    /// order: the events (2000 empty, 2001 type 0), existence (2005), then the version guard (2003: `expected_version: n` commits
    /// only at exactly version n, the batch count, so `0` only while the aggregate does not
    /// exist; answered, as the server does, with a `WriteConflictResponse` naming each stale
    /// guard's expected and current version), **then** client idempotency where the write
    /// enforces it (2002 with the sequences in the message, when its lowest `client_seq`, if
    /// at least 1, is at or below the highest stored for this aggregate and client id). 2013
    /// (in flight) is never produced here: tests script it.
    fn write(&mut self, request: &WriteRequest) -> ClientResponse {
        let correlation_id = request.correlation_id;
        let mut conflicts = Vec::new();
        for (key, write) in &request.writes {
            if write.events.is_empty() {
                let message = "events list is empty".into();
                return error(
                    correlation_id,
                    error_codes::WRITE_EMPTY_EVENTS_LIST,
                    message,
                );
            }
            if write.events.iter().any(|e| e.event_type_major == 0) {
                let message = "event type 0 is reserved".into();
                return error(correlation_id, error_codes::WRITE_ZERO_EVENT_TYPE, message);
            }
            let current = self.store.get(key).map_or(0, |b| b.len() as u64);
            if current == 0 && !write.allow_create {
                return error(
                    correlation_id,
                    error_codes::WRITE_AGGREGATE_NOT_EXISTS,
                    "aggregate does not exist".into(),
                );
            }
            if let Some(expected) = write.expected_version
                && expected != current
            {
                conflicts.push(AggregateConflict {
                    key: key.clone(),
                    expected,
                    current,
                });
            }
        }
        if !conflicts.is_empty() {
            return ClientResponse::WriteConflict(WriteConflictResponse {
                correlation_id,
                conflicts,
            });
        }
        for (key, write) in &request.writes {
            let lowest = write.events.iter().map(|e| e.client_seq).min().unwrap_or(0);
            let highest = self.seqs.get(&(key.clone(), request.client_id)).copied();
            if write.enforce_client_idempotency
                && lowest >= 1
                && let Some(highest) = highest
                && lowest <= highest
            {
                return error(
                    correlation_id,
                    error_codes::WRITE_CLIENT_IDEMPOTENCY_VIOLATION,
                    format!(r#"{{"last_client_seq":{highest},"attempted_client_seq":{lowest}}}"#),
                );
            }
        }
        for (key, write) in &request.writes {
            let top = write.events.iter().map(|e| e.client_seq).max().unwrap_or(0);
            if write.enforce_client_idempotency {
                let held = self
                    .seqs
                    .entry((key.clone(), request.client_id))
                    .or_insert(0);
                *held = (*held).max(top);
            }
        }
        let now = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_millis() as u64;
        let mut version = None;
        let mut notes = Vec::new();
        for (key, write) in &request.writes {
            let batches = self.store.entry(key.clone()).or_default();
            let mut event_seq = batches.iter().map(|b| b.events.len() as u64).sum::<u64>();
            let events = write
                .events
                .iter()
                .map(|e| {
                    event_seq += 1;
                    let mut e = e.clone();
                    e.event_seq = event_seq;
                    e
                })
                .collect();
            let aggregate_version = batches.len() as u64 + 1;
            batches.push(AggregateEventBatch {
                aggregate_version,
                client_id: request.client_id,
                user_id: request.user_id,
                server_timestamp: now,
                events,
            });
            version = Some(aggregate_version);
            notes.push(written(key, aggregate_version));
        }
        self.tell_watchers(WatchMsg::Events(notes));
        ClientResponse::Write(WriteResponse {
            correlation_id,
            max_aggregate_version: version.filter(|_| request.writes.len() == 1),
        })
    }

    /// An aggregate's versions (7001 when it does not exist).
    fn details(&self, request: &AggregateDetailsRequest) -> ClientResponse {
        let correlation_id = request.correlation_id;
        let Some(batches) = self.store.get(&request.aggregate_key) else {
            return error(
                correlation_id,
                error_codes::EXISTS_AGGREGATE_NOT_EXISTS,
                "aggregate does not exist".into(),
            );
        };
        let last = batches.last();
        ClientResponse::AggregateDetails(AggregateDetailsResponse {
            correlation_id,
            min_aggregate_version: batches.first().map_or(0, |b| b.aggregate_version),
            max_aggregate_version: last.map_or(0, |b| b.aggregate_version),
            max_event_seq: batches.iter().map(|b| b.events.len() as u64).sum(),
            is_deleted: false,
            allow_recreate: false,
            allow_sequence_continuation: false,
            last_server_timestamp: last.map_or(0, |b| b.server_timestamp),
            last_client_id: last.map_or(0, |b| b.client_id),
            last_user_id: last.and_then(|b| b.user_id),
        })
    }

    fn read(&self, request: &ReadRequest) -> ClientResponse {
        let correlation_id = request.correlation_id;
        let Some(batches) = self.store.get(&request.aggregate_key) else {
            return error(
                correlation_id,
                error_codes::READ_AGGREGATE_NOT_EXISTS,
                "aggregate does not exist".into(),
            );
        };
        let from = request.filters.from_aggregate_version;
        let to = request.filters.to_aggregate_version.unwrap_or(u64::MAX);
        let mut in_range = batches
            .iter()
            .filter(|b| b.aggregate_version >= from && b.aggregate_version <= to);
        let limit = self.read_page_limit.unwrap_or(usize::MAX);
        let event_batches: Vec<_> = in_range.by_ref().take(limit).cloned().collect();
        ClientResponse::Read(ReadResponse {
            correlation_id,
            event_batches,
            next_aggregate_version: in_range.next().map(|b| b.aggregate_version),
        })
    }
}
