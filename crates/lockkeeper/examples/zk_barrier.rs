//! A worker in a group of `N` that start and finish a round of work together: a
//! [`DoubleBarrier`] holds each worker in `enter` until all `N` are in, and in `leave` until all
//! `N` are done. A coordinator can also hold the start behind a [`Barrier`] ("gate").
//!
//! Start a server, then run three workers in three terminals (a worker waits for the others):
//!
//! ```sh
//! cargo run --release -- serve                                      # Keeper on 127.0.0.1:2181
//! cargo run --release -p lockkeeper --example zk_barrier -- 3        # group of 3, 127.0.0.1:2181
//! cargo run --release -p lockkeeper --example zk_barrier -- 3 127.0.0.1:2181/myapp
//! ```
//!
//! With `gate` as the first argument it sets the gate, waits for Enter on stdin, and removes it:
//! workers started meanwhile wait at the gate first.
//!
//! The layouts are Curator's (`/examples/zk_barrier/round/{uuid}` and `.../round/ready`;
//! `/examples/zk_barrier/gate`), so Java workers using `DistributedDoubleBarrier` and
//! `DistributedBarrier` on these paths take part in the same rounds.
//!
//! [`DoubleBarrier`]: lockkeeper::zk::DoubleBarrier
//! [`Barrier`]: lockkeeper::zk::Barrier

use std::time::Duration;

use lockkeeper::zk::Session;

const ROUND_PATH: &str = "/examples/zk_barrier/round";
const GATE_PATH: &str = "/examples/zk_barrier/gate";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let first = args.next().unwrap_or_else(|| "2".to_owned());
    let connect = args.next().unwrap_or_else(|| "127.0.0.1:2181".to_owned());
    let session = Session::connect(&connect).await?;
    let gate = session.barrier(GATE_PATH)?;

    if first == "gate" {
        gate.set().await?;
        println!("gate set at {GATE_PATH}; press Enter to open it");
        let mut line = String::new();
        std::io::stdin().read_line(&mut line)?;
        gate.remove().await?;
        println!("gate open");
        return Ok(());
    }

    let members: u32 = first
        .parse()
        .map_err(|_| format!("the group size {first:?} is not a number"))?;
    let pid = std::process::id();
    if !gate.wait_timeout(Duration::from_secs(600)).await? {
        return Err("the gate stayed closed for 10 minutes".into());
    }

    let round = session.double_barrier(ROUND_PATH, members)?;
    println!("worker {pid}: waiting for {members} workers");
    let Some(mut entered) = round.enter_timeout(Duration::from_secs(600)).await? else {
        return Err(format!("fewer than {members} workers came within 10 minutes").into());
    };
    println!("worker {pid}: everyone is in, working");
    // Uneven work, so that the quick workers visibly wait for the slow ones in leave.
    tokio::time::sleep(Duration::from_millis(500 + u64::from(pid % 7) * 300)).await;
    println!("worker {pid}: done, waiting for the others to finish");
    entered.leave().await?;
    println!("worker {pid}: everyone has finished");
    Ok(())
}
