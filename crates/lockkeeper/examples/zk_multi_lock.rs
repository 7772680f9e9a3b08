//! A transfer between two accounts under a ZooKeeper [`MultiLock`]: both account locks are held
//! for the transfer, or neither. Run two copies with the accounts in opposite orders: the
//! multi-lock takes them in one canonical order, so they cannot deadlock.
//!
//! ```sh
//! cargo run --release -- serve                                                  # Keeper on 127.0.0.1:2181
//! cargo run --release -p lockkeeper --example zk_multi_lock -- alice bob
//! cargo run --release -p lockkeeper --example zk_multi_lock -- bob alice 127.0.0.1:2181
//! ```
//!
//! [`MultiLock`]: lockkeeper::MultiLock

use std::time::Duration;

use std::sync::Arc;

use lockkeeper::zk::Session;
use lockkeeper::{Lock, MultiLock};

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let from = args.first().map_or("alice", String::as_str);
    let to = args.get(1).map_or("bob", String::as_str);
    let connect = args.get(2).map_or("127.0.0.1:2181", String::as_str);
    let session = Session::connect(connect).await?;
    let locks: [Arc<dyn Lock>; 2] = [
        Arc::new(session.mutex(&format!("/examples/accounts/{from}"))?),
        Arc::new(session.mutex(&format!("/examples/accounts/{to}"))?),
    ];
    let accounts = MultiLock::new(locks)?;
    for round in 1..=5 {
        let guard = accounts.lock().await?;
        // Each account's store would check its own lock's token.
        println!(
            "transfer {round} {from} -> {to}, tokens {:?}",
            guard.fencing_tokens()
        );
        tokio::select! {
            () = guard.lost() => println!("a lock was lost mid-transfer: abandon it"),
            () = tokio::time::sleep(Duration::from_millis(500)) => {}
        }
        guard.release().await?;
    }
    Ok(())
}
