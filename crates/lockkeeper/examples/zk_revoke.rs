//! Revoking a ZooKeeper lock: one copy holds the lock and gives it up when asked; another asks
//! (cooperative), or deletes the holder's node after a grace period (forced).
//!
//! ```sh
//! cargo run --release -- serve                                             # Keeper on 127.0.0.1:2181
//! cargo run --release -p lockkeeper --example zk_revoke -- hold            # holds until asked
//! cargo run --release -p lockkeeper --example zk_revoke -- ask             # asks every holder
//! cargo run --release -p lockkeeper --example zk_revoke -- force 5         # asks, then deletes after 5 s
//! ```
//!
//! A third argument, after the grace in seconds (which `hold` and `ask` ignore), is the connect
//! string (default `127.0.0.1:2181`). Curator's
//! `Revoker.attemptRevoke` asks a `hold` copy just as `ask` does, and `ask` reaches a Curator
//! holder that called `makeRevocable`.

use std::time::Duration;

use lockkeeper::zk::{Revoked, Session};

/// The lock every copy of this example uses.
const LOCK_PATH: &str = "/examples/zk_revoke";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let mode = args.first().map(String::as_str).unwrap_or("hold");
    let connect = args.get(2).map_or("127.0.0.1:2181", String::as_str);
    let session = Session::connect(connect).await?;
    match mode {
        "hold" => {
            let guard = session.mutex(LOCK_PATH)?.lock().await?;
            println!("holding {} (token {})", guard.node(), guard.fencing_token());
            tokio::select! {
                () = guard.revocation_requested() => println!("asked to give the lock up: releasing"),
                () = guard.lost() => println!("the lock was taken away (forced revocation or session loss)"),
            }
            // Releasing a lock that was taken away is Error::NotHeld: say so rather than fail.
            if let Err(err) = guard.release().await {
                println!("release: {err}");
            }
        }
        "ask" | "force" => {
            let grace = Duration::from_secs(args.get(1).and_then(|s| s.parse().ok()).unwrap_or(5));
            let inspection = session.inspect(LOCK_PATH).await?;
            for holder in inspection.holders() {
                if mode == "ask" {
                    let asked = session.request_revocation(&holder.path).await?;
                    println!("asked {} to let go: {asked}", holder.path);
                } else {
                    let outcome = session.revoke(&holder.path, grace).await?;
                    let what = match outcome {
                        Revoked::Released => "released within the grace period",
                        Revoked::Deleted => "did not let go: its node was deleted",
                        Revoked::AlreadyGone => "was already gone",
                    };
                    println!("{} {what}", holder.path);
                }
            }
        }
        other => return Err(format!("unknown mode {other:?}: hold, ask or force").into()),
    }
    Ok(())
}
