//! The peer of `lockkeeper-bench --etcd`: etcd's own lock service (the v3lock `Lock` and
//! `Unlock` RPCs, which etcd serves with Go's `concurrency.Mutex` inside the server), driven
//! through `etcd-client`'s `LockClient` as a Rust service would use it.
//!
//! One [`V3Lock`] is one client: its own gRPC connection and its own lease (the session of
//! etcd's lock API), granted with the run's TTL and kept alive by a task of its own every third
//! of it. Invariants: every call is bounded (connecting by the connect limit, a `Lock` by
//! [`ACQUIRE_LIMIT`], the others by [`CALL_LIMIT`]); closing stops the keep-alive and revokes
//! the lease, which deletes any lock key the client still has, so a failed run leaves nothing
//! behind for the next one.

use std::time::{Duration, Instant};

use etcd_client::{Client, ConnectOptions, LockOptions};
use tokio::task::JoinHandle;

use crate::BoxError;
use crate::locks::ACQUIRE_LIMIT;

/// Bound on one RPC other than `Lock` (grant, unlock, revoke).
const CALL_LIMIT: Duration = Duration::from_secs(10);

/// One client of etcd's lock service, holding a lease.
pub(super) struct V3Lock {
    client: Client,
    lease: i64,
    name: String,
    endpoint: String,
    keep_alive: JoinHandle<()>,
}

impl V3Lock {
    /// Connects to `endpoint` (`host:port`), grants a lease of `ttl` (whole seconds, at least
    /// one) and keeps it alive; every step bounded by `connect_limit`.
    pub(super) async fn open(
        endpoint: &str,
        name: &str,
        ttl: Duration,
        connect_limit: Duration,
    ) -> Result<V3Lock, BoxError> {
        let options = ConnectOptions::new()
            .with_connect_timeout(connect_limit)
            .with_timeout(ACQUIRE_LIMIT + CALL_LIMIT);
        let client = bounded(
            connect_limit,
            Client::connect([endpoint], Some(options)),
            || format!("connect to etcd at {endpoint}"),
        )
        .await?;
        let seconds = i64::try_from(ttl.as_secs().max(1)).unwrap_or(i64::MAX);
        let mut leases = client.lease_client();
        let lease = bounded(connect_limit, leases.grant(seconds, None), || {
            format!("grant a lease of {seconds} s at {endpoint}")
        })
        .await?
        .id();
        let (mut keeper, mut answers) = bounded(connect_limit, leases.keep_alive(lease), || {
            format!("keep lease {lease:x} alive at {endpoint}")
        })
        .await?;
        let period = Duration::from_secs(u64::try_from(seconds).unwrap_or(1)) / 3;
        let keep_alive = tokio::spawn(async move {
            // A failed renewal ends the task; a lost lease then shows as a failed Unlock.
            loop {
                tokio::time::sleep(period).await;
                if keeper.keep_alive().await.is_err() {
                    return;
                }
                match tokio::time::timeout(CALL_LIMIT, answers.message()).await {
                    Ok(Ok(Some(_))) => {}
                    _ => return,
                }
            }
        });
        Ok(V3Lock {
            client,
            lease,
            name: name.to_string(),
            endpoint: endpoint.to_string(),
            keep_alive,
        })
    }

    /// One `Lock` + `Unlock` on the lock's name; returns how long `Lock` took to answer (the
    /// wait for the grant).
    pub(super) async fn cycle(&self) -> Result<Duration, BoxError> {
        let mut locks = self.client.lock_client();
        let asked = Instant::now();
        let options = LockOptions::new().with_lease(self.lease);
        let granted = bounded(
            ACQUIRE_LIMIT,
            locks.lock(self.name.as_str(), Some(options)),
            || format!("v3lock Lock {:?} at {}", self.name, self.endpoint),
        )
        .await?;
        let waited = asked.elapsed();
        bounded(CALL_LIMIT, locks.unlock(granted.key()), || {
            format!("v3lock Unlock {:?} at {}", self.name, self.endpoint)
        })
        .await?;
        Ok(waited)
    }

    /// Stops the keep-alive and revokes the lease (best effort, bounded).
    pub(super) async fn close(self) {
        self.keep_alive.abort();
        let mut leases = self.client.lease_client();
        let _ = tokio::time::timeout(CALL_LIMIT, leases.revoke(self.lease)).await;
    }
}

/// `call` within `limit`, its error or the timeout named by `what`.
async fn bounded<T>(
    limit: Duration,
    call: impl Future<Output = Result<T, etcd_client::Error>>,
    what: impl FnOnce() -> String,
) -> Result<T, BoxError> {
    match tokio::time::timeout(limit, call).await {
        Ok(Ok(value)) => Ok(value),
        Ok(Err(e)) => Err(format!("{}: {e}", what()).into()),
        Err(_) => Err(format!("{}: no answer within {limit:?}", what()).into()),
    }
}
