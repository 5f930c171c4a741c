//! Bytes a connection's kernel still holds: a read page stays inside the read budget until it
//! has left the socket, and must leave it at a minimum rate.
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
//!   taken, and kept there until the client has acknowledged every byte of the page: the
//!   connection has written them and the socket's unacknowledged send queue (`SIOCOUTQ`)
//!   holds only bytes written after them, looked at every [`POLL`] while a page is on its
//!   way. Bytes acknowledged count as activity (the client is reading); a client that
//!   acknowledges nothing is left to the idle timeout, which closes the connection and gives
//!   the reservation back.
//!
//! **A minimum rate** ([`PagePace`], `--min-page-rate-bytes-per-sec`). Activity alone let a
//! client hold a page for hours: acknowledging one segment just before each idle timeout kept
//! its connection "active" while the page's reservation stayed held, and a handful of
//! addresses doing so could fill the read budget for everyone (the hostile review's "M1, the
//! drip-feed"). So from the moment a page's first byte is handed to the connection
//! ([`Unsent::begin`]) its n-th byte must be acknowledged by *grace + n / rate*, the grace being
//! the idle timeout; a page that falls behind closes its connection ([`Unsent::drain`]
//! returns), which gives the reservation back, and the close is a reset (`SO_LINGER` 0), so the
//! kernel drops its copy at once instead of trickling it out to the client. Why this shape:
//!
//! * it is the rule of request bodies (`--min-body-rate-bytes-per-sec`: the n-th byte by 2 s +
//!   n / rate), turned around, so one sentence describes both;
//! * a per-byte due time, rather than one deadline for the whole page (grace + size / rate),
//!   closes a drip-feeder soon after the grace whatever the page's size: one that reads at a
//!   fraction f of the rate lasts about grace / (1 − f); a whole-page deadline would let it
//!   hold a 2 MiB page for 35 minutes at the default 1 KiB/s while reading almost nothing;
//! * the idle timeout as the grace means the rule never closes a connection before the idle
//!   timeout could have (a page whose client reads nothing at all is held as long either way),
//!   and it needs no rolling window: one comparison per poll, of numbers the poll has anyway.
//!
//! A reader that keeps up banks what it read ahead: after 1 MiB at link speed it may pause for
//! 1 MiB / rate (17 minutes at 1 KiB/s) plus the grace. A page asked for on a keep-alive connection
//! while the previous one is still in the kernel starts its clock before its first byte can
//! leave; the previous page's remainder (at most a send buffer and a frame) is what it waits
//! for, well inside the grace for any client at the rate.

use std::sync::Mutex;
use std::sync::atomic::{AtomicI32, AtomicU64, Ordering};
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

/// The send buffer asked for every connection (the kernel doubles it for its bookkeeping):
/// enough for a reader that keeps up on a fast link, small beside a page.
pub const SEND_BUFFER: usize = 64 * 1024;

/// How often the send queue of a connection holding a page is looked at.
pub const POLL: Duration = Duration::from_millis(25);

/// How fast a page must leave the socket: its n-th byte acknowledged by `grace` + n /
/// `min_rate` after its first byte was handed to the connection.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct PagePace {
    /// The idle timeout: no page falls behind before it.
    pub grace: Duration,
    /// `--min-page-rate-bytes-per-sec`; 0: no minimum.
    pub min_rate: u64,
}

impl PagePace {
    /// No minimum rate: pages are held until acknowledged, however long that takes.
    pub const OFF: PagePace = PagePace {
        grace: Duration::ZERO,
        min_rate: 0,
    };

    /// Whether a page of `len` bytes, `out` of which have been acknowledged `elapsed` after its
    /// first byte was handed to the connection, is behind: not all out, and more than
    /// `grace` + `out` / `min_rate` gone by (so the next byte is late). Never with no minimum.
    pub fn behind(&self, elapsed: Duration, out: u64, len: u64) -> bool {
        if self.min_rate == 0 || out >= len {
            return false;
        }
        // elapsed > grace + out / rate, in whole microseconds, without floats or overflow.
        let allowed =
            self.grace.as_micros() + u128::from(out) * 1_000_000 / u128::from(self.min_rate);
        elapsed.as_micros() > allowed
    }
}

