//! Fences on real resources: in-process, Redis, SQLite and PostgreSQL (with the `sqlite` and
//! `postgres` features), and ZooKeeper (Keeper and Apache ZooKeeper).
//!
//! Every fence must refuse a lower token and accept an equal or higher one, keep the highest
//! write under concurrent writers (no lost update), refuse the late write of a holder that was
//! paused past its session or lease while accepting the new holder's, and name a bad argument.
//! The paused holders are real: a ZooKeeper holder behind a cut network until its session
//! expired, a Redis holder in a child process stopped with SIGSTOP past its lease.

mod support;

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use lockkeeper::fence::{LocalFence, Outcome, RedisFence, ZkFence};
use lockkeeper::redis::{Redis, RedisOptions};
use lockkeeper::zk::{ConnectionState, Session};
use lockkeeper::{Error, FencingToken};
use lockkeeper_testkit::RedisServer;
use lockkeeper_testkit::test_child::{self as child, ChildProcess};
use rand::seq::SliceRandom;
use support::{Partition, for_each_backend, session, wait_state};
use zookeeper_client::{Acls, CreateMode};

#[cfg(any(feature = "postgres", feature = "sqlite"))]
use lockkeeper::fence::sql::SqlFence;

#[cfg(any(feature = "postgres", feature = "sqlite"))]
const TABLE: &str = "fenced";

/// Every accepted write of an in-process resource, in the order they happened.
type LocalLog = Arc<StdMutex<Vec<(String, u64)>>>;

/// The in-process resource: its values and the log of accepted writes.
#[derive(Clone, Default)]
struct LocalStore {
    fence: Arc<LocalFence>,
    values: Arc<StdMutex<HashMap<String, Vec<u8>>>>,
    log: LocalLog,
}

/// Where a fence keeps its resource, shared by the writers of one test.
#[derive(Clone)]
enum Target {
    Local(LocalStore),
    Redis(String),
    #[cfg(feature = "sqlite")]
    Sqlite(std::path::PathBuf),
    #[cfg(feature = "postgres")]
    Postgres(String),
    /// A connect string and a lock node that exists for the whole test.
    Zk(String, String),
}

impl Target {
    fn name(&self) -> &'static str {
        match self {
            Target::Local(_) => "local",
            Target::Redis(_) => "redis",
            #[cfg(feature = "sqlite")]
            Target::Sqlite(_) => "sqlite",
            #[cfg(feature = "postgres")]
            Target::Postgres(_) => "postgres",
            Target::Zk(..) => "zookeeper",
        }
    }

    /// A writer with a connection of its own, so that concurrent writers really are.
    async fn writer(&self) -> Writer {
        match self {
            Target::Local(store) => Writer::Local(store.clone()),
            Target::Redis(url) => {
                let redis = Redis::connect(url).await.expect("connect to redis-server");
                Writer::Redis(RedisFence::new(&redis))
            }
            #[cfg(feature = "sqlite")]
            Target::Sqlite(path) => {
                let conn = rusqlite::Connection::open(path).expect("open the SQLite file");
                conn.busy_timeout(Duration::from_secs(30))
                    .expect("busy timeout");
                Writer::Sqlite(conn, SqlFence::new(TABLE).unwrap())
            }
            #[cfg(feature = "postgres")]
            Target::Postgres(config) => {
                Writer::Postgres(pg_connect(config).await, SqlFence::new(TABLE).unwrap())
            }
            Target::Zk(connect, lock_node) => Writer::Zk(session(connect).await, lock_node.clone()),
        }
    }
}

/// One writer's handle on a fence, seen through the calls every fence has.
enum Writer {
    Local(LocalStore),
    Redis(RedisFence),
    #[cfg(feature = "sqlite")]
    Sqlite(rusqlite::Connection, SqlFence),
    #[cfg(feature = "postgres")]
    Postgres(tokio_postgres::Client, SqlFence),
    Zk(Session, String),
}

