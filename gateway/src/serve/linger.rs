//! After hyper lets go of a connection: what the kernel still holds for its client is kept
//! inside the bounds until it has left, or dropped at once.
//!
//! Closing a socket whose send queue is not empty does not free the queue: the kernel keeps the
//! socket as an *orphan* (FIN-WAIT-1) and goes on sending it for minutes, outside every budget
//! of the gateway and outside its connection caps. A review measured 200 such orphans holding
//! 8 MB, made within a second by one address asking 200 times for a page with
//! `Connection: close` and never reading. So each connection keeps its own handle to its socket
//! ([`Kept`], a second descriptor taken at accept: the socket stays open when hyper drops its
//! own), and when the connection ends:
//!
//! * **Cut by the gateway** (idle timeout, eviction, a stalled change stream, a page below the
//!   minimum rate, the end of the shutdown grace): the client is not reading, so whatever is still queued is dropped with a
//!   reset (`SO_LINGER` 0); a connection with nothing queued closes normally.
//! * **Finished by hyper** (an answer with `Connection: close`, the client's close, an error,
//!   shutdown): the connection task goes on holding the socket and its place in the connection
//!   pool (its pages' reservations go back, as when the socket closed) until the send queue is
//!   empty ([`flush`]), then closes normally, so a client on a slow link still gets the last
//!   bytes of its answer. The wait ends with a reset after the idle timeout, on an eviction, or
//!   at the end of the shutdown grace. A socket the client has reset is in state `TCP_CLOSE`,
//!   whose `SIOCOUTQ` never drains: the state is read too (`TCP_INFO`), and such a socket is
//!   done at once.
//!
//! Every close goes through [`Kept::close`], which says whether it was a reset; the connection
//! task counts each reset once, in `celeriant_gateway_unread_resets_total`, under the [`Cut`]
//! that made it (a page below the minimum rate has its socket set to reset before the cut
//! reaches here: [`Kept::close`] sees that too).
//!
//! So an orphan holds at most a FIN, and what a client that does not read can make the kernel
//! hold is what an open connection can: one capped send buffer per connection place.

use std::os::fd::{AsFd, AsRawFd, OwnedFd, RawFd};
use std::time::Duration;

use super::unsent::{POLL, queue_length};
use crate::limits::connections::Slot;

/// The first wait before a second look at a flushing socket's send queue: on a fast link the
/// queue empties within a round trip, and the connection's place and reservations should come
/// back as soon as it has.
pub const FIRST_POLL: Duration = Duration::from_millis(1);

/// The longest wait between two looks at a flushing socket's send queue, reached by doubling
/// while the queue does not move (a client that stopped reading costs one `ioctl` per second).
/// After progress the next look is [`POLL`] later.
pub const MAX_POLL: Duration = Duration::from_secs(1);

/// `TCP_CLOSE` in `tcp_info.tcpi_state` (linux/include/net/tcp_states.h).
const TCP_CLOSE: u8 = 7;

/// The connection's own descriptor of its socket.
#[derive(Debug)]
pub struct Kept(OwnedFd);

/// Why the gateway cut a connection (or ended its flush): the reason its reset, if any, is
/// counted under (`celeriant_gateway_unread_resets_total{reason}`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Cut {
    /// Nothing moved for the idle timeout while hyper served it.
    Idle,
    /// Its place was given to a newcomer (while hyper served it, or while it flushed).
    Evicted,
    /// A change stream whose client stopped reading.
    Stalled,
    /// A read page fell behind the minimum page rate.
    SlowReader,
    /// Its flush lasted the idle timeout (the client stopped reading after hyper finished).
    FlushTimeout,
    /// The shutdown grace ended.
    Shutdown,
}

impl Cut {
    /// The metric's `reason` label: a fixed name.
    pub fn label(self) -> &'static str {
        match self {
            Cut::Idle => "idle",
            Cut::Evicted => "evicted",
            Cut::Stalled => "stalled stream",
            Cut::SlowReader => "slow reader",
            Cut::FlushTimeout => "flush timeout",
            Cut::Shutdown => "shutdown",
        }
    }
}

/// How a connection's socket is closed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Close {
    /// Normally: what is queued is still sent (nothing is, when this is chosen after a flush).
    Graceful,
    /// Cut by the gateway: with a reset when its client left anything unread, so the kernel
    /// drops it at once.
    Reset(Cut),
}

impl Kept {
    /// A second descriptor of `socket`'s socket; `None` when the process is out of them.
    pub fn of(socket: &impl AsFd) -> Option<Kept> {
        match socket.as_fd().try_clone_to_owned() {
            Ok(fd) => Some(Kept(fd)),
            Err(e) => {
                tracing::debug!(error = %e, "could not keep a connection's socket");
                None
            }
        }
    }

