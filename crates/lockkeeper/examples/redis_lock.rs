//! A job that must run in one process at a time, guarded by a Redis [`LeaseLock`]: a lease that
//! a watchdog renews while the job runs, a fencing token from the same script that takes the
//! lock, and a signal if the lease is lost. Run it in two terminals at once and the second
//! waits for the first, woken by the release (no polling).
//!
//! ```sh
//! redis-server --port 6379 --appendonly yes --appendfsync always
//! cargo run --release -p lockkeeper --example redis_lock        # redis://127.0.0.1:6379
//! cargo run --release -p lockkeeper --example redis_lock -- redis://10.0.0.7:6379/2
//! ```
//!
//! [`LeaseLock`]: lockkeeper::redis::LeaseLock

use std::time::Duration;

use lockkeeper::redis::Redis;

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let url = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "redis://127.0.0.1:6379".to_owned());
    let redis = Redis::connect(&url).await?;
    let lock = redis.lease_lock("examples:redis_lock");
    let guard = match lock.try_lock().await? {
        Some(guard) => guard,
        None => {
            println!("busy; waiting for the release");
            lock.lock().await?
        }
    };
    println!("holding with fencing token {}", guard.fencing_token());
    let finished = tokio::select! {
        () = guard.lost() => false,
        () = work(guard.fencing_token().get()) => true,
    };
    if !finished {
        eprintln!("lost the lease mid-work: stopped");
        std::process::exit(1);
    }
    guard.release().await?;
    println!("released");
    Ok(())
}

/// Stands for the job: a few steps, each of which would write with the fencing token.
async fn work(token: u64) {
    for step in 1..=5 {
        println!("  step {step}/5 (writes carry token {token})");
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}
