//! A fake Celeriant cluster: several [`FakeCeleriant`] nodes over one shared store, one leader.
//!
//! The gateway's production backend talks to a cluster through `celeriant_client_tokio`'s pool,
//! which routes every write to the leader and learns who that is from the answers it gets. This
//! module plays the cluster's side of that conversation, as 0.3.0's client expects it (its
//! `tests/leader_routing_contract.rs` and `ErrorResponse::parse_leader_address`):
//!
//! * a follower answers every write-class request (write, delete, trim, schema) with
//!   `ErrorResponse { error_code: 2011, error_message: {"leader_address":"HOST:PORT"} }`, checked
//!   before anything else, as the server does, so a 2011 means nothing was applied;
//! * reads, aggregate details and watches are served by every node from the shared store (the
//!   replicated state), and a write on the leader notifies the watches of every node; a node can
//!   be made to answer an aggregate's details as a lagging replica would
//!   ([`FakeCluster::lag_details`]);
//! * [`FakeCluster::start_election`] leaves the cluster without a leader (every node answers 2011
//!   without an address) until [`FakeCluster::change_leader`], which moves leadership at once; the writes the old leader was
//!   told to hold ([`FakeCluster::hold_writes`]) are settled as a real step-down can settle them
//!   ([`Held`]): applied but unanswered, lost unanswered, or refused with 2011 naming the new
//!   leader; the old leader can also drop every connection it holds (pool, watches), as a node
//!   that restarts does.
//!
//! A lone node ([`FakeCeleriant::start`]) has no roles and behaves as before: it is its own leader.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};

use celeriant_msg::error_codes;
use celeriant_msg::process_client_requests::ClientRequest;
use celeriant_msg::process_client_responses::ClientResponse;
use celeriant_msg::response::aggregate_event_batch::AggregateEventBatch;
use celeriant_wal::aggregate_key::AggregateKey;
use tokio::sync::oneshot;

use crate::{FakeCeleriant, State, error};

/// How the writes held by a leader are settled when it steps down.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Held {
    /// Committed (to the shared store), then the connection closes unanswered: the writer cannot
    /// know it landed.
    Applied,
    /// Never committed, and the connection closes unanswered.
    Lost,
    /// Never committed, answered 2011 with the new leader's address.
    Refused,
}

/// What the node does with one request, decided before the ordinary store sees it.
pub(crate) enum Intercept {
    /// Serve it as a lone node would.
    Pass,
    /// Answer this instead.
    Answer(ClientResponse),
    /// Close the connection without answering.
    Close,
}

/// The cluster's roles and counters; empty (no addresses) for a lone node.
#[derive(Default)]
pub(crate) struct Roles {
    addresses: Vec<String>,
    leader: usize,
    /// Per node: bumped to drop every connection the node holds.
    generations: Vec<u64>,
    /// An election in progress: no node leads, every one answers 2011 without an address.
    electing: bool,
    /// Whether the leader holds the writes it receives until the next leader change.
    hold: bool,
    held: Vec<(ClientRequest, oneshot::Sender<Intercept>)>,
    /// Per node: write-class requests received, and how many were answered 2011.
    writes: Vec<u64>,
    not_leader: Vec<u64>,
    /// Per node: aggregate-details and read requests received.
    details: Vec<u64>,
    reads: Vec<u64>,
    changes: u64,
    /// (node, aggregate): the node answers that aggregate's details at most at this version.
    lagging: HashMap<(usize, AggregateKey), u64>,
}

/// The current generation of `node`'s connections.
pub(crate) fn generation(state: &Mutex<State>, node: usize) -> u64 {
    let state = state.lock().unwrap();
    state.cluster.generations.get(node).copied().unwrap_or(0)
}

/// Resolves once `node`'s connections of generation `born` are to be dropped.
pub(crate) async fn dropped(state: &Mutex<State>, node: usize, born: u64) {
    while generation(state, node) == born {
        tokio::time::sleep(std::time::Duration::from_millis(5)).await;
    }
}

fn leader_only(request: &ClientRequest) -> bool {
    matches!(
        request,
        ClientRequest::Write(_)
            | ClientRequest::Delete(_)
            | ClientRequest::TrimStart(_)
            | ClientRequest::RegisterSchema(_)
    )
}

