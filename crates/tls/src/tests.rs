//! The stream against itself over loopback, with certificates made at run time.

use std::sync::Arc;

use bytes::BytesMut;
use rcgen::DnType;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::testing::{Issued, Pki};
use crate::{ClientFiles, ServerFiles, ServerName, Stream, x509_id};

fn server_files(pki: &Pki, client_ca: bool) -> ServerFiles {
    let Issued { cert, key } = pki.server("server");
    ServerFiles {
        cert,
        key,
        client_ca: client_ca.then(|| pki.ca().to_owned()),
    }
}

/// A server handshake and a client handshake on one loopback connection: their results.
async fn pair(
    server: &ServerFiles,
    client: &ClientFiles,
    name: &str,
) -> (std::io::Result<Stream>, std::io::Result<Stream>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server_config = server.config().unwrap();
    let accepting = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        Stream::accept(server_config, tcp).await
    });
    let tcp = TcpStream::connect(addr).await.unwrap();
    let name = ServerName::try_from(name.to_owned()).unwrap();
    let client = Stream::connect(client.config().unwrap(), name, tcp).await;
    // The server's side fails on the client's alert, or on its closing the connection.
    let server = accepting.await.unwrap();
    (server, client)
}

#[test]
fn subjects_read_as_zookeeper_names_them() {
    let pki = Pki::new("ca");
    let id = |subject: &[(DnType, &str)]| {
        let issued = pki.client("c", subject);
        let pem = std::fs::read(issued.cert).unwrap();
        let der = rustls::pki_types::CertificateDer::from_pem_slice(&pem).unwrap();
        x509_id(&der)
    };
    use rustls::pki_types::pem::PemObject;
    assert_eq!(
        id(&[
            (DnType::CountryName, "US"),
            (DnType::OrganizationName, "Example"),
            (DnType::CommonName, "alice"),
        ])
        .as_deref(),
        Some("CN=alice,O=Example,C=US")
    );
    assert_eq!(
        id(&[(DnType::CommonName, "a,b+c")]).as_deref(),
        Some("CN=a\\,b\\+c")
    );
    assert_eq!(
        id(&[(DnType::CommonName, " x ")]).as_deref(),
        Some("CN=\\ x\\ ")
    );
    assert_eq!(x509_id(b"not a certificate"), None);
}

#[tokio::test]
async fn both_ways_in_order_with_the_client_certificate_as_its_id() {
    let pki = Pki::new("ca");
    let alice = pki.client(
        "alice",
        &[
            (DnType::OrganizationName, "Example"),
            (DnType::CommonName, "alice"),
        ],
    );
    let client_files = ClientFiles {
        ca: pki.ca().to_owned(),
        cert: Some((alice.cert, alice.key)),
    };
    let (server, client) = pair(&server_files(&pki, true), &client_files, "localhost").await;
    let (server, client) = (Arc::new(server.unwrap()), client.unwrap());
    let chain = server.peer_certificates();
    assert_eq!(x509_id(&chain[0]).as_deref(), Some("CN=alice,O=Example"));

    // More than the socket buffers take at once: writes that stop at WouldBlock, flushed on.
    let sent: Vec<u8> = (0..4 << 20).map(|i: u32| (i % 251) as u8).collect();
    let writer = {
        let (server, sent) = (server.clone(), sent.clone());
        tokio::spawn(async move {
            server.write_all(&sent).await.unwrap();
            server.shutdown().await.unwrap();
        })
    };
    let mut got = BytesMut::new();
    while client.read_buf(&mut got).await.unwrap() > 0 {}
    writer.await.unwrap();
    assert!(got[..] == sent[..], "the bytes arrived whole and in order");

    client.write_all(b"hello").await.unwrap();
    let mut back = BytesMut::new();
    while back.len() < 5 {
        assert!(server.read_buf(&mut back).await.unwrap() > 0);
    }
    assert_eq!(&back[..], b"hello");
}

#[tokio::test]
async fn a_plain_text_peer_is_named_as_one() {
    let pki = Pki::new("ca");
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let config = server_files(&pki, false).config().unwrap();
    let accepting = tokio::spawn(async move {
        let (tcp, _) = listener.accept().await.unwrap();
        Stream::accept(config, tcp).await
    });
    let mut plain = TcpStream::connect(addr).await.unwrap();
    // A ZooKeeper connect request's frame.
    plain.write_all(&[0, 0, 0, 44, 0, 0, 0, 0]).await.unwrap();
    let err = accepting.await.unwrap().unwrap_err();
    assert!(err.to_string().contains("does not speak TLS"), "{err}");
    let mut rest = Vec::new();
    let _ = plain.read_to_end(&mut rest).await;
}

#[tokio::test]
async fn a_client_refuses_what_it_cannot_trust_and_says_why() {
    let pki = Pki::new("ca");
    let other = Pki::new("other");
    let trusting = |pki: &Pki| ClientFiles {
        ca: pki.ca().to_owned(),
        cert: None,
    };
    let cases = [
        (
            server_files(&pki, false),
            trusting(&other),
            "localhost",
            "UnknownIssuer (not signed by a CA this side trusts)",
        ),
        (
            server_files(&pki, false),
            trusting(&pki),
            "example.com",
            "not valid for name \"example.com\"",
        ),
        (
            {
                let Issued { cert, key } = pki.expired_server("old");
                ServerFiles {
                    cert,
                    key,
                    client_ca: None,
                }
            },
            trusting(&pki),
            "localhost",
            "expired",
        ),
        // The server wants a client certificate and gets none.
        (
            server_files(&pki, true),
            trusting(&pki),
            "localhost",
            "the peer sent none",
        ),
    ];
    for (server, client, name, reason) in cases {
        let (server, client) = pair(&server, &client, name).await;
        let failed = match (server, client) {
            (Err(e), _) if reason.contains("peer sent none") => e,
            (_, Err(e)) => e,
            (_, Ok(_)) => panic!("connected, expecting {reason:?}"),
        };
        eprintln!("{failed}");
        assert!(failed.to_string().contains(reason), "{failed}");
        assert!(
            failed.to_string().contains("TLS handshake failed"),
            "{failed}"
        );
    }
}
