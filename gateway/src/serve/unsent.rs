//! Bytes a connection's kernel still holds: a read page stays inside the read budget until it
//! has left the socket.
//!
//! A page is handed to hyper in frames, and hyper to the socket; once the kernel took the last
//! byte, the body is done and used to give its reservation back, but the kernel may still hold
//! the whole page in the socket's send buffer for a client that does not read (250 such
//! connections from one address once pinned 844 MB of kernel memory, outside every budget).
//! Two bounds keep that memory inside the budget:
//!
//! * every connection's send buffer is capped ([`SEND_BUFFER`], set at accept), so the kernel
//!   holds at most that much of a page per connection, and a page larger than it stays in the
//!   gateway's (reserved) frames until the client reads;
//! * a page's reservation is handed to the connection's [`Unsent`] when its last frame is
//!   taken, and kept there until the connection has written every byte of the page and the
//!   socket's unacknowledged send queue (`SIOCOUTQ`) is empty, polled every [`POLL`] while
//!   something is held. A send queue that shrinks counts as activity (the client is reading);
//!   one that does not leaves the connection to the idle timeout, which closes it and gives
//!   the reservation back.

use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;

/// The send buffer asked for every connection (the kernel doubles it for its bookkeeping):
/// enough for a reader that keeps up on a fast link, small beside a page.
pub const SEND_BUFFER: usize = 64 * 1024;

/// How often the send queue of a connection holding a page is looked at.
pub const POLL: Duration = Duration::from_millis(25);

/// Something held until the connection has written `until` bytes and its send queue is empty.
struct Held {
    until: u64,
    _item: Box<dyn Send>,
}

/// What a connection holds until its bytes have left the socket.
pub struct Unsent {
    /// The socket's descriptor (-1: none to ask, as in tests over in-memory pipes).
    socket: AtomicI32,
    /// Bytes the connection has handed to the kernel so far.
    written: AtomicU64,
    held: Mutex<Vec<Held>>,
    added: Notify,
}

impl std::fmt::Debug for Unsent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unsent")
            .field("socket", &self.socket.load(Ordering::Relaxed))
            .field("written", &self.written.load(Ordering::Relaxed))
            .field("held", &self.held().len())
            .finish()
    }
}

impl Default for Unsent {
    fn default() -> Self {
        Unsent {
            socket: AtomicI32::new(-1),
            written: AtomicU64::new(0),
            held: Mutex::new(Vec::new()),
            added: Notify::new(),
        }
    }
}

impl Unsent {
    fn held(&self) -> std::sync::MutexGuard<'_, Vec<Held>> {
        self.held.lock().unwrap_or_else(|e| e.into_inner())
    }

    /// The connection's socket, asked for its send queue. Its descriptor must stay open while
    /// [`Unsent::drain`] or [`Unsent::settle`] may run (the connection's task holds both).
    pub fn attach(&self, socket: i32) {
        self.socket.store(socket, Ordering::Relaxed);
    }

    /// `n` more bytes handed to the kernel.
    pub fn wrote(&self, n: usize) {
        self.written.fetch_add(n as u64, Ordering::Relaxed);
    }

    /// Bytes handed to the kernel so far.
    pub fn written(&self) -> u64 {
        self.written.load(Ordering::Relaxed)
    }

    /// Holds `item` until `until` bytes were written and the send queue is empty; drops it at
    /// once when there is no socket to ask.
    pub fn hold_until(&self, until: u64, item: Box<dyn Send>) {
        if self.socket.load(Ordering::Relaxed) < 0 {
            return;
        }
        self.held().push(Held { until, _item: item });
        self.added.notify_one();
    }

    /// Gives back what has left the socket now; returns the send queue's length.
    pub fn settle(&self) -> usize {
        let socket = self.socket.load(Ordering::Relaxed);
        if socket < 0 {
            return 0;
        }
        let queued = send_queue(socket);
        if queued == 0 {
            let written = self.written();
            self.held().retain(|h| h.until > written);
        }
        queued
    }

    /// Gives back everything held (the connection is gone).
    pub fn release(&self) {
        self.held().clear();
    }

    /// Runs for the connection's life: while something is held, looks at the send queue every
    /// [`POLL`], gives back what has left, and calls `progress` when the queue shrank.
    pub async fn drain(&self, progress: impl Fn()) {
        loop {
            if self.held().is_empty() {
                self.added.notified().await;
                continue;
            }
            let mut last = usize::MAX;
            while !self.held().is_empty() {
                let queued = self.settle();
                if queued < last && last != usize::MAX {
                    progress();
                }
                last = queued;
                tokio::time::sleep(POLL).await;
            }
        }
    }
}

