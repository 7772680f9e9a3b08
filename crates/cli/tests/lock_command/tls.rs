//! `lockkeeper lock` over TLS with a client certificate, on every backend: `zk+tls://` to
//! Keeper's secure listener, `rediss://` to a redis-server TLS port, `etcd+https://` to an etcd
//! member with `--client-cert-auth`, the files given as flags or as `LOCKKEEPER_TLS_*`; a server
//! signed by a CA it does not trust ends in exit 69 naming the address and the TLS reason, and
//! a TLS URL without its CA is a usage error (64). And SASL DIGEST-MD5 credentials on Keeper.

use lockkeeper_testkit::{Keeper, RedisServer, RedisTls};
use lockkeeper_tls::testing::{Issued, Pki};
use rcgen::DnType;

use crate::support::{RUN_LIMIT, assert_code, assert_said, finish, lock_command, run_expecting};

fn flags(pki: &Pki, client: &Issued) -> Vec<String> {
    vec![
        "--tls-ca".into(),
        pki.ca().display().to_string(),
        "--tls-cert".into(),
        client.cert.display().to_string(),
        "--tls-key".into(),
        client.key.display().to_string(),
    ]
}

/// `lockkeeper lock` of `name` with `tls` flags, to its end: exit 0 and the token printed.
fn locks(backend: &str, name: &str, tls: &[String], label: &str) {
    let mut args: Vec<&str> = tls.iter().map(String::as_str).collect();
    args.extend([
        "--try",
        name,
        "--",
        "sh",
        "-c",
        "echo token=$LOCKKEEPER_FENCING_TOKEN",
    ]);
    let output = run_expecting(backend, &args, 0, label);
    assert!(
        String::from_utf8_lossy(&output.stdout).contains("token="),
        "{label}: the command ran"
    );
}

/// A server signed by another CA: exit 69 naming the address and UnknownIssuer.
fn untrusted(backend: &str, address: &str, other: &Pki, client: &Issued, label: &str) {
    let tls = flags(other, client);
    let mut args: Vec<&str> = tls.iter().map(String::as_str).collect();
    args.extend(["--connect-timeout", "3s", "--try", "/tls", "--", "true"]);
    let output = run_expecting(backend, &args, 69, label);
    assert_said(&output, address);
    assert_said(&output, "UnknownIssuer");
}

#[test]
fn zk_tls_to_keeper_with_flags_and_variables() {
    let pki = Pki::new("test-ca");
    let other = Pki::new("other-ca");
    let keeper = Keeper::start_tls(pki.server_files("keeper", true));
    let secure = keeper.secure_addr();
    let alice = pki.client("alice", &[(DnType::CommonName, "alice")]);
    let backend = format!("zk+tls://{secure}");
    locks(
        &backend,
        "/tls",
        &flags(&pki, &alice),
        "zk+tls:// with flags",
    );

    // The same through LOCKKEEPER_TLS_*.
    let child = lock_command(&backend, &["--try", "/tls", "--", "true"])
        .env("LOCKKEEPER_TLS_CA", pki.ca())
        .env("LOCKKEEPER_TLS_CERT", &alice.cert)
        .env("LOCKKEEPER_TLS_KEY", &alice.key)
        .spawn()
        .expect("start lockkeeper");
    assert_code(
        &finish(child, RUN_LIMIT, "variables"),
        0,
        "zk+tls:// with variables",
    );

    untrusted(
        &backend,
        &secure.to_string(),
        &other,
        &alice,
        "zk+tls:// untrusted",
    );
    let output = run_expecting(&backend, &["--try", "/tls", "--", "true"], 64, "no CA");
    assert_said(&output, "needs --tls-ca");
}

#[test]
fn rediss_with_a_client_certificate() {
    let pki = Pki::new("test-ca");
    let other = Pki::new("other-ca");
    let Issued { cert, key } = pki.server("redis");
    let redis = RedisServer::start_tls(RedisTls {
        cert,
        key,
        ca: pki.ca().to_owned(),
        auth_clients: true,
    });
    let alice = pki.client("alice", &[(DnType::CommonName, "alice")]);
    locks(&redis.tls_url(), "tls", &flags(&pki, &alice), "rediss://");
    let address = redis.tls_url().trim_start_matches("rediss://").to_owned();
    untrusted(
        &redis.tls_url(),
        &address,
        &other,
        &alice,
        "rediss:// untrusted",
    );
}

#[cfg(feature = "etcd")]
#[test]
fn etcd_https_with_a_client_certificate() {
    use lockkeeper_testkit::{Etcd, EtcdTls};
    let pki = Pki::new("test-ca");
    let other = Pki::new("other-ca");
    let Issued { cert, key } = pki.server("etcd");
    let etcd = Etcd::start_tls(EtcdTls {
        cert,
        key,
        ca: pki.ca().to_owned(),
        client_cert_auth: true,
    });
    let alice = pki.client("alice", &[(DnType::CommonName, "alice")]);
    let address = etcd
        .secure_endpoint()
        .trim_start_matches("https://")
        .to_owned();
    let backend = format!("etcd+https://{address}");
    locks(&backend, "tls", &flags(&pki, &alice), "etcd+https://");
    untrusted(
        &backend,
        &address,
        &other,
        &alice,
        "etcd+https:// untrusted",
    );
}

/// `--sasl-user` with `LOCKKEEPER_SASL_PASSWORD` on Keeper: the right password locks, a wrong
/// one is exit 77 saying the credentials were refused, and on Redis the flag is a usage error.
#[test]
fn sasl_digest_credentials_on_keeper() {
    use lockkeeper_server::SaslUsers;
    let keeper = Keeper::start_configured(|config| {
        config.sasl_users = Some(SaslUsers::new([("jaasuser", "jaas_password")]));
    });
    let backend = format!("zk://{}", lockkeeper_testkit::TestServer::addr(&keeper));
    let run = |password: &str| {
        let child = lock_command(
            &backend,
            &["--sasl-user", "jaasuser", "--try", "/sasl", "--", "true"],
        )
        .env("LOCKKEEPER_SASL_PASSWORD", password)
        .spawn()
        .expect("start lockkeeper");
        finish(child, RUN_LIMIT, "sasl")
    };
    assert_code(&run("jaas_password"), 0, "the right password");
    let refused = run("wrong");
    assert_code(&refused, 77, "a wrong password");
    assert_said(&refused, "refused the credentials");
    let output = run_expecting(
        "redis://127.0.0.1:1",
        &[
            "--sasl-user",
            "u",
            "--sasl-password",
            "p",
            "--try",
            "x",
            "--",
            "true",
        ],
        64,
        "SASL on Redis",
    );
    assert_said(&output, "is for ZooKeeper and Keeper");
}
