//! A service instance in a [`Group`]: it joins as the id it is given, prints who is in the group,
//! then every join, update and leave, until Ctrl-C, when it leaves.
//!
//! Start a server, then run it in two or three terminals with different ids; stop one with
//! Ctrl-C (it leaves at once) or kill it with `kill -9` (it leaves once its session expires):
//!
//! ```sh
//! cargo run --release -- serve                                          # Keeper on 127.0.0.1:2181
//! cargo run --release -p lockkeeper --example zk_group -- worker-a      # default 127.0.0.1:2181
//! cargo run --release -p lockkeeper --example zk_group -- worker-b 127.0.0.1:2181/myapp
//! ```
//!
//! The layout is Curator's `GroupMember` (`/examples/zk_group/{id}`, ephemeral, the payload as
//! data), so a Java instance using Curator shows up here, and this one there.
//!
//! [`Group`]: lockkeeper::zk::Group

use lockkeeper::zk::{MemberEvent, Session};
use tokio::signal::unix::{SignalKind, signal};

/// The group every copy of this example joins.
const GROUP_PATH: &str = "/examples/zk_group";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let id = args
        .next()
        .unwrap_or_else(|| format!("pid-{}", std::process::id()));
    let connect = args.next().unwrap_or_else(|| "127.0.0.1:2181".to_owned());
    // Listening from the start: a Ctrl-C at any moment from here on is heard, never lost
    // between two turns of the loop below.
    let mut interrupt = signal(SignalKind::interrupt())?;
    let session = Session::connect(&connect).await?;
    let group = session.group(GROUP_PATH)?;

    let member = group.join(&id, "starting").await?;
    if !member.is_present() {
        println!("{id} is taken by another session; joining once it is gone");
        member.present().await;
    }
    // The payload is the member's to change: here, a readiness flag other instances can see.
    member.update("ready").await?;
    println!("joined {GROUP_PATH} as {id}");

    let mut view = group.watch().await?;
    for (other, data) in view.members() {
        println!("  member {other}: {}", String::from_utf8_lossy(&data));
    }
    loop {
        tokio::select! {
            _ = interrupt.recv() => break,
            event = view.next() => match event {
                Some(MemberEvent::Joined { id, data }) => {
                    println!("+ {id} joined: {}", String::from_utf8_lossy(&data));
                }
                Some(MemberEvent::Updated { id, data, .. }) => {
                    println!("~ {id} is now: {}", String::from_utf8_lossy(&data));
                }
                Some(MemberEvent::Left { id, .. }) => println!("- {id} left"),
                None => break,
            },
        }
    }
    member.leave().await?;
    println!("left");
    session.close().await;
    Ok(())
}
