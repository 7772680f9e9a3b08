//! How the differential test talks to a server through `zookeeper-client`: bounded calls,
//! sessions that open authenticated and close for sure, digest credentials and the ACLs and
//! create options the operations ask for.

use std::future::Future;
use std::time::Duration;

use base64::Engine as _;
use sha1::{Digest as _, Sha1};
use zookeeper_client::{
    Acl, Acls, AuthId, Client, CreateMode, CreateOptions, Permission, SessionState,
};

use super::ops::{AclChoice, NodeKind, USERS};

/// How long any single request may take. Generous: the machine is shared and Keeper syncs its
/// log to disk; this only turns a hang into a reported difference.
pub(crate) const OP_TIMEOUT: Duration = Duration::from_secs(15);

/// Session timeout asked for. Long, so that a loaded machine never expires a session mid-run.
pub(crate) const SESSION_TIMEOUT: Duration = Duration::from_secs(30);

/// TTL of TTL nodes: far longer than a run, so expiry never races the comparison.
pub(crate) const TTL: Duration = Duration::from_secs(3600);

/// `user:password` for [`USERS`]`[user]`, as addauth digest takes it.
pub(crate) fn credential(user: usize) -> String {
    let (name, password) = USERS[user];
    format!("{name}:{password}")
}

/// The digest ACL id for [`USERS`]`[user]`: `user:base64(sha1(user:password))`.
pub(crate) fn digest_id(user: usize) -> String {
    let hash = Sha1::digest(credential(user).as_bytes());
    format!(
        "{}:{}",
        USERS[user].0,
        base64::engine::general_purpose::STANDARD.encode(hash)
    )
}

pub(crate) fn acl_list(choice: AclChoice) -> Vec<Acl> {
    let digest = |user: usize| AuthId::new("digest", &digest_id(user));
    match choice {
        AclChoice::AnyoneAll => vec![Acl::new(Permission::ALL, AuthId::anyone())],
        AclChoice::AnyoneRead => vec![Acl::new(Permission::READ, AuthId::anyone())],
        AclChoice::CreatorAll => vec![Acl::new(Permission::ALL, AuthId::authed())],
        AclChoice::Alice => vec![Acl::new(Permission::ALL, digest(0))],
        AclChoice::Mixed => vec![
            Acl::new(Permission::ALL, digest(0)),
            Acl::new(Permission::READ, digest(1)),
            Acl::new(Permission::CREATE | Permission::READ, AuthId::anyone()),
        ],
        AclChoice::Loopback => vec![Acl::new(Permission::ALL, AuthId::new("ip", "127.0.0.1"))],
        AclChoice::ForeignNetOrBob => vec![
            Acl::new(Permission::READ, AuthId::new("ip", "10.0.0.0/8")),
            Acl::new(Permission::ALL, digest(1)),
        ],
        AclChoice::NoDelete => vec![Acl::new(
            Permission::READ | Permission::WRITE | Permission::CREATE | Permission::ADMIN,
            AuthId::anyone(),
        )],
        AclChoice::Malformed => vec![Acl::new(Permission::ALL, AuthId::new("digest", "alice"))],
    }
}

pub(crate) fn create_options(kind: NodeKind, acls: Acls<'_>) -> CreateOptions<'_> {
    match kind {
        NodeKind::Persistent => CreateMode::Persistent.with_acls(acls),
        NodeKind::Ephemeral => CreateMode::Ephemeral.with_acls(acls),
        NodeKind::PersistentSequential => CreateMode::PersistentSequential.with_acls(acls),
        NodeKind::EphemeralSequential => CreateMode::EphemeralSequential.with_acls(acls),
        NodeKind::Container => CreateMode::Container.with_acls(acls),
        NodeKind::Ttl => CreateMode::Persistent.with_acls(acls).with_ttl(TTL),
        NodeKind::TtlSequential => CreateMode::PersistentSequential
            .with_acls(acls)
            .with_ttl(TTL),
    }
}

/// ACL entries as `scheme:id:PERMS`, sorted: see `compare.rs` on why order is not compared.
pub(crate) fn show_acl(acl: &[Acl]) -> Vec<String> {
    sorted(
        acl.iter()
            .map(|a| format!("{}:{}:{}", a.scheme(), a.id(), a.permission()))
            .collect(),
    )
}

pub(crate) fn text(data: &[u8]) -> String {
    String::from_utf8_lossy(data).into_owned()
}

pub(crate) fn sorted(mut names: Vec<String>) -> Vec<String> {
    names.sort();
    names
}

/// Awaits a client call for at most [`OP_TIMEOUT`]; errors become their names.
pub(crate) async fn bounded<T>(
    call: impl Future<Output = Result<T, zookeeper_client::Error>>,
) -> Result<T, String> {
    match tokio::time::timeout(OP_TIMEOUT, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(format!("{e:?}")),
        Err(_) => Err(format!("no answer within {OP_TIMEOUT:?}")),
    }
}

/// Opens a session and authenticates it as `users`.
pub(crate) async fn connect(connect_string: &str, users: &[usize]) -> Result<Client, String> {
    let client = bounded(
        Client::connector()
            .with_session_timeout(SESSION_TIMEOUT)
            .connect(connect_string),
    )
    .await
    .map_err(|e| format!("connect to {connect_string}: {e}"))?;
    for &user in users {
        bounded(client.auth("digest", credential(user).as_bytes()))
            .await
            .map_err(|e| format!("addauth on a new session: {e}"))?;
    }
    Ok(client)
}

/// Closes a session and waits until the server has confirmed it, so that its ephemerals are
/// gone before the next operation.
pub(crate) async fn close(client: Client) -> Result<(), String> {
    let mut state = client.state_watcher();
    drop(client);
    let wait = async {
        let mut now = state.peek_state();
        while !now.is_terminated() {
            now = state.changed().await;
        }
        now
    };
    match tokio::time::timeout(OP_TIMEOUT, wait).await {
        Ok(SessionState::Closed) => Ok(()),
        Ok(other) => Err(format!("session ended as {other:?}, not Closed")),
        Err(_) => Err(format!("session not closed within {OP_TIMEOUT:?}")),
    }
}