impl Writer {
    /// Writes `value` to `resource` with `token`. The SQL writers also append the token to a
    /// history table in the same transaction when accepted, so the history is the order in
    /// which the accepted writes took effect.
    async fn write(&mut self, resource: &str, token: u64, value: &[u8]) -> Outcome {
        let token = FencingToken::new(token);
        match self {
            Writer::Local(store) => store
                .fence
                .write(resource, token, || {
                    store
                        .values
                        .lock()
                        .unwrap()
                        .insert(resource.to_owned(), value.to_vec());
                    store
                        .log
                        .lock()
                        .unwrap()
                        .push((resource.to_owned(), token.get()));
                })
                .expect("local write"),
            Writer::Redis(fence) => fence
                .write(resource, token, value)
                .await
                .expect("redis write"),
            #[cfg(feature = "sqlite")]
            Writer::Sqlite(conn, fence) => {
                let tx = conn
                    .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
                    .expect("begin");
                let outcome = fence
                    .write_sqlite(&tx, resource, token, value)
                    .expect("sqlite write");
                if outcome.is_accepted() {
                    tx.execute(
                        "INSERT INTO history (resource, token) VALUES (?1, ?2)",
                        rusqlite::params![resource, token.get() as i64],
                    )
                    .expect("history");
                }
                tx.commit().expect("commit");
                outcome
            }
            #[cfg(feature = "postgres")]
            Writer::Postgres(client, fence) => {
                let tx = client.transaction().await.expect("begin");
                let outcome = fence
                    .write_postgres(&tx, resource, token, value)
                    .await
                    .expect("postgres write");
                if outcome.is_accepted() {
                    tx.execute(
                        "INSERT INTO history (resource, token) VALUES ($1, $2)",
                        &[&resource, &(token.get() as i64)],
                    )
                    .await
                    .expect("history");
                }
                tx.commit().await.expect("commit");
                outcome
            }
            Writer::Zk(session, lock_node) => ZkFence::new(session, &zk_path(resource))
                .unwrap()
                .write_checked(lock_node, token, value)
                .await
                .expect("zookeeper write"),
        }
    }

    /// The stored token and value of `resource`.
    async fn read(&mut self, resource: &str) -> Option<(u64, Vec<u8>)> {
        let found = match self {
            Writer::Local(store) => {
                let value = store.values.lock().unwrap().get(resource).cloned();
                store.fence.highest(resource).zip(value)
            }
            Writer::Redis(fence) => fence.read(resource).await.expect("redis read"),
            #[cfg(feature = "sqlite")]
            Writer::Sqlite(conn, fence) => fence.read_sqlite(conn, resource).expect("sqlite read"),
            #[cfg(feature = "postgres")]
            Writer::Postgres(client, fence) => fence
                .read_postgres(client, resource)
                .await
                .expect("postgres read"),
            Writer::Zk(session, _) => ZkFence::new(session, &zk_path(resource))
                .unwrap()
                .read()
                .await
                .expect("zookeeper read"),
        };
        found.map(|(token, value)| (token.get(), value))
    }

    /// The tokens of the accepted writes of `resource` in the order they took effect, where
    /// the fence keeps that order (in-process and SQL).
    async fn history(&mut self, resource: &str) -> Option<Vec<u64>> {
        match self {
            Writer::Local(store) => Some(
                store
                    .log
                    .lock()
                    .unwrap()
                    .iter()
                    .filter(|(r, _)| r == resource)
                    .map(|(_, t)| *t)
                    .collect(),
            ),
            Writer::Redis(_) | Writer::Zk(..) => None,
            #[cfg(feature = "sqlite")]
            Writer::Sqlite(conn, _) => {
                let mut query = conn
                    .prepare("SELECT token FROM history WHERE resource = ?1 ORDER BY seq")
                    .unwrap();
                let tokens = query
                    .query_map([resource], |row| row.get::<_, i64>(0))
                    .unwrap()
                    .map(|t| t.unwrap() as u64)
                    .collect();
                Some(tokens)
            }
            #[cfg(feature = "postgres")]
            Writer::Postgres(client, _) => {
                let rows = client
                    .query(
                        "SELECT token FROM history WHERE resource = $1 ORDER BY seq",
                        &[&resource],
                    )
                    .await
                    .unwrap();
                Some(rows.iter().map(|r| r.get::<_, i64>(0) as u64).collect())
            }
        }
    }
}

