//! Why a lock needs a fence, shown in one process: a holder loses its ZooKeeper lock without
//! knowing it yet (here its node is revoked by force, as `lockkeeper revoke --force` does; a GC
//! pause past the session does the same), the next holder takes the lock and writes, and then
//! the old holder's late write arrives. The lock cannot stop that write; the fences refuse it,
//! a [`LocalFence`] by its older fencing token, a [`ZkFence`] by its token too (and, had nobody
//! newer written yet, because the writer's lock node is gone).
//!
//! ```sh
//! cargo run --release -- serve                                   # Keeper on 127.0.0.1:2181
//! cargo run --release -p lockkeeper --example zk_fence           # default 127.0.0.1:2181
//! cargo run --release -p lockkeeper --example zk_fence -- 127.0.0.1:2181/myapp
//! ```
//!
//! [`LocalFence`]: lockkeeper::LocalFence
//! [`ZkFence`]: lockkeeper::ZkFence

use std::time::Duration;

use lockkeeper::fence::Outcome;
use lockkeeper::zk::Session;
use lockkeeper::{LocalFence, ZkFence};

const LOCK_PATH: &str = "/examples/zk_fence/lock";
const RESOURCE_PATH: &str = "/examples/zk_fence/balance";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let connect = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:2181".to_owned());
    let (old_session, new_session) = (
        Session::connect(&connect).await?,
        Session::connect(&connect).await?,
    );
    let local = LocalFence::new();
    let znode = ZkFence::new(&new_session, RESOURCE_PATH)?;
    let mut balance = 0;

    let old = old_session.mutex(LOCK_PATH)?.lock().await?;
    println!("old holder: token {}", old.fencing_token());

    // The old holder is stalled; meanwhile its node is deleted and the next holder goes ahead.
    new_session.revoke(old.node(), Duration::ZERO).await?;
    let new = new_session.mutex(LOCK_PATH)?.lock().await?;
    println!("new holder: token {}", new.fencing_token());
    // The first writes with the new token: both fences accept them.
    let local_outcome = local.write("balance", new.fencing_token(), || balance = 100)?;
    let znode_outcome = znode.write(&new, b"100").await?;
    if local_outcome != Outcome::Accepted || znode_outcome != Outcome::Accepted {
        return Err("a fence refused the current holder".into());
    }
    println!("new holder wrote 100");

    // The old holder wakes up and writes what it computed before its stall.
    match local.write("balance", old.fencing_token(), || balance = 50)? {
        Outcome::Refused { highest } => {
            println!("local fence refused the old holder's write: token {highest} came first");
        }
        Outcome::Accepted => return Err("the local fence accepted a stale write".into()),
    }
    // The ZooKeeper fence refuses it twice over: by its token, and because the writer's lock
    // node is gone (which alone refuses a stale holder before anyone newer has written).
    let stale = ZkFence::new(&old_session, RESOURCE_PATH)?;
    match stale.write(&old, b"50").await {
        Ok(Outcome::Refused { highest }) => {
            println!("ZooKeeper fence refused the old holder's write: token {highest} came first");
        }
        Err(lockkeeper::Error::NotHeld) => {
            println!("ZooKeeper fence refused the old holder's write: its lock node is gone");
        }
        other => return Err(format!("the ZooKeeper fence answered {other:?}").into()),
    }
    println!("balance is {balance}");
    new.release().await?;
    old_session.close().await;
    new_session.close().await;
    Ok(())
}
