//! ZooKeeper's protocol over TLS, across implementations: Curator (ZooKeeper's Java client with
//! its Netty socket and PEM files) locks, creates and watches on Keeper's secure listener, and
//! the `x509` id Keeper gives it is the one Apache ZooKeeper gives the same certificate; zkCli
//! creates and reads over TLS; lockkeeper locks over TLS on Apache ZooKeeper's
//! `secureClientPort`. Certificates are made at run time (`lockkeeper_tls::testing`).

#[allow(dead_code)] // each test binary uses its own part of the JVM driver
#[path = "curator/jvm.rs"]
mod jvm;

use std::net::SocketAddr;
use std::time::Duration;

use lockkeeper::TlsFiles;
use lockkeeper::zk::Session;
use lockkeeper_testkit::{ApacheZk, Keeper, ZkOptions, ZkTls};
use lockkeeper_tls::testing::{Issued, Pki};
use lockkeeper_zk_client::{Acl, CreateMode, CreateOptions, Id, perms};
use rcgen::DnType;

use jvm::Jvm;

const LIMIT: Duration = Duration::from_secs(90);
const ALICE: &str = "CN=alice,O=Example";

/// Keeper whose secure listener requires certificates `pki` signed; its secure address.
fn keeper(pki: &Pki) -> (Keeper, SocketAddr) {
    let keeper = Keeper::start_tls(pki.server_files("keeper", true));
    let secure = keeper.secure_addr();
    (keeper, secure)
}

/// Apache ZooKeeper with a secure client port that requires certificates `pki` signed.
fn zookeeper(pki: &Pki) -> ApacheZk {
    ApacheZk::start_with(ZkOptions {
        tls: Some(ZkTls {
            keystore: pki.server("zookeeper").bundle(),
            truststore: pki.ca().to_owned(),
            client_auth: true,
            port: 0,
        }),
        ..ZkOptions::default()
    })
}

fn alice(pki: &Pki) -> Issued {
    pki.client(
        "alice",
        &[
            (DnType::OrganizationName, "Example"),
            (DnType::CommonName, "alice"),
        ],
    )
}

async fn session(pki: &Pki, client: &Issued, secure: SocketAddr) -> Session {
    Session::builder(&secure.to_string())
        .tls(TlsFiles {
            ca: pki.ca().to_owned(),
            cert: Some((client.cert.clone(), client.key.clone())),
        })
        .connect()
        .await
        .unwrap_or_else(|e| panic!("a session over TLS to {secure}: {e}"))
}

/// The ACL the server gives a node created by `session` with `auth` (the creator's ids).
async fn creator_acl(session: &Session, path: &str) -> Vec<Acl> {
    let client = session.client().unwrap();
    let auth = CreateOptions::new(CreateMode::Persistent).with_acl(vec![Acl {
        perms: perms::ALL,
        id: Id {
            scheme: "auth".into(),
            id: String::new(),
        },
    }]);
    client
        .create(path, b"", &auth)
        .await
        .expect("create with auth");
    client.get_acl(path).await.expect("get_acl").0
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_locks_creates_and_watches_over_tls_on_keeper() {
    let pki = Pki::new("test-ca");
    let (_keeper, secure) = keeper(&pki);
    let alice = alice(&pki);
    let bundle = alice.bundle();
    let mut curator = Jvm::spawn(
        "TlsClient",
        &[
            &secure.to_string(),
            bundle.to_str().unwrap(),
            pki.ca().to_str().unwrap(),
            "/curator-tls",
        ],
    );
    for expected in [
        "LOCKED".to_owned(),
        format!("CREATED x509:{ALICE}"),
        "WATCHED NodeDataChanged".to_owned(),
        "RELEASED".to_owned(),
    ] {
        let line = curator.next_line(LIMIT);
        assert_eq!(line, expected, "{}", curator.transcript());
    }
    assert!(curator.finish(LIMIT).success, "Curator exits cleanly");

    // lockkeeper, with the same certificate, is the same x509 id; another one is refused.
    let same = session(&pki, &alice, secure).await;
    let read = same.client().unwrap().get_data("/curator-tls/node").await;
    assert_eq!(read.expect("alice reads her node").0, b"v2");
    let bob = pki.client("bob", &[(DnType::CommonName, "bob")]);
    let other = session(&pki, &bob, secure).await;
    let refused = other.client().unwrap().get_data("/curator-tls/node").await;
    assert!(
        matches!(refused, Err(lockkeeper_zk_client::Error::NoAuth)),
        "{refused:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockkeeper_over_tls_on_apache_zookeeper_and_the_same_x509_id_on_both() {
    let pki = Pki::new("test-ca");
    let zk = zookeeper(&pki);
    let (_keeper, keeper_secure) = keeper(&pki);
    let alice = alice(&pki);

    let on_zk = session(&pki, &alice, zk.secure_addr()).await;
    let mutex = on_zk.mutex("/locks/tls").unwrap();
    let guard = mutex.lock().await.expect("lock over TLS on ZooKeeper");
    guard.release().await.expect("release");

    let on_keeper = session(&pki, &alice, keeper_secure).await;
    let zk_acl = creator_acl(&on_zk, "/mine").await;
    let keeper_acl = creator_acl(&on_keeper, "/mine").await;
    assert_eq!(zk_acl[0].id.id, ALICE, "ZooKeeper's x509 id");
    assert_eq!(
        keeper_acl, zk_acl,
        "Keeper names the certificate as ZooKeeper does"
    );
}

#[test]
fn zkcli_creates_and_reads_over_tls_on_keeper() {
    let pki = Pki::new("test-ca");
    let dir = tempfile::tempdir().unwrap();
    let (_keeper, secure) = keeper(&pki);
    let bundle = alice(&pki).bundle();
    let config = dir.path().join("client.properties");
    std::fs::write(
        &config,
        format!(
            "zookeeper.client.secure=true\n\
             zookeeper.clientCnxnSocket=org.apache.zookeeper.ClientCnxnSocketNetty\n\
             zookeeper.ssl.keyStore.location={}\n\
             zookeeper.ssl.keyStore.type=PEM\n\
             zookeeper.ssl.trustStore.location={}\n\
             zookeeper.ssl.trustStore.type=PEM\n",
            bundle.display(),
            pki.ca().display()
        ),
    )
    .unwrap();
    let zkcli = |command: &[&str]| {
        let output = std::process::Command::new(lockkeeper_testkit::java())
            .arg("-cp")
            .arg(lockkeeper_testkit::curator_classpath())
            .arg("org.apache.zookeeper.ZooKeeperMain")
            .args(["-server", &secure.to_string()])
            .arg("-client-configuration")
            .arg(&config)
            .arg("-waitforconnection")
            .args(command)
            .output()
            .expect("run zkCli");
        let text = String::from_utf8_lossy(&output.stdout).into_owned();
        assert!(
            output.status.success(),
            "zkCli {command:?}: {text}{}",
            String::from_utf8_lossy(&output.stderr)
        );
        text
    };
    zkcli(&["create", "/zkcli-tls", "hello"]);
    let read = zkcli(&["get", "/zkcli-tls"]);
    assert!(read.contains("hello"), "zkCli read back: {read}");
}
