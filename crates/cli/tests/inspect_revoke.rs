//! `lockkeeper inspect` and `lockkeeper revoke` as operators run them (the built binary), on
//! locks held by lockkeeper, by Curator (`Revoke.java` of the library's interop tests: a mutex
//! made revocable with `makeRevocable`) and by kazoo (a `Lock`), against Keeper and Apache
//! ZooKeeper; on a Redis lease lock held by lockkeeper; and on an etcd mutex's holder and
//! waiter.
//!
//! Each test checks what the command printed (the table, the JSON fields) against what the
//! holder knows of itself (session, fencing token, node), and what a revocation did on the
//! holder's side: a lockkeeper or Curator holder hears a cooperative request, a forced one
//! deletes the node (the guard sees it lost, the next waiter is granted), a Redis key is
//! deleted only by `--force`. Every wait is bounded.

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use lockkeeper::redis::Redis;
use lockkeeper::zk::Session;
use lockkeeper_testkit::{
    LinePeer, RedisServer, both, compile_java, curator_classpath, java, python3,
};
use serde_json::Value;
use tokio::time::timeout;

const LOCKKEEPER: &str = env!("CARGO_BIN_EXE_lockkeeper");
/// Bound on one command run, a JVM's or Python's start, a holder hearing a request.
const LIMIT: Duration = Duration::from_secs(90);

