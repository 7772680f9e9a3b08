//! The resource's fences: every write a client sends goes through all five, each keeping its
//! own copy of the resource, and each copy checks its own history when the scenario ends.
//!
//! The fences, each on a real store started once per run:
//! - `local`: [`LocalFence`] in this process;
//! - `redis`: [`RedisFence`] on a `redis-server` of its own with `appendonly yes` and
//!   `appendfsync always` (the fence refuses to be built on anything less);
//! - `postgres`: the SQL fence on a PostgreSQL server of its own;
//! - `sqlite`: the SQL fence on a SQLite file;
//! - `zk`: [`ZkFence`]. On a ZooKeeper backend it lives on the backend itself and each write
//!   names the writer's lock node, so a holder whose node is gone is refused whatever its
//!   token (the fence's own check); on other backends it lives on a Keeper of the run's own and
//!   the lock node is an anchor that always exists, leaving the token comparison alone.
//!
//! Invariants:
//! - Each write gets a verdict per fence: accepted, refused, or unavailable (the store did
//!   not answer within [`FENCE_WAIT`] or failed). A write is done only if every fence accepted
//!   it; the client hears `refused` otherwise.
//! - Each fence's **history** is the writes it accepted, in the order it accepted them, plus
//!   the ones whose outcome is unknown (unavailable: the store may have applied it). Checked at
//!   the end: the accepted tokens never go down, and the value the store holds is the last
//!   accepted write's, or a later write of unknown outcome with a token at least that one.
//! - Values are unique per write (`CLIENT#N`), so the stored value names the write that made
//!   it.

use std::fmt;
use std::time::Duration;

use lockkeeper::FencingToken;
use lockkeeper::fence::sql::{SqlError, SqlFence};
use lockkeeper::fence::{LocalFence, Outcome, RedisFence, ZkFence};
use lockkeeper_testkit::{Keeper, NodeOptions, Postgres, RedisNode, TestServer};
use lockkeeper_zk_client::{CreateMode, CreateOptions, Error as ZkError};

/// How long one fence may take to answer before the write counts as unavailable there.
pub(crate) const FENCE_WAIT: Duration = Duration::from_secs(3);

/// The fences, in table order.
pub(crate) const NAMES: [&str; 5] = ["local", "redis", "postgres", "sqlite", "zk"];

/// The anchor node standing in for a lock node on backends that have none.
const ANCHOR: &str = "/faults-anchor";

/// The SQL fences' table.
const TABLE: &str = "faults_fenced";

/// What one fence did with one write.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Written: the token was at least the highest seen.
    Accepted,
    /// Refused: a higher token wrote first, or (ZooKeeper) the writer's lock node is gone.
    Refused,
    /// No answer in time, or the store failed: the outcome is unknown.
    Unavailable(String),
}

/// The stores the fences live on, started once per run.
pub(crate) struct Stores {
    redis: RedisNode,
    postgres: Postgres,
    keeper: Keeper,
    sqlite_dir: tempfile::TempDir,
}

impl Stores {
    /// Starts a durable `redis-server`, PostgreSQL and a Keeper (blocking: call off the async
    /// threads). Panics naming the store that could not start.
    pub(crate) fn start() -> Stores {
        Stores {
            redis: RedisNode::start_with(NodeOptions::new().durable(true)),
            postgres: Postgres::start(),
            keeper: Keeper::start(),
            sqlite_dir: tempfile::Builder::new()
                .prefix("lockkeeper-faults-sqlite-")
                .tempdir()
                .unwrap_or_else(|e| panic!("a directory for the SQLite fence: {e}")),
        }
    }
}

/// One fence's history of one resource.
#[derive(Debug, Default)]
struct History {
    /// Accepted writes, in order: (token, value).
    accepted: Vec<(u64, String)>,
    /// Writes of unknown outcome after the last accepted one.
    unknown_since_last: Vec<(u64, String)>,
    /// Tokens that went down among the accepted writes: (previous, next).
    went_down: Vec<(u64, u64)>,
}

