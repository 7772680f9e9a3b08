//! A job that must run in one process at a time, guarded by a ZooKeeper [`Mutex`].
//!
//! It connects, takes the lock, shows who holds and waits, does its work under the lock while
//! watching for the lock's loss, and releases. Start a server, then run it in two terminals
//! at once: the second one waits for the first.
//!
//! ```sh
//! cargo run --release -- serve                                  # Keeper on 127.0.0.1:2181
//! cargo run --release -p lockkeeper --example zk_mutex          # default 127.0.0.1:2181
//! cargo run --release -p lockkeeper --example zk_mutex -- 127.0.0.1:2181,127.0.0.1:2182
//! ```
//!
//! A connect string may end with a chroot (`127.0.0.1:2181/myapp`); a missing chroot is created.
//!
//! The work stops at once if the lock can no longer be trusted (the session was suspended or
//! expired): that is what `lost()` is for.
//!
//! [`Mutex`]: lockkeeper::zk::Mutex

use std::time::Duration;

use lockkeeper::zk::Session;

/// The lock every copy of this example competes for.
const LOCK_PATH: &str = "/examples/zk_mutex";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let connect = std::env::args()
        .nth(1)
        .unwrap_or_else(|| "127.0.0.1:2181".to_owned());
    let session = Session::connect(&connect).await?;
    println!(
        "connected to {connect} as session 0x{:x}",
        session.session_id()
    );

    let mutex = session.mutex(LOCK_PATH)?;
    let guard = match mutex.try_lock().await? {
        Some(guard) => guard,
        None => {
            println!(
                "busy; waiting behind:\n{}",
                session.inspect(LOCK_PATH).await?
            );
            mutex.lock().await?
        }
    };
    // The token goes with every write to the protected resource, which refuses a token lower
    // than the highest it has seen: a holder that paused past its session cannot overwrite.
    println!(
        "holding {} with fencing token {}",
        guard.node(),
        guard.fencing_token()
    );

    let finished = tokio::select! {
        () = guard.lost() => false,
        () = work(guard.fencing_token().get()) => true,
    };
    if !finished {
        eprintln!("lost the lock mid-work: stopped; the next holder starts over");
        session.close().await;
        std::process::exit(1);
    }
    guard.release().await?;
    println!("released");
    session.close().await;
    Ok(())
}

/// Stands for the job: a few steps, each of which would write with the fencing token.
async fn work(token: u64) {
    for step in 1..=5 {
        println!("  step {step}/5 (writes carry token {token})");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
}
