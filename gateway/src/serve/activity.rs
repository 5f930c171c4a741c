//! The idle timeout of one connection: when did a byte last move, either way?
//!
//! hyper bounds how long a connection may take to send its headers, and the write route bounds
//! how long a body may take, but nothing in hyper notices a connection that stopped moving
//! half-way: an upload that stalls, or a client that asked for a page and never reads it (its
//! answer then sits in memory for as long as the socket stays open). [`Tracked`] wraps the
//! socket and stamps [`Activity`] on every read or write that moves bytes; [`Activity::idle`]
//! resolves once nothing moved for the timeout, and the connection is then dropped.
//!
//! A change stream needs more: its heartbeats are accepted by the kernel as long as the socket's
//! send buffer has room, whether or not the client reads, so they would keep a stream that
//! nobody reads "active" for hours. While a connection carries a stream ([`Activity::stream`]),
//! its send buffer is shrunk to [`STREAM_SEND_BUFFER`] (so a client that stops reading fills it
//! soon), and [`Activity::stalled`] resolves once a write has waited for room in it for the
//! stream's write timeout: the connection is then dropped, and the stream with it. A write that
//! waits is no movement: only bytes the kernel takes count as activity. On Linux the socket's
//! `TCP_USER_TIMEOUT` is set to the same timeout, so the kernel itself gives up once the
//! client's receive window stayed closed (it stopped reading and its buffer is full) or the
//! bytes sent stayed unacknowledged (it vanished) that long, before our buffer is full.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::Notify;
use tokio::time::Instant;

use super::unsent::{Behind, PagePace, Unsent};

/// The send buffer asked for a connection that carries a change stream (the kernel doubles
/// it for its bookkeeping): room for hundreds of notifications, so a reader that keeps up never
/// waits, yet full soon once a client stops reading.
pub const STREAM_SEND_BUFFER: usize = 16 * 1024;

/// `blocked_ms` when no write is waiting.
const NOT_BLOCKED: u64 = u64::MAX;

#[derive(Debug)]
struct Stamp {
    base: Instant,
    /// Milliseconds from `base` to the last movement.
    last_ms: AtomicU64,
    /// Milliseconds from `base` to the first write that found no room and has not been
    /// followed by one that did ([`NOT_BLOCKED`] when none waits).
    blocked_ms: AtomicU64,
    /// Change streams served on the connection now (0 or 1 on HTTP/1.1).
    streams: AtomicUsize,
    /// The write timeout of the stream served, in milliseconds.
    write_timeout_ms: AtomicU64,
    /// The send buffer the socket should be given at the next write (0: leave it).
    send_buffer: AtomicUsize,
    /// Woken when a stream starts on the connection.
    stream_started: Notify,
    /// What the connection holds until its bytes have left the socket.
    unsent: Unsent,
}

/// When a connection last moved a byte.
#[derive(Debug, Clone)]
pub struct Activity(Arc<Stamp>);

impl Activity {
    /// Activity stamped now.
    pub fn new() -> Self {
        Activity(Arc::new(Stamp {
            base: Instant::now(),
            last_ms: AtomicU64::new(0),
            blocked_ms: AtomicU64::new(NOT_BLOCKED),
            streams: AtomicUsize::new(0),
            write_timeout_ms: AtomicU64::new(u64::MAX),
            send_buffer: AtomicUsize::new(0),
            stream_started: Notify::new(),
            unsent: Unsent::default(),
        }))
    }

    /// What the connection holds until its bytes have left the socket.
    pub fn unsent(&self) -> &Unsent {
        &self.0.unsent
    }

    /// Runs for the connection's life: gives back what the connection held once its bytes
    /// have left the socket, and counts bytes the client acknowledged (it reads) as movement.
    /// Returns when a page fell behind `pace`: the connection must then be closed
    /// ([`Unsent::drain`]).
    pub async fn drain(&self, pace: PagePace) -> Behind {
        self.0.unsent.drain(pace, || self.touch()).await
    }

