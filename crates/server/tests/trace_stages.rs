//! Keeper's write-path trace (`mntr`'s `lk_write_stage_*` keys) against a real client.
//!
//! Keeper only: the stages are Keeper's own pipeline and Apache ZooKeeper has no such keys.
//! A synchronous client makes every write wait for the log on its own, so each write is traced
//! exactly once: the counts must match the writes, the stages of one reply cannot add up to more
//! than the client saw, and `fdatasync` is spent only when the log syncs.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use lockkeeper_server::{Stage, SyncMode};
use lockkeeper_testkit::{Keeper, TestServer, backend_enabled, try_four_letter_word};
use zookeeper_client::{Acls, Client, CreateMode, EventType};

/// The longest any single server interaction may take. Generous: the machine is shared.
const LIMIT: Duration = Duration::from_secs(20);
/// Create+delete pairs the synchronous client makes.
const PAIRS: u32 = 50;

/// `mntr`'s Keeper keys (`lk_`) as numbers.
async fn stages(addr: SocketAddr) -> HashMap<String, f64> {
    let text = tokio::task::spawn_blocking(move || try_four_letter_word(addr, "mntr", LIMIT))
        .await
        .expect("join mntr")
        .expect("mntr");
    text.lines()
        .filter_map(|line| line.split_once('\t'))
        .filter(|(key, _)| key.starts_with("lk_"))
        .map(|(key, value)| {
            let value = value
                .parse()
                .unwrap_or_else(|e| panic!("{key}\t{value}: {e}"));
            (key.to_string(), value)
        })
        .collect()
}

fn delta(before: &HashMap<String, f64>, after: &HashMap<String, f64>, key: &str) -> f64 {
    let get = |m: &HashMap<String, f64>| {
        *m.get(key)
            .unwrap_or_else(|| panic!("no {key} in mntr: {m:?}"))
    };
    get(after) - get(before)
}

async fn within<T>(what: &str, fut: impl std::future::Future<Output = T>) -> T {
    lockkeeper_testkit::within(LIMIT, what, fut).await
}

