//! SASL DIGEST-MD5 with `lockkeeper-zk-client`, against Keeper and Apache ZooKeeper configured
//! with the same JAAS user list: the right password authenticates the connection, whose id
//! then passes a `sasl` ACL that others fail and is what `auth` expands to; a wrong password
//! or an unknown user ends the connect with `AuthFailed` at once, not at the timeout.

use std::time::{Duration, Instant};

use lockkeeper_server::SaslUsers;
use lockkeeper_testkit::{ApacheZk, Keeper, TestServer, ZkOptions};
use lockkeeper_zk_client::{Acl, Client, CreateMode, CreateOptions, Error, Id, perms};

/// The users kazoo's test harness gives ZooKeeper for its SASL tests.
const JAAS: &str = r#"
Server {
    org.apache.zookeeper.server.auth.DigestLoginModule required
    user_super="super_secret"
    user_jaasuser="jaas_password";
};"#;
const CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

fn acl(scheme: &str, id: &str) -> Vec<Acl> {
    vec![Acl {
        perms: perms::ALL,
        id: Id {
            scheme: scheme.into(),
            id: id.into(),
        },
    }]
}

async fn connect(address: &str, sasl: Option<(&str, &str)>) -> Result<Client, Error> {
    let mut connector = Client::connector().connection_timeout(CONNECT_TIMEOUT);
    if let Some((user, password)) = sasl {
        connector = connector.sasl_digest(user, password);
    }
    connector.connect(address).await
}

async fn sasl_on(server: &dyn TestServer) {
    let name = server.name();
    let address = server.connect_string();
    let user = connect(&address, Some(("jaasuser", "jaas_password")))
        .await
        .unwrap_or_else(|e| panic!("{name}: jaasuser connects: {e}"));
    let plain = connect(&address, None).await.expect("a plain session");
    let only_jaasuser =
        CreateOptions::new(CreateMode::Persistent).with_acl(acl("sasl", "jaasuser"));
    user.create("/sasl", b"x", &only_jaasuser)
        .await
        .expect("create");
    assert_eq!(
        user.get_data("/sasl").await.expect("read").0,
        b"x",
        "{name}"
    );
    assert!(
        matches!(plain.get_data("/sasl").await, Err(Error::NoAuth)),
        "{name}: an unauthenticated session"
    );
    let auth = CreateOptions::new(CreateMode::Persistent).with_acl(acl("auth", ""));
    user.create("/sasl-auth", b"", &auth)
        .await
        .expect("create with auth");
    let (expanded, _) = user.get_acl("/sasl-auth").await.expect("get_acl");
    assert_eq!(
        expanded,
        acl("sasl", "jaasuser"),
        "{name}: auth expands to the SASL user"
    );

    for (who, password) in [("jaasuser", "wrong"), ("baduser", "badpassword")] {
        let started = Instant::now();
        let refused = connect(&address, Some((who, password))).await;
        assert!(
            matches!(refused, Err(Error::AuthFailed)),
            "{name}: {who}/{password}: {refused:?}"
        );
        assert!(
            started.elapsed() < CONNECT_TIMEOUT,
            "{name}: refused credentials end the connect at once, not at the timeout"
        );
    }
    user.close().await;
    plain.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn digest_md5_on_keeper_and_apache_zookeeper_alike() {
    let dir = tempfile::tempdir().unwrap();
    let jaas = dir.path().join("jaas.conf");
    std::fs::write(&jaas, JAAS).unwrap();
    let keeper = Keeper::start_configured(|config| {
        config.sasl_users = Some(SaslUsers::from_jaas_file(&jaas).unwrap());
    });
    sasl_on(&keeper).await;
    let zookeeper = ApacheZk::start_with(ZkOptions {
        jaas: Some(jaas),
        ..ZkOptions::default()
    });
    sasl_on(&zookeeper).await;
}

#[tokio::test]
async fn without_sasl_users_an_exchange_is_refused_and_the_password_never_shown() {
    let keeper = Keeper::start();
    let refused = connect(
        &keeper.connect_string(),
        Some(("jaasuser", "jaas_password")),
    )
    .await;
    assert!(matches!(refused, Err(Error::AuthFailed)), "{refused:?}");
    let shown = format!("{:?}", Client::connector().sasl_digest("u", "hunter2"));
    assert!(!shown.contains("hunter2"), "{shown}");
}
