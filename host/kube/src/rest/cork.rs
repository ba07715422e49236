//! Coalesced writes on an HTTP/2 connection. Every request the reconciles make shares one
//! HTTP/2 connection, whose task writes and flushes as soon as a request wakes it: one TLS
//! record and one `writev` per request, the syscall and the loopback or NIC path paid each time.
//! A corked connection holds a flush back for one turn of the runtime's run queue, so that the
//! other tasks ready to send (reconciles woken by their answers) add their frames first, and
//! the connection writes them all at once. HTTP/1.1 carries one request at a time per
//! connection, with nothing to coalesce: its connections are not corked.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::task::{Context, Poll, ready};

use hyper::Uri;
use hyper::rt::{Read, ReadBufCursor, Write};
use hyper_util::client::legacy::connect::{Connected, Connection};
use tower_service::Service;

/// Beyond this many bytes held, a write goes through at once: a large body gains nothing from
/// waiting, and the buffer stays small.
const MAX_HELD: usize = 64 << 10;

/// A connector whose HTTP/2 connections are [`Corked`].
#[derive(Clone)]
pub(crate) struct CorkConnector<C>(pub(crate) C);

impl<C> Service<Uri> for CorkConnector<C>
where
    C: Service<Uri>,
    C::Response: Connection + Send + 'static,
    C::Future: Send + 'static,
{
    type Response = Corked<C::Response>;
    type Error = C::Error;
    type Future = Pin<Box<dyn Future<Output = Result<Self::Response, Self::Error>> + Send>>;

    fn poll_ready(&mut self, cx: &mut Context<'_>) -> Poll<Result<(), Self::Error>> {
        self.0.poll_ready(cx)
    }

    fn call(&mut self, uri: Uri) -> Self::Future {
        let connecting = self.0.call(uri);
        Box::pin(async move {
            let io = connecting.await?;
            // ALPN has been negotiated by now: only an HTTP/2 connection multiplexes requests.
            let corked = io.connected().is_negotiated_h2();
            Ok(Corked::new(io, corked))
        })
    }
}

/// A connection whose writes are held until a flush that has waited one turn of the run queue.
pub(crate) struct Corked<T> {
    io: T,
    corked: bool,
    held: Vec<u8>,
    /// How much of `held` the connection has taken.
    written: usize,
    /// The flush now due has already let the other ready tasks run once.
    yielded: bool,
}

impl<T> Corked<T> {
    pub(crate) fn new(io: T, corked: bool) -> Self {
        Self {
            io,
            corked,
            held: Vec::new(),
            written: 0,
            yielded: false,
        }
    }
}

impl<T: Write + Unpin> Corked<T> {
    /// Writes out what is held; pending until the connection has taken all of it.
    fn poll_drain(&mut self, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        while self.written < self.held.len() {
            let n = ready!(Pin::new(&mut self.io).poll_write(cx, &self.held[self.written..]))?;
            if n == 0 {
                return Poll::Ready(Err(io::ErrorKind::WriteZero.into()));
            }
            self.written += n;
        }
        self.held.clear();
        self.written = 0;
        Poll::Ready(Ok(()))
    }

    /// Makes room for `incoming` more bytes: drains first when they would not fit.
    fn poll_room(&mut self, cx: &mut Context<'_>, incoming: usize) -> Poll<io::Result<()>> {
        if self.held.len() + incoming > MAX_HELD {
            ready!(self.poll_drain(cx))?;
        }
        Poll::Ready(Ok(()))
    }
}

impl<T: Read + Unpin> Read for Corked<T> {
    fn poll_read(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: ReadBufCursor<'_>,
    ) -> Poll<io::Result<()>> {
        Pin::new(&mut self.get_mut().io).poll_read(cx, buf)
    }
}

impl<T: Write + Unpin> Write for Corked<T> {
    fn poll_write(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        data: &[u8],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if !this.corked {
            return Pin::new(&mut this.io).poll_write(cx, data);
        }
        ready!(this.poll_room(cx, data.len()))?;
        if data.len() > MAX_HELD {
            return Pin::new(&mut this.io).poll_write(cx, data);
        }
        this.held.extend_from_slice(data);
        Poll::Ready(Ok(data.len()))
    }

    fn poll_write_vectored(
        self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        let this = self.get_mut();
        if !this.corked {
            return Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        }
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        ready!(this.poll_room(cx, total))?;
        if total > MAX_HELD {
            return Pin::new(&mut this.io).poll_write_vectored(cx, bufs);
        }
        for buf in bufs {
            this.held.extend_from_slice(buf);
        }
        Poll::Ready(Ok(total))
    }

    fn is_write_vectored(&self) -> bool {
        // Held slices are copied together whatever their number.
        self.corked || self.io.is_write_vectored()
    }