/// 2011 as the server sends it, naming `leader`.
fn not_leader(correlation_id: Option<u128>, leader: &str) -> ClientResponse {
    error(
        correlation_id,
        error_codes::WRITE_NOT_LEADER,
        format!(r#"{{"leader_address":"{leader}"}}"#),
    )
}

/// The cluster's say on `request`, received by `node`.
pub(crate) async fn intercept(
    request: &ClientRequest,
    state: &Mutex<State>,
    node: usize,
) -> Intercept {
    {
        let mut state = state.lock().unwrap();
        let roles = &mut state.cluster;
        let counts = match request {
            ClientRequest::AggregateDetails(_) => Some(&mut roles.details),
            ClientRequest::Read(_) => Some(&mut roles.reads),
            _ => None,
        };
        if let Some(count) = counts.and_then(|c| c.get_mut(node)) {
            *count += 1;
        }
        if let ClientRequest::AggregateDetails(d) = request
            && let Some(&lag) = state.cluster.lagging.get(&(node, d.aggregate_key.clone()))
        {
            let mut response = state.apply(request);
            if let ClientResponse::AggregateDetails(r) = &mut response {
                r.max_aggregate_version = r.max_aggregate_version.min(lag);
            }
            return Intercept::Answer(response);
        }
    }
    if !leader_only(request) {
        return Intercept::Pass;
    }
    let settled = {
        let mut state = state.lock().unwrap();
        let roles = &mut state.cluster;
        if roles.addresses.is_empty() {
            return Intercept::Pass;
        }
        roles.writes[node] += 1;
        if roles.electing {
            roles.not_leader[node] += 1;
            return Intercept::Answer(error(
                request.correlation_id(),
                error_codes::WRITE_NOT_LEADER,
                "not the leader; no leader elected".into(),
            ));
        }
        if node != roles.leader {
            roles.not_leader[node] += 1;
            let leader = &roles.addresses[roles.leader];
            return Intercept::Answer(not_leader(request.correlation_id(), leader));
        }
        if !roles.hold {
            return Intercept::Pass;
        }
        let (settle, settled) = oneshot::channel();
        roles.held.push((request.clone(), settle));
        settled
    };
    settled.await.unwrap_or(Intercept::Close)
}

/// Several nodes on `127.0.0.1`, one shared store, node 0 the first leader. Dropping it stops
/// every node.
pub struct FakeCluster {
    nodes: Vec<FakeCeleriant>,
}

impl FakeCluster {
    /// `count` nodes (at least one), each on a port of its own.
    pub fn start(count: usize) -> Self {
        Self::with_state(count, State::default())
    }

    /// `count` nodes that refuse an Identify without this API key.
    pub fn with_api_key(count: usize, key: &str) -> Self {
        Self::with_state(
            count,
            State {
                required_api_key: Some(key.to_owned()),
                ..State::default()
            },
        )
    }

    fn with_state(count: usize, mut state: State) -> Self {
        assert!(count >= 1, "a cluster has at least one node");
        let listeners: Vec<_> = (0..count)
            .map(|_| std::net::TcpListener::bind("127.0.0.1:0").unwrap())
            .collect();
        state.cluster = Roles {
            addresses: listeners
                .iter()
                .map(|l| l.local_addr().unwrap().to_string())
                .collect(),
            generations: vec![0; count],
            writes: vec![0; count],
            not_leader: vec![0; count],
            details: vec![0; count],
            reads: vec![0; count],
            ..Roles::default()
        };
        let state = Arc::new(Mutex::new(state));
        let nodes = listeners
            .into_iter()
            .enumerate()
            .map(|(i, listener)| FakeCeleriant::serve(listener, state.clone(), i))
            .collect();
        FakeCluster { nodes }
    }

    /// Every node's `HOST:PORT`, node 0 first.
    pub fn addresses(&self) -> Vec<String> {
        self.nodes.iter().map(FakeCeleriant::address).collect()
    }

    /// Node `i`; its store, scripts and watches are the cluster's (shared by every node).
    pub fn node(&self, i: usize) -> &FakeCeleriant {
        &self.nodes[i]
    }

    /// The leader's index.
    pub fn leader(&self) -> usize {
        self.nodes[0].lock().cluster.leader
    }

    /// Leader changes so far.
    pub fn changes(&self) -> u64 {
        self.nodes[0].lock().cluster.changes
    }

    /// From now until the next [`change_leader`](Self::change_leader), the leader keeps every
    /// write-class request it receives, unapplied and unanswered.
    pub fn hold_writes(&self) {
        self.nodes[0].lock().cluster.hold = true;
    }

    /// Writes held now.
    pub fn held(&self) -> usize {
        self.nodes[0].lock().cluster.held.len()
    }

    /// Per node, the write-class requests it received (including those answered 2011).
    pub fn writes_per_node(&self) -> Vec<u64> {
        self.nodes[0].lock().cluster.writes.clone()
    }

    /// Per node, the aggregate-details requests it received.
    pub fn details_per_node(&self) -> Vec<u64> {
        self.nodes[0].lock().cluster.details.clone()
    }

    /// From now on node `i` answers `key`'s details with a max version of at most `version`, as
    /// a replica behind the others (or cut off from them) would; the store is unchanged.
    pub fn lag_details(&self, i: usize, key: AggregateKey, version: u64) {
        self.nodes[0]
            .lock()
            .cluster
            .lagging
            .insert((i, key), version);
    }

    /// Per node, the connections it accepted (dials).
    pub fn connections_per_node(&self) -> Vec<u64> {
        let state = self.nodes[0].lock();
        (0..self.nodes.len())
            .map(|i| state.accepted.get(&i).copied().unwrap_or(0))
            .collect()
    }

    /// Per node, the read requests it received.
    pub fn reads_per_node(&self) -> Vec<u64> {
        self.nodes[0].lock().cluster.reads.clone()
    }

    /// Per node, the 2011 answers it sent.
    pub fn not_leader_per_node(&self) -> Vec<u64> {
        self.nodes[0].lock().cluster.not_leader.clone()
    }

    /// Makes node `to` the leader (it may be the leader already: a new term on the same node).
    /// The held writes are settled as `held` says; with `drop_connections`, the old leader then
    /// closes every connection it has (pooled ones and watches), as a restarting node does.
    pub fn change_leader(&self, to: usize, held: Held, drop_connections: bool) {
        let mut state = self.nodes[0].lock();
        assert!(to < state.cluster.addresses.len(), "no node {to}");
        let old = state.cluster.leader;
        state.cluster.leader = to;
        state.cluster.electing = false;
        state.cluster.hold = false;
        state.cluster.changes += 1;
        let new_leader = state.cluster.addresses[to].clone();
        for (request, settle) in std::mem::take(&mut state.cluster.held) {
            let outcome = match held {
                Held::Applied => {
                    state.requests.push(request.clone());
                    let _ = state.apply(&request);
                    Intercept::Close
                }
                Held::Lost => Intercept::Close,
                Held::Refused => {
                    state.cluster.not_leader[old] += 1;
                    Intercept::Answer(not_leader(request.correlation_id(), &new_leader))
                }
            };
            let _ = settle.send(outcome);
        }
        if drop_connections {
            state.cluster.generations[old] += 1;
        }
    }

    /// Every aggregate stored, with its batches (the store every node serves).
    pub fn dump(&self) -> Vec<(AggregateKey, Vec<AggregateEventBatch>)> {
        let state = self.nodes[0].lock();
        let mut all: Vec<_> = state
            .store
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect();
        all.sort_by_key(|(k, _)| (k.org_id, k.aggregate_type_id, k.aggregate_id));
        all
    }

    /// Watch connections open now, over every node.
    pub fn watches(&self) -> usize {
        self.nodes[0].watches()
    }

    /// Starts an election: until the next [`change_leader`](Self::change_leader), no node leads
    /// and every node answers write-class requests 2011 without a leader's address.
    pub fn start_election(&self) {
        self.nodes[0].lock().cluster.electing = true;
    }

    /// Closes every connection node `i` holds (pooled ones and watches); new ones are accepted.
    pub fn drop_connections(&self, i: usize) {
        self.nodes[0].lock().cluster.generations[i] += 1;
    }
}
