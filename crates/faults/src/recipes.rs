//! What the recipe scenarios (`atomic-long`, `queue`, `two-phase`, `double-barrier`) share:
//! their clients run in the orchestrator's process, each through a loopback proxy of its own
//! to a ZooKeeper backend, and their fault is one of three.

use std::time::Duration;

use lockkeeper_testkit::Proxy;

use tokio::time::Instant;

use crate::backend::Backend;
use crate::client::ZK_SESSION;
use crate::resource::Counts;
use crate::scenario::{Fault, Row, Scenario};

/// The backend's servers as a connect string, for the clients' proxies.
pub(crate) fn upstream(backend: &Backend, scenario: Scenario) -> String {
    backend
        .proxied_upstream()
        .unwrap_or_else(|| panic!("{scenario}: a recipe scenario needs a ZooKeeper backend"))
}

/// Strikes the scenario's fault: none, the backend's server fault, or `victim`'s proxy cut for
/// past its session and then healed.
pub(crate) async fn strike(backend: &mut Backend, scenario: Scenario, victim: &Proxy) {
    match scenario.fault {
        Fault::None => {}
        Fault::Server => backend.server_fault().await,
        Fault::Cut => {
            victim.cut();
            tokio::time::sleep(ZK_SESSION + Duration::from_secs(2)).await;
            victim.heal();
        }
        other => panic!("{scenario}: a recipe scenario has no {other:?} fault"),
    }
}

/// A recipe scenario's row: whether its fault `struck`, its checker's `problems`, what it
/// counted (`turns`: its operations; `writes`: its acknowledged writes, if it has such) and a
/// `note` for the JSON.
pub(crate) fn row(
    scenario: Scenario,
    seed: u64,
    started: Instant,
    struck: bool,
    (turns, writes): (usize, usize),
    problems: Vec<String>,
    note: String,
) -> Row {
    Row {
        scenario,
        seed,
        counts: Counts {
            turns: turns as u64,
            writes: writes as u64,
            ..Counts::default()
        },
        took: started.elapsed(),
        struck,
        fence_problems: Vec::new(),
        history_problems: problems,
        notes: vec![note],
    }
}