fn zk_path(resource: &str) -> String {
    format!("/fenced/{resource}")
}

#[cfg(feature = "postgres")]
async fn pg_connect(config: &str) -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(config, tokio_postgres::NoTls)
        .await
        .expect("connect to PostgreSQL");
    tokio::spawn(async move {
        let _ = connection.await;
    });
    client
}

/// Creates the fence's table and the history table.
#[cfg(feature = "postgres")]
async fn pg_prepare(config: &str) {
    let client = pg_connect(config).await;
    SqlFence::new(TABLE)
        .unwrap()
        .create_table_postgres(&client)
        .await
        .expect("create the fence table");
    client
        .batch_execute(
            "CREATE TABLE IF NOT EXISTS history \
             (seq BIGSERIAL PRIMARY KEY, resource TEXT NOT NULL, token BIGINT NOT NULL)",
        )
        .await
        .expect("create the history table");
}

#[cfg(feature = "sqlite")]
fn sqlite_prepare(path: &std::path::Path) {
    let conn = rusqlite::Connection::open(path).expect("open the SQLite file");
    // WAL: readers never wait for the writer, and writers queue on the busy timeout.
    conn.pragma_update(None, "journal_mode", "wal").unwrap();
    SqlFence::new(TABLE)
        .unwrap()
        .create_table_sqlite(&conn)
        .expect("create the fence table");
    conn.execute_batch(
        "CREATE TABLE IF NOT EXISTS history \
         (seq INTEGER PRIMARY KEY AUTOINCREMENT, resource TEXT NOT NULL, token INTEGER NOT NULL)",
    )
    .expect("create the history table");
}

/// The servers behind the fences other than ZooKeeper, for one test.
struct Resources {
    redis: RedisServer,
    #[cfg(feature = "postgres")]
    postgres: lockkeeper_testkit::Postgres,
    #[cfg(feature = "sqlite")]
    sqlite_dir: tempfile::TempDir,
}

impl Resources {
    async fn start() -> Resources {
        let resources = Resources {
            redis: RedisServer::start(),
            #[cfg(feature = "postgres")]
            postgres: lockkeeper_testkit::Postgres::start(),
            #[cfg(feature = "sqlite")]
            sqlite_dir: tempfile::tempdir().expect("tempdir"),
        };
        #[cfg(feature = "postgres")]
        pg_prepare(&resources.postgres.config()).await;
        #[cfg(feature = "sqlite")]
        sqlite_prepare(&resources.sqlite_path());
        resources
    }

    #[cfg(feature = "sqlite")]
    fn sqlite_path(&self) -> std::path::PathBuf {
        self.sqlite_dir.path().join("fence.db")
    }

    /// Every fence but ZooKeeper's.
    fn targets(&self) -> Vec<Target> {
        vec![
            Target::Local(LocalStore::default()),
            Target::Redis(self.redis.url()),
            #[cfg(feature = "sqlite")]
            Target::Sqlite(self.sqlite_path()),
            #[cfg(feature = "postgres")]
            Target::Postgres(self.postgres.config()),
        ]
    }
}

