//! `lockkeeper-zk-client` over TLS: to Keeper's secure listener, with client certificates and
//! the `x509` ACL scheme, and refusing what it cannot trust, promptly and saying why. The
//! certificates are made at run time (`lockkeeper_tls::testing`).

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lockkeeper_server::ServerFiles;
use lockkeeper_testkit::{Keeper, TestServer};
use lockkeeper_tls::testing::{Issued, Pki};
use lockkeeper_zk_client::{Acl, Client, CreateMode, CreateOptions, Error, Id, TlsFiles, perms};
use rcgen::DnType;

const LIMIT: Duration = Duration::from_secs(20);
/// A connect that fails must fail within the connection timeout: this one.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// Keeper with a plain listener and a secure one presenting `server` whose clients must present
/// a certificate the test CA signed; the secure address.
fn keeper(pki: &Pki, server: Issued) -> (Keeper, SocketAddr) {
    let keeper = Keeper::start_tls(ServerFiles {
        cert: server.cert,
        key: server.key,
        client_ca: Some(pki.ca().to_owned()),
    });
    let secure = keeper.secure_addr();
    (keeper, secure)
}

fn client_files(pki: &Pki, cert: Option<Issued>) -> TlsFiles {
    TlsFiles {
        ca: pki.ca().to_owned(),
        cert: cert.map(|Issued { cert, key }| (cert, key)),
    }
}

async fn connect(files: TlsFiles, connect: &str) -> Result<Client, Error> {
    tokio::time::timeout(
        LIMIT,
        Client::connector()
            .connection_timeout(CONNECT_TIMEOUT)
            .tls(files)
            .connect(connect),
    )
    .await
    .expect("a connect attempt ends within its timeout")
}

fn x509_acl(subject: &str) -> Vec<Acl> {
    vec![Acl {
        perms: perms::ALL,
        id: Id {
            scheme: "x509".into(),
            id: subject.into(),
        },
    }]
}

#[tokio::test]
async fn keeper_over_tls_admits_the_certificate_an_x509_acl_names_and_refuses_another() {
    let pki = Pki::new("test-ca");
    let (_keeper, secure) = keeper(&pki, pki.server("keeper"));
    let subject = |cn| {
        [
            (DnType::OrganizationName, "Example"),
            (DnType::CommonName, cn),
        ]
    };
    let alice = pki.client("alice", &subject("alice"));
    let bob = pki.client("bob", &subject("bob"));
    let alice = connect(client_files(&pki, Some(alice)), &secure.to_string())
        .await
        .expect("alice connects over TLS");
    let bob = connect(client_files(&pki, Some(bob)), &secure.to_string())
        .await
        .expect("bob connects over TLS");

    let options =
        CreateOptions::new(CreateMode::Persistent).with_acl(x509_acl("CN=alice,O=Example"));
    alice
        .create("/alice", b"hers", &options)
        .await
        .expect("create");
    assert_eq!(
        alice.get_data("/alice").await.expect("alice reads").0,
        b"hers"
    );
    assert!(matches!(bob.get_data("/alice").await, Err(Error::NoAuth)));

    // `auth` expands to the creator's certificate subject.
    let auth = CreateOptions::new(CreateMode::Persistent).with_acl(vec![Acl {
        perms: perms::ALL,
        id: Id {
            scheme: "auth".into(),
            id: String::new(),
        },
    }]);
    alice
        .create("/mine", b"", &auth)
        .await
        .expect("create with auth");
    let (acl, _) = alice.get_acl("/mine").await.expect("get_acl");
    assert_eq!(acl, x509_acl("CN=alice,O=Example"));
    assert!(matches!(
        bob.set_data("/mine", b"x", None).await,
        Err(Error::NoAuth)
    ));

    // A watch set over TLS fires over TLS, and a large value crosses whole.
    let (stat, watch) = bob.check_and_watch_stat("/open").await.expect("watch");
    assert!(stat.is_none());
    let big = vec![7u8; 900 * 1024];
    let open = CreateOptions::new(CreateMode::Persistent);
    alice
        .create("/open", &big, &open)
        .await
        .expect("create a large node");
    let event = tokio::time::timeout(LIMIT, watch.changed())
        .await
        .expect("the watch fires");
    assert_eq!(event.path, "/open");
    assert_eq!(bob.get_data("/open").await.expect("read it back").0, big);
}

#[tokio::test]
async fn what_cannot_be_trusted_fails_within_the_connect_timeout_saying_why() {
    let pki = Pki::new("test-ca");
    let other = Pki::new("other-ca");
    let (_elsewhere_keeper, elsewhere) =
        keeper(&pki, pki.server_for("elsewhere", "keeper.example"));
    let (_expired_keeper, expired) = keeper(&pki, pki.expired_server("old"));
    let (server, secure) = keeper(&pki, pki.server("keeper"));
    let alice = || pki.client("alice", &[(DnType::CommonName, "alice")]);
    let cases: Vec<(&str, TlsFiles, String, &str)> = vec![
        (
            "a server signed by another CA",
            client_files(&other, Some(alice())),
            secure.to_string(),
            "UnknownIssuer",
        ),
        (
            "a host name the certificate is not for",
            client_files(&pki, Some(alice())),
            elsewhere.to_string(),
            "not valid for name",
        ),
        (
            "an expired certificate",
            client_files(&pki, Some(alice())),
            expired.to_string(),
            "certificate expired",
        ),
        (
            "TLS to the plain-text port",
            client_files(&pki, Some(alice())),
            server.addr().to_string(),
            "does it speak TLS",
        ),
        (
            "no client certificate",
            client_files(&pki, None),
            secure.to_string(),
            "wanted one and got none",
        ),
    ];
    for (what, files, address, reason) in cases {
        let started = Instant::now();
        let err = match connect(files, &address).await {
            Ok(_) => panic!("{what}: connected"),
            Err(err) => err.to_string(),
        };
        eprintln!("{what}: {err}");
        assert!(
            started.elapsed() < LIMIT,
            "{what}: took {:?}",
            started.elapsed()
        );
        assert!(
            err.contains(&address),
            "{what}: the address is named: {err}"
        );
        assert!(err.contains(reason), "{what}: {err}");
    }
}
