//! A service that reads its configuration from a watched ZooKeeper subtree and registers its
//! address under a name, so that clients can resolve it.
//!
//! It caches `/examples/config` (every node below it, in memory), prints the configuration
//! once loaded and every change after, registers `/examples/services/<name>` with its address
//! (ephemeral: the name goes when the process does) and follows the name of a peer. Start a
//! server, run the example, and change the configuration from another terminal:
//!
//! ```sh
//! cargo run --release -- serve                                   # Keeper on 127.0.0.1:2181
//! cargo run --release -p lockkeeper --example zk_config          # default 127.0.0.1:2181, name a
//! cargo run --release -p lockkeeper --example zk_config -- 127.0.0.1:2181 b 10.0.0.8:8080
//! zkCli.sh -server 127.0.0.1:2181 create /examples/config/db/url postgres://db:5432
//! ```
//!
//! Stop it with Ctrl-C: the name is removed and the cache closed.

use lockkeeper::zk::{CacheEvent, Registration, Session};
use tokio::signal::unix::{SignalKind, signal};

const CONFIG: &str = "/examples/config";
const SERVICES: &str = "/examples/services";

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let mut args = std::env::args().skip(1);
    let connect = args.next().unwrap_or_else(|| "127.0.0.1:2181".to_owned());
    let name = args.next().unwrap_or_else(|| "a".to_owned());
    let address = args.next().unwrap_or_else(|| "127.0.0.1:8080".to_owned());
    let peer = if name == "a" { "b" } else { "a" };

    // Listening from the start: a Ctrl-C at any moment from here on is heard, never lost
    // between two turns of the loop below.
    let mut interrupt = signal(SignalKind::interrupt())?;
    let session = Session::connect(&connect).await?;
    let config = session.tree_cache(CONFIG).await?;
    println!("configuration under {CONFIG} ({} nodes):", config.len());
    for (path, node) in config.snapshot() {
        println!("  {path} = {}", String::from_utf8_lossy(&node.data));
    }

    let me = session
        .register(
            &format!("{SERVICES}/{name}"),
            &address,
            Registration::Ephemeral,
        )
        .await?;
    println!("registered {} at {}", me.path(), me.address());
    let mut peer_name = session.watch_name(&format!("{SERVICES}/{peer}")).await?;
    println!("peer {peer} is at {:?}", peer_name.address());

    let mut changes = config.events();
    loop {
        tokio::select! {
                    event = changes.next() => match event {
                        Some(CacheEvent::Created { path, node } | CacheEvent::Changed { path, node, ..
        }) => {
                            println!("config {path} = {}", String::from_utf8_lossy(&node.data));
                        }
                        Some(CacheEvent::Deleted { path, .. }) => println!("config {path} removed"),
                        Some(CacheEvent::Rebuilt) => println!("configuration read again after a reconnection"),
                        Some(CacheEvent::Initialized) => {}
                        None => break,
                    },
                    moved = peer_name.next() => match moved {
                        Some(Some(at)) => println!("peer {peer} is now at {at}"),
                        Some(None) => println!("peer {peer} is gone"),
                        None => break,
                    },
                    _ = interrupt.recv() => break,
                }
    }
    me.unregister().await?;
    config.close().await;
    session.close().await;
    Ok(())
}
