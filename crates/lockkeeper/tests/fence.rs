//! Fences on real resources: in-process, Redis, SQLite and PostgreSQL (with the `sqlite` and
//! `postgres` features), and ZooKeeper (Keeper and Apache ZooKeeper).
//!
//! Every fence must refuse a lower token and accept an equal or higher one, keep the highest
//! write under concurrent writers (no lost update), and name a bad argument.
//! `fence/targets.rs`: each fence seen through one writer type; `fence/lost_holders.rs`: the
//! late write of a holder paused past its session or lease is refused while the new holder's
//! is accepted (a ZooKeeper holder behind a cut network until its session expired, a Redis or
//! etcd holder in a child process stopped with SIGSTOP past its lease).

mod support;

#[path = "fence/lost_holders.rs"]
mod lost_holders;
#[path = "fence/redis_persistence.rs"]
mod redis_persistence;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
#[path = "fence/sql_transactions.rs"]
mod sql_transactions;
#[path = "fence/targets.rs"]
mod targets;

use std::time::Duration;

use lockkeeper::fence::{LocalFence, Outcome, RedisFence, ZkFence};
use lockkeeper::redis::Redis;
use lockkeeper::{Error, FencingToken};
use lockkeeper_testkit::RedisServer;
use rand::seq::SliceRandom;
use support::{for_each_backend, session};
use targets::{Resources, Target, lock_node};

#[cfg(any(feature = "postgres", feature = "sqlite"))]
use lockkeeper::fence::sql::SqlFence;
#[cfg(any(feature = "postgres", feature = "sqlite"))]
use targets::TABLE;

