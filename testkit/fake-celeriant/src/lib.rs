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
//! ([`FakeCeleriant::silence_watches`]), and hold back the acknowledgement of new ones
//! ([`FakeCeleriant::hold_watch_acks`]). It counts the connections it accepted (dials) and can
//! answer some aggregates' details slowly ([`FakeCeleriant::slow_details`]).
//!
//! `DictCodec` is `!Sync`, so the server owns a thread with a current-thread runtime and a
//! `LocalSet`; dropping the [`FakeCeleriant`] stops it and closes its connections.

use std::collections::{HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use celeriant_msg::error_codes;
use celeriant_msg::process_client_requests::ClientRequest;
use celeriant_msg::process_client_responses::ClientResponse;
use celeriant_msg::process_identify::{
    IDENTIFY_REQUEST_TYPE_ID, read_identify_request, write_identify_response,
};
use celeriant_msg::request::requests::{IdentifyRequest, WriteRequest};
use celeriant_msg::response::aggregate_event_batch::AggregateEventBatch;
use celeriant_msg::response::responses::{
    ErrorResponse, IdentifyResponse, WatchResponse, WriteResponse,
};
use celeriant_msg::response::watch_event::WatchResponseEvent;
use celeriant_wal::aggregate_key::AggregateKey;
use celeriant_wal::builtin_dict::BUILTIN_DICT_BYTES;
use celeriant_wire::codec::compression::DictCodec;
use celeriant_wire::network::wire_header::{PROTOCOL_VERSION_V4, WireHeader};
use futures_util::io::AsyncWriteExt;
use tokio_util::compat::{Compat, TokioAsyncReadCompatExt};

mod cluster;
mod store;
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
    /// Connections accepted, per node (a lone node is node 0).
    accepted: HashMap<usize, u64>,
    /// While set, a new watch is not acknowledged.
    hold_watch_acks: bool,
    /// While set, a new connection is closed as soon as it is accepted.
    refuse_connections: bool,
    /// Aggregate-details requests for these aggregates are answered after this long.
    slow_details: HashMap<AggregateKey, Duration>,
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
                        {
                            let mut state = shared.lock().unwrap();
                            *state.accepted.entry(node).or_insert(0) += 1;
                            if state.refuse_connections {
                                continue;
                            }
                        }
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

    /// Connections accepted so far (each a dial by a client), over every node of a cluster.
    pub fn connections(&self) -> u64 {
        self.lock().accepted.values().sum()
    }

    /// While `hold` is set, a new watch is recorded but not acknowledged (its client waits);
    /// once cleared, it is.
    pub fn hold_watch_acks(&self, hold: bool) {
        self.lock().hold_watch_acks = hold;
    }

    /// While `refuse` is set, every new connection is closed as soon as it is accepted (a node
    /// that cannot take one); those open stay open.
    pub fn refuse_connections(&self, refuse: bool) {
        self.lock().refuse_connections = refuse;
    }

    /// Watch requests received so far (acknowledged or not).
    pub fn watch_requests(&self) -> usize {
        let state = self.lock();
        (state.requests.iter())
            .filter(|r| matches!(r, ClientRequest::Watch(_)))
            .count()
    }

    /// Aggregate-details requests for `key` are answered after `delay` (as stored).
    pub fn slow_details(&self, key: AggregateKey, delay: Duration) {
        self.lock().slow_details.insert(key, delay);
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
    while state.lock().unwrap().hold_watch_acks {
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
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
            Reply::Store => {
                if let ClientRequest::AggregateDetails(d) = request {
                    let slow = state
                        .lock()
                        .unwrap()
                        .slow_details
                        .get(&d.aggregate_key)
                        .copied();
                    if let Some(delay) = slow {
                        tokio::time::sleep(delay).await;
                    }
                }
                Some(state.lock().unwrap().apply(request))
            }
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
