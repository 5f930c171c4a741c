//! Serving connections: the accept loop, with the bounds `axum::serve` does not offer.
//!
//! hyper's HTTP/1.1 connection builder does the protocol; this module decides, per connection,
//! what `axum::serve` cannot be told:
//!
//! * **A cap on open connections**, overall and per client address
//!   ([`crate::limits::connections`]). A connection over either cap is answered at once with a
//!   fixed `429` protocol body (`retry`, 42900) and closed: no task, no buffer, no descriptor
//!   kept. When the overall cap is reached, a newcomer first takes the place of an idle
//!   connection of an address that holds more (the pool tells that connection's task, which
//!   drops it); a connection whose write is between its body and its answer is never evicted
//!   (each request finds the connection's [`crate::limits::connections::Slot`] in its
//!   extensions for that). The listener's own descriptor budget is the process's open-file
//!   limit, which [`fit_to_open_file_limit`] raises to its hard maximum and the cap is lowered
//!   to fit.
//! * **Header-read timeout** (hyper's own): a request's headers must arrive within it. hyper
//!   starts it whenever a connection waits for a request, so it also closes idle keep-alive
//!   connections.
//! * **Idle timeout** ([`activity`]): a connection on which nothing moved for that long is
//!   dropped, whatever it was doing.
//! * **Stalled streams** ([`activity`]): a connection carrying a change stream is dropped once
//!   a write has waited for room in its (small) send buffer for the stream's write timeout,
//!   which frees the stream's slots; each request finds the connection's [`Activity`] in its
//!   extensions for that.
//! * **Kernel memory** ([`unsent`]): every connection's send buffer is capped at
//!   [`unsent::SEND_BUFFER`], and a read page's reservation is held until its bytes have left
//!   the socket, so what the kernel holds for a client that does not read is inside the read
//!   budget.
//! * **Slow readers** ([`unsent::PagePace`]): a page whose bytes leave the socket slower than
//!   the minimum page rate (after a grace of the idle timeout) closes its connection, so a
//!   client that reads a trickle to beat the idle timeout cannot hold a page's reservation for
//!   hours.
//! * **No orphans** ([`linger`]): each connection keeps a descriptor of its own to its socket.
//!   A connection the gateway cuts (the bounds above) is closed with a reset when bytes are
//!   still queued for its client; one hyper finished keeps its place until its send queue is
//!   empty, so the kernel never goes on sending for a closed socket outside the bounds.
//! * **Bounded buffers**: a request's headers may take at most [`MAX_HEADER_BYTES`] (431 past
//!   it; 100 headers at most, hyper's default), and hyper buffers at most [`MAX_BUF_BYTES`] per
//!   connection.
//! * **Framing** is hyper's, and strict: two different `Content-Length`s, one that is not a
//!   number, an unknown or non-final `chunked` transfer coding are refused with a bare 400
//!   before a request exists; a request with both `Content-Length` and `Transfer-Encoding`
//!   is framed by the latter alone (RFC 9112 §6.3) and its connection closed after the
//!   answer, so no leftover bytes can be read as a request nobody checked.
//! * **Graceful shutdown**: on the signal the listener closes, requests in progress finish and
//!   finished connections flush their send queues (up to the grace period); past it every
//!   connection still open, inside hyper or flushing, is cut (a reset when bytes are queued),
//!   then the loop returns.
//!
//! Each request gets the connection's peer address as `ConnectInfo<SocketAddr>`, as with
//! `into_make_service_with_connect_info`. The body-read timeout and the per-route deadline are
//! per request, in the routes and the router's layers.

pub mod activity;
pub mod linger;
pub mod unsent;

use std::future::Future;
use std::sync::LazyLock;
use std::time::Duration;

use axum::Router;
use axum::extract::ConnectInfo;
use axum::http::Request;
use celeriant_sync_protocol::codes::gateway as g;
use celeriant_sync_protocol::outcome::WriteOutcome;
use hyper::body::Incoming;
use hyper::server::conn::http1;
use hyper_util::rt::{TokioIo, TokioTimer};
use hyper_util::server::graceful::GracefulShutdown;
use hyper_util::service::TowerToHyperService;
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tower::ServiceExt;

use self::activity::{Activity, Tracked};
use self::linger::{Close, Cut, Kept};
use self::unsent::PagePace;
use crate::limits::connections::{Connections, Full};
use crate::limits::notice::Throttle;

/// Most bytes hyper buffers per connection.
pub const MAX_BUF_BYTES: usize = 64 * 1024;

/// Most bytes of one request's line and headers (a session token is at most 8 KiB).
pub const MAX_HEADER_BYTES: usize = 32 * 1024;

/// Descriptors kept free of connections: the database, the listener, logs, the Celeriant
/// pool's sockets.
const RESERVED_DESCRIPTORS: u64 = 64;

/// Descriptors each connection takes: hyper's and the connection's own ([`linger::Kept`]).
const DESCRIPTORS_PER_CONNECTION: u64 = 2;