impl History {
    fn record(&mut self, verdict: &Verdict, token: u64, value: &str) {
        match verdict {
            Verdict::Accepted => {
                if let Some(&(last, _)) = self.accepted.last()
                    && token < last
                {
                    self.went_down.push((last, token));
                }
                self.accepted.push((token, value.to_owned()));
                self.unknown_since_last.clear();
            }
            Verdict::Refused => {}
            Verdict::Unavailable(_) => self.unknown_since_last.push((token, value.to_owned())),
        }
    }

    /// Checks the history against what the store holds now; a description of each problem.
    fn check(&self, fence: &str, stored: Option<(u64, String)>) -> Vec<String> {
        let mut problems: Vec<String> = self
            .went_down
            .iter()
            .map(|(a, b)| format!("{fence}: accepted token {b} after {a}"))
            .collect();
        let last = self.accepted.last();
        let explained = match (&stored, last) {
            (None, None) => true,
            (Some(stored), Some(last)) if stored == last => true,
            (Some((token, value)), last) => self
                .unknown_since_last
                .iter()
                .any(|(t, v)| t == token && v == value && last.is_none_or(|(l, _)| t >= l)),
            (None, Some(_)) => false,
        };
        if !explained {
            problems.push(format!(
                "{fence}: the store holds {stored:?}, but the last accepted write was {last:?}"
            ));
        }
        problems
    }
}

/// The five fences of one scenario's resource.
pub(crate) struct Fences {
    resource: String,
    local: LocalFence,
    local_value: Option<(u64, String)>,
    redis: RedisFence,
    sql: SqlFence,
    postgres: tokio_postgres::Client,
    postgres_task: tokio::task::JoinHandle<()>,
    sqlite: rusqlite::Connection,
    zk: ZkFence,
    /// The lock node to present when the writer names none: the anchor on the run's Keeper.
    zk_anchor: Option<&'static str>,
    histories: [History; 5],
    writes: u64,
}

impl fmt::Debug for Fences {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Fences")
            .field("resource", &self.resource)
            .finish_non_exhaustive()
    }
}

impl Fences {
    /// Fences for `resource` (unique per scenario) on `stores`; the ZooKeeper fence on the
    /// backend at `zk_backend` when it is a ZooKeeper backend, else on the run's Keeper.
    pub(crate) async fn open(
        stores: &Stores,
        resource: &str,
        zk_backend: Option<&str>,
    ) -> Result<Fences, String> {
        let redis = lockkeeper::redis::Redis::connect(&stores.redis.url())
            .await
            .map_err(|e| format!("the Redis fence's server: {e}"))?;
        let redis = RedisFence::new(&redis)
            .await
            .map_err(|e| format!("the Redis fence: {e}"))?;
        let sql = SqlFence::new(TABLE).map_err(|e| format!("the SQL fence: {e}"))?;
        let (postgres, connection) =
            tokio_postgres::connect(&stores.postgres.config(), tokio_postgres::NoTls)
                .await
                .map_err(|e| format!("the PostgreSQL fence's server: {e}"))?;
        let postgres_task = tokio::spawn(async move {
            let _ = connection.await;
        });
        sql.create_table_postgres(&postgres)
            .await
            .map_err(|e| format!("the PostgreSQL fence's table: {e}"))?;
        let sqlite = rusqlite::Connection::open(stores.sqlite_dir.path().join("fenced.db"))
            .map_err(|e| format!("the SQLite fence's file: {e}"))?;
        sql.create_table_sqlite(&sqlite)
            .map_err(|e| format!("the SQLite fence's table: {e}"))?;
        let (connect, zk_anchor) = match zk_backend {
            Some(connect) => (connect.to_owned(), None),
            None => (stores.keeper.connect_string(), Some(ANCHOR)),
        };
        let session = lockkeeper::zk::Session::connect(&connect)
            .await
            .map_err(|e| format!("the ZooKeeper fence's server {connect}: {e}"))?;
        if zk_anchor.is_some() {
            let persistent = CreateOptions::new(CreateMode::Persistent);
            match session.client() {
                Ok(client) => match client.mkdir(ANCHOR, &persistent).await {
                    Ok(()) | Err(ZkError::NodeExists) => {}
                    Err(e) => return Err(format!("the ZooKeeper fence's anchor: {e}")),
                },
                Err(e) => return Err(format!("the ZooKeeper fence's session: {e}")),
            }
        }
        let zk = ZkFence::new(&session, &format!("/faults-fenced/{resource}"))
            .map_err(|e| format!("the ZooKeeper fence: {e}"))?;
        Ok(Fences {
            resource: resource.to_owned(),
            local: LocalFence::new(),
            local_value: None,
            redis,
            sql,
            postgres,
            postgres_task,
            sqlite,
            zk,
            zk_anchor,
            histories: Default::default(),
            writes: 0,
        })
    }

