//! The connection to one server, plain TCP or TLS, as the session uses it: writes and reads
//! that never wait (`WouldBlock` when they would), and readiness to wait on between them.
//! With TLS, bytes the session took but the socket did not are written by
//! [`Socket::try_flush`]: a write is on the wire once that is `Ok`.

use std::io;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use bytes::BytesMut;
use lockkeeper_tls::{ClientConfig, ServerName, Stream};
use tokio::io::Interest;
use tokio::net::TcpStream;

use crate::error::HostFailure;

#[derive(Debug)]
pub(crate) enum Socket {
    Plain(TcpStream),
    Tls(Box<Stream>),
}

impl Socket {
    /// Opens a connection to `host` (`name:port`), over TLS with `tls`: the server's certificate
    /// must be valid for `name`. Sets `connected` once the TCP connection is up.
    pub(crate) async fn connect(
        host: &str,
        tls: Option<&Arc<ClientConfig>>,
        connected: &AtomicBool,
    ) -> Result<Socket, HostFailure> {
        let tcp = TcpStream::connect(host)
            .await
            .map_err(|err| match err.kind() {
                io::ErrorKind::ConnectionRefused => HostFailure::Refused,
                _ => HostFailure::Io(err.to_string()),
            })?;
        connected.store(true, Ordering::Relaxed);
        let _ = tcp.set_nodelay(true);
        let Some(config) = tls else {
            return Ok(Socket::Plain(tcp));
        };
        let name = server_name(host).ok_or_else(|| {
            HostFailure::Tls(format!("{host:?} names no host a certificate could be for"))
        })?;
        Stream::connect(config.clone(), name, tcp)
            .await
            .map(|stream| Socket::Tls(Box::new(stream)))
            .map_err(|err| HostFailure::Tls(err.to_string()))
    }

    fn tcp(&self) -> &TcpStream {
        match self {
            Socket::Plain(tcp) => tcp,
            Socket::Tls(stream) => stream.tcp(),
        }
    }

    pub(crate) async fn readable(&self) -> io::Result<()> {
        self.tcp().readable().await
    }

    pub(crate) async fn writable(&self) -> io::Result<()> {
        self.tcp().writable().await
    }

    /// Reads what arrived into `buf` without waiting; `Ok(0)` at the end of the stream.
    ///
    /// On plain TCP, a read that leaves room in `buf` took everything the socket held, so it
    /// also clears the socket's readiness: the next [`Socket::readable`] then waits for new
    /// bytes instead of resolving at once for a read that could only say `WouldBlock`. That
    /// saves one `recvfrom(2)` per reply, as tokio's own `AsyncRead` saves it. Bytes arriving
    /// after the read make the socket ready again, and tokio keeps that newer readiness: it
    /// clears only the readiness this read was made on.
    pub(crate) fn try_read_buf(&self, buf: &mut BytesMut) -> io::Result<usize> {
        match self {
            Socket::Plain(tcp) => {
                let mut read = None;
                let outcome = tcp.try_io(Interest::READABLE, || {
                    let room = buf.capacity() - buf.len();
                    let n = tcp.try_read_buf(buf)?;
                    read = Some(n);
                    // `WouldBlock` is what makes tokio clear the readiness.
                    if n < room {
                        Err(io::ErrorKind::WouldBlock.into())
                    } else {
                        Ok(n)
                    }
                });
                // After a read, its count, whatever the closure told tokio; without one, why
                // not (the socket was not ready, or the read failed).
                match read {
                    Some(n) => Ok(n),
                    None => outcome,
                }
            }
            Socket::Tls(stream) => stream.try_read_buf(buf),
        }
    }

    /// Writes what of `buf` the socket takes now.
    pub(crate) fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        match self {
            Socket::Plain(tcp) => tcp.try_write(buf),
            Socket::Tls(stream) => stream.try_write(buf),
        }
    }

    /// Writes what a TLS session still holds; `WouldBlock` if some is left. Always `Ok` on
    /// plain TCP.
    pub(crate) fn try_flush(&self) -> io::Result<()> {
        match self {
            Socket::Plain(_) => Ok(()),
            Socket::Tls(stream) => stream.try_flush(),
        }
    }

    /// Writes all of `buf`, waiting for the socket as needed.
    pub(crate) async fn write_all(&self, mut buf: &[u8]) -> io::Result<()> {
        loop {
            let written = if buf.is_empty() {
                self.try_flush().map(|()| 0)
            } else {
                self.try_write(buf)
            };
            match written {
                Ok(0) if buf.is_empty() => return Ok(()),
                Ok(n) => buf = &buf[n..],
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => self.writable().await?,
                Err(err) => return Err(err),
            }
        }
    }

    /// Reads into `buf`, waiting until something arrives; 0 at the end of the stream.
    pub(crate) async fn read_buf(&self, buf: &mut BytesMut) -> io::Result<usize> {
        loop {
            match self.try_read_buf(buf) {
                Err(err) if err.kind() == io::ErrorKind::WouldBlock => self.readable().await?,
                done => return done,
            }
        }
    }
}

/// The host part of `host:port` (`[v6]:port` too), as the name a certificate must be valid for.
fn server_name(host: &str) -> Option<ServerName<'static>> {
    let (name, _port) = host.rsplit_once(':')?;
    let name = name.trim_start_matches('[').trim_end_matches(']');
    ServerName::try_from(name.to_owned()).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_certificate_is_checked_against_the_host_part() {
        let name = |host| server_name(host).map(|n| n.to_str().into_owned());
        assert_eq!(name("localhost:2281").as_deref(), Some("localhost"));
        assert_eq!(name("127.0.0.1:2281").as_deref(), Some("127.0.0.1"));
        assert_eq!(name("[::1]:2281").as_deref(), Some("::1"));
        assert_eq!(name("no-port"), None);
    }
}
