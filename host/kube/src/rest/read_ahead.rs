//! Large reads under TLS. rustls takes at most 4 KiB of ciphertext from the socket per read, so
//! the watch events and answers of one busy moment (tens of KiB on the one HTTP/2 connection)
//! were read in that many `recvfrom` calls, most of them full. Under a TLS connection the socket
//! is read here in blocks of [`BLOCK`] and rustls is served from them; a plain connection
//! (`http://`) is read by hyper's own adaptive buffer and passes through.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use hyper::Uri;
use hyper::rt::{Read, ReadBuf, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection};
use tower_service::Service;

/// The most read from the socket at once: what a burst of events and answers comes to.
const BLOCK: usize = 64 << 10;

/// A connector whose `https://` connections are [`ReadAhead`].
#[derive(Clone)]
pub(crate) struct ReadAheadConnector<C>(pub(crate) C);

impl<C> Service<Uri> for ReadAheadConnector<C>
where
    C: Service<Uri>,
    C::Future: Send + 'static,
{
    type Response = ReadAhead<C::Response>;
    type Error = C::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let ahead = uri.scheme() == Some(&hyper::http::uri::Scheme::HTTPS);
        let connecting = self.0.call(uri);
        Box::pin(async move { Ok(ReadAhead::new(connecting.await?, ahead)) })
    }
}

/// A connection read in large blocks, handed on in the sizes asked for.
pub(crate) struct ReadAhead<T> {
    io: T,
    /// Read ahead (empty: the connection passes reads through).
    block: Box<[u8]>,
    /// `block[start..end]` is read and not yet handed on.
    start: usize,
    end: usize,
}

impl<T> ReadAhead<T> {
    pub(crate) fn new(io: T, ahead: bool) -> Self {
        Self {
            io,
            block: if ahead {
                vec![0; BLOCK].into_boxed_slice()
            } else {
                Box::default()
            },
            start: 0,
            end: 0,
        }
    }
}

impl<T: Read + Unpin> Read for ReadAhead<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        mut buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.block.is_empty() {
            return Pin::new(&mut this.io).poll_read(cx, buf);
        }
        if buf.remaining() == 0 {
            // Nothing can be handed on: reading ahead now would make the empty answer look
            // like the end of the stream.
            return Poll::Ready(Ok(()));
        }
        if this.start == this.end {
            let mut block = ReadBuf::new(&mut this.block);
            ready!(Pin::new(&mut this.io).poll_read(cx, block.unfilled()))?;
            // Zero bytes is the end of the stream, and is handed on as such.
            this.start = 0;
            this.end = block.filled().len();
        }
        let n = (this.end - this.start).min(buf.remaining());
        buf.put_slice(&this.block[this.start..this.start + n]);
        this.start += n;
        Poll::Ready(Ok(()))
    }
}

impl<T: Write + Unpin> Write for ReadAhead<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write(cx, data)
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        Pin::new(&mut self.get_mut().io).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_shutdown(cx)
    }
}

impl<T: Connection> Connection for ReadAhead<T> {
    fn connected(&self) -> Connected {
        self.io.connected()
    }
}

#[cfg(test)]
mod tests {
    use std::collections::VecDeque;

    use super::*;

    /// A connection that returns its chunks one read at a time, and counts the reads.
    struct Chunks {
        chunks: VecDeque<Vec<u8>>,
        reads: usize,
    }

    impl Read for Chunks {
        fn poll_read(
            mut self: Pin<&mut Self>,
            _: &mut Context<'_>,
            mut buf: ReadBufCursor<'_>,
        ) -> Poll<io::Result<()>> {
            self.reads += 1;
            if let Some(mut chunk) = self.chunks.pop_front() {
                let n = chunk.len().min(buf.remaining());
                buf.put_slice(&chunk[..n]);
                if n < chunk.len() {
                    self.chunks.push_front(chunk.split_off(n));
                }
            }
            Poll::Ready(Ok(()))
        }
    }

    /// Reads `size` bytes at most, as rustls does; empty at the end of the stream.
    fn read(io: &mut ReadAhead<Chunks>, size: usize) -> Vec<u8> {
        let mut cx = Context::from_waker(std::task::Waker::noop());
        let mut storage = vec![0u8; size];
        let mut buf = ReadBuf::new(&mut storage);
        match Pin::new(io).poll_read(&mut cx, buf.unfilled()) {
            Poll::Ready(Ok(())) => buf.filled().to_vec(),
            other => panic!("read: {other:?}"),
        }
    }

    fn connection(chunks: &[&[u8]], ahead: bool) -> ReadAhead<Chunks> {
        ReadAhead::new(
            Chunks {
                chunks: chunks.iter().map(|c| c.to_vec()).collect(),
                reads: 0,
            },
            ahead,
        )
    }

    #[test]
    fn what_arrived_together_is_read_from_the_socket_once_and_handed_on_whole_in_order() {
        let arrived: Vec<u8> = (0..10_000u32).map(|i| (i % 251) as u8).collect();
        let mut io = connection(&[&arrived, b"later"], true);
        let mut handed = Vec::new();
        while handed.len() < arrived.len() {
            handed.extend(read(&mut io, 4096));
        }
        assert_eq!(handed, arrived);
        assert_eq!(io.io.reads, 1, "one socket read for 10,000 bytes");
        // A read with no room reads nothing from the socket.
        assert!(read(&mut io, 0).is_empty());
        assert_eq!(io.io.reads, 1);
        assert_eq!(read(&mut io, 4096), b"later");
        assert_eq!(io.io.reads, 2);
        // The end of the stream is a read of nothing.
        assert!(read(&mut io, 4096).is_empty());
    }

    #[test]
    fn a_plain_connection_reads_straight_through() {
        let mut io = connection(&[b"HTTP/1.1 200 OK\r\n"], false);
        assert_eq!(read(&mut io, 4), b"HTTP");
        assert_eq!(io.io.reads, 1);
        assert_eq!(read(&mut io, 64), b"/1.1 200 OK\r\n");
        assert_eq!(io.io.reads, 2);
    }
}
