//! The late write of a holder paused past its session or lease is refused by every fence,
//! while the new holder's is accepted. The pauses are real: a network cut until the server
//! expired the session, a child process stopped with SIGSTOP.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use lockkeeper::fence::{Outcome, ZkFence};
use lockkeeper::redis::{Redis, RedisOptions};
use lockkeeper::zk::ConnectionState;
use lockkeeper::{Error, FencingToken};
use lockkeeper_testkit::RedisServer;
use lockkeeper_testkit::test_child::{self as child, ChildProcess};

use crate::support::{Partition, for_each_backend, session, wait_state};
use crate::targets::{Resources, Target};

/// A Mutex holder behind a proxy whose network is cut until its session expires; a second
/// holder takes the lock. The first holder's late writes, with its older token, are refused
/// by every fence once the new holder wrote; the ZooKeeper fence refuses it even before that,
/// because its lock node is gone.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_zookeeper_holder_past_its_session_is_fenced_off() {
    let resources = Arc::new(Resources::start().await);
    for_each_backend(|connect| {
        let resources = resources.clone();
        async move {
            let path = "/locks/fenced";
            let partition = Partition::start(&connect).await;
            let old_session = session(&partition.connect_string()).await;
            let new_session = session(&connect).await;
            let old = old_session.mutex(path).unwrap().lock().await.unwrap();
            let old_token = old.fencing_token().get();
            let targets = resources.targets();
            // The shared resources outlive one backend's run; the two servers' tokens are
            // unrelated, so each run fences a resource of its own.
            let resource = format!("orders-{}", connect.replace([':', '.'], "-"));
            let resource = resource.as_str();
            let mut old_writers = Vec::new();
            for target in &targets {
                let mut writer = target.writer().await;
                assert_eq!(
                    writer.write(resource, old_token, b"old").await,
                    Outcome::Accepted
                );
                old_writers.push(writer);
            }
            let old_fence = ZkFence::new(&old_session, "/fenced/orders").unwrap();
            assert_eq!(
                old_fence.write(&old, b"old").await.unwrap(),
                Outcome::Accepted
            );

            // The old holder goes silent; the server expires its session.
            partition.cut();
            let new = tokio::time::timeout(
                Duration::from_secs(60),
                new_session.mutex(path).unwrap().lock(),
            )
            .await
            .expect("the lock passed on after the old session expired")
            .unwrap();
            let new_token = new.fencing_token().get();
            assert!(new_token > old_token);
            wait_state(&old_session, ConnectionState::Lost).await;
            partition.heal();

            // Before the new holder writes, only the lock-node check stands in the way.
            assert!(
                matches!(old_fence.write(&old, b"late").await, Err(Error::NotHeld)),
                "the old holder's write went through its gone lock node"
            );
            let new_fence = ZkFence::new(&new_session, "/fenced/orders").unwrap();
            assert_eq!(
                new_fence.write(&new, b"new").await.unwrap(),
                Outcome::Accepted
            );
            for (target, old_writer) in targets.iter().zip(&mut old_writers) {
                let name = target.name();
                let mut writer = target.writer().await;
                assert_eq!(
                    writer.write(resource, new_token, b"new").await,
                    Outcome::Accepted,
                    "{name}: the new holder"
                );
                assert_eq!(
                    old_writer.write(resource, old_token, b"late").await,
                    Outcome::Refused {
                        highest: FencingToken::new(new_token)
                    },
                    "{name}: the old holder's late write"
                );
                assert_eq!(
                    writer.read(resource).await,
                    Some((new_token, b"new".to_vec())),
                    "{name}"
                );
            }
            // A token-only write of the old token is refused too, from any live lock node.
            assert_eq!(
                new_fence
                    .write_checked(new.node(), FencingToken::new(old_token), b"late")
                    .await
                    .unwrap(),
                Outcome::Refused {
                    highest: FencingToken::new(new_token)
                }
            );
            assert_eq!(
                new_fence.read().await.unwrap(),
                Some((FencingToken::new(new_token), b"new".to_vec()))
            );
            new.release().await.unwrap();
        }
    })
    .await;
}