/// Creates an ephemeral node standing for a held lock node, for the ZooKeeper fence's check.
async fn lock_node(session: &Session, node: &str) {
    let client = session.client().unwrap();
    let options = CreateMode::Ephemeral.with_acls(Acls::anyone_all());
    client
        .create(node, b"", &options)
        .await
        .expect("create the lock node");
}

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
    eprintln!("{name}: {refused} of {} writes refused", WRITERS * ROUNDS);
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

const REDIS_LOCK: &str = "fenced";

fn env(name: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| panic!("child needs {name}"))
}

/// The child's late write through the fences it can reach from another process, each outcome
/// stored as `outcome:<fence>` in the lock's Redis for the parent to read.
async fn child_late_writes(redis: &Redis, token: u64) {
    let targets = vec![
        Target::Redis(env("LK_RESOURCE_REDIS")),
        #[cfg(feature = "sqlite")]
        Target::Sqlite(env("LK_SQLITE").into()),
        #[cfg(feature = "postgres")]
        Target::Postgres(env("LK_POSTGRES")),
    ];
    for target in targets {
        let outcome = target.writer().await.write("orders", token, b"late").await;
        let _: () = redis
            .command(
                redis::cmd("SET")
                    .arg(format!("outcome:{}", target.name()))
                    .arg(format!("{outcome:?}")),
            )
            .await
            .expect("report the outcome");
    }
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
        let guard = redis.lease_lock(REDIS_LOCK).lock().await.expect("lock");
        let token = guard.fencing_token().get();
        let _: () = redis
            .command(redis::cmd("SET").arg("child-token").arg(token))
            .await
            .expect("report the token");
        // Stopped here by the parent; carries on once let go, as a paused process does,
        // without looking at its guard.
        loop {
            let go: bool = redis
                .command(redis::cmd("EXISTS").arg("go"))
                .await
                .unwrap_or(false);
            if go {
                break;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        child_late_writes(&redis, token).await;
        std::mem::forget(guard);
        return;
    }
    let lock_server = RedisServer::start();
    let resources = Resources::start().await;
    let vars = vec![
        ("LK_REDIS", lock_server.url()),
        ("LK_RESOURCE_REDIS", resources.redis.url()),
        #[cfg(feature = "sqlite")]
        ("LK_SQLITE", resources.sqlite_path().display().to_string()),
        #[cfg(feature = "postgres")]
        ("LK_POSTGRES", resources.postgres.config()),
    ];
    let redis = Redis::connect(&lock_server.url()).await.expect("connect");
    let mut paused = ChildProcess::spawn(
        "a_redis_holder_stopped_past_its_lease_is_fenced_off",
        "holder",
        &vars,
    );
    let mut child_token = None;
    for _ in 0..3000 {
        let token: Option<u64> = redis
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
    let guard = redis
        .lease_lock(REDIS_LOCK)
        .lock_timeout(Duration::from_secs(30))
        .await
        .expect("lock_timeout")
        .expect("acquired once the stopped holder's lease ran out");
    let token = guard.fencing_token().get();
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
    let _: () = redis
        .command(redis::cmd("SET").arg("go").arg(1))
        .await
        .unwrap();
    paused.signal("CONT");
    assert!(paused.wait_success(Duration::from_secs(60)), "child failed");
    for target in &targets {
        let name = target.name();
        let outcome: Option<String> = redis
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
    guard.release().await.expect("release");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_input_is_an_invalid_argument_naming_it() {
    fn invalid<T: std::fmt::Debug>(result: lockkeeper::Result<T>, names: &str) {
        match result {
            Err(Error::InvalidArgument(what)) => {
                assert!(what.contains(names), "{what:?} does not name {names:?}")
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
    let fence = RedisFence::new(&redis);
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
                assert!(what.contains(names), "{what:?} does not name {names:?}")
            }
            other => panic!("want InvalidArgument naming {names:?}, got {other:?}"),
        };
        sql_invalid(SqlFence::new("orders; DROP TABLE x").map(|_| ()), "table");
        sql_invalid(SqlFence::new("").map(|_| ()), "table");
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
