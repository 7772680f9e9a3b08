//! A client connection's two ends, plain TCP or TLS, as the connection's reader and its outbox
//! use them. Writes never wait (`try_write`, `WouldBlock` when the socket is full); with TLS,
//! bytes the session took but the socket did not are written by `try_flush`, which the outbox
//! calls before it calls a connection idle.

use std::io;
use std::sync::Arc;

use bytes::BytesMut;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::net::tcp::{OwnedReadHalf, OwnedWriteHalf};

use lockkeeper_tls::Stream;

/// Splits a connection into the reader's end and the writers' end.
pub(crate) enum Socket {
    Plain(TcpStream),
    Tls(Box<Stream>),
}

impl Socket {
    pub(crate) fn split(self) -> (ReadHalf, WriteHalf) {
        match self {
            Socket::Plain(tcp) => {
                let (read, write) = tcp.into_split();
                (ReadHalf::Plain(read), WriteHalf::Plain(write))
            }
            Socket::Tls(stream) => {
                let stream = Arc::new(*stream);
                (ReadHalf::Tls(stream.clone()), WriteHalf::Tls(stream))
            }
        }
    }
}

pub(crate) enum ReadHalf {
    Plain(OwnedReadHalf),
    Tls(Arc<Stream>),
}

impl ReadHalf {
    /// Reads what the peer sent into `buf`; 0 at the end of the stream.
    pub(crate) async fn read_buf(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        match self {
            ReadHalf::Plain(read) => read.read_buf(buf).await,
            ReadHalf::Tls(stream) => stream.read_buf(buf).await,
        }
    }
}

pub(crate) enum WriteHalf {
    Plain(OwnedWriteHalf),
    Tls(Arc<Stream>),
}

impl WriteHalf {
    /// The TCP socket underneath.
    pub(crate) fn tcp(&self) -> &TcpStream {
        match self {
            WriteHalf::Plain(write) => write.as_ref(),
            WriteHalf::Tls(stream) => stream.tcp(),
        }
    }

    /// Writes what of `buf` the socket takes now (see the module doc).
    pub(crate) fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            WriteHalf::Plain(write) => write.try_write(buf),
            WriteHalf::Tls(stream) => stream.try_write(buf),
        }
    }

    /// Writes what an earlier `try_write` left in the TLS session; `WouldBlock` if some is
    /// left. Always `Ok` on plain TCP, which leaves nothing behind.
    pub(crate) fn try_flush(&self) -> io::Result<()> {
        match self {
            WriteHalf::Plain(_) => Ok(()),
            WriteHalf::Tls(stream) => stream.try_flush(),
        }
    }

    /// Waits until the socket may take more.
    pub(crate) async fn writable(&self) -> io::Result<()> {
        self.tcp().writable().await
    }

    /// Writes all of `buf`, waiting for the socket as needed.
    pub(crate) async fn write_all(&mut self, buf: &[u8]) -> io::Result<()> {
        match self {
            WriteHalf::Plain(write) => tokio::io::AsyncWriteExt::write_all(write, buf).await,
            WriteHalf::Tls(stream) => stream.write_all(buf).await,
        }
    }

    /// Ends the stream after what was written (with TLS, close_notify first).
    pub(crate) async fn shutdown(&self) -> io::Result<()> {
        match self {
            WriteHalf::Plain(write) => {
                socket2::SockRef::from(write.as_ref()).shutdown(std::net::Shutdown::Write)
            }
            WriteHalf::Tls(stream) => stream.shutdown().await,
        }
    }
}