/// How a connection is served.
#[derive(Debug, Clone)]
pub struct ServeOptions {
    /// `--trusted-proxy` addresses and ranges: the connections of a proxy named by its single
    /// address are never evicted from a full pool (a range's members are, like any client).
    pub trusted_proxies: crate::proxy::TrustedProxies,
    /// Most connections open at once.
    pub max_connections: usize,
    /// Most connections open at once from one address.
    pub max_connections_per_ip: usize,
    /// hyper's header-read timeout.
    pub header_read_timeout: Duration,
    /// Drop a connection on which nothing moved for this long.
    pub idle_timeout: Duration,
    /// `--min-page-rate-bytes-per-sec`: close a connection whose read page leaves its socket
    /// slower (after a grace of `idle_timeout`); 0: no minimum.
    pub min_page_rate: u64,
    /// How long requests in progress may take to finish at shutdown.
    pub shutdown_grace: Duration,
}

/// The answer to a connection over a cap, written once and then closed.
static OVER_CAPACITY: LazyLock<Vec<u8>> = LazyLock::new(|| {
    let outcome =
        WriteOutcome::from_code(g::GATEWAY_BUSY, "too many open connections; retry shortly");
    let body = serde_json::to_string(&outcome).unwrap_or_default();
    format!(
        "HTTP/1.1 429 Too Many Requests\r\ncontent-type: application/json\r\nretry-after: 1\r\n\
         connection: close\r\ncontent-length: {}\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
});

/// Raises the soft open-file limit to the hard one and returns the most connections that fit
/// under it (`wanted`, or fewer with a warning).
pub fn fit_to_open_file_limit(wanted: usize) -> usize {
    use rustix::process::{Resource, Rlimit, getrlimit, setrlimit};
    let limit = getrlimit(Resource::Nofile);
    let raised = Rlimit {
        current: limit.maximum,
        maximum: limit.maximum,
    };
    let current = match setrlimit(Resource::Nofile, raised) {
        Ok(()) => limit.maximum,
        Err(_) => limit.current,
    };
    let Some(current) = current else {
        return wanted;
    };
    let fits =
        (current.saturating_sub(RESERVED_DESCRIPTORS) / DESCRIPTORS_PER_CONNECTION).max(1) as usize;
    if fits < wanted {
        tracing::warn!(
            wanted,
            open_file_limit = current,
            "--max-connections lowered to {fits} to fit the open-file limit"
        );
        return fits;
    }
    wanted
}

/// Serves `router` on `listener` until `shutdown` resolves, then lets requests in progress
/// finish for up to `options.shutdown_grace`.
pub async fn serve(
    listener: TcpListener,
    router: Router,
    options: ServeOptions,
    shutdown: impl Future<Output = ()>,
) {
    let connections = Connections::new(
        options.max_connections,
        options.max_connections_per_ip,
        options.trusted_proxies.clone(),
    );
    let graceful = GracefulShutdown::new();
    let mut builder = http1::Builder::new();
    builder
        .timer(TokioTimer::new())
        .header_read_timeout(options.header_read_timeout)
        .max_buf_size(MAX_BUF_BYTES)
        .max_header_size(MAX_HEADER_BYTES)
        .keep_alive(true);
    let refused = Throttle::new();
    let evicted = Throttle::new();
    let accept_errors = Throttle::new();
    let tasks = TaskTracker::new();
    // Cancelled when the shutdown grace is over: connections still flushing then reset.
    let stop = CancellationToken::new();
    tokio::pin!(shutdown);
    loop {
        let (stream, peer) = tokio::select! {
            accepted = listener.accept() => match accepted {
                Ok(accepted) => accepted,
                Err(e) => {
                    if let Some(suppressed) = accept_errors.allow() {
                        tracing::warn!(error = %e, suppressed, "accept failed");
                    }
                    // Out of descriptors or memory: give connections in progress a moment.
                    if !matches!(e.kind(), std::io::ErrorKind::ConnectionAborted
                        | std::io::ErrorKind::ConnectionReset) {
                        tokio::time::sleep(Duration::from_millis(50)).await;
                    }
                    continue;
                }
            },
            () = &mut shutdown => break,
        };
        // Before a place is taken (which may evict another connection).
        let Some(kept) = Kept::of(&stream) else {
            // Out of descriptors: answered like a full pool.
            refuse(&stream);
            crate::observe::budget_refused("connections", "descriptors");
            continue;
        };
        let place = match connections.enter(peer.ip()) {
            Ok(place) => place,
            Err(full) => {
                refuse(&stream);
                crate::observe::budget_refused(
                    "connections",
                    match full {
                        Full::Total => "total",
                        Full::Address => "address",
                    },
                );
                if let Some(suppressed) = refused.allow() {
                    tracing::warn!(
                        %peer,
                        cap = match full { Full::Total => "overall", Full::Address => "per address" },
                        open = connections.open(),
                        suppressed,
                        "connection refused: too many open"
                    );
                }
                continue;
            }
        };
        if place.evicted_another() {
            crate::observe::budget_refused("connections", "evicted");
            if let Some(suppressed) = evicted.allow() {
                tracing::info!(
                    %peer,
                    suppressed,
                    "connection pool full: an idle connection of the address holding the most gave way"
                );
            }
        }
        let _ = stream.set_nodelay(true);
        let capped = socket2::SockRef::from(&stream).set_send_buffer_size(unsent::SEND_BUFFER);
        if let Err(e) = capped {
            tracing::debug!(%peer, error = %e, "could not cap a connection's send buffer");
        }
        crate::observe::connection_accepted();
        let activity = Activity::new();
        // The kept descriptor, open for the task's whole life (hyper's closes before).
        activity.unsent().attach(kept.raw());
        let io = TokioIo::new(Tracked::new(stream, activity.clone()));
        let slot = place.slot();
        let service = router.clone().map_request({
            let activity = activity.clone();
            move |mut request: Request<Incoming>| {
                request.extensions_mut().insert(ConnectInfo(peer));
                request.extensions_mut().insert(activity.clone());
                // The routes that apply something mark their commit phase on it.
                request.extensions_mut().insert(slot.clone());
                request
            }
        });
        let connection =
            graceful.watch(builder.serve_connection(io, TowerToHyperService::new(service)));
        let idle_timeout = options.idle_timeout;
        let pace = PagePace {
            grace: idle_timeout,
            min_rate: options.min_page_rate,
        };
        let evicted_slot = place.slot();
        let stop = stop.clone();
        tasks.spawn(async move {
            let _place = place;
            // Whether hyper finished with the connection (`Graceful`) or the gateway cut it.
            let ended = tokio::select! {
                result = connection => {
                    if let Err(e) = result {
                        tracing::debug!(%peer, error = %e, "connection ended with an error");
                    }
                    Close::Graceful
                },
                () = activity.idle(idle_timeout) => {
                    tracing::debug!(%peer, ?idle_timeout, "idle connection closed");
                    Close::Reset(Cut::Idle)
                }
                () = evicted_slot.evicted() => {
                    tracing::debug!(%peer, "connection evicted: the pool was full");
                    Close::Reset(Cut::Evicted)
                }
                () = activity.stalled() => {
                    crate::observe::budget_refused("change streams", "stalled");
                    tracing::debug!(%peer, "change stream closed: its client stopped reading");
                    Close::Reset(Cut::Stalled)
                }
                behind = activity.drain(pace) => {
                    crate::observe::budget_refused("read responses", "slow reader");
                    tracing::debug!(
                        %peer,
                        page_bytes = behind.len,
                        acknowledged = behind.out,
                        elapsed = ?behind.elapsed,
                        min_rate = pace.min_rate,
                        "connection closed: its read page left slower than the minimum page rate"
                    );
                    Close::Reset(Cut::SlowReader)
                }
                // The shutdown grace is over and hyper is still at it (an answer its client
                // does not read): cut, rather than left to the process's exit (which would
                // close it normally and leave what is queued to the kernel).
                () = stop.cancelled() => {
                    tracing::debug!(%peer, "connection cut: the shutdown grace is over");
                    Close::Reset(Cut::Shutdown)
                }
            };
            // hyper has let go of the socket; the kept descriptor still holds it open. Pages'
            // reservations go back now, as they did when the socket closed: what the kernel
            // still holds (at most a send buffer) stays bounded by the place the flush keeps.
            activity.unsent().release();
            let how = match ended {
                Close::Graceful => {
                    let stop = stop.cancelled();
                    linger::flush(&kept, idle_timeout, &evicted_slot, stop).await
                }
                cut @ Close::Reset(_) => cut,
            };
            // The one place a connection's socket is closed: each reset counted once, under
            // the cut that made it.
            if let Close::Reset(cut) = kept.close(how) {
                crate::observe::unread_reset(cut.label());
                tracing::debug!(
                    %peer,
                    reason = cut.label(),
                    "connection reset: its client left bytes unread"
                );
            }
        });
    }
    drop(listener);
    let deadline = tokio::time::Instant::now() + options.shutdown_grace;
    tokio::select! {
        () = graceful.shutdown() => {}
        () = tokio::time::sleep_until(deadline) => {
            tracing::warn!("requests still in progress after the shutdown grace period; stopping");
        }
    }
    // Answers given, some may still be on their way to slow clients: wait for them within the
    // same grace (past it, the kernel goes on sending them after the process exits).
    tasks.close();
    tokio::select! {
        () = tasks.wait() => return,
        () = tokio::time::sleep_until(deadline) => {}
    }
    // Past the grace: what is still queued is reset rather than left to the kernel after the
    // process exits (a moment for the tasks to do it).
    tracing::info!(
        connections = tasks.len(),
        "answers still on their way at the end of the shutdown grace period: reset"
    );
    stop.cancel();
    let _ = tokio::time::timeout(Duration::from_millis(200), tasks.wait()).await;
}

/// Answers a connection over a cap without a task: one non-blocking write of a fixed answer
/// (a fresh socket's send buffer always has room for it), then the socket is closed on drop.
fn refuse(stream: &TcpStream) {
    let _ = stream.try_write(&OVER_CAPACITY);
}