/// The lock the stopped holders take (a Redis lease lock, an etcd Mutex).
const LOCK_NAME: &str = "fenced";

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("child needs {name}"))
}

/// The child's late write through the fences it can reach from another process, each outcome
/// stored as `outcome:<fence>` in the coordinating Redis for the parent to read.
async fn child_late_writes(coord: &Redis, token: u64) {
    let targets = vec![
        Target::Redis(env("LK_RESOURCE_REDIS")),
        #[cfg(feature = "sqlite")]
        Target::Sqlite(env("LK_SQLITE").into()),
        #[cfg(feature = "postgres")]
        Target::Postgres(env("LK_POSTGRES")),
    ];
    for target in targets {
        let outcome = target.writer().await.write("orders", token, b"late").await;
        let _: () = coord
            .command(
                redis::cmd("SET")
                    .arg(format!("outcome:{}", target.name()))
                    .arg(format!("{outcome:?}")),
            )
            .await
            .expect("report the outcome");
    }
}

/// The child's part once it holds the lock with `token`: report it on `coord` (the Redis at
/// `LK_COORD`), be stopped there by the parent, carry on once let go (as a paused process does,
/// without looking at its guard) and make the late writes.
async fn child_holds_then_writes_late(coord: &Redis, token: u64) {
    let _: () = coord
        .command(redis::cmd("SET").arg("child-token").arg(token))
        .await
        .expect("report the token");
    loop {
        let go: bool = coord
            .command(redis::cmd("EXISTS").arg("go"))
            .await
            .unwrap_or(false);
        if go {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    child_late_writes(coord, token).await;
}

/// The parent's part: spawn the child test `test` (with `vars`, and `LK_COORD` naming
/// `coord_url`), wait for its token, stop it, take the lock over with `take_over` (its token
/// and guard), write with the new token through every fence reachable from both processes, let
/// the child go and check that each of its late writes was refused and the new value stayed.
/// Returns the guard, still held.
async fn stopped_holder_is_fenced_off<G>(
    test: &str,
    mut vars: Vec<(&'static str, String)>,
    coord_url: String,
    resources: &Resources,
    take_over: impl Future<Output = (u64, G)>,
) -> G {
    let coord = Redis::connect(&coord_url).await.expect("connect");
    vars.push(("LK_COORD", coord_url));
    vars.push(("LK_RESOURCE_REDIS", resources.redis.url()));
    #[cfg(feature = "sqlite")]
    vars.push(("LK_SQLITE", resources.sqlite_path().display().to_string()));
    #[cfg(feature = "postgres")]
    vars.push(("LK_POSTGRES", resources.postgres.config()));
    let mut paused = ChildProcess::spawn(test, "holder", &vars);
    let mut child_token = None;
    for _ in 0..3000 {
        let token: Option<u64> = coord
            .command(redis::cmd("GET").arg("child-token"))
            .await
            .unwrap();
        if token.is_some() {
            child_token = token;
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let child_token = child_token.expect("the child took the lock within a minute");
    paused.signal("STOP");
    let (token, guard) = take_over.await;
    assert!(token > child_token);
    let targets: Vec<Target> = resources
        .targets()
        .into_iter()
        .filter(|t| !matches!(t, Target::Local(_)))
        .collect();
    for target in &targets {
        let mut writer = target.writer().await;
        assert_eq!(
            writer.write("orders", token, b"new").await,
            Outcome::Accepted,
            "{}",
            target.name()
        );
    }
    let _: () = coord
        .command(redis::cmd("SET").arg("go").arg(1))
        .await
        .unwrap();
    paused.signal("CONT");
    assert!(paused.wait_success(Duration::from_secs(60)), "child failed");
    for target in &targets {
        let name = target.name();
        let outcome: Option<String> = coord
            .command(redis::cmd("GET").arg(format!("outcome:{name}")))
            .await
            .unwrap();
        assert_eq!(
            outcome,
            Some(format!(
                "{:?}",
                Outcome::Refused {
                    highest: FencingToken::new(token)
                }
            )),
            "{name}: the stopped holder's late write"
        );
        let mut reader = target.writer().await;
        assert_eq!(
            reader.read("orders").await,
            Some((token, b"new".to_vec())),
            "{name}"
        );
    }
    guard
}

/// A Redis lease lock holder in a child process, stopped with SIGSTOP until its lease ran out
/// and the parent took the lock and wrote; once continued, its late writes with the older
/// token are refused by the Redis, SQLite and PostgreSQL fences.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_redis_holder_stopped_past_its_lease_is_fenced_off() {
    if child::role().is_some() {
        let redis = Redis::connect_with(
            &env("LK_REDIS"),
            RedisOptions::new().watchdog_timeout(Duration::from_secs(1)),
        )
        .await
        .expect("child connects");
        let guard = redis.lease_lock(LOCK_NAME).lock().await.expect("lock");
        let coord = Redis::connect(&env("LK_COORD")).await.expect("connect");
        child_holds_then_writes_late(&coord, guard.fencing_token().get()).await;
        std::mem::forget(guard);
        return;
    }
    let lock_server = RedisServer::start();
    let resources = Resources::start().await;
    let redis = Redis::connect(&lock_server.url()).await.expect("connect");
    let guard = stopped_holder_is_fenced_off(
        "lost_holders::a_redis_holder_stopped_past_its_lease_is_fenced_off",
        vec![("LK_REDIS", lock_server.url())],
        lock_server.url(),
        &resources,
        async {
            let guard = redis
                .lease_lock(LOCK_NAME)
                .lock_timeout(Duration::from_secs(30))
                .await
                .expect("lock_timeout")
                .expect("acquired once the stopped holder's lease ran out");
            (guard.fencing_token().get(), guard)
        },
    )
    .await;
    guard.release().await.expect("release");
}

/// An etcd Mutex holder in a child process, stopped with SIGSTOP until its lease (2 s TTL) ran
/// out and the parent took the lock (a higher create revision) and wrote; once continued, its
/// late writes with the older token are refused by the Redis, SQLite and PostgreSQL fences.
#[cfg(feature = "etcd")]
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_etcd_holder_stopped_past_its_lease_is_fenced_off() {
    use lockkeeper::etcd::Session as EtcdSession;

    const TTL: Duration = Duration::from_secs(2);
    let connect = |endpoint: String| async move {
        EtcdSession::builder(&endpoint)
            .ttl(TTL)
            .connect()
            .await
            .expect("connect")
    };
    if child::role().is_some() {
        let session = connect(env("LK_ETCD")).await;
        let guard = session
            .mutex(LOCK_NAME)
            .unwrap()
            .lock()
            .await
            .expect("lock");
        let coord = Redis::connect(&env("LK_COORD")).await.expect("connect");
        child_holds_then_writes_late(&coord, guard.fencing_token().get()).await;
        std::mem::forget(guard);
        return;
    }
    let etcd = lockkeeper_testkit::Etcd::start();
    let resources = Resources::start().await;
    let session = connect(etcd.addr().to_string()).await;
    let guard = stopped_holder_is_fenced_off(
        "lost_holders::an_etcd_holder_stopped_past_its_lease_is_fenced_off",
        vec![("LK_ETCD", etcd.addr().to_string())],
        resources.redis.url(),
        &resources,
        async {
            let guard = session
                .mutex(LOCK_NAME)
                .unwrap()
                .lock_timeout(Duration::from_secs(30))
                .await
                .expect("lock_timeout")
                .expect("acquired once the stopped holder's lease ran out");
            (guard.fencing_token().get(), guard)
        },
    )
    .await;
    guard.release().await.expect("release");
}
