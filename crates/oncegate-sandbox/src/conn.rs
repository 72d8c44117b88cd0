//! Connections a handler can sever, for the `drop_after_commit` fault.
//!
//! A handler never sees its socket, and a response whose body fails may already have
//! sent its status line, which a client reads as a success. So [`serve`] accepts through
//! [`SeverableListener`], which hands each connection's kill switch to the router as
//! connect info ([`Severer`]); once a handler pulls it, every later read or write on
//! that connection fails, hyper gives the connection up, and the caller sees it close
//! without a single byte of response.
//!
//! [`serve`]: super::serve

use std::{
    io,
    net::SocketAddr,
    pin::Pin,
    sync::{
        Arc,
        atomic::{AtomicBool, Ordering},
    },
    task::{Context, Poll},
};

use axum::{
    extract::connect_info::Connected,
    serve::{IncomingStream, Listener},
};
use tokio::{
    io::{AsyncRead, AsyncWrite, ReadBuf},
    net::{TcpListener, TcpStream},
};

/// A TCP listener whose connections can be severed by the handler serving them.
pub(super) struct SeverableListener(TcpListener);

impl SeverableListener {
    pub(super) fn new(listener: TcpListener) -> Self {
        SeverableListener(listener)
    }
}

impl Listener for SeverableListener {
    type Io = SeverableStream;
    type Addr = SocketAddr;

    async fn accept(&mut self) -> (Self::Io, Self::Addr) {
        // axum's own TcpListener impl logs and retries accept errors; reuse it.
        let (stream, addr) = Listener::accept(&mut self.0).await;
        // A streamed answer (MCP's) goes out in several writes: with Nagle on, the
        // second waits for the client's delayed ACK, 40 ms a call.
        let _ = stream.set_nodelay(true);
        let stream = SeverableStream {
            stream,
            severed: Arc::new(AtomicBool::new(false)),
        };
        (stream, addr)
    }

    fn local_addr(&self) -> io::Result<Self::Addr> {
        self.0.local_addr()
    }
}

/// One accepted connection and its kill switch.
pub(super) struct SeverableStream {
    stream: TcpStream,
    severed: Arc<AtomicBool>,
}

impl SeverableStream {
    fn check(&self) -> io::Result<()> {
        if self.severed.load(Ordering::Acquire) {
            Err(io::Error::new(
                io::ErrorKind::ConnectionAborted,
                "connection severed by the drop_after_commit fault",
            ))
        } else {
            Ok(())
        }
    }
}

impl AsyncRead for SeverableStream {
    fn poll_read(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &mut ReadBuf<'_>,
    ) -> Poll<io::Result<()>> {
        self.check()?;
        Pin::new(&mut self.stream).poll_read(cx, buf)
    }
}

impl AsyncWrite for SeverableStream {
    fn poll_write(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        buf: &[u8],
    ) -> Poll<io::Result<usize>> {
        self.check()?;
        Pin::new(&mut self.stream).poll_write(cx, buf)
    }

    fn poll_write_vectored(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
        bufs: &[io::IoSlice<'_>],
    ) -> Poll<io::Result<usize>> {
        self.check()?;
        Pin::new(&mut self.stream).poll_write_vectored(cx, bufs)
    }

    fn is_write_vectored(&self) -> bool {
        self.stream.is_write_vectored()
    }

    fn poll_flush(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        self.check()?;
        Pin::new(&mut self.stream).poll_flush(cx)
    }

    fn poll_shutdown(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<io::Result<()>> {
        // A severed connection is closed by dropping it; a graceful shutdown would only
        // flush what hyper buffered, which is exactly what must not reach the caller.
        self.check()?;
        Pin::new(&mut self.stream).poll_shutdown(cx)
    }
}

/// The kill switch of the connection a request arrived on (axum connect info).
#[derive(Clone, Debug)]
pub(super) struct Severer(Arc<AtomicBool>);

impl Severer {
    /// Makes the connection fail from now on, so the current response is never sent.
    pub(super) fn sever(&self) {
        self.0.store(true, Ordering::Release);
    }
}

impl Connected<IncomingStream<'_, SeverableListener>> for Severer {
    fn connect_info(stream: IncomingStream<'_, SeverableListener>) -> Self {
        Severer(Arc::clone(&stream.io().severed))
    }
}
