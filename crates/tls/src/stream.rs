//! One TLS connection whose writers never wait.
//!
//! The socket and its rustls session sit under one lock, shared by the connection's reader and
//! its writers, which may be on any thread (Keeper's core and log workers write replies; a
//! client's callers write requests). A write encrypts what it is given into the session and
//! writes what the socket takes at once. What the socket does not take stays in the session and
//! is written first by the next write, or by [`Stream::try_flush`]; a writer that must know all
//! is on the wire calls that until it is `Ok`, waiting for the socket to be writable between.
//!
//! Invariants: the lock is never held across an `.await`; records leave in the order written;
//! a handshake that fails says why (rustls' reason, and a hint when the peer does not speak
//! TLS at all).

use std::io::{self, Read, Write};
use std::sync::{Arc, Mutex, MutexGuard};

use bytes::BytesMut;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection, Connection, ServerConfig, ServerConnection};
use tokio::net::TcpStream;

/// A TCP connection after its TLS handshake (see the module doc).
#[derive(Debug)]
pub struct Stream {
    tcp: TcpStream,
    session: Mutex<Connection>,
}

impl Stream {
    /// The server's side of a handshake on `tcp`.
    pub async fn accept(config: Arc<ServerConfig>, tcp: TcpStream) -> io::Result<Stream> {
        let session = ServerConnection::new(config).map_err(io::Error::other)?;
        Stream::handshake(tcp, session.into()).await
    }

    /// The client's side of a handshake on `tcp`, with a server whose certificate must be
    /// valid for `name`.
    pub async fn connect(
        config: Arc<ClientConfig>,
        name: ServerName<'static>,
        tcp: TcpStream,
    ) -> io::Result<Stream> {
        let session = ClientConnection::new(config, name).map_err(io::Error::other)?;
        Stream::handshake(tcp, session.into()).await
    }

    async fn handshake(tcp: TcpStream, mut session: Connection) -> io::Result<Stream> {
        loop {
            write_all_tls(&mut session, &tcp).await?;
            if !session.is_handshaking() {
                break;
            }
            tcp.readable().await?;
            match session.read_tls(&mut Socket(&tcp)) {
                Ok(0) => {
                    return Err(io::Error::new(
                        io::ErrorKind::UnexpectedEof,
                        "TLS handshake failed: the peer closed the connection \
                         (does it speak TLS on this port?)",
                    ));
                }
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => continue,
                Err(e) => return Err(e),
            }
            if let Err(e) = session.process_new_packets() {
                // The alert that tells the peer why, if the socket takes it now.
                let _ = flush(&mut session, &tcp);
                return Err(handshake_error(&e));
            }
        }
        Ok(Stream {
            tcp,
            session: Mutex::new(session),
        })
    }

    /// The TCP socket underneath, for readiness and socket options.
    pub fn tcp(&self) -> &TcpStream {
        &self.tcp
    }

    /// The peer's certificate chain as it presented it, leaf first (empty if it sent none).
    pub fn peer_certificates(&self) -> Vec<Vec<u8>> {
        self.lock()
            .peer_certificates()
            .map(|chain| chain.iter().map(|cert| cert.to_vec()).collect())
            .unwrap_or_default()
    }

    /// Decrypts what the socket has into `buf` without waiting: `Ok(0)` at the end of the
    /// stream (the peer's close_notify, or its FIN), `WouldBlock` when nothing whole arrived.
    pub fn try_read_buf(&self, buf: &mut BytesMut) -> io::Result<usize> {
        let mut session = self.lock();
        match drain(&mut session, buf)? {
            (0, false) => {}
            (got, _) => return Ok(got),
        }
        let read = session.read_tls(&mut Socket(&self.tcp))?;
        let processed = session.process_new_packets();
        // An alert, or the answer to a post-handshake message: sent now if the socket takes it,
        // else with the next write.
        let _ = flush(&mut session, &self.tcp);
        processed.map_err(|e| tls_error(&e, "TLS"))?;
        match drain(&mut session, buf)? {
            (0, false) if read > 0 => Err(io::ErrorKind::WouldBlock.into()),
            (got, _) => Ok(got),
        }
    }

    /// Reads what the peer sent, decrypted, into `buf`, waiting for it; 0 at the end of the
    /// stream.
    pub async fn read_buf(&self, buf: &mut BytesMut) -> io::Result<usize> {
        loop {
            match self.try_read_buf(buf) {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.tcp.readable().await?,
                done => return done,
            }
        }
    }