    /// The connection now carries a change stream whose writes must find room within
    /// `write_timeout`, until the returned guard is dropped; its send buffer is shrunk to
    /// [`STREAM_SEND_BUFFER`] before the next byte is written.
    pub fn stream(&self, write_timeout: Duration) -> Streaming {
        let ms = (write_timeout.as_millis() as u64).max(1);
        self.0.write_timeout_ms.store(ms, Ordering::Relaxed);
        self.0
            .send_buffer
            .store(STREAM_SEND_BUFFER, Ordering::Relaxed);
        self.0.streams.fetch_add(1, Ordering::AcqRel);
        self.0.stream_started.notify_waiters();
        Streaming(self.clone())
    }

    fn blocked(&self) {
        let now = self.now_ms();
        let _ = self.0.blocked_ms.compare_exchange(
            NOT_BLOCKED,
            now,
            Ordering::Relaxed,
            Ordering::Relaxed,
        );
    }

    fn moved(&self) {
        self.0.blocked_ms.store(NOT_BLOCKED, Ordering::Relaxed);
        self.touch();
    }

    /// Resolves once a write of a change stream has waited for room for the stream's write
    /// timeout (never while the connection carries no stream). One timer per stream, woken
    /// once per timeout: asleep for the timeout when nothing waits, else until the waiting
    /// write's deadline.
    pub async fn stalled(&self) {
        loop {
            let started = self.0.stream_started.notified();
            if self.0.streams.load(Ordering::Acquire) == 0 {
                started.await;
                continue;
            }
            let limit = self.0.write_timeout_ms.load(Ordering::Relaxed);
            let blocked = self.0.blocked_ms.load(Ordering::Relaxed);
            let now = self.now_ms();
            let wait = if blocked == NOT_BLOCKED {
                limit
            } else {
                let due = blocked.saturating_add(limit);
                if now >= due {
                    return;
                }
                due - now
            };
            tokio::time::sleep(Duration::from_millis(wait)).await;
        }
    }

    fn now_ms(&self) -> u64 {
        self.0.base.elapsed().as_millis() as u64
    }

    fn touch(&self) {
        self.0.last_ms.store(self.now_ms(), Ordering::Relaxed);
    }

    /// Resolves once nothing moved for `limit`.
    pub async fn idle(&self, limit: Duration) {
        let limit = limit.as_millis() as u64;
        loop {
            let due = self.0.last_ms.load(Ordering::Relaxed).saturating_add(limit);
            let now = self.now_ms();
            if now >= due {
                return;
            }
            tokio::time::sleep(Duration::from_millis(due - now)).await;
        }
    }
}

/// A change stream served on a connection (see [`Activity::stream`]); ends it when dropped.
#[derive(Debug)]
pub struct Streaming(Activity);

