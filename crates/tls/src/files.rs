//! PEM files to rustls configurations. Every error names the file and what is wrong with it,
//! so a service that fails to start (or a reload that is refused) says what to fix.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::WebPkiClientVerifier;
use rustls::{ClientConfig, RootCertStore, ServerConfig};

/// A TLS server's files: read at start, and again at each reload.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerFiles {
    /// The server's certificate chain, leaf first.
    pub cert: PathBuf,
    /// The private key of the leaf certificate (PKCS#8, PKCS#1 or SEC1).
    pub key: PathBuf,
    /// CA certificates that sign client certificates. When given, every client must present a
    /// certificate one of them signed.
    pub client_ca: Option<PathBuf>,
}

impl ServerFiles {
    /// The rustls configuration the files describe (TLS 1.2 and 1.3).
    pub fn config(&self) -> io::Result<Arc<ServerConfig>> {
        let provider = provider();
        let builder = ServerConfig::builder_with_provider(provider.clone())
            .with_safe_default_protocol_versions()
            .map_err(io::Error::other)?;
        let builder = match &self.client_ca {
            None => builder.with_no_client_auth(),
            Some(ca) => {
                let verifier = WebPkiClientVerifier::builder_with_provider(roots(ca)?, provider)
                    .build()
                    .map_err(|e| invalid(ca, "unusable as a client CA", e))?;
                builder.with_client_cert_verifier(verifier)
            }
        };
        let config = builder
            .with_single_cert(certs(&self.cert)?, key(&self.key)?)
            .map_err(|e| mismatch(&self.cert, &self.key, e))?;
        Ok(Arc::new(config))
    }
}

/// A TLS client's files.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClientFiles {
    /// CA certificates that sign the servers' certificates.
    pub ca: PathBuf,
    /// The client's certificate chain and key, for servers that ask for one.
    pub cert: Option<(PathBuf, PathBuf)>,
}

impl ClientFiles {
    /// The rustls configuration the files describe (TLS 1.2 and 1.3).
    pub fn config(&self) -> io::Result<Arc<ClientConfig>> {
        let builder = ClientConfig::builder_with_provider(provider())
            .with_safe_default_protocol_versions()
            .map_err(io::Error::other)?
            .with_root_certificates(roots(&self.ca)?);
        let config = match &self.cert {
            None => builder.with_no_client_auth(),
            Some((cert, key_file)) => builder
                .with_client_auth_cert(certs(cert)?, key(key_file)?)
                .map_err(|e| mismatch(cert, key_file, e))?,
        };
        Ok(Arc::new(config))
    }
}

fn provider() -> Arc<CryptoProvider> {
    Arc::new(rustls::crypto::ring::default_provider())
}

/// Every certificate in the PEM file `path`; at least one.
fn certs(path: &Path) -> io::Result<Vec<CertificateDer<'static>>> {
    let certs = CertificateDer::pem_file_iter(path)
        .and_then(Iterator::collect::<Result<Vec<_>, _>>)
        .map_err(|e| invalid(path, "no readable PEM certificates", e))?;
    if certs.is_empty() {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            format!("{}: no PEM certificate in the file", path.display()),
        ));
    }
    Ok(certs)
}

fn key(path: &Path) -> io::Result<PrivateKeyDer<'static>> {
    PrivateKeyDer::from_pem_file(path).map_err(|e| invalid(path, "no readable PEM private key", e))
}

/// The CA certificates in `path`, as trust anchors.
fn roots(path: &Path) -> io::Result<Arc<RootCertStore>> {
    let mut roots = RootCertStore::empty();
    for cert in certs(path)? {
        roots
            .add(cert)
            .map_err(|e| invalid(path, "not a usable CA certificate", e))?;
    }
    Ok(Arc::new(roots))
}

fn invalid(path: &Path, what: &str, e: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!("{}: {what}: {e}", path.display()),
    )
}

fn mismatch(cert: &Path, key: &Path, e: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidInput,
        format!(
            "{} and {}: not a certificate and its key: {e}",
            cert.display(),
            key.display()
        ),
    )
}
