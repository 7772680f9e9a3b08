//! The cache scenario: tree caches and name watches following a subtree that a writer keeps
//! changing under a fault, checked for convergence ([`crate::check::cache`]).
//!
//! One writer and [`WATCHERS`] watchers run in the orchestrator's process, each with its own
//! session through its own loopback proxy (so one can be cut off alone). The writer makes
//! [`CHANGES`] seeded random changes spread over the scenario's length under
//! `/faults/cache-<seed>`: creating, rewriting and deleting nodes on two levels, and moving a
//! name's address now and then. Each watcher holds a [`tree
//! cache`](lockkeeper::zk::Session::tree_cache) of the subtree and a [`name
//! watch`](lockkeeper::zk::Session::watch_name) on the name. The fault strikes the first
//! watcher (its proxy cut past its session) or restarts the server. Once the writer is done,
//! every view is compared with the server's, read by a fresh session, until all agree or
//! [`CONVERGE_LIMIT`] passes; what still differs then is the row's problem.
//!
//! Invariants: every call is bounded ([`CALL_WAIT`]), the convergence wait too; the fault
//! strikes after a quarter of the scenario's length, with changes before and after it.

use std::time::Duration;

use lockkeeper::zk::{Cache, NameWatch, Registration, Session};
use lockkeeper_testkit::Proxy;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use tokio::time::Instant;

use crate::backend::Backend;
use crate::check::cache::{self, Tree};
use crate::client::ZK_SESSION;
use crate::scenario::{Row, Scenario};

/// Changes the writer makes.
const CHANGES: usize = 40;
/// Sessions holding a cache and a name watch.
const WATCHERS: usize = 2;
/// The longest one call may take.
const CALL_WAIT: Duration = Duration::from_secs(10);
/// The longest wait for the views to agree with the server after the writer is done.
const CONVERGE_LIMIT: Duration = Duration::from_secs(30);
/// The first level's node names (each may have children `x` and `y`).
const NAMES: [&str; 6] = ["a", "b", "c", "d", "e", "f"];

/// One watcher's views.
struct Watcher {
    session: Session,
    cache: Cache,
    name: NameWatch,
}