    /// Encrypts what of `buf` the session takes and writes what the socket takes; never waits.
    /// `WouldBlock` (nothing taken) while bytes of an earlier write still wait for the socket.
    pub fn try_write(&self, buf: &[u8]) -> io::Result<usize> {
        let mut session = self.lock();
        flush(&mut session, &self.tcp)?;
        let n = session.writer().write(buf)?;
        if n == 0 && !buf.is_empty() {
            // The session takes nothing more (its close_notify went out): never "0 written",
            // which a writer looping on progress would spin on.
            return Err(io::ErrorKind::WriteZero.into());
        }
        match flush(&mut session, &self.tcp) {
            Err(e) if e.kind() != io::ErrorKind::WouldBlock => Err(e),
            _ => Ok(n),
        }
    }

    /// Writes what the session still holds for the socket; `WouldBlock` if some is left.
    pub fn try_flush(&self) -> io::Result<()> {
        flush(&mut self.lock(), &self.tcp)
    }

    /// Writes all of `buf` and what the session holds, waiting for the socket as needed.
    pub async fn write_all(&self, mut buf: &[u8]) -> io::Result<()> {
        while !buf.is_empty() {
            match self.try_write(buf) {
                Ok(n) => buf = &buf[n..],
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.tcp.writable().await?,
                Err(e) => return Err(e),
            }
        }
        self.flush_all().await
    }

    /// Sends close_notify after what was written, then shuts the socket's write side down.
    pub async fn shutdown(&self) -> io::Result<()> {
        self.lock().send_close_notify();
        self.flush_all().await?;
        shutdown_write(&self.tcp)
    }

    async fn flush_all(&self) -> io::Result<()> {
        loop {
            match self.try_flush() {
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => self.tcp.writable().await?,
                done => return done,
            }
        }
    }

    fn lock(&self) -> MutexGuard<'_, Connection> {
        // Held for a few non-blocking steps only: what a panic leaves is still a session that
        // the next step fails cleanly on.
        self.session
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

fn handshake_error(e: &rustls::Error) -> io::Error {
    tls_error(e, "TLS handshake failed")
}

/// `e` as an I/O error that says what it means for the connection.
fn tls_error(e: &rustls::Error, what: &str) -> io::Error {
    use rustls::{AlertDescription, CertificateError, Error};
    let hint = match e {
        Error::InvalidMessage(_) => " (the peer does not speak TLS: a plain-text peer?)",
        Error::InvalidCertificate(CertificateError::UnknownIssuer) => {
            " (not signed by a CA this side trusts)"
        }
        Error::NoCertificatesPresented => {
            " (this side requires a certificate signed by its CA, and the peer sent none)"
        }
        Error::AlertReceived(
            AlertDescription::CertificateRequired
            | AlertDescription::BadCertificate
            | AlertDescription::UnknownCA
            | AlertDescription::CertificateUnknown,
        ) => " (the peer refused this side's certificate, or wanted one and got none)",
        _ => "",
    };
    io::Error::new(io::ErrorKind::InvalidData, format!("{what}: {e}{hint}"))
}

/// Moves the plaintext the session has decrypted into `buf`: how much, and whether the
/// stream has ended behind it.
fn drain(session: &mut Connection, buf: &mut BytesMut) -> io::Result<(usize, bool)> {
    let mut plain = [0u8; 8 * 1024];
    let mut got = 0;
    loop {
        match session.reader().read(&mut plain) {
            // The peer's close_notify.
            Ok(0) => return Ok((got, true)),
            Ok(n) => {
                buf.extend_from_slice(&plain[..n]);
                got += n;
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok((got, false)),
            // The peer's FIN without close_notify: the end of the stream all the same.
            Err(e) if e.kind() == io::ErrorKind::UnexpectedEof => return Ok((got, true)),
            Err(e) => return Err(e),
        }
    }
}

/// Writes what `session` holds for the socket, waiting for the socket as needed.
async fn write_all_tls(session: &mut Connection, tcp: &TcpStream) -> io::Result<()> {
    loop {
        match flush(session, tcp) {
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => tcp.writable().await?,
            done => return done,
        }
    }
}

/// Writes what `session` holds for the socket until it is all written (`Ok`) or the socket is
/// full (`WouldBlock`).
fn flush(session: &mut Connection, tcp: &TcpStream) -> io::Result<()> {
    while session.wants_write() {
        if session.write_tls(&mut Socket(tcp))? == 0 {
            return Err(io::ErrorKind::WriteZero.into());
        }
    }
    Ok(())
}

fn shutdown_write(tcp: &TcpStream) -> io::Result<()> {
    socket2::SockRef::from(tcp).shutdown(std::net::Shutdown::Write)
}

/// The socket as rustls reads and writes it: without waiting (`WouldBlock` when it would).
struct Socket<'a>(&'a TcpStream);

impl Read for Socket<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.0.try_read(buf)
    }
}

impl Write for Socket<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.try_write(buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}
