//! A transaction decided by two-phase commit: a coordinator proposes it to named sites, each
//! site votes commit or abort, and everyone learns the one decision written in ZooKeeper.
//!
//! Start a server, then the sites (each waits for the proposal), then the coordinator:
//!
//! ```sh
//! cargo run --release -- serve                                                # Keeper on 127.0.0.1:2181
//! cargo run --release -p lockkeeper --example zk_two_phase -- site east commit tx-1
//! cargo run --release -p lockkeeper --example zk_two_phase -- site west commit tx-1
//! cargo run --release -p lockkeeper --example zk_two_phase -- coordinator east,west tx-1
//! ```
//!
//! A site started with `abort` makes the transaction abort; a site never started, or killed
//! after it voted, makes it abort at the coordinator's 30 s vote timeout (or at once, when its
//! commit vote goes with its session). If the coordinator is killed before it decides,
//! `... zk_two_phase -- recover tx-1` decides abort in its place; `... -- decision tx-1` prints
//! the decision to anyone, and `... -- forget tx-1` removes the finished transaction. A last
//! argument `host:port` chooses the server (127.0.0.1:2181 by default).

use std::time::Duration;

use lockkeeper::zk::{Session, Vote};

const PATH: &str = "/examples/zk_two_phase";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let usage = "usage: zk_two_phase (site NAME commit|abort | coordinator SITE,SITE,... | \
                 recover | decision | forget) TX [host:port]";
    let role = args.first().ok_or(usage)?.as_str();
    let operands = match role {
        "site" => 3,
        "coordinator" => 2,
        _ => 1,
    };
    let tx = args.get(operands).ok_or(usage)?;
    let connect = args
        .get(operands + 1)
        .map_or("127.0.0.1:2181", String::as_str);
    let session = Session::connect(connect).await?;
    let two_phase = session.two_phase(PATH)?;

    match role {
        "site" => {
            let vote = match args[2].as_str() {
                "commit" => Vote::Commit,
                "abort" => Vote::Abort,
                other => return Err(format!("vote {other:?}: commit or abort").into()),
            };
            println!("{}: waiting for {tx} to be proposed", args[1]);
            let proposal = two_phase.join(tx, &args[1]).await?;
            println!(
                "{}: proposal {:?} to {}; voting {vote:?}",
                args[1],
                String::from_utf8_lossy(proposal.payload()),
                proposal.sites().join(", ")
            );
            let outcome = proposal.vote(vote).await?;
            println!("{}: {outcome}", args[1]);
        }
        "coordinator" => {
            let sites: Vec<&str> = args[1].split(',').collect();
            let payload = format!("{tx}: move 10 between {}", args[1]);
            println!("proposing {tx} to {}", sites.join(", "));
            let outcome = two_phase
                .propose(tx, &sites, payload.as_bytes(), Duration::from_secs(30))
                .await?;
            println!("decided: {outcome}");
        }
        "recover" => println!("decided: {}", two_phase.recover(tx).await?),
        "decision" => match two_phase.decision(tx).await? {
            Some(outcome) => println!("{tx}: {outcome}"),
            None => println!("{tx}: no decision (yet)"),
        },
        "forget" => {
            two_phase.forget(tx).await?;
            println!("{tx} removed");
        }
        _ => return Err(usage.into()),
    }
    Ok(())
}