/// Lower refused (naming the highest), equal and higher accepted, resources independent.
async fn check_order(target: &Target) {
    let name = target.name();
    let mut writer = target.writer().await;
    assert_eq!(
        writer.write("a", 10, b"ten").await,
        Outcome::Accepted,
        "{name}"
    );
    assert_eq!(
        writer.write("a", 9, b"nine").await,
        Outcome::Refused {
            highest: FencingToken::new(10)
        },
        "{name}: a lower token is refused"
    );
    assert_eq!(
        writer.read("a").await,
        Some((10, b"ten".to_vec())),
        "{name}"
    );
    assert_eq!(
        writer.write("a", 10, b"ten again").await,
        Outcome::Accepted,
        "{name}: an equal token is accepted"
    );
    assert_eq!(writer.read("a").await, Some((10, b"ten again".to_vec())));
    assert_eq!(
        writer.write("a", 11, b"").await,
        Outcome::Accepted,
        "{name}"
    );
    assert_eq!(writer.read("a").await, Some((11, Vec::new())), "{name}");
    // Another resource has its own highest token.
    assert_eq!(
        writer.write("b", 1, b"one").await,
        Outcome::Accepted,
        "{name}"
    );
    assert_eq!(writer.read("b").await, Some((1, b"one".to_vec())), "{name}");
    assert_eq!(writer.read("c").await, None, "{name}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lower_token_is_refused_an_equal_or_higher_one_accepted() {
    let resources = Resources::start().await;
    for target in resources.targets() {
        check_order(&target).await;
    }
    for_each_backend(|connect| async move {
        let holder = session(&connect).await;
        lock_node(&holder, "/order-lock").await;
        check_order(&Target::Zk(connect, "/order-lock".into())).await;
    })
    .await;
}

/// 8 writers with their own connections write tokens 1..=48 to one resource, each its six in a
/// random order: the fence must end with token 48's value, every refusal must name a higher
/// token, and the accepted writes must have taken effect in non-decreasing token order.
async fn check_concurrent(target: &Target) {
    const WRITERS: u64 = 8;
    const ROUNDS: u64 = 6;
    let name = target.name();
    let resource = "contended";
    let started = std::time::Instant::now();
    let mut tasks = Vec::new();
    for w in 0..WRITERS {
        let mut writer = target.writer().await;
        let mut tokens: Vec<u64> = (0..ROUNDS).map(|r| r * WRITERS + w + 1).collect();
        tokens.shuffle(&mut rand::thread_rng());
        tasks.push(tokio::spawn(async move {
            let mut refused = 0;
            for token in tokens {
                match writer
                    .write(resource, token, token.to_string().as_bytes())
                    .await
                {
                    Outcome::Accepted => {
                        // No read after an accepted write can see a lower token.
                        let (seen, _) = writer.read(resource).await.expect("written");
                        assert!(seen >= token, "{name}: read {seen} after writing {token}");
                    }
                    Outcome::Refused { highest } => {
                        assert!(
                            highest.get() > token,
                            "{name}: {token} refused by {highest}"
                        );
                        refused += 1;
                    }
                }
            }
            refused
        }));
    }
    let mut refused = 0;
    for task in tasks {
        refused += tokio::time::timeout(Duration::from_secs(120), task)
            .await
            .expect("writers finish")
            .expect("writer task");
    }
    let last = WRITERS * ROUNDS;
    let mut reader = target.writer().await;
    assert_eq!(
        reader.read(resource).await,
        Some((last, last.to_string().into_bytes())),
        "{name}: the highest token's write is the one kept"
    );
    assert!(refused > 0, "{name}: shuffled tokens were all in order?");
    if let Some(history) = reader.history(resource).await {
        assert!(
            history.windows(2).all(|w| w[0] <= w[1]),
            "{name}: accepted writes went backwards: {history:?}"
        );
        assert_eq!(history.last(), Some(&last), "{name}: {history:?}");
        assert_eq!(
            history.len() as u64 + refused,
            WRITERS * ROUNDS,
            "{name}: every write was either accepted or refused"
        );
    }
    // Reported, not asserted: speed is measured in benchmarks, never in tests.
    eprintln!(
        "{name}: {refused} of {} writes refused, all done in {:?}",
        WRITERS * ROUNDS,
        started.elapsed()
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_writers_lose_no_update() {
    let resources = Resources::start().await;
    for target in resources.targets() {
        check_concurrent(&target).await;
    }
    for_each_backend(|connect| async move {
        let holder = session(&connect).await;
        lock_node(&holder, "/concurrent-lock").await;
        check_concurrent(&Target::Zk(connect, "/concurrent-lock".into())).await;
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_input_is_an_invalid_argument_naming_it() {
    fn invalid<T: std::fmt::Debug>(result: lockkeeper::Result<T>, names: &str) {
        match result {
            Err(Error::InvalidArgument(what)) => {
                assert!(what.contains(names), "{what:?} does not name {names:?}");
            }
            other => panic!("want InvalidArgument naming {names:?}, got {other:?}"),
        }
    }
    let local = LocalFence::new();
    let mut ran = false;
    invalid(
        local.write("", FencingToken::new(1), || ran = true),
        "resource",
    );
    assert!(!ran, "the write ran despite the bad resource id");

    let server = RedisServer::start();
    let redis = Redis::connect(&server.url()).await.unwrap();
    // Arguments are checked whatever the server keeps: testkit's persists nothing.
    let fence = RedisFence::builder(&redis)
        .accept_unpersisted_server()
        .build()
        .await
        .unwrap();
    invalid(
        fence.write("", FencingToken::new(1), b"v").await,
        "resource",
    );
    invalid(
        fence.write("a{b}", FencingToken::new(1), b"v").await,
        "\"a{b}\"",
    );
    invalid(fence.read("").await, "resource");
    let keys: Vec<String> = redis.command(redis::cmd("KEYS").arg("*")).await.unwrap();
    assert!(
        keys.is_empty(),
        "a refused argument reached Redis: {keys:?}"
    );

    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    {
        use lockkeeper::fence::sql::SqlError;
        let sql_invalid = |result: Result<_, SqlError>, names: &str| match result {
            Err(SqlError::InvalidArgument(what)) => {
                assert!(what.contains(names), "{what:?} does not name {names:?}");
            }
            other => panic!("want InvalidArgument naming {names:?}, got {other:?}"),
        };
        sql_invalid(SqlFence::new("orders; DROP TABLE x").map(|_| ()), "table");
        sql_invalid(SqlFence::new("").map(|_| ()), "table");
        let longest = "t".repeat(63);
        assert_eq!(
            SqlFence::new(&longest).unwrap().table(),
            longest,
            "63 bytes is the limit"
        );
        sql_invalid(SqlFence::new(&"t".repeat(64)).map(|_| ()), "table");
        assert_eq!(SqlFence::new("_fenced_1").unwrap().table(), "_fenced_1");
        #[cfg(feature = "sqlite")]
        {
            let conn = rusqlite::Connection::open_in_memory().unwrap();
            let fence = SqlFence::new(TABLE).unwrap();
            fence.create_table_sqlite(&conn).unwrap();
            sql_invalid(
                fence
                    .write_sqlite(&conn, "", FencingToken::new(1), b"v")
                    .map(|_| ()),
                "resource",
            );
            sql_invalid(
                fence
                    .write_sqlite(&conn, "a", FencingToken::new(u64::MAX), b"v")
                    .map(|_| ()),
                "BIGINT",
            );
        }
    }

    for_each_backend(|connect| async move {
        let session = session(&connect).await;
        invalid(ZkFence::new(&session, ""), "fence path");
        invalid(ZkFence::new(&session, "relative"), "fence path");
        invalid(ZkFence::new(&session, "/"), "fence path");
        invalid(ZkFence::new(&session, "/zookeeper/x"), "fence path");
        let fence = ZkFence::new(&session, "/fenced/x").unwrap();
        assert_eq!(fence.path(), "/fenced/x");
        invalid(
            fence.write_checked("", FencingToken::new(1), b"v").await,
            "lock node",
        );
        // A lock node that does not exist is no lock: nothing is written.
        assert!(matches!(
            fence
                .write_checked("/no-such-lock", FencingToken::new(1), b"v")
                .await,
            Err(Error::NotHeld)
        ));
        assert_eq!(fence.read().await.unwrap(), None);
    })
    .await;
}