    /// Presents `client`'s write with `token` to every fence; `lock_node` is the writer's
    /// ZooKeeper lock node, if it has one. The verdicts, in [`NAMES`] order.
    pub(crate) async fn write(
        &mut self,
        client: &str,
        token: FencingToken,
        lock_node: Option<&str>,
    ) -> [Verdict; 5] {
        self.writes += 1;
        let value = format!("{client}#{}", self.writes);
        let resource = self.resource.clone();
        let local = {
            let mut written = None;
            match self.local.write(&resource, token, || {
                written = Some((token.get(), value.clone()));
            }) {
                Ok(outcome) => {
                    if let Some(written) = written {
                        self.local_value = Some(written);
                    }
                    verdict(outcome)
                }
                Err(e) => Verdict::Unavailable(e.to_string()),
            }
        };
        let redis = bounded(async {
            self.redis
                .write(&resource, token, value.as_bytes())
                .await
                .map(verdict)
                .map_err(|e| e.to_string())
        })
        .await;
        let postgres = bounded(async {
            sql_verdict(
                self.sql
                    .write_postgres(&self.postgres, &resource, token, value.as_bytes())
                    .await,
            )
        })
        .await;
        let sqlite =
            sql_verdict(
                self.sql
                    .write_sqlite(&self.sqlite, &resource, token, value.as_bytes()),
            )
            .unwrap_or_else(Verdict::Unavailable);
        let node = lock_node.or(self.zk_anchor);
        let zk = match node {
            // A ZooKeeper backend's writer that names no node has none to be checked by.
            None => Verdict::Unavailable("no lock node".into()),
            Some(node) => {
                bounded(async {
                    match self.zk.write_checked(node, token, value.as_bytes()).await {
                        Ok(outcome) => Ok(verdict(outcome)),
                        Err(lockkeeper::Error::NotHeld) => Ok(Verdict::Refused),
                        Err(e) => Err(e.to_string()),
                    }
                })
                .await
            }
        };
        let verdicts = [local, redis, postgres, sqlite, zk];
        for (history, verdict) in self.histories.iter_mut().zip(&verdicts) {
            history.record(verdict, token.get(), &value);
        }
        verdicts
    }

    /// Checks every fence's history against its store; one line per problem found.
    pub(crate) async fn check(&self) -> Vec<String> {
        let decode = |row: Option<(FencingToken, Vec<u8>)>| {
            row.map(|(t, v)| (t.get(), String::from_utf8_lossy(&v).into_owned()))
        };
        let stored: [Result<Option<(u64, String)>, String>; 5] = [
            Ok(self.local_value.clone()),
            self.redis
                .read(&self.resource)
                .await
                .map(decode)
                .map_err(|e| e.to_string()),
            self.sql
                .read_postgres(&self.postgres, &self.resource)
                .await
                .map(decode)
                .map_err(|e| e.to_string()),
            self.sql
                .read_sqlite(&self.sqlite, &self.resource)
                .map(decode)
                .map_err(|e| e.to_string()),
            match tokio::time::timeout(Duration::from_secs(20), self.zk.read()).await {
                Ok(read) => read.map(decode).map_err(|e| e.to_string()),
                Err(_) => Err("no answer within 20 s".into()),
            },
        ];
        let mut problems = Vec::new();
        for ((name, history), stored) in NAMES.iter().zip(&self.histories).zip(stored) {
            match stored {
                Ok(stored) => problems.extend(history.check(name, stored)),
                Err(e) => problems.push(format!("{name}: could not read the store back: {e}")),
            }
        }
        problems
    }
}

impl Drop for Fences {
    fn drop(&mut self) {
        self.postgres_task.abort();
    }
}