    fn poll_flush(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        if this.corked && this.written < this.held.len() {
            if !this.yielded {
                // Woken by itself, the connection's task goes to the back of the run queue
                // (tokio reschedules a self-woken task as a yield): the tasks ahead of it
                // add their frames before it writes.
                this.yielded = true;
                cx.waker().wake_by_ref();
                return Poll::Pending;
            }
            ready!(this.poll_drain(cx))?;
        }
        this.yielded = false;
        Pin::new(&mut this.io).poll_flush(cx)
    }

    fn poll_shutdown(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        let this = self.get_mut();
        ready!(this.poll_drain(cx))?;
        Pin::new(&mut this.io).poll_shutdown(cx)
    }
}

impl<T: Connection> Connection for Corked<T> {
    fn connected(&self) -> Connected {
        self.io.connected()
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    /// A connection that records each write it is given, and may take only part of one.
    #[derive(Clone, Default)]
    struct Recording {
        writes: Arc<Mutex<Vec<Vec<u8>>>>,
        /// At most this many bytes per write (0: no limit).
        max_write: usize,
        flushes: Arc<Mutex<usize>>,
    }

    impl Write for Recording {
        fn poll_write(
            self: Pin<&mut Self>,
            _: &mut Context<'_>,
            data: &[u8],
        ) -> Poll<io::Result<usize>> {
            let n = match self.max_write {
                0 => data.len(),
                max => data.len().min(max),
            };
            self.writes.lock().expect("lock").push(data[..n].to_vec());
            Poll::Ready(Ok(n))
        }
        fn poll_flush(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            *self.flushes.lock().expect("lock") += 1;
            Poll::Ready(Ok(()))
        }
        fn poll_shutdown(self: Pin<&mut Self>, _: &mut Context<'_>) -> Poll<io::Result<()>> {
            Poll::Ready(Ok(()))
        }
    }

    fn write(io: &mut Corked<Recording>, data: &[u8]) {
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        match Pin::new(io).poll_write(&mut cx, data) {
            Poll::Ready(Ok(n)) => assert_eq!(n, data.len()),
            other => panic!("write: {other:?}"),
        }
    }

    fn flush(io: &mut Corked<Recording>) -> Poll<io::Result<()>> {
        let waker = std::task::Waker::noop();
        let mut cx = Context::from_waker(waker);
        Pin::new(io).poll_flush(&mut cx)
    }

    fn written(recording: &Recording) -> Vec<u8> {
        recording.writes.lock().expect("lock").concat()
    }

    #[test]
    fn frames_written_before_a_delayed_flush_go_out_in_one_write_in_order() {
        let recording = Recording::default();
        let mut io = Corked::new(recording.clone(), true);
        write(&mut io, b"first ");
        // The first flush lets the other tasks run: nothing is written yet.
        assert!(flush(&mut io).is_pending());
        assert!(recording.writes.lock().expect("lock").is_empty());
        // Another request's frames, added meanwhile.
        write(&mut io, b"second");
        assert!(matches!(flush(&mut io), Poll::Ready(Ok(()))));
        assert_eq!(
            *recording.writes.lock().expect("lock"),
            vec![b"first second".to_vec()]
        );
        assert_eq!(*recording.flushes.lock().expect("lock"), 1);
        // With nothing held, a flush goes straight through.
        assert!(matches!(flush(&mut io), Poll::Ready(Ok(()))));
        assert_eq!(*recording.flushes.lock().expect("lock"), 2);
    }

    #[test]
    fn a_connection_that_takes_part_of_a_write_is_given_the_rest() {
        let recording = Recording {
            max_write: 4,
            ..Recording::default()
        };
        let mut io = Corked::new(recording.clone(), true);
        write(&mut io, b"0123456789");
        assert!(flush(&mut io).is_pending());
        assert!(matches!(flush(&mut io), Poll::Ready(Ok(()))));
        assert_eq!(written(&recording), b"0123456789");
        assert_eq!(recording.writes.lock().expect("lock").len(), 3);
    }

    #[test]
    fn a_large_write_is_not_held_and_what_was_held_goes_first() {
        let recording = Recording::default();
        let mut io = Corked::new(recording.clone(), true);
        write(&mut io, b"head");
        let body = vec![7u8; MAX_HELD + 1];
        write(&mut io, &body);
        let mut expected = b"head".to_vec();
        expected.extend_from_slice(&body);
        assert_eq!(written(&recording), expected);
        assert!(matches!(flush(&mut io), Poll::Ready(Ok(()))));
    }

    #[test]
    fn an_uncorked_connection_writes_and_flushes_at_once() {
        let recording = Recording::default();
        let mut io = Corked::new(recording.clone(), false);
        write(&mut io, b"GET / HTTP/1.1\r\n\r\n");
        assert_eq!(recording.writes.lock().expect("lock").len(), 1);
        assert!(matches!(flush(&mut io), Poll::Ready(Ok(()))));
    }
}
