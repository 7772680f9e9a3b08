//! The names shared by the orchestrator and its clients: lock kinds and backend endpoints, and
//! their command-line spellings.
//!
//! An endpoint travels to a client as one URL-like argument:
//! `zk://HOST:PORT[,HOST:PORT...]`, `redis://HOST:PORT`,
//! `redis+sentinel://MASTER@HOST:PORT[,HOST:PORT...]`, `redlock://HOST:PORT,HOST:PORT,...`,
//! `etcd://HOST:PORT[,HOST:PORT...]`.
//! Parsing refuses anything else with an error naming the argument.

use std::fmt;

/// A lock kind the suite drives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Kind {
    /// ZooKeeper `Mutex`, or etcd's on an etcd backend.
    Mutex,
    /// ZooKeeper `RwLock`, write side (etcd's on an etcd backend).
    RwWrite,
    /// ZooKeeper `Semaphore` with one lease (etcd's with one permit on an etcd backend).
    Semaphore,
    /// ZooKeeper `Semaphore` with two leases (etcd's with two permits), each client taking
    /// one: two holders at once are allowed, three are not. Two concurrent holders hold two
    /// tokens, which no single fence can tell from a stale one, so the resource fences none of
    /// its writes (it uses the tokens to tell which holder's lease lapsed).
    Semaphore2,
    /// ZooKeeper leader election (`LeaderLatch`), or etcd's `Election` on an etcd backend.
    Leader,
    /// Redis `LeaseLock` (watchdog lease).
    Lease,
    /// Redis `ReentrantLock` (watchdog lease).
    Reentrant,
    /// Redlock over several masters.
    Redlock,
    /// ZooKeeper `AtomicLong`: not a lock; its clients' history is checked for
    /// linearizability.
    AtomicLong,
    /// ZooKeeper `DistributedQueue` consumed at least once: not a lock; its producers' and
    /// consumers' history is checked for lost items.
    Queue,
    /// ZooKeeper `TwoPhase`: not a lock; each transaction's votes and outcomes are checked.
    TwoPhase,
    /// ZooKeeper `DoubleBarrier` of three: not a lock; its members' rounds are checked.
    DoubleBarrier,
    /// ZooKeeper tree caches and name watches following a changing subtree: not a lock;
    /// their views are checked against the server's once the fault healed.
    Cache,
    /// The `lockkeeper elect` command running each leader's work as a child process
    /// ([`crate::cli_client`]).
    CliElect,
}

impl Kind {
    /// Every kind, in table order.
    pub(crate) const ALL: [Kind; 14] = [
        Kind::Mutex,
        Kind::RwWrite,
        Kind::Semaphore,
        Kind::Semaphore2,
        Kind::Leader,
        Kind::Lease,
        Kind::Reentrant,
        Kind::Redlock,
        Kind::AtomicLong,
        Kind::Queue,
        Kind::TwoPhase,
        Kind::DoubleBarrier,
        Kind::Cache,
        Kind::CliElect,
    ];

    /// The command-line and table name.
    pub(crate) fn name(self) -> &'static str {
        match self {
            Kind::Mutex => "mutex",
            Kind::RwWrite => "rwlock-write",
            Kind::Semaphore => "semaphore-1",
            Kind::Semaphore2 => "semaphore-2",
            Kind::Leader => "leader",
            Kind::Lease => "lease-lock",
            Kind::Reentrant => "reentrant",
            Kind::Redlock => "redlock",
            Kind::AtomicLong => "atomic-long",
            Kind::Queue => "queue",
            Kind::TwoPhase => "two-phase",
            Kind::DoubleBarrier => "double-barrier",
            Kind::Cache => "tree-cache",
            Kind::CliElect => "cli-elect",
        }
    }

    /// How many clients may hold it at once.
    pub(crate) fn holders(self) -> usize {
        match self {
            Kind::Semaphore2 => 2,
            _ => 1,
        }
    }

    /// Parses a [`name`](Kind::name).
    pub(crate) fn parse(raw: &str) -> Result<Kind, String> {
        Kind::ALL
            .into_iter()
            .find(|k| k.name() == raw)
            .ok_or_else(|| {
                let names: Vec<&str> = Kind::ALL.iter().map(|k| k.name()).collect();
                format!("--kind {raw:?} is not one of {}", names.join(", "))
            })
    }
}