/// Bytes in the socket's send queue not yet acknowledged by the peer (`SIOCOUTQ`); 0 when
/// the kernel cannot tell.
#[cfg(target_os = "linux")]
fn send_queue(socket: i32) -> usize {
    let mut queued: libc::c_int = 0;
    // SAFETY: `socket` is the connection's open descriptor (the connection's task owns the
    // socket for as long as this may be called), and TIOCOUTQ (= SIOCOUTQ) writes one int.
    let result = unsafe { libc::ioctl(socket, libc::TIOCOUTQ, &mut queued) };
    if result < 0 {
        0
    } else {
        queued.max(0) as usize
    }
}

#[cfg(not(target_os = "linux"))]
fn send_queue(_socket: i32) -> usize {
    0
}

#[cfg(all(test, target_os = "linux"))]
mod tests {
    use super::*;
    use std::os::fd::AsRawFd;
    use std::sync::Arc;
    use std::sync::atomic::AtomicBool;
    use tokio::io::AsyncReadExt;

    /// Sets its flag when dropped: the reservation given back.
    struct Given(Arc<AtomicBool>);

    impl Drop for Given {
        fn drop(&mut self) {
            self.0.store(true, Ordering::SeqCst);
        }
    }

    #[tokio::test]
    async fn a_page_is_held_until_the_client_has_read_it() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        client.set_recv_buffer_size(1024).unwrap();
        client
            .connect(&listener.local_addr().unwrap().into())
            .unwrap();
        client.set_nonblocking(true).unwrap();
        let mut client = tokio::net::TcpStream::from_std(client.into()).unwrap();
        let (server, _) = listener.accept().await.unwrap();
        socket2::SockRef::from(&server)
            .set_send_buffer_size(SEND_BUFFER)
            .unwrap();

        let unsent = Unsent::default();
        unsent.attach(server.as_raw_fd());
        // As much as the kernel takes at once of a 32 KiB page, for a client that does not read.
        let page = vec![7u8; 32 << 10];
        let mut sent = 0;
        while sent < page.len() {
            match server.try_write(&page[sent..]) {
                Ok(n) => {
                    sent += n;
                    unsent.wrote(n);
                }
                Err(_) => break,
            }
        }
        assert!(sent > 8 << 10, "the kernel took {sent} bytes");
        let given = Arc::new(AtomicBool::new(false));
        unsent.hold_until(unsent.written(), Box::new(Given(given.clone())));
        let not_yet_written = Arc::new(AtomicBool::new(false));
        unsent.hold_until(
            unsent.written() + 1,
            Box::new(Given(not_yet_written.clone())),
        );

        tokio::time::sleep(POLL * 4).await;
        assert!(
            unsent.settle() > 0,
            "the client read nothing: bytes are queued"
        );
        assert!(!given.load(Ordering::SeqCst), "held while queued");

        let drain = unsent.drain(|| {});
        let read = async {
            let mut back = vec![0u8; sent];
            client.read_exact(&mut back).await.unwrap();
            for _ in 0..200 {
                if given.load(Ordering::SeqCst) {
                    break;
                }
                tokio::time::sleep(POLL).await;
            }
        };
        tokio::select! {
            () = drain => unreachable!("drain runs for the connection's life"),
            () = read => {}
        }
        assert!(given.load(Ordering::SeqCst), "given back once read");
        assert!(
            !not_yet_written.load(Ordering::SeqCst),
            "a page not all written yet stays held"
        );
        unsent.release();
        assert!(not_yet_written.load(Ordering::SeqCst));
    }
}
