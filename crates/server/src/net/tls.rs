//! The secure listener's TLS side, as ZooKeeper's `secureClientPort` offers it: the
//! certificate, key and optional client CA ([`ServerFiles`]), reloadable, and the handshake
//! of each connection. The TLS session itself is `lockkeeper_tls::Stream`, which the outbox
//! writes through without waiting, from any thread.
//!
//! [`Acceptor::reload`] reads the files again and swaps them whole: connections that are up
//! keep the session they negotiated, the next handshake uses the new files, and files that do
//! not load leave the old ones in use. With a client CA, every client must present a
//! certificate it signed, and the certificate's subject is the connection's `x509` id.

use std::io;
use std::sync::{Arc, RwLock};

use lockkeeper_tls::{ServerConfig, ServerFiles, Stream, x509_id};
use tokio::net::TcpStream;

/// Makes the server side of each TLS connection from the files' current contents.
pub(crate) struct Acceptor {
    files: ServerFiles,
    config: RwLock<Arc<ServerConfig>>,
}

impl Acceptor {
    /// Reads the files. Errors name the file and what is wrong with it.
    pub(crate) fn new(files: ServerFiles) -> io::Result<Acceptor> {
        let config = files.config()?;
        Ok(Acceptor {
            files,
            config: RwLock::new(config),
        })
    }

    /// Reads the files again and uses them for every later handshake; on an error the files
    /// in use stay.
    pub(crate) fn reload(&self) -> io::Result<()> {
        let config = self.files.config()?;
        *self
            .config
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner) = config;
        Ok(())
    }

    /// The server's side of the handshake on `tcp`, and the client certificate's subject.
    pub(crate) async fn accept(&self, tcp: TcpStream) -> io::Result<(Stream, Option<String>)> {
        let config = self
            .config
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone();
        let stream = Stream::accept(config, tcp).await?;
        let x509 = stream
            .peer_certificates()
            .first()
            .and_then(|leaf| x509_id(leaf));
        Ok((stream, x509))
    }
}