/// A page that fell behind its [`PagePace`]: what [`Unsent::drain`] returns, for the log.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Behind {
    /// The page's length.
    pub len: u64,
    /// Bytes of it acknowledged.
    pub out: u64,
    /// Since its first byte was handed to the connection.
    pub elapsed: Duration,
}

/// A page on its way: bytes `from..until` of what the connection writes.
struct Page {
    from: u64,
    until: u64,
    /// When its first byte was handed to the connection.
    began: Instant,
    /// Its reservation, once the body has let go of it.
    item: Option<Box<dyn Send>>,
}

/// What a connection holds until its bytes have left the socket.
pub struct Unsent {
    /// The socket's descriptor (-1: none to ask, as in tests over in-memory pipes).
    socket: AtomicI32,
    /// Bytes the connection has handed to the kernel so far.
    written: AtomicU64,
    pages: Mutex<Vec<Page>>,
    added: Notify,
}

impl std::fmt::Debug for Unsent {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Unsent")
            .field("socket", &self.socket.load(Ordering::Relaxed))
            .field("written", &self.written.load(Ordering::Relaxed))
            .field("pages", &self.pages().len())
            .finish()
    }
}

impl Default for Unsent {
    fn default() -> Self {
        Unsent {
            socket: AtomicI32::new(-1),
            written: AtomicU64::new(0),
            pages: Mutex::new(Vec::new()),
            added: Notify::new(),
        }
    }
}

impl Unsent {
    fn pages(&self) -> std::sync::MutexGuard<'_, Vec<Page>> {
        self.pages.lock().unwrap_or_else(|e| e.into_inner())
    }

    fn attached(&self) -> Option<i32> {
        Some(self.socket.load(Ordering::Relaxed)).filter(|s| *s >= 0)
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

    /// A page of `len` bytes starts now: its clock for the minimum rate runs from here. Returns
    /// the count of written bytes at which all of it will have been written (for
    /// [`Unsent::hold_until`]).
    pub fn begin(&self, len: u64) -> u64 {
        let from = self.written();
        let until = from + len;
        if self.attached().is_some() {
            self.pages().push(Page {
                from,
                until,
                began: Instant::now(),
                item: None,
            });
            self.added.notify_one();
        }
        until
    }

    /// Holds `item` until `until` bytes were written and acknowledged (with the page begun at
    /// `until`'s [`Unsent::begin`], if any); drops it at once when there is no socket to ask.
    pub fn hold_until(&self, until: u64, item: Box<dyn Send>) {
        if self.attached().is_none() {
            return;
        }
        let mut pages = self.pages();
        match pages
            .iter_mut()
            .find(|p| p.until == until && p.item.is_none())
        {
            Some(page) => page.item = Some(item),
            None => pages.push(Page {
                from: until,
                until,
                began: Instant::now(),
                item: Some(item),
            }),
        }
        drop(pages);
        self.added.notify_one();
    }

    /// Bytes the client has acknowledged, and the send queue's length.
    fn acknowledged(&self, socket: i32) -> (u64, usize) {
        // `written` first: a write between the two only makes the queue look longer, so the
        // acknowledged count is never overstated.
        let written = self.written();
        let queued = send_queue(socket);
        (written.saturating_sub(queued as u64), queued)
    }

    /// Gives back what has left the socket now; returns the send queue's length.
    pub fn settle(&self) -> usize {
        let Some(socket) = self.attached() else {
            return 0;
        };
        let (acked, queued) = self.acknowledged(socket);
        self.pages().retain(|p| p.until > acked);
        queued
    }

    /// Gives back the pages the client has acknowledged (`acked` bytes), and returns the first
    /// of the others that is behind `pace`, if any.
    fn settle_paced(&self, acked: u64, pace: PagePace) -> Option<Behind> {
        let mut pages = self.pages();
        pages.retain(|p| p.until > acked);
        let now = Instant::now();
        pages.iter().find_map(|p| {
            let len = p.until - p.from;
            let out = acked.saturating_sub(p.from).min(len);
            let elapsed = now.saturating_duration_since(p.began);
            pace.behind(elapsed, out, len)
                .then_some(Behind { len, out, elapsed })
        })
    }

    /// Gives back everything held and forgets the socket (the connection is gone: its
    /// descriptor's number may soon be another socket's).
    pub fn release(&self) {
        self.socket.store(-1, Ordering::Relaxed);
        self.pages().clear();
    }

    /// Runs for the connection's life: while a page is on its way, looks at the send queue
    /// every [`POLL`], gives back what has left, and calls `progress` when the client
    /// acknowledged more. Returns only when a page fell behind `pace`, after setting the socket
    /// to reset when closed: the caller then closes the connection.
    pub async fn drain(&self, pace: PagePace, progress: impl Fn()) -> Behind {
        let mut last = 0;
        loop {
            if self.pages().is_empty() {
                self.added.notified().await;
                continue;
            }
            let Some(socket) = self.attached() else {
                self.release();
                continue;
            };
            while !self.pages().is_empty() {
                let (acked, _) = self.acknowledged(socket);
                if acked > last {
                    progress();
                    last = acked;
                }
                if let Some(late) = self.settle_paced(acked, pace) {
                    reset_on_close(socket);
                    return late;
                }
                tokio::time::sleep(POLL).await;
            }
        }
    }
}

