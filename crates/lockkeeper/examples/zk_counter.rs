//! Shared counters on ZooKeeper: an order-number [`AtomicLong`] and a watched
//! [`SharedCount`], both in Curator's layouts.
//!
//! It takes a few order numbers (each `add_fetch(1)` is applied exactly once, whoever else
//! increments the same node), then raises a shared worker count by one with a versioned
//! `try_set`, and watches the count for a while. Start a server, then run it in two terminals at
//! once: the order numbers never repeat, and each copy sees the other's change of the count.
//!
//! ```sh
//! cargo run --release -- serve                                  # Keeper on 127.0.0.1:2181
//! cargo run --release -p lockkeeper --example zk_counter        # default 127.0.0.1:2181
//! cargo run --release -p lockkeeper --example zk_counter -- 127.0.0.1:2181/myapp
//! ```
//!
//! A Curator service reads the same numbers with `new DistributedAtomicLong(client,
//! "/examples/counters/orders", retryPolicy)` and `new SharedCount(client,
//! "/examples/counters/workers", 1)`.
//!
//! [`AtomicLong`]: lockkeeper::zk::AtomicLong
//! [`SharedCount`]: lockkeeper::zk::SharedCount

use std::time::Duration;

use lockkeeper::zk::{RetryPolicy, Session};

const ORDERS: &str = "/examples/counters/orders";
const ORDERS_LOCK: &str = "/examples/counters/orders-lock";
const WORKERS: &str = "/examples/counters/workers";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let connect = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:2181".to_owned());
    let session = Session::connect(&connect).await?;

    // Five quick tries, then queue on a lock rather than keep colliding.
    let orders = session
        .atomic_long(ORDERS)?
        .optimistic_retries(RetryPolicy::exponential(
            Duration::from_millis(5),
            Duration::from_millis(100),
            5,
        ))
        .promote_to_lock(ORDERS_LOCK, Duration::from_secs(10))?;
    for _ in 0..3 {
        println!("order number {}", orders.add_fetch(1).await?);
    }

    // The seed applies only if nobody created the count before.
    let workers = session.shared_count(WORKERS, 1).await?;
    loop {
        let seen = workers.versioned();
        if workers.try_set(&seen, seen.value + 1).await? {
            println!("workers: {} -> {}", seen.value, seen.value + 1);
            break;
        }
        println!(
            "workers changed under us (now {}); trying again",
            workers.load()
        );
    }

    println!("watching {WORKERS} for 10 s");
    let mut changes = workers.changes();
    let watching = async {
        while let Some(now) = changes.next().await {
            println!("workers is now {} (version {})", now.value, now.version);
        }
    };
    let _ = tokio::time::timeout(Duration::from_secs(10), watching).await;
    session.close().await;
    Ok(())
}