/// 50 synchronous create+delete pairs, then a watch event and the watcher's next request.
async fn trace_a_synchronous_client(keeper: &Keeper, syncs: bool) {
    let addr = keeper.addr();
    let zk = within("connect", Client::connect(&keeper.connect_string()))
        .await
        .expect("connect");
    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let before = stages(addr).await;
    let mut client_us = 0.0;
    for i in 0..PAIRS {
        let path = format!("/trace-{i}");
        let started = Instant::now();
        within("create", zk.create(&path, b"x", &persistent))
            .await
            .expect("create");
        within("delete", zk.delete(&path, None))
            .await
            .expect("delete");
        client_us += started.elapsed().as_secs_f64() * 1e6;
    }
    let writes = f64::from(2 * PAIRS);
    // The client has the last reply as soon as it is on the socket; the writer records that
    // reply's stages just after. Read until every write is in (bounded): a write never traced
    // still fails below.
    let settle = Instant::now() + Duration::from_secs(2);
    let mut after = stages(addr).await;
    while delta(&before, &after, "lk_write_stage_socket_count") < writes && Instant::now() < settle
    {
        tokio::time::sleep(Duration::from_millis(10)).await;
        after = stages(addr).await;
    }
    let mut stage_us = 0.0;
    for stage in Stage::PIPELINE.map(Stage::name) {
        let count = delta(&before, &after, &format!("lk_write_stage_{stage}_count"));
        let sum = delta(&before, &after, &format!("lk_write_stage_{stage}_us_sum"));
        assert_eq!(
            count, writes,
            "{stage}: every synchronous write is traced once"
        );
        if stage == "fdatasync" && !syncs {
            assert_eq!(sum, 0.0, "no fdatasync without --sync always");
        } else {
            assert!(
                sum > 0.0,
                "{stage} took no time at all over {writes} writes"
            );
        }
        stage_us += sum;
    }
    let log_syncs = delta(&before, &after, "lk_log_syncs");
    let want = if syncs { writes } else { 0.0 };
    assert_eq!(log_syncs, want, "log syncs for {writes} synchronous writes");
    // The syncs' recent p50, within the range of the traced fdatasync times.
    match after.get("lk_log_sync_p50_us") {
        Some(&p50) if syncs => {
            let max = after["lk_write_stage_fdatasync_us_max"];
            assert!(
                p50 > 0.0 && p50 <= max * 1.01 + 1.0,
                "p50 {p50} µs, max {max} µs"
            );
        }
        None if !syncs => {}
        other => panic!("lk_log_sync_p50_us {other:?} with syncs {syncs}"),
    }
    assert!(
        stage_us <= client_us,
        "the stages ({stage_us:.0} µs) cannot take longer than the client waited ({client_us:.0} µs)"
    );
    // The time inside the server is most of what a client on loopback waits.
    assert!(
        stage_us >= client_us * 0.2,
        "the stages ({stage_us:.0} µs) are too small a part of the client's {client_us:.0} µs"
    );

    // Reaction: a watcher hears of a create, then asks again.
    let watcher = within("connect", Client::connect(&keeper.connect_string()))
        .await
        .expect("connect the watcher");
    let (stat, event) = within("watch", watcher.check_and_watch_stat("/trace-w"))
        .await
        .expect("exists watch");
    assert!(stat.is_none());
    let reacted_before = stages(addr).await;
    within("create", zk.create("/trace-w", b"", &persistent))
        .await
        .expect("create the watched node");
    let event = within("the watch event", event.changed()).await;
    assert_eq!(event.event_type, EventType::NodeCreated);
    let _ = within("the watcher's next request", watcher.get_data("/trace-w"))
        .await
        .expect("get_data");
    let reacted = stages(addr).await;
    let count = delta(&reacted_before, &reacted, "lk_write_stage_reaction_count");
    let sum = delta(&reacted_before, &reacted, "lk_write_stage_reaction_us_sum");
    assert_eq!(count, 1.0, "one event followed by one request");
    assert!(sum > 0.0, "the watcher reacted in no time");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stages_add_up_for_a_synchronous_client_without_syncs() {
    if !backend_enabled("keeper") {
        return;
    }
    let keeper = Keeper::start();
    trace_a_synchronous_client(&keeper, false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stages_add_up_for_a_synchronous_client_with_sync_always() {
    if !backend_enabled("keeper") {
        return;
    }
    let data = tempfile::tempdir().expect("a data dir");
    let keeper = Keeper::start_with(lockkeeper_server::Config {
        sync: SyncMode::Always,
        ..Keeper::test_config(data.path())
    });
    trace_a_synchronous_client(&keeper, true).await;
}

/// A lock handoff's two writes share one sync: the releaser's delete wakes a watcher, the
/// releaser's next write waits (within the follow window) for the woken one's write, and one
/// sync makes both durable. The window here is far longer than the woken client's pause, so
/// the test says the same on a slow machine.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_write_after_a_waking_one_waits_for_the_woken_and_shares_its_sync() {
    if !backend_enabled("keeper") {
        return;
    }
    let data = tempfile::tempdir().expect("a data dir");
    let keeper = Keeper::start_with(lockkeeper_server::Config {
        sync: SyncMode::Always,
        follow_window: Duration::from_secs(60),
        ..Keeper::test_config(data.path())
    });
    let addr = keeper.addr();
    let persistent = CreateMode::Persistent.with_acls(Acls::anyone_all());
    let releaser = within("connect", Client::connect(&keeper.connect_string()))
        .await
        .expect("connect the releaser");
    let woken = within("connect", Client::connect(&keeper.connect_string()))
        .await
        .expect("connect the watcher");
    within("create", releaser.create("/held", b"", &persistent))
        .await
        .expect("create the held node");
    let (_, watch) = within("watch", woken.check_and_watch_stat("/held"))
        .await
        .expect("exists watch");
    let before = stages(addr).await;

    // The woken client pauses before it writes: long enough that, without the wait, the
    // releaser's next write would have been synced alone well before.
    let pause = Duration::from_millis(500);
    let options = persistent.clone();
    let woken_task = tokio::spawn(async move {
        let event = within("the watch event", watch.changed()).await;
        assert_eq!(event.event_type, EventType::NodeDeleted);
        tokio::time::sleep(pause).await;
        let sent = Instant::now();
        within("the woken write", woken.create("/next", b"", &options))
            .await
            .expect("the woken client's create");
        // Handed back, not dropped: its session's close is a write of its own.
        (sent, woken)
    });
    within("delete", releaser.delete("/held", None))
        .await
        .expect("release");
    within("re-queue", releaser.create("/again", b"", &persistent))
        .await
        .expect("the releaser's next write");
    let requeued = Instant::now();
    let (woken_sent, _woken) = woken_task.await.expect("the woken client");
    assert!(
        requeued >= woken_sent,
        "the releaser's next write was answered before the woken client wrote"
    );
    let after = stages(addr).await;
    assert_eq!(
        delta(&before, &after, "lk_log_syncs"),
        2.0,
        "the release, then both writes together"
    );
}