/// Bytes in the socket's send queue not yet acknowledged by the peer (`SIOCOUTQ`); 0 when
/// the kernel cannot tell.
fn send_queue(socket: i32) -> usize {
    queue_length(socket).unwrap_or(0)
}

/// Bytes in the socket's send queue not yet acknowledged by the peer (`SIOCOUTQ`); `None` when
/// the kernel cannot tell.
#[cfg(target_os = "linux")]
pub(super) fn queue_length(socket: i32) -> Option<usize> {
    let mut queued: libc::c_int = 0;
    // SAFETY: `socket` is the connection's open descriptor (the connection's task owns the
    // socket for as long as this may be called), and TIOCOUTQ (= SIOCOUTQ) writes one int.
    let result = unsafe { libc::ioctl(socket, libc::TIOCOUTQ, &mut queued) };
    (result >= 0).then(|| queued.max(0) as usize)
}

#[cfg(not(target_os = "linux"))]
pub(super) fn queue_length(_socket: i32) -> Option<usize> {
    None
}

/// Makes the socket's close a reset (`SO_LINGER` 0): the kernel drops what it still holds for
/// the client at once instead of trickling it out after the close. Best effort.
fn reset_on_close(socket: i32) {
    // SAFETY: `socket` is the connection's open descriptor, kept open by the connection's task
    // while `drain` runs; it is only borrowed for one `setsockopt`.
    let fd = unsafe { std::os::fd::BorrowedFd::borrow_raw(socket) };
    if let Err(e) = socket2::SockRef::from(&fd).set_linger(Some(Duration::ZERO)) {
        tracing::debug!(error = %e, "could not set a slow reader's socket to reset");
    }
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

        let drain = unsent.drain(PagePace::OFF, || {});
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
            _ = drain => unreachable!("drain runs for the connection's life without a minimum rate"),
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

    #[tokio::test]
    async fn a_page_its_client_does_not_read_falls_behind_and_resets_its_socket() {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let client =
            socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
        client.set_recv_buffer_size(1024).unwrap();
        client
            .connect(&listener.local_addr().unwrap().into())
            .unwrap();
        let (server, _) = listener.accept().await.unwrap();
        socket2::SockRef::from(&server)
            .set_send_buffer_size(SEND_BUFFER)
            .unwrap();
        let unsent = Unsent::default();
        unsent.attach(server.as_raw_fd());
        // A 1 MiB page, of which the kernel takes what fits; the client reads nothing.
        let len = 1u64 << 20;
        let until = unsent.begin(len);
        let page = vec![7u8; 64 << 10];
        while let Ok(n) = server.try_write(&page) {
            unsent.wrote(n);
        }
        let given = Arc::new(AtomicBool::new(false));
        unsent.hold_until(until, Box::new(Given(given.clone())));
        let pace = PagePace {
            grace: Duration::from_millis(200),
            min_rate: 1 << 20,
        };
        let behind = tokio::time::timeout(Duration::from_secs(10), unsent.drain(pace, || {}))
            .await
            .expect("a page nobody reads falls behind soon after the grace");
        assert_eq!(behind.len, len);
        assert!(behind.out < len, "{behind:?}");
        assert!(behind.elapsed >= pace.grace, "{behind:?}");
        assert_eq!(
            socket2::SockRef::from(&server).linger().unwrap(),
            Some(Duration::ZERO),
            "closed with a reset"
        );
        assert!(
            !given.load(Ordering::SeqCst),
            "held until the connection closes"
        );
        unsent.release();
        assert!(given.load(Ordering::SeqCst));
        drop(client);
    }
}

