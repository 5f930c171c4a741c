//! The idle timeout of one connection: when did a byte last move, either way?
//!
//! hyper bounds how long a connection may take to send its headers, and the write route bounds
//! how long a body may take, but nothing in hyper notices a connection that stopped moving
//! half-way: an upload that stalls, or a client that asked for a page and never reads it (its
//! answer then sits in memory for as long as the socket stays open). [`Tracked`] wraps the
//! socket and stamps [`Activity`] on every read or write that moves bytes; [`Activity::idle`]
//! resolves once nothing moved for the timeout, and the connection is then dropped.

use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::time::Instant;

#[derive(Debug)]
struct Stamp {
    base: Instant,
    /// Milliseconds from `base` to the last movement.
    last_ms: AtomicU64,
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
        }))
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

impl<S: AsyncWrite + Unpin> AsyncWrite for Tracked<S> {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write(cx, buf);
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
        result
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let result = Pin::new(&mut self.inner).poll_write_vectored(cx, bufs);
        if matches!(result, Poll::Ready(Ok(n)) if n > 0) {
            self.activity.touch();
        }
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
}