/// Runs the cache `scenario` on `backend` for about `length`.
pub(crate) async fn run(
    backend: &mut Backend,
    scenario: Scenario,
    seed: u64,
    length: Duration,
) -> Row {
    let started = Instant::now();
    let upstream = crate::recipes::upstream(backend, scenario);
    let root = format!("/faults/cache-{seed:x}");
    let name = format!("/faults/names-{seed:x}/service");
    let mut proxies = Vec::new();
    for _ in 0..=WATCHERS {
        proxies.push(Proxy::start(&upstream).await);
    }
    let writer = connect(&proxies[0]).await;
    let client = writer
        .client()
        .unwrap_or_else(|e| panic!("{scenario}: the writer's session: {e}"));
    client
        .mkdir(&root, &persistent())
        .await
        .unwrap_or_else(|e| panic!("{scenario}: create {root}: {e}"));
    let registered = writer
        .register(&name, "start:0", Registration::Persistent)
        .await
        .unwrap_or_else(|e| panic!("{scenario}: register {name}: {e}"));
    let mut watchers = Vec::new();
    for proxy in &proxies[1..] {
        let session = connect(proxy).await;
        let cache = session
            .tree_cache(&root)
            .await
            .unwrap_or_else(|e| panic!("{scenario}: tree cache of {root}: {e}"));
        let watch = session
            .watch_name(&name)
            .await
            .unwrap_or_else(|e| panic!("{scenario}: watch {name}: {e}"));
        watchers.push(Watcher {
            session,
            cache,
            name: watch,
        });
    }
    let writing = tokio::spawn({
        let root = root.clone();
        async move {
            let made = write(&writer, &registered, &root, seed, length).await;
            (made, writer, registered)
        }
    });
    tokio::time::sleep(length / 4).await;
    // The fault: the server restarted, or the first watcher cut off past its session.
    crate::recipes::strike(backend, scenario, &proxies[1]).await;
    let (made, _writer, _registered) = writing
        .await
        .unwrap_or_else(|e| panic!("{scenario}: the writer panicked: {e}"));
    let reader = connect_direct(&upstream).await;
    let converge_from = Instant::now();
    let mut problems;
    loop {
        problems = Vec::new();
        let server = read_tree(&reader, &root).await;
        let address = tokio::time::timeout(CALL_WAIT, reader.resolve(&name))
            .await
            .ok()
            .and_then(Result::ok)
            .flatten();
        for (i, watcher) in watchers.iter().enumerate() {
            let view: Tree = watcher
                .cache
                .snapshot()
                .into_iter()
                .map(|(path, node)| (path, node.data))
                .collect();
            problems.extend(
                cache::diff(&view, &server)
                    .into_iter()
                    .map(|p| format!("watcher {i}: {p}")),
            );
            problems.extend(
                cache::name(&name, watcher.name.address().as_deref(), address.as_deref())
                    .map(|p| format!("watcher {i}: {p}")),
            );
        }
        if problems.is_empty() || converge_from.elapsed() >= CONVERGE_LIMIT {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let converged = converge_from.elapsed();
    let sessions: Vec<String> = watchers
        .iter()
        .map(|w| format!("{:#x}", w.session.session_id()))
        .collect();
    crate::recipes::row(
        scenario,
        seed,
        started,
        true,
        (made.attempted, made.done),
        problems,
        format!(
            "{} changes made ({} answered), every view agreed with the server {:.1} s after \
             the last; watchers' sessions at the end {}",
            made.attempted,
            made.done,
            converged.as_secs_f64(),
            sessions.join(", ")
        ),
    )
}

/// What the writer did.
struct Made {
    attempted: usize,
    done: usize,
}

/// Makes [`CHANGES`] seeded random changes under `root`, spread over `length`; a change the
/// server refuses (a node that is not there, or not empty) or does not answer is skipped.
async fn write(
    session: &Session,
    registered: &lockkeeper::zk::Registered,
    root: &str,
    seed: u64,
    length: Duration,
) -> Made {
    let mut rng = StdRng::seed_from_u64(seed);
    let gap = length / CHANGES as u32;
    let mut made = Made {
        attempted: 0,
        done: 0,
    };
    let create = persistent();
    for n in 0..CHANGES {
        tokio::time::sleep(gap).await;
        let first = NAMES[rng.gen_range(0..NAMES.len())];
        let path = if rng.gen_bool(0.4) {
            format!(
                "{root}/{first}/{}",
                if rng.gen_bool(0.5) { "x" } else { "y" }
            )
        } else {
            format!("{root}/{first}")
        };
        let data = format!("v{n}");
        made.attempted += 1;
        let Ok(client) = session.client() else {
            continue;
        };
        let change = async {
            if n % 8 == 7 {
                return registered
                    .set_address(&format!("host-{n}:80"))
                    .await
                    .is_ok();
            }
            match rng.gen_range(0..10) {
                0..4 => client.create(&path, data.as_bytes(), &create).await.is_ok(),
                4..8 => client.set_data(&path, data.as_bytes(), None).await.is_ok(),
                _ => client.delete(&path, None).await.is_ok(),
            }
        };
        if tokio::time::timeout(CALL_WAIT, change).await == Ok(true) {
            made.done += 1;
        }
    }
    made
}

/// Every node under `root` (itself included) with its data, as a fresh session reads it.
async fn read_tree(session: &Session, root: &str) -> Tree {
    let mut tree = Tree::new();
    let Ok(client) = session.client() else {
        return tree;
    };
    let mut pending = vec![root.to_owned()];
    while let Some(path) = pending.pop() {
        let Ok(Ok((data, _))) = tokio::time::timeout(CALL_WAIT, client.get_data(&path)).await
        else {
            continue;
        };
        tree.insert(path.clone(), data);
        if let Ok(Ok(children)) = tokio::time::timeout(CALL_WAIT, client.list_children(&path)).await
        {
            pending.extend(children.into_iter().map(|child| format!("{path}/{child}")));
        }
    }
    tree
}

fn persistent() -> lockkeeper::zk::client::CreateOptions {
    lockkeeper::zk::client::CreateOptions::new(lockkeeper::zk::client::CreateMode::Persistent)
}

async fn connect(proxy: &Proxy) -> Session {
    connect_direct(&proxy.connect_string()).await
}

async fn connect_direct(connect: &str) -> Session {
    Session::builder(connect)
        .session_timeout(ZK_SESSION)
        .connect()
        .await
        .unwrap_or_else(|e| panic!("connect to {connect}: {e}"))
}
