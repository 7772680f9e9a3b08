//! Certificates for tests, made at run time (nothing secret is committed): a CA of its own in a
//! temporary directory, which signs server and client certificates as PEM files.

use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DistinguishedName, DnType, IsCa, KeyPair, SanType,
};

/// A test CA and the directory its files go in (removed on drop).
pub struct Pki {
    dir: tempfile::TempDir,
    ca: rcgen::Certificate,
    ca_key: KeyPair,
    ca_file: PathBuf,
}

/// A certificate and its key, as PEM files.
#[derive(Debug, Clone)]
pub struct Issued {
    pub cert: PathBuf,
    pub key: PathBuf,
}

impl Issued {
    /// The key and the certificate in one PEM file beside them (what Java's ZooKeeper takes
    /// as a PEM key store); its path.
    pub fn bundle(&self) -> PathBuf {
        let path = self.cert.with_extension("bundle.pem");
        let mut text = std::fs::read_to_string(&self.key).expect("read the key");
        text.push_str(&std::fs::read_to_string(&self.cert).expect("read the certificate"));
        std::fs::write(&path, text).expect("write the bundle");
        path
    }
}

impl std::fmt::Debug for Pki {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pki").field("ca", &self.ca_file).finish()
    }
}

impl Pki {
    /// A new CA, `CN=<name>`.
    pub fn new(name: &str) -> Pki {
        let dir = tempfile::tempdir().expect("a directory for test certificates");
        let mut params = CertificateParams::default();
        params.distinguished_name = dn(&[(DnType::CommonName, name)]);
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        let ca_key = KeyPair::generate().expect("a CA key");
        let ca = params.self_signed(&ca_key).expect("a CA certificate");
        let ca_file = dir.path().join(format!("{name}.ca.pem"));
        std::fs::write(&ca_file, ca.pem()).expect("write the CA");
        Pki {
            dir,
            ca,
            ca_key,
            ca_file,
        }
    }

    /// The CA's certificate (PEM), for clients and servers to trust.
    pub fn ca(&self) -> &Path {
        &self.ca_file
    }

    /// A server certificate for `localhost` and 127.0.0.1, `CN=<name>`, valid now.
    pub fn server(&self, name: &str) -> Issued {
        let mut params = CertificateParams::default();
        params.distinguished_name = dn(&[(DnType::CommonName, name)]);
        params.subject_alt_names = vec![
            SanType::DnsName("localhost".try_into().expect("a DNS name")),
            SanType::IpAddress([127, 0, 0, 1].into()),
        ];
        self.issue(name, params)
    }

    /// A server's files: [`Pki::server`]'s certificate and key, and with `client_ca` this CA as
    /// the one that signs client certificates.
    pub fn server_files(&self, name: &str, client_ca: bool) -> crate::ServerFiles {
        let Issued { cert, key } = self.server(name);
        crate::ServerFiles {
            cert,
            key,
            client_ca: client_ca.then(|| self.ca().to_owned()),
        }
    }

    /// A client certificate whose subject is `subject`, most general name first (as in the
    /// certificate: `[(OrganizationName, "Example"), (CommonName, "alice")]` is
    /// `CN=alice,O=Example` in RFC 2253 form).
    pub fn client(&self, file: &str, subject: &[(DnType, &str)]) -> Issued {
        let mut params = CertificateParams::default();
        params.distinguished_name = dn(subject);
        self.issue(file, params)
    }

    /// A server certificate valid for the DNS name `host` alone.
    pub fn server_for(&self, name: &str, host: &str) -> Issued {
        let mut params = CertificateParams::default();
        params.distinguished_name = dn(&[(DnType::CommonName, name)]);
        params.subject_alt_names = vec![SanType::DnsName(
            host.to_owned().try_into().expect("a DNS name"),
        )];
        self.issue(name, params)
    }

    /// A server certificate like [`Pki::server`]'s, whose validity ended in 2020.
    pub fn expired_server(&self, name: &str) -> Issued {
        let mut params = CertificateParams::default();
        params.distinguished_name = dn(&[(DnType::CommonName, name)]);
        params.subject_alt_names = vec![
            SanType::DnsName("localhost".try_into().expect("a DNS name")),
            SanType::IpAddress([127, 0, 0, 1].into()),
        ];
        params.not_before = rcgen::date_time_ymd(2019, 1, 1);
        params.not_after = rcgen::date_time_ymd(2020, 1, 1);
        self.issue(name, params)
    }

    fn issue(&self, name: &str, params: CertificateParams) -> Issued {
        let key = KeyPair::generate().expect("a key");
        let cert = params
            .signed_by(&key, &self.ca, &self.ca_key)
            .expect("a certificate");
        let issued = Issued {
            cert: self.dir.path().join(format!("{name}.pem")),
            key: self.dir.path().join(format!("{name}.key.pem")),
        };
        std::fs::write(&issued.cert, cert.pem()).expect("write a certificate");
        std::fs::write(&issued.key, key.serialize_pem()).expect("write a key");
        issued
    }
}

fn dn(parts: &[(DnType, &str)]) -> DistinguishedName {
    let mut dn = DistinguishedName::new();
    for (kind, value) in parts {
        dn.push(kind.clone(), *value);
    }
    dn
}
