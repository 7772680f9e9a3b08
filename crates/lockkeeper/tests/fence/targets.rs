//! Each fence seen through the calls every fence has (write, read, and the order of accepted
//! writes where the fence keeps it), so that one test body checks them all; and the servers
//! behind them.

use std::collections::HashMap;
use std::sync::{Arc, Mutex as StdMutex};
#[cfg(feature = "sqlite")]
use std::time::Duration;

use lockkeeper::FencingToken;
use lockkeeper::fence::{LocalFence, Outcome, RedisFence, ZkFence};
use lockkeeper::redis::Redis;
use lockkeeper::zk::Session;
use lockkeeper_testkit::RedisServer;
use lockkeeper_zk_client::{CreateMode, CreateOptions};

use crate::support::session;

#[cfg(any(feature = "postgres", feature = "sqlite"))]
use lockkeeper::fence::sql::{SqlError, SqlFence};

#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub(crate) const TABLE: &str = "fenced";

/// Every accepted write of an in-process resource, in the order they happened.
pub(crate) type LocalLog = Arc<StdMutex<Vec<(String, u64)>>>;

/// The in-process resource: its values and the log of accepted writes.
#[derive(Clone, Default)]
pub(crate) struct LocalStore {
    pub fence: Arc<LocalFence>,
    pub values: Arc<StdMutex<HashMap<String, Vec<u8>>>>,
    pub log: LocalLog,
}

/// Where a fence keeps its resource, shared by the writers of one test.
#[derive(Clone)]
pub(crate) enum Target {
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
    pub(crate) fn name(&self) -> &'static str {
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
    pub(crate) async fn writer(&self) -> Writer {
        match self {
            Target::Local(store) => Writer::Local(store.clone()),
            Target::Redis(url) => {
                let redis = Redis::connect(url).await.expect("connect to redis-server");
                // testkit's redis-server keeps nothing on disk, and these tests never restart
                // it: the fence's forgetting at a restart is tested in redis_persistence.rs.
                let fence = RedisFence::builder(&redis)
                    .accept_unpersisted_server()
                    .build()
                    .await
                    .expect("build the Redis fence");
                Writer::Redis(fence)
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
pub(crate) enum Writer {
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
    pub(crate) async fn write(&mut self, resource: &str, token: u64, value: &[u8]) -> Outcome {
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
                let outcome =
                    sql_outcome(fence.write_sqlite(&tx, resource, token, value), "sqlite");
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
                let outcome = sql_outcome(
                    fence.write_postgres(&tx, resource, token, value).await,
                    "postgres",
                );
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
    pub(crate) async fn read(&mut self, resource: &str) -> Option<(u64, Vec<u8>)> {
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
    pub(crate) async fn history(&mut self, resource: &str) -> Option<Vec<u64>> {
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

/// The SQL fence's answer seen as the other fences': its refusal, an error, as `Refused`.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
fn sql_outcome(result: Result<(), SqlError>, name: &str) -> Outcome {
    match result {
        Ok(()) => Outcome::Accepted,
        Err(SqlError::Stale { highest, .. }) => Outcome::Refused { highest },
        Err(err) => panic!("{name} write: {err}"),
    }
}

pub(crate) fn zk_path(resource: &str) -> String {
    format!("/fenced/{resource}")
}

#[cfg(feature = "postgres")]
pub(crate) async fn pg_connect(config: &str) -> tokio_postgres::Client {
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
pub(crate) async fn pg_prepare(config: &str) {
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
pub(crate) fn sqlite_prepare(path: &std::path::Path) {
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
pub(crate) struct Resources {
    pub redis: RedisServer,
    #[cfg(feature = "postgres")]
    pub postgres: lockkeeper_testkit::Postgres,
    #[cfg(feature = "sqlite")]
    sqlite_dir: tempfile::TempDir,
}

impl Resources {
    pub(crate) async fn start() -> Resources {
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
    pub(crate) fn sqlite_path(&self) -> std::path::PathBuf {
        self.sqlite_dir.path().join("fence.db")
    }

    /// Every fence but ZooKeeper's.
    pub(crate) fn targets(&self) -> Vec<Target> {
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
pub(crate) async fn lock_node(session: &Session, node: &str) {
    let client = session.client().unwrap();
    let options = CreateOptions::new(CreateMode::Ephemeral);
    client
        .create(node, b"", &options)
        .await
        .expect("create the lock node");
}
