//! A replica that does its work only while it leads, with a ZooKeeper [`LeaderLatch`].
//!
//! Every copy joins the election under its own id; the one that leads runs the leader's loop
//! (here: a tick a second, tagged with its fencing token) until it can no longer be sure it
//! leads, then queues again at the back. Start a server, then run it in two or three terminals;
//! stop the leader (Ctrl-C, or `kill -9` to see a session expire) and watch another take over.
//!
//! ```sh
//! cargo run --release -- serve                                          # Keeper on 127.0.0.1:2181
//! cargo run --release -p lockkeeper --example zk_election -- replica-a  # id, then connect string
//! cargo run --release -p lockkeeper --example zk_election -- replica-b 127.0.0.1:2181
//! ```
//!
//! [`LeaderLatch`]: lockkeeper::zk::LeaderLatch

use std::time::Duration;

use lockkeeper::zk::Session;
use tokio::signal::unix::{SignalKind, signal};

/// The election every copy of this example joins.
const ELECTION: &str = "/examples/zk_election";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let id = args
        .next()
        .unwrap_or_else(|| format!("replica-{}", std::process::id()));
    let connect = args.next().unwrap_or_else(|| "127.0.0.1:2181".to_owned());
    // Listening from the start: a Ctrl-C at any moment from here on is heard, never lost
    // between two turns of the loop below.
    let mut interrupt = signal(SignalKind::interrupt())?;
    let session = Session::connect(&connect).await?;
    let latch = session.leader_latch(ELECTION, &id)?;
    match latch.leader().await? {
        Some(leader) => println!("{id}: {} leads now; queueing", leader.id),
        None => println!("{id}: nobody leads yet"),
    }

    let election = latch.run(|term| {
        let id = id.clone();
        async move {
            // Only now is this replica the leader; every write carries the term's token, so a
            // resource that refuses lower tokens refuses this replica once it is deposed.
            println!("{id}: leading, fencing token {}", term.fencing_token());
            let mut ticks = tokio::time::interval(Duration::from_secs(1));
            loop {
                ticks.tick().await;
                println!("{id}: leader tick (token {})", term.fencing_token());
            }
        }
    });
    tokio::select! {
        ended = election => ended?,
        _ = interrupt.recv() => {
            // Closing the session deletes the latch node at once: the next replica leads
            // without waiting for a session timeout.
            session.close().await;
            println!("{id}: left the election");
        }
    }
    Ok(())
}