impl fmt::Display for Kind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Where a client finds its lock.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Endpoint {
    /// A ZooKeeper connect string.
    Zk(String),
    /// One Redis server's URL.
    Redis(String),
    /// A Sentinel-monitored master.
    Sentinel {
        /// The master's name.
        master: String,
        /// The sentinels' URLs.
        sentinels: Vec<String>,
    },
    /// Redlock masters' URLs.
    Redlock(Vec<String>),
    /// etcd members, `HOST:PORT[,HOST:PORT...]`.
    Etcd(String),
}

impl Endpoint {
    /// Parses the `--backend` argument (see the module docs).
    pub(crate) fn parse(raw: &str) -> Result<Endpoint, String> {
        let hosts = |list: &str| -> Result<Vec<String>, String> {
            let hosts: Vec<String> = list.split(',').map(str::to_owned).collect();
            if hosts.iter().any(|h| h.is_empty() || !h.contains(':')) {
                return Err(format!(
                    "--backend {raw:?}: expected HOST:PORT[,HOST:PORT...]"
                ));
            }
            Ok(hosts)
        };
        if let Some(rest) = raw.strip_prefix("zk://") {
            Ok(Endpoint::Zk(hosts(rest)?.join(",")))
        } else if let Some(rest) = raw.strip_prefix("redis://") {
            let [host] = hosts(rest)?
                .try_into()
                .map_err(|_| format!("--backend {raw:?}: a redis:// backend is one HOST:PORT"))?;
            Ok(Endpoint::Redis(format!("redis://{host}")))
        } else if let Some(rest) = raw.strip_prefix("redis+sentinel://") {
            let (master, list) = rest
                .split_once('@')
                .ok_or_else(|| format!("--backend {raw:?}: expected MASTER@HOST:PORT,..."))?;
            if master.is_empty() {
                return Err(format!("--backend {raw:?}: the master name is empty"));
            }
            let sentinels = hosts(list)?
                .iter()
                .map(|h| format!("redis://{h}"))
                .collect();
            Ok(Endpoint::Sentinel {
                master: master.to_owned(),
                sentinels,
            })
        } else if let Some(rest) = raw.strip_prefix("redlock://") {
            Ok(Endpoint::Redlock(
                hosts(rest)?
                    .iter()
                    .map(|h| format!("redis://{h}"))
                    .collect(),
            ))
        } else if let Some(rest) = raw.strip_prefix("etcd://") {
            Ok(Endpoint::Etcd(hosts(rest)?.join(",")))
        } else {
            Err(format!(
                "--backend {raw:?}: expected zk://, redis://, redis+sentinel://, redlock:// or \
                 etcd://"
            ))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn endpoints_parse_and_bad_ones_are_named() {
        assert_eq!(
            Endpoint::parse("zk://127.0.0.1:1,127.0.0.1:2"),
            Ok(Endpoint::Zk("127.0.0.1:1,127.0.0.1:2".into()))
        );
        assert_eq!(
            Endpoint::parse("redis+sentinel://m@127.0.0.1:5"),
            Ok(Endpoint::Sentinel {
                master: "m".into(),
                sentinels: vec!["redis://127.0.0.1:5".into()]
            })
        );
        let err = Endpoint::parse("redis://a:1,b:2").unwrap_err();
        assert!(err.contains("one HOST:PORT"), "{err}");
        assert_eq!(
            Endpoint::parse("etcd://127.0.0.1:1,127.0.0.1:2"),
            Ok(Endpoint::Etcd("127.0.0.1:1,127.0.0.1:2".into()))
        );
        let err = Endpoint::parse("etcd://x").unwrap_err();
        assert!(
            err.contains("etcd://x") && err.contains("HOST:PORT"),
            "{err}"
        );
        let err = Endpoint::parse("consul://x:1").unwrap_err();
        assert!(err.contains("consul://x:1"), "{err}");
        assert!(Kind::parse("nope").unwrap_err().contains("--kind \"nope\""));
    }
}