/// What one run of the command left: exit code, stdout, stderr.
struct Run {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

/// Runs `lockkeeper ARGS` to its end (bounded by [`LIMIT`]).
async fn lockkeeper(args: &[&str]) -> Run {
    let output = timeout(
        LIMIT,
        tokio::process::Command::new(LOCKKEEPER)
            .args(args)
            .env_remove("LOCKKEEPER_BACKEND")
            .kill_on_drop(true)
            .output(),
    )
    .await
    .unwrap_or_else(|_| panic!("lockkeeper {args:?} still running after {LIMIT:?}"))
    .expect("run lockkeeper");
    Run {
        code: output.status.code(),
        stdout: String::from_utf8_lossy(&output.stdout).into_owned(),
        stderr: String::from_utf8_lossy(&output.stderr).into_owned(),
    }
}

/// `inspect --json` of `name` on `backend`, parsed.
async fn inspect_json(backend: &str, name: &str) -> Value {
    let run = lockkeeper(&["inspect", "--backend", backend, "--json", name]).await;
    assert_eq!(run.code, Some(0), "inspect --json: {}", run.stderr);
    serde_json::from_str(run.stdout.trim()).unwrap_or_else(|e| panic!("{e}: {}", run.stdout))
}

/// `revoke --force --grace GRACE NAME`: exits 0 and says it deleted the holder's node or key.
async fn force_revoke(backend: &str, name: &str, grace: &str, label: &str) {
    let forced = lockkeeper(&[
        "revoke",
        "--backend",
        backend,
        "--force",
        "--grace",
        grace,
        name,
    ])
    .await;
    assert_eq!(forced.code, Some(0), "{label}: {}", forced.stderr);
    assert!(forced.stdout.contains("deleted after"), "{}", forced.stdout);
}

/// `inspect --json NAME` lists no holder.
async fn assert_no_holders(backend: &str, name: &str) {
    let after = inspect_json(backend, name).await;
    assert_eq!(
        after["holders"].as_array().map(Vec::len),
        Some(0),
        "{after}"
    );
}

/// `lockkeeper inspect --watch --json NAME`, read a redraw (a line) at a time.
fn watch_json(backend: &str, name: &str) -> LinePeer {
    LinePeer::spawn(
        Command::new(LOCKKEEPER)
            .args(["inspect", "--backend", backend, "--watch", "--json", name])
            .env_remove("LOCKKEEPER_BACKEND"),
        "inspect --watch",
    )
}

/// Curator's revocation interop program of the library's tests.
fn curator_revoke(connect: &str) -> LinePeer {
    let sources = Path::new(env!("CARGO_MANIFEST_DIR")).join("../lockkeeper/tests/curator");
    let classes = compile_java(
        &sources,
        Path::new(env!("CARGO_TARGET_TMPDIR")),
        "zk-curator",
    );
    LinePeer::spawn(
        Command::new(java())
            .args(["-Xmx192m", "-XX:+UseSerialGC", "-XX:TieredStopAtLevel=1"])
            .arg("-cp")
            .arg(format!("{}:{}", classes.display(), curator_classpath()))
            .args(["Revoke", connect]),
        "Curator (Revoke)",
    )
}

/// A kazoo `Lock` holder: prints `HELD` once it holds, then holds until killed.
fn kazoo_holder(connect: &str, path: &str, id: &str) -> LinePeer {
    const SCRIPT: &str = r#"
import signal, sys, time
from kazoo.client import KazooClient
signal.alarm(240)
client = KazooClient(hosts=sys.argv[1], timeout=10)
client.start(timeout=30)
client.Lock(sys.argv[2], sys.argv[3]).acquire(timeout=60)
print("HELD", flush=True)
sys.stdin.read()
"#;
    LinePeer::spawn(
        Command::new(python3()).args(["-c", SCRIPT, connect, path, id]),
        "kazoo holder",
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn lockkeeper_holder_inspected_asked_then_forced() {
    for server in both() {
        let name = server.name();
        let connect = server.connect_string();
        let backend = format!("zk://{connect}");
        let holder = Session::connect(&connect).await.unwrap();
        let waiter = Session::connect(&connect).await.unwrap();
        let guard = holder.mutex("/ir/lk").unwrap().lock().await.unwrap();
        let next = tokio::spawn(async move { waiter.mutex("/ir/lk").unwrap().lock().await });
        let json = loop {
            let json = inspect_json(&backend, "/ir/lk").await;
            if json["waiters"].as_array().is_some_and(|w| w.len() == 1) {
                break json;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        assert_eq!(json["kind"], "lock", "{name}: {json}");
        let held = &json["holders"][0];
        assert_eq!(held["node"], guard.node(), "{name}: {json}");
        assert_eq!(held["kind"], "mutex");
        assert_eq!(held["state"], "holds");
        assert_eq!(held["token"], guard.fencing_token().get());
        assert_eq!(held["session"], format!("0x{:016x}", holder.session_id()));
        assert!(held["age_ms"].is_u64() && held["sequence"] == 0, "{json}");

        let table = lockkeeper(&["inspect", "--backend", &backend, "/ir/lk"]).await;
        assert_eq!(table.code, Some(0));
        assert!(
            table
                .stdout
                .starts_with("/ir/lk (lock): 1 holding, 1 waiting"),
            "{}",
            table.stdout
        );

        // Cooperative: the holder hears it and keeps the lock (it decides).
        let asked = lockkeeper(&["revoke", "--backend", &backend, "/ir/lk"]).await;
        assert_eq!(asked.code, Some(0), "{name}: {}", asked.stderr);
        assert!(asked.stdout.contains(guard.node()), "{}", asked.stdout);
        assert!(
            asked.stdout.contains("revocation requested"),
            "{}",
            asked.stdout
        );
        timeout(LIMIT, guard.revocation_requested())
            .await
            .expect("the holder heard it");
        assert!(guard.is_held());

        // Forced: it does not let go, so after the grace its node is deleted.
        force_revoke(&backend, "/ir/lk", "300ms", name).await;
        timeout(LIMIT, guard.lost())
            .await
            .expect("the holder sees its loss");
        let next = timeout(LIMIT, next)
            .await
            .expect("the waiter is granted")
            .unwrap()
            .unwrap();
        assert!(next.fencing_token() > guard.fencing_token());

        // Bad use: a node that is not there, --grace without --force.
        let unknown =
            lockkeeper(&["revoke", "--backend", &backend, "--node", "nope", "/ir/lk"]).await;
        assert_eq!(unknown.code, Some(64), "{}", unknown.stderr);
        assert!(unknown.stderr.contains("nope"), "{}", unknown.stderr);
        let grace = lockkeeper(&["revoke", "--backend", &backend, "--grace", "1s", "/ir/lk"]).await;
        assert_eq!(grace.code, Some(64));
        let bad = lockkeeper(&["inspect", "--backend", &backend, "no-slash"]).await;
        assert_eq!(bad.code, Some(64), "{}", bad.stderr);
        next.release().await.unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn curator_holder_releases_on_request_and_kazoo_holder_is_forced() {
    for server in both() {
        let name = server.name();
        let connect = server.connect_string();
        let backend = format!("zk://{connect}");

        let mut curator = curator_revoke(&connect);
        assert_eq!(curator.next_line_async(LIMIT).await, "READY", "{name}");
        curator.send("hold mutex /ir/curator");
        assert_eq!(curator.next_line_async(LIMIT).await, "OK held", "{name}");
        let json = inspect_json(&backend, "/ir/curator").await;
        let node = json["holders"][0]["node"]
            .as_str()
            .expect("a holder")
            .to_owned();
        assert_eq!(json["holders"][0]["kind"], "mutex", "{name}: {json}");
        let asked = lockkeeper(&["revoke", "--backend", &backend, "/ir/curator"]).await;
        assert_eq!(asked.code, Some(0), "{name}: {}", asked.stderr);
        assert!(asked.stdout.contains(&node), "{}", asked.stdout);
        assert_eq!(
            curator.next_line_async(LIMIT).await,
            "REVOKED released",
            "{name}: Curator let go"
        );
        assert_no_holders(&backend, "/ir/curator").await;

        let mut kazoo = kazoo_holder(&connect, "/ir/kazoo", "kz-holder");
        assert_eq!(kazoo.next_line_async(LIMIT).await, "HELD", "{name}");
        let json = inspect_json(&backend, "/ir/kazoo").await;
        assert_eq!(json["holders"][0]["kind"], "kazoo-lock", "{name}: {json}");
        assert_eq!(json["holders"][0]["data"], "kz-holder", "{name}: {json}");
        let asked = lockkeeper(&["revoke", "--backend", &backend, "/ir/kazoo"]).await;
        assert!(
            asked.stdout.contains("kazoo holders do not listen"),
            "{}",
            asked.stdout
        );
        force_revoke(&backend, "/ir/kazoo", "300ms", name).await;
        assert_no_holders(&backend, "/ir/kazoo").await;
        drop(kazoo);
        curator.send("quit");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_lease_holder_inspected_and_forced_only() {
    let server = RedisServer::start();
    let backend = server.url();
    let redis = Redis::connect(&server.url()).await.unwrap();
    let guard = redis.lease_lock("ir").lock().await.unwrap();

    let json = inspect_json(&backend, "ir").await;
    let held = &json["holders"][0];
    assert_eq!(held["kind"], "lease", "{json}");
    assert_eq!(held["key"], "lockkeeper:lease:{ir}");
    assert_eq!(held["value"], guard.token());
    assert_eq!(held["token"], guard.fencing_token().get());
    assert!(held["ttl_ms"].as_i64().is_some_and(|ms| ms > 0), "{json}");
    let table = lockkeeper(&["inspect", "--backend", &backend, "ir"]).await;
    assert!(table.stdout.contains(guard.token()), "{}", table.stdout);

    let asked = lockkeeper(&["revoke", "--backend", &backend, "ir"]).await;
    assert_eq!(
        asked.code,
        Some(64),
        "cooperative is not available on Redis"
    );
    assert!(
        asked.stderr.contains("not available on Redis"),
        "{}",
        asked.stderr
    );
    let exists: i64 = redis
        .command(redis::cmd("EXISTS").arg("lockkeeper:lease:{ir}"))
        .await
        .unwrap();
    assert_eq!(exists, 1, "a refused revoke changes nothing");

    force_revoke(&backend, "ir", "200ms", "redis").await;
    let exists: i64 = redis
        .command(redis::cmd("EXISTS").arg("lockkeeper:lease:{ir}"))
        .await
        .unwrap();
    assert_eq!(exists, 0, "the holder's key is gone");
    let none = inspect_json(&backend, "ir").await;
    assert_eq!(none["holders"].as_array().map(Vec::len), Some(0), "{none}");
    drop(guard);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_redraws_on_every_change_until_interrupted() {
    for server in both() {
        let name = server.name();
        let connect = server.connect_string();
        let backend = format!("zk://{connect}");
        let mut watch = watch_json(&backend, "/ir/watch");
        let mut next = async || -> Value {
            let line = watch.next_line_async(LIMIT).await;
            serde_json::from_str(&line).unwrap_or_else(|e| panic!("{name}: {e}: {line}"))
        };
        assert_eq!(next().await["kind"], "missing", "{name}");
        let session = Session::connect(&connect).await.unwrap();
        let guard = session.mutex("/ir/watch").unwrap().lock().await.unwrap();
        // The parent's creation and the lock node's may come as one redraw or two.
        let held = loop {
            let seen = next().await;
            if seen["holders"].as_array().is_some_and(|h| h.len() == 1) {
                break seen;
            }
        };
        assert_eq!(held["holders"][0]["node"], guard.node(), "{name}");
        guard.release().await.unwrap();
        // Redraws that still show the holder may be queued before the release's.
        let mut redraws = 0;
        while next().await["holders"].as_array().map(Vec::len) != Some(0) {
            redraws += 1;
            assert!(redraws < 10, "{name}: the release was never drawn");
        }
        // SAFETY: kill(2) on the pid of a child this test started and has not reaped.
        unsafe { libc::kill(watch.pid() as libc::pid_t, libc::SIGINT) };
        let deadline = tokio::time::Instant::now() + LIMIT;
        let status = loop {
            if let Some(status) = watch.try_wait() {
                break status;
            }
            assert!(
                tokio::time::Instant::now() < deadline,
                "{name}: still watching"
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(status.code(), Some(0), "{name}: SIGINT ends a watch with 0");
        session.close().await;
    }
}

/// A watch follows its session through a server restart: it redraws once reconnected (the new
/// connection may be a new session, which has no watches), and changes after that are drawn.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn watch_redraws_after_a_reconnect_and_keeps_watching() {
    if lockkeeper_testkit::backend_enabled("keeper") {
        let mut keeper = lockkeeper_testkit::Keeper::start();
        let connect = lockkeeper_testkit::TestServer::connect_string(&keeper);
        watch_through_restart("keeper", &connect, || keeper.restart()).await;
    }
    if lockkeeper_testkit::backend_enabled("zookeeper") {
        let mut zk = lockkeeper_testkit::ApacheZk::start();
        let connect = lockkeeper_testkit::TestServer::connect_string(&zk);
        watch_through_restart("zookeeper", &connect, || zk.restart()).await;
    }
}

async fn watch_through_restart(name: &str, connect: &str, restart: impl FnOnce()) {
    let backend = format!("zk://{connect}");
    let mut watch = watch_json(&backend, "/ir/again");
    let first = watch.next_line_async(LIMIT).await;
    assert!(first.contains(r#""kind":"missing""#), "{name}: {first}");
    restart();
    let redrawn = watch.next_line_async(LIMIT).await;
    assert!(
        redrawn.contains(r#""kind":"missing""#),
        "{name}: redraw after reconnect: {redrawn}"
    );
    let session = Session::connect(connect).await.unwrap();
    let guard = session.mutex("/ir/again").unwrap().lock().await.unwrap();
    let mut lines = 0;
    loop {
        let line = watch.next_line_async(LIMIT).await;
        if line.contains(guard.node()) {
            break;
        }
        lines += 1;
        assert!(lines < 10, "{name}: the new holder was never drawn");
    }
    guard.release().await.unwrap();
    session.close().await;
}

/// `revoke` on etcd is a usage error (64) before anything is dialled, naming the backend and
/// the way to do it by hand; nothing listens at the address.
#[tokio::test]
async fn revoke_on_etcd_is_a_usage_error_naming_the_manual_way() {
    let backend = format!("etcd://127.0.0.1:{}", lockkeeper_testkit::free_port());
    for force in [false, true] {
        let mut args = vec!["revoke", "--backend", &backend, "orders"];
        if force {
            args.push("--force");
        }
        let run = lockkeeper(&args).await;
        assert_eq!(run.code, Some(64), "{args:?}: {}", run.stderr);
        assert!(
            run.stderr.contains(&backend[7..]) && run.stderr.contains("etcdctl del"),
            "{args:?}: {}",
            run.stderr
        );
    }
}

/// On etcd, `inspect` lists the keys under `NAME/` in queue order: the holder and the waiter of
/// a mutex, each with its fencing token, lease and remaining TTL, as the sessions know them.
#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn inspect_on_etcd_names_the_holder_and_the_waiter() {
    use lockkeeper::etcd::Session as EtcdSession;

    let etcd = lockkeeper_testkit::Etcd::start();
    let backend = format!("etcd://{}", etcd.addr());
    let endpoint = etcd.addr().to_string();
    let holder = EtcdSession::connect(&endpoint).await.expect("connect");
    let waiter = EtcdSession::connect(&endpoint).await.expect("connect");
    let held = holder.mutex("orders").unwrap().lock().await.expect("lock");
    let queued = waiter.mutex("orders").unwrap();
    let waiting = tokio::spawn(async move { queued.lock().await });
    let deadline = tokio::time::Instant::now() + LIMIT;
    let json = loop {
        let json = inspect_json(&backend, "orders").await;
        if json["waiters"].as_array().map_or(0, Vec::len) == 1 {
            break json;
        }
        assert!(tokio::time::Instant::now() < deadline, "no waiter: {json}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    let holders = json["holders"].as_array().expect("holders");
    assert_eq!(holders.len(), 1, "{json}");
    let first = &holders[0];
    assert_eq!(first["key"], held.key().as_str());
    assert_eq!(first["kind"], "lock");
    assert_eq!(first["token"], held.fencing_token().get());
    assert_eq!(first["lease"], format!("{:x}", holder.lease_id()).as_str());
    assert!(first["ttl_s"].as_u64().is_some_and(|ttl| ttl > 0), "{json}");
    let next = &json["waiters"][0];
    assert_eq!(
        next["key"],
        format!("orders/{:x}", waiter.lease_id()).as_str()
    );
    assert!(next["token"].as_u64() > first["token"].as_u64(), "{json}");

    let table = lockkeeper(&["inspect", "--backend", &backend, "orders"]).await;
    assert_eq!(table.code, Some(0), "{}", table.stderr);
    assert!(
        table.stdout.starts_with("orders: 1 holding, 1 waiting"),
        "{}",
        table.stdout
    );
    assert!(table.stdout.contains(&held.key()), "{}", table.stdout);
    let watch = lockkeeper(&["inspect", "--backend", &backend, "--watch", "orders"]).await;
    assert_eq!(watch.code, Some(64), "--watch on etcd: {}", watch.stderr);

    held.release().await.expect("release");
    let granted = timeout(LIMIT, waiting)
        .await
        .expect("granted")
        .unwrap()
        .expect("lock");
    let after = inspect_json(&backend, "orders").await;
    assert_eq!(
        after["holders"][0]["key"],
        granted.key().as_str(),
        "{after}"
    );
    assert_eq!(
        after["waiters"].as_array().map(Vec::len),
        Some(0),
        "{after}"
    );
}