impl Drop for Streaming {
    fn drop(&mut self) {
        self.0.0.streams.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A socket that can be set up for a change stream ([`Activity::stream`]).
pub trait SendBuffer {
    /// Asks the kernel for a send buffer of `bytes`, and to give up on the connection when
    /// bytes sent stay unacknowledged, or the peer's receive window stays closed, for
    /// `timeout` (`TCP_USER_TIMEOUT`, where there is one). Best effort.
    fn set_send_buffer(&self, bytes: usize, timeout: Duration);
}

impl SendBuffer for tokio::net::TcpStream {
    fn set_send_buffer(&self, bytes: usize, timeout: Duration) {
        let socket = socket2::SockRef::from(self);
        if let Err(e) = socket.set_send_buffer_size(bytes) {
            tracing::debug!(error = %e, "could not set a stream's send buffer");
        }
        #[cfg(any(target_os = "linux", target_os = "android"))]
        if let Err(e) = socket.set_tcp_user_timeout(Some(timeout)) {
            tracing::debug!(error = %e, "could not set a stream's TCP user timeout");
        }
        #[cfg(not(any(target_os = "linux", target_os = "android")))]
        let _ = timeout;
    }
}

impl SendBuffer for tokio::io::DuplexStream {
    fn set_send_buffer(&self, _bytes: usize, _timeout: Duration) {}
}

impl Default for Activity {
    fn default() -> Self {
        Self::new()
    }
}

/// A socket that stamps its [`Activity`] whenever bytes move.
#[derive(Debug)]
pub struct Tracked<S> {
    inner: S,
    activity: Activity,
}

impl<S> Tracked<S> {
    /// `inner`, stamping `activity`.
    pub fn new(inner: S, activity: Activity) -> Self {
        Tracked { inner, activity }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Tracked<S> {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        let before = buf.filled().len();
        let result = Pin::new(&mut self.inner).poll_read(cx, buf);
        if matches!(result, Poll::Ready(Ok(()))) && buf.filled().len() > before {
            self.activity.touch();
        }
        result
    }
}

impl<S: SendBuffer> Tracked<S> {
    /// Applies a send buffer asked for by [`Activity::stream`], once.
    fn tune(&self) {
        if self.activity.0.send_buffer.load(Ordering::Relaxed) != 0 {
            let bytes = self.activity.0.send_buffer.swap(0, Ordering::Relaxed);
            if bytes != 0 {
                let timeout = self.activity.0.write_timeout_ms.load(Ordering::Relaxed);
                self.inner
                    .set_send_buffer(bytes, Duration::from_millis(timeout));
            }
        }
    }

    /// Stamps a write's result: bytes taken are movement, a write without room starts (or
    /// continues) a wait.
    fn stamp(&self, result: &Poll<io::Result<usize>>) {
        match result {
            Poll::Ready(Ok(n)) if *n > 0 => {
                self.activity.0.unsent.wrote(*n);
                self.activity.moved()
            }
            Poll::Pending => self.activity.blocked(),
            _ => {}
        }
    }
}

impl<S: AsyncWrite + SendBuffer + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.tune();
        let result = Pin::new(&mut self.inner).poll_write(cx, buf);
        self.stamp(&result);
        result
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.tune();
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        self.stamp(&result);
        result
    }

    fn is_write_vectored(&self) -> bool {
        self.inner.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};

    #[tokio::test(start_paused = true)]
    async fn idle_waits_for_the_last_movement() {
        let (a, mut b) = tokio::io::duplex(64);
        let activity = Activity::new();
        let mut tracked = Tracked::new(a, activity.clone());
        let idle = tokio::spawn({
            let activity = activity.clone();
            async move { activity.idle(Duration::from_millis(1_000)).await }
        });
        tokio::time::sleep(Duration::from_millis(600)).await;
        b.write_all(b"x").await.unwrap();
        let mut byte = [0u8];
        tracked.read_exact(&mut byte).await.unwrap();
        tokio::time::sleep(Duration::from_millis(600)).await;
        assert!(!idle.is_finished(), "a byte moved 600 ms ago");
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(idle.is_finished());
    }

    #[tokio::test(start_paused = true)]
    async fn a_stream_write_that_finds_no_room_is_a_stall_not_activity() {
        let (a, mut b) = tokio::io::duplex(8);
        let activity = Activity::new();
        let mut tracked = Tracked::new(a, activity.clone());
        let stalled = tokio::spawn({
            let activity = activity.clone();
            async move { activity.stalled().await }
        });
        let idle = tokio::spawn({
            let activity = activity.clone();
            async move { activity.idle(Duration::from_millis(5_000)).await }
        });
        tokio::time::sleep(Duration::from_millis(3_000)).await;
        assert!(!stalled.is_finished(), "no stream yet: never stalled");
        let guard = activity.stream(Duration::from_millis(1_000));
        // The reader takes 8 bytes and then stops: the rest waits for room.
        let writer = tokio::spawn(async move {
            let _ = tracked.write_all(&[0u8; 64]).await;
        });
        let mut first = [0u8; 8];
        b.read_exact(&mut first).await.unwrap();
        tokio::time::sleep(Duration::from_millis(900)).await;
        assert!(!stalled.is_finished(), "waiting 900 ms of a 1 s bound");
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(stalled.is_finished(), "a write waited past the bound");
        assert!(
            !idle.is_finished(),
            "the idle timeout runs from the last byte taken"
        );
        tokio::time::sleep(Duration::from_millis(4_000)).await;
        assert!(idle.is_finished(), "a waiting write kept nothing alive");
        drop((guard, writer));
    }
}
