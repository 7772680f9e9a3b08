//! A job that must run in one process at a time, guarded by an etcd [`Mutex`].
//!
//! It connects (one lease, renewed every third of its TTL), takes the lock, does its work while
//! watching for the lock's loss, and releases. Run it in two terminals at once and the second
//! waits for the first; `etcdctl lock examples/etcd_mutex` in a third excludes both (the key
//! layout is Go's `concurrency.Mutex`).
//!
//! ```sh
//! etcd --listen-client-urls http://127.0.0.1:2379 --advertise-client-urls http://127.0.0.1:2379
//! cargo run -p lockkeeper --example etcd_mutex                    # 127.0.0.1:2379
//! cargo run -p lockkeeper --example etcd_mutex -- 127.0.0.1:2379,127.0.0.1:22379
//! ```
//!
//! The work stops at once if the lock can no longer be trusted (renewals failed until the
//! lease's deadline, or the key was deleted): that is what `lost()` is for.
//!
//! [`Mutex`]: lockkeeper::etcd::Mutex

use std::time::Duration;

use lockkeeper::etcd::Session;

/// The lock every copy of this example competes for.
const LOCK_NAME: &str = "examples/etcd_mutex";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let endpoints = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:2379".to_owned());
    let session = Session::builder(&endpoints)
        .ttl(Duration::from_secs(10))
        .connect()
        .await?;
    let mutex = session.mutex(LOCK_NAME)?;
    println!(
        "waiting for {} (lease {:x})",
        mutex.key(),
        session.lease_id()
    );
    let guard = mutex.lock().await?;
    println!(
        "holding {} with fencing token {}; working for 5 s",
        guard.key(),
        guard.fencing_token()
    );
    tokio::select! {
        () = guard.lost() => {
            eprintln!("lock lost: stopping the work");
            return Ok(());
        }
        () = tokio::time::sleep(Duration::from_secs(5)) => {}
    }
    guard.release().await?;
    println!("released");
    session.close().await?;
    Ok(())
}
