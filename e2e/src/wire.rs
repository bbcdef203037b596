//! What a fake backend puts on the wire, below HTTP.
//!
//! Most modes say what to answer (a status, a delay). Two break the bytes themselves, which no
//! answer can say: `trickle` sends a response one byte at a time, a period apart, status line
//! included, and `garbage` sends bytes that are not HTTP at all. Both must also hit the
//! connections a proxy already holds open, as a server turning bad mid-traffic does, so they live
//! in the stream every connection writes its responses to, which looks at the mode on each write.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{ready, Context, Poll};

use tokio::io::{AsyncRead, AsyncWrite, ReadBuf};
use tokio::sync::watch;
use tokio::time::{sleep, Sleep};

use crate::mode::Mode;

/// What `garbage` sends instead of a response: a TLS alert's first bytes and some text, no
/// status line, as a server speaking another protocol on the port would answer.
pub const GARBAGE: &[u8] = b"\x15\x03\x03\x00\x02\x02\x50garbage instead of a status line\r\n\r\n";

/// One connection's stream, writing as the backend's current mode says.
pub struct Wire<S> {
    inner: S,
    mode: watch::Receiver<Mode>,
    /// In `trickle`: not before this fires does the next byte go out.
    pause: Option<Pin<Box<Sleep>>>,
    /// In `garbage`: how much of [`GARBAGE`] this connection has sent; once all of it is out,
    /// whatever the server writes is dropped.
    garbage_sent: usize,
}

impl<S> Wire<S> {
    /// Wraps a connection's stream; `mode` follows the backend's mode.
    pub fn new(inner: S, mode: watch::Receiver<Mode>) -> Self {
        Wire {
            inner,
            mode,
            pause: None,
            garbage_sent: 0,
        }
    }
}

impl<S: AsyncRead + Unpin> AsyncRead for Wire<S> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_read(cx, buf)
    }
}

impl<S: AsyncWrite + Unpin> AsyncWrite for Wire<S> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        let mode = this.mode.borrow().clone();
        match mode {
            Mode::Trickle(period) => {
                if let Some(pause) = this.pause.as_mut() {
                    ready!(pause.as_mut().poll(cx));
                    this.pause = None;
                }
                let Some(byte) = buf.get(..1) else {
                    return Poll::Ready(Ok(0));
                };
                let written = ready!(Pin::new(&mut this.inner).poll_write(cx, byte))?;
                this.pause = Some(Box::pin(sleep(period)));
                Poll::Ready(Ok(written))
            }
            Mode::Garbage => {
                while let Some(rest) = GARBAGE.get(this.garbage_sent..).filter(|r| !r.is_empty()) {
                    let written = ready!(Pin::new(&mut this.inner).poll_write(cx, rest))?;
                    if written == 0 {
                        return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
                    }
                    this.garbage_sent += written;
                }
                Poll::Ready(Ok(buf.len()))
            }
            _ => Pin::new(&mut this.inner).poll_write(cx, buf),
        }
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().inner).poll_shutdown(cx)
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    use tokio::net::TcpStream;
    use tokio::time::{timeout, Instant};

    use super::GARBAGE;
    use crate::mode::Mode;
    use crate::upstream::FakeUpstream;

    const REQUEST: &[u8] = b"GET / HTTP/1.1\r\nHost: app\r\n\r\n";

    /// What arrives on `stream` within `within`, or until `done` says enough.
    async fn read_for(stream: &mut TcpStream, within: Duration, done: &[u8]) -> Vec<u8> {
        let deadline = Instant::now() + within;
        let mut got = Vec::new();
        let mut buf = [0; 1024];
        while !got.ends_with(done) || done.is_empty() {
            match timeout(deadline - Instant::now(), stream.read(&mut buf)).await {
                Ok(Ok(n)) if n > 0 => got.extend_from_slice(&buf[..n]),
                _ => break,
            }
        }
        got
    }

    /// A connection to `app` on which one `GET /` was answered in full (`ok` mode).
    async fn answered_once(app: &FakeUpstream) -> TcpStream {
        let mut stream = TcpStream::connect(app.addr()).await.unwrap();
        stream.write_all(REQUEST).await.unwrap();
        let first = read_for(&mut stream, Duration::from_secs(2), b"app2 200\n").await;
        assert!(first.starts_with(b"HTTP/1.1 200"), "{first:?}");
        stream
    }

    #[tokio::test]
    async fn a_trickling_backend_sends_a_response_byte_by_byte_also_on_a_connection_already_open() {
        let app = FakeUpstream::start("app2", Mode::Ok).await.unwrap();
        let mut open = answered_once(&app).await;
        app.set_mode(Mode::Trickle(Duration::from_millis(200)));
        open.write_all(REQUEST).await.unwrap();
        let mut fresh = TcpStream::connect(app.addr()).await.unwrap();
        fresh.write_all(REQUEST).await.unwrap();
        for stream in [&mut open, &mut fresh] {
            let got = read_for(stream, Duration::from_millis(500), b"").await;
            // A byte at once, then one per 200 ms: the status line is not even whole.
            assert!(!got.is_empty() && got.len() < 8, "{got:?}");
            assert!(b"HTTP/1.1 200".starts_with(&got), "{got:?}");
        }
    }

    #[tokio::test]
    async fn a_garbage_backend_answers_bytes_that_are_not_http_also_on_a_connection_already_open() {
        let app = FakeUpstream::start("app2", Mode::Ok).await.unwrap();
        let mut open = answered_once(&app).await;
        app.set_mode(Mode::Garbage);
        open.write_all(REQUEST).await.unwrap();
        let mut fresh = TcpStream::connect(app.addr()).await.unwrap();
        fresh.write_all(REQUEST).await.unwrap();
        for stream in [&mut open, &mut fresh] {
            let got = read_for(stream, Duration::from_secs(2), GARBAGE).await;
            assert_eq!(got, GARBAGE);
        }
        assert_eq!(app.counts().requests, 3);
    }
}