    /// Its raw descriptor, open for as long as this lives.
    pub fn raw(&self) -> RawFd {
        self.0.as_raw_fd()
    }

    /// Bytes still queued (0 once the client reset the connection: there is nowhere to send).
    pub fn queued(&self) -> usize {
        if closed(self.raw()) {
            return 0;
        }
        // A queue the kernel cannot tell counts as not empty on Linux (where it always can for
        // an open socket): the wait then ends at the idle timeout with a reset, never with a
        // close that could leave bytes behind. Elsewhere there is no `SIOCOUTQ` to ask.
        queue_length(self.raw()).unwrap_or(usize::from(cfg!(target_os = "linux")))
    }

    /// Whether the socket is already set to close with a reset (`SO_LINGER` 0, as a page
    /// below the minimum rate leaves it: bytes of that page are unread by definition) and
    /// still open at the client's end (a socket the client reset sends nothing more).
    fn armed(&self) -> bool {
        let linger = socket2::SockRef::from(&self.0).linger();
        matches!(linger, Ok(Some(d)) if d.is_zero()) && !closed(self.raw())
    }

    /// Closes the socket `how`, and returns how it was closed: [`Close::Reset`] (with the cut
    /// that asked for it) exactly when the close is a reset, that is when the cut found bytes
    /// its client left unread — still queued, or a page already set to reset. Every reset the
    /// gateway makes goes through here, so the caller counts each once.
    pub fn close(self, how: Close) -> Close {
        let how = match how {
            Close::Reset(cut) if self.queued() > 0 || self.armed() => {
                if let Err(e) = socket2::SockRef::from(&self.0).set_linger(Some(Duration::ZERO)) {
                    tracing::debug!(error = %e, "could not set a closing socket to reset");
                }
                Close::Reset(cut)
            }
            _ => Close::Graceful,
        };
        drop(self.0);
        how
    }
}

/// Waits, after hyper finished with the connection, until its socket's send queue is empty
/// (or the client reset it): [`Close::Graceful`]. [`Close::Reset`] after `idle_timeout` in
/// all ([`Cut::FlushTimeout`]: the queue holds at most a send buffer and the end of an answer:
/// a client reading at any useful speed has it long before; one acknowledging a byte now and
/// then does not hold the place for longer), when the connection's place was given to a
/// newcomer ([`Cut::Evicted`]), or when `stop` resolves (the shutdown grace is over:
/// [`Cut::Shutdown`]). The connection's pages are given back before: no
/// page rate applies here, the idle timeout bounds it all.
pub async fn flush(
    socket: &Kept,
    idle_timeout: Duration,
    slot: &Slot,
    stop: impl std::future::Future<Output = ()>,
) -> Close {
    tokio::select! {
        () = flushed(socket) => Close::Graceful,
        () = tokio::time::sleep(idle_timeout) => Close::Reset(Cut::FlushTimeout),
        () = slot.evicted() => Close::Reset(Cut::Evicted),
        () = stop => Close::Reset(Cut::Shutdown),
    }
}

/// Resolves once `socket`'s send queue is empty. Looks again after [`FIRST_POLL`], doubling the wait each time, up to
/// [`POLL`] while the queue shrinks and up to [`MAX_POLL`] while it does not.
async fn flushed(socket: &Kept) {
    let mut wait = FIRST_POLL / 2;
    let mut last = usize::MAX;
    loop {
        let queued = socket.queued();
        if queued == 0 {
            return;
        }
        wait = if queued < last {
            (wait * 2).min(POLL)
        } else {
            (wait * 2).min(MAX_POLL)
        };
        last = queued;
        tokio::time::sleep(wait).await;
    }
}

/// Whether the socket is in state `TCP_CLOSE` (the client reset it), from `TCP_INFO`.
#[cfg(target_os = "linux")]
fn closed(socket: RawFd) -> bool {
    // SAFETY: an all-zero `tcp_info` is a valid value of this plain C struct.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: `socket` is an open descriptor (the caller's `Kept` owns it); `info` and `len`
    // are valid for writes of the size given, and the kernel writes at most `len` bytes.
    let result = unsafe {
        libc::getsockopt(
            socket,
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&raw mut info).cast(),
            &mut len,
        )
    };
    result == 0 && info.tcpi_state == TCP_CLOSE
}