fn verdict(outcome: Outcome) -> Verdict {
    if outcome.is_accepted() {
        Verdict::Accepted
    } else {
        Verdict::Refused
    }
}

fn sql_verdict(result: Result<(), SqlError>) -> Result<Verdict, String> {
    match result {
        Ok(()) => Ok(Verdict::Accepted),
        Err(SqlError::Stale { .. }) => Ok(Verdict::Refused),
        Err(e) => Err(e.to_string()),
    }
}

/// Runs one fence's write within [`FENCE_WAIT`]; unavailable past it or on an error.
async fn bounded(write: impl Future<Output = Result<Verdict, String>>) -> Verdict {
    match tokio::time::timeout(FENCE_WAIT, write).await {
        Ok(Ok(verdict)) => verdict,
        Ok(Err(e)) => Verdict::Unavailable(e),
        Err(_) => Verdict::Unavailable(format!("no answer within {FENCE_WAIT:?}")),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_history_whose_tokens_go_down_is_caught() {
        let mut history = History::default();
        history.record(&Verdict::Accepted, 5, "a#1");
        history.record(&Verdict::Accepted, 4, "b#2");
        let problems = history.check("local", Some((4, "b#2".into())));
        assert_eq!(problems, ["local: accepted token 4 after 5"]);
        // One holder writing again under its token is no decrease.
        let mut same = History::default();
        same.record(&Verdict::Accepted, 5, "a#1");
        same.record(&Verdict::Accepted, 5, "a#2");
        assert!(same.check("local", Some((5, "a#2".into()))).is_empty());
    }

    #[test]
    fn a_store_that_lost_the_last_accepted_write_is_caught() {
        let mut history = History::default();
        history.record(&Verdict::Accepted, 5, "a#1");
        history.record(&Verdict::Accepted, 6, "b#2");
        assert_eq!(
            history.check("redis", Some((6, "b#2".into()))),
            Vec::<String>::new()
        );
        let problems = history.check("redis", Some((5, "a#1".into())));
        assert_eq!(problems.len(), 1, "{problems:?}");
        assert!(problems[0].contains("last accepted write"), "{problems:?}");
        assert_eq!(history.check("redis", None).len(), 1);
    }

    /// `Fences::check` against real stores: clean after fenced writes, and a write made behind
    /// the fences' back (one store changed, the others not) is named.
    #[test]
    fn a_store_changed_behind_the_fences_is_caught() {
        let stores = Stores::start();
        let runtime = tokio::runtime::Runtime::new().expect("a runtime");
        runtime.block_on(async {
            let mut fences = Fences::open(&stores, "forged", None)
                .await
                .expect("open the fences");
            let verdicts = fences.write("c0.0", FencingToken::new(3), None).await;
            assert!(
                verdicts.iter().all(|v| *v == Verdict::Accepted),
                "{verdicts:?}"
            );
            let stale = fences.write("c1.0", FencingToken::new(2), None).await;
            assert!(stale.iter().all(|v| *v == Verdict::Refused), "{stale:?}");
            assert_eq!(fences.check().await, Vec::<String>::new());
            fences
                .sql
                .write_sqlite(&fences.sqlite, "forged", FencingToken::new(9), b"forged")
                .expect("the write behind the fences' back");
            let problems = fences.check().await;
            assert_eq!(problems.len(), 1, "{problems:?}");
            assert!(problems[0].starts_with("sqlite:"), "{problems:?}");
        });
    }

    #[test]
    fn a_write_of_unknown_outcome_may_be_what_the_store_holds() {
        let mut history = History::default();
        history.record(&Verdict::Accepted, 5, "a#1");
        history.record(&Verdict::Unavailable("timeout".into()), 6, "b#2");
        assert!(history.check("zk", Some((6, "b#2".into()))).is_empty());
        assert!(history.check("zk", Some((5, "a#1".into()))).is_empty());
        // An unknown write with a lower token than the last accepted cannot be stored.
        history.record(&Verdict::Accepted, 7, "c#3");
        history.record(&Verdict::Unavailable("timeout".into()), 6, "b#4");
        assert_eq!(history.check("zk", Some((6, "b#4".into()))).len(), 1);
    }
}