#[cfg(test)]
mod pace {
    use super::*;

    const fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    #[test]
    fn no_minimum_never_falls_behind() {
        assert!(!PagePace::OFF.behind(Duration::from_secs(86_400), 0, 1 << 20));
    }

    #[test]
    fn nothing_falls_behind_within_the_grace_or_once_all_out() {
        let pace = PagePace {
            grace: ms(60_000),
            min_rate: 1024,
        };
        assert!(!pace.behind(ms(60_000), 0, 1 << 20));
        assert!(pace.behind(ms(60_001), 0, 1 << 20));
        assert!(!pace.behind(Duration::from_secs(86_400), 1 << 20, 1 << 20));
    }

    #[test]
    fn each_byte_out_earns_one_over_the_rate() {
        let pace = PagePace {
            grace: ms(1_000),
            min_rate: 1_000,
        };
        // 500 bytes out: the 501st is due 1 s + 500 ms after the first was handed over.
        assert!(!pace.behind(ms(1_500), 500, 2_000));
        assert!(pace.behind(ms(1_501), 500, 2_000));
        // A reader exactly at the rate from the start is never behind, to the page's end.
        for t in (0..=2_000u64).step_by(50) {
            assert!(!pace.behind(ms(t), t, 2_000), "at {t} ms");
        }
    }

    #[test]
    fn a_drip_feeder_is_behind_soon_after_the_grace_whatever_the_page() {
        // At the defaults (idle timeout 60 s, 1 KiB/s), a client acknowledging 100 bytes a
        // second (enough to beat any idle timeout) is behind after grace / (1 - 100/1024),
        // about 66.5 s, for a 2 MiB page as for a 7.5 MB one (a deadline for the whole page
        // would have let it hold the 2 MiB one for 35 minutes).
        let pace = PagePace {
            grace: ms(60_000),
            min_rate: 1024,
        };
        for len in [2u64 << 20, 7_541_918] {
            let cut = (0..10_000u64)
                .map(|tenth| ms(tenth * 100))
                .find(|t| pace.behind(*t, t.as_millis() as u64 / 10, len))
                .expect("cut at some point");
            assert!(
                cut > ms(66_000) && cut < ms(67_000),
                "cut after {cut:?} for {len} bytes"
            );
        }
    }

    #[test]
    fn extreme_figures_do_not_overflow() {
        let pace = PagePace {
            grace: Duration::MAX,
            min_rate: 1,
        };
        assert!(!pace.behind(Duration::MAX, u64::MAX - 1, u64::MAX));
        let pace = PagePace {
            grace: Duration::ZERO,
            min_rate: u64::MAX,
        };
        assert!(pace.behind(ms(1), 0, 1));
    }
}