#[cfg(not(target_os = "linux"))]
fn closed(_socket: RawFd) -> bool {
    false
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::io::Read;

    /// A connected pair: the gateway's end (with a capped send buffer) and a client whose
    /// receive buffer is as small as can be, so what is written stays queued on our side.
    fn pair() -> (std::net::TcpStream, std::net::TcpStream) {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let client =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        client.set_recv_buffer_size(1024).unwrap();
        client
            .connect(&listener.local_addr().unwrap().into())
            .unwrap();
        let (server, _) = listener.accept().unwrap();
        socket2::SockRef::from(&server)
            .set_send_buffer_size(64 << 10)
            .unwrap();
        (server, client.into())
    }

    /// Fills `server`'s send queue as far as the kernel takes without blocking.
    fn fill(server: &std::net::TcpStream) -> usize {
        use std::io::Write;
        server.set_nonblocking(true).unwrap();
        let chunk = vec![7u8; 16 << 10];
        let mut sent = 0;
        let mut server = server;
        while let Ok(n) = server.write(&chunk) {
            sent += n;
        }
        sent
    }

    /// [`flush`] of a fresh slot, with `idle_timeout`, until `stop`.
    async fn flush_for(
        kept: &Kept,
        idle_timeout: Duration,
        stop: impl std::future::Future<Output = ()>,
    ) -> Close {
        flush(kept, idle_timeout, &Slot::default(), stop).await
    }

    #[tokio::test]
    async fn a_flush_ends_once_the_client_has_read_everything() {
        let (server, mut client) = pair();
        let kept = Kept::of(&server).unwrap();
        let sent = fill(&server);
        drop(server); // hyper let go: the kept descriptor holds the socket open
        assert!(kept.queued() > 0, "queued for a client that does not read");
        let reader = std::thread::spawn(move || {
            std::thread::sleep(Duration::from_millis(300));
            let mut back = vec![0u8; sent];
            client.read_exact(&mut back).unwrap();
            client
        });
        let how = tokio::time::timeout(
            Duration::from_secs(10),
            flush_for(&kept, Duration::from_secs(60), std::future::pending()),
        )
        .await
        .expect("flushed once read");
        assert_eq!(how, Close::Graceful);
        assert_eq!(kept.queued(), 0);
        assert_eq!(kept.close(how), Close::Graceful);
        drop(reader.join().unwrap());
    }

    #[tokio::test]
    async fn a_client_that_reads_nothing_is_reset_at_the_idle_timeout() {
        let (server, client) = pair();
        let kept = Kept::of(&server).unwrap();
        fill(&server);
        drop(server);
        let started = std::time::Instant::now();
        let how = flush_for(&kept, Duration::from_millis(400), std::future::pending()).await;
        assert_eq!(how, Close::Reset(Cut::FlushTimeout));
        assert!(started.elapsed() >= Duration::from_millis(300));
        assert_eq!(kept.close(how), how, "bytes were queued: a reset");
        drop(client);
    }

    #[tokio::test]
    async fn a_socket_the_client_reset_is_done_at_once() {
        let (server, client) = pair();
        let kept = Kept::of(&server).unwrap();
        fill(&server);
        drop(server);
        // The client closes with unread data: its kernel answers with a reset.
        socket2::SockRef::from(&client)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(client);
        let how = tokio::time::timeout(
            Duration::from_secs(2),
            flush_for(&kept, Duration::from_secs(60), std::future::pending()),
        )
        .await
        .expect("a reset socket's queue never drains: its state says it is done");
        assert_eq!(how, Close::Graceful);
        assert_eq!(kept.close(how), Close::Graceful);
    }

    #[test]
    fn a_cut_is_a_reset_only_with_bytes_unread_and_says_so() {
        // Nothing queued, nothing armed: a cut closes normally (not a reset, not counted).
        let (server, client) = pair();
        let kept = Kept::of(&server).unwrap();
        drop(server);
        assert_eq!(kept.close(Close::Reset(Cut::Idle)), Close::Graceful);
        drop(client);
        // Nothing queued but already set to reset (a page below the minimum rate): a reset,
        // and the close says so, under the cut's reason.
        let (server, client) = pair();
        let kept = Kept::of(&server).unwrap();
        socket2::SockRef::from(&server)
            .set_linger(Some(Duration::ZERO))
            .unwrap();
        drop(server);
        let how = Close::Reset(Cut::SlowReader);
        assert_eq!(kept.close(how), how);
        drop(client);
        // Bytes queued: a reset whatever the cut.
        let (server, client) = pair();
        let kept = Kept::of(&server).unwrap();
        fill(&server);
        drop(server);
        let how = Close::Reset(Cut::Evicted);
        assert_eq!(kept.close(how), how);
        assert_eq!(Cut::Evicted.label(), "evicted");
        drop(client);
    }

    #[tokio::test]
    async fn the_end_of_the_shutdown_grace_resets_a_flush() {
        let (server, client) = pair();
        let kept = Kept::of(&server).unwrap();
        fill(&server);
        drop(server);
        let stop = tokio::time::sleep(Duration::from_millis(100));
        let how = tokio::time::timeout(
            Duration::from_secs(5),
            flush_for(&kept, Duration::from_secs(60), stop),
        )
        .await
        .expect("stopped");
        assert_eq!(how, Close::Reset(Cut::Shutdown));
        assert_eq!(kept.close(how), how);
        drop(client);
    }
}
