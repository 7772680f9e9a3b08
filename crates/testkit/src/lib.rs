//! Test support for lockkeeper: real servers on random 127.0.0.1 ports, stopped on drop.
//!
//! Behaviour is tested against real components, never mocks: Keeper in-process ([`Keeper`]),
//! Apache ZooKeeper 3.8 as a child JVM ([`ApacheZk`]) and redis-server ([`RedisServer`]).
//! The two ZooKeeper-protocol servers implement [`TestServer`], and [`both()`] returns one of
//! each so the same test body pins that Keeper answers as ZooKeeper does:
//!
//! ```no_run
//! for server in lockkeeper_testkit::both() {
//!     let connect = server.connect_string(); // "127.0.0.1:PORT"
//!     // ... run the same client code against `connect`, label failures with server.name()
//! #   let _ = connect;
//! }
//! ```
//!
//! [`raw::Raw`] speaks the ZooKeeper wire protocol byte by byte, for tests that send what no
//! real client would, or stop reading their socket.
//!
//! Set `LOCKKEEPER_TEST_BACKENDS=keeper` (or `zookeeper`, or `keeper,zookeeper`, the default)
//! to run the [`both()`] tests against fewer backends while debugging, or add `ensemble` to
//! run them against a three-member Apache ZooKeeper ensemble as well (opt-in: three JVMs per
//! test; tests that restart or cut off one server keep to the single servers).

mod child;
pub mod docs;
mod ensemble;
mod etcd;
mod fourlw;
mod host;
mod http;
mod keeper;
mod launch;
mod peer;
mod ports;
mod postgres;
mod proxy;
pub mod raw;
mod redis;
mod redis_cluster;
mod redis_node;
pub mod resp;
mod sentinel;
pub mod test_child;
mod tools;
mod zk;
pub mod zk_metrics;

use std::net::SocketAddr;

pub use child::{die_with_parent, send_signal};
pub use ensemble::{ENSEMBLE_TICK_MS, MemberMode, ZkEnsemble, ensemble_options};
pub use etcd::{ELECTION_MS, Etcd, EtcdCluster, EtcdTls, HEARTBEAT_MS, etcdctl};
pub use fourlw::{cons_field, four_letter_word, total_watches, try_four_letter_word};
pub use host::Host;
pub use http::{http_exchange, try_http_exchange};
pub use keeper::Keeper;
pub use launch::{Launch, on_free_port, on_port};
pub use peer::LinePeer;
pub use ports::{free_port, try_free_port};
pub use postgres::Postgres;
pub use proxy::Proxy;
pub use redis::{RedisServer, RedisTls};
pub use redis_cluster::RedisCluster;
pub use redis_node::{NodeOptions, RedisNode};
pub use sentinel::RedisSentinel;
pub use tools::{
    JAVA_LIB_DIR, ZKCLI, compile_java, curator_classpath, curator_classpath_unchecked,
    find_on_path, java, java_classpath, java_jar, javac, javac_command, python3, zkcli,
};
pub use zk::{ApacheZk, ZkJvm, ZkOptions, ZkRole, ZkTls};

/// Awaits `fut`, failing the test with "`what` did not complete within `limit`" if it takes
/// longer: every wait in a test is bounded, and says which one hung.
pub async fn within<T>(
    limit: std::time::Duration,
    what: impl std::fmt::Display,
    fut: impl std::future::Future<Output = T>,
) -> T {
    match tokio::time::timeout(limit, fut).await {
        Ok(value) => value,
        Err(_) => panic!("{what} did not complete within {limit:?}"),
    }
}

/// Something a ZooKeeper client can connect to, started for one test and stopped on drop.
pub trait TestServer: Send + Sync {
    /// The loopback address it listens on.
    fn addr(&self) -> SocketAddr;
    /// The client connect string, `"127.0.0.1:PORT"`.
    fn connect_string(&self) -> String;
    /// `"keeper"` or `"zookeeper"`, to say in assertion messages which backend failed.
    fn name(&self) -> &'static str;
}

/// The environment variable that narrows [`both()`] to some backends.
pub const BACKENDS_ENV: &str = "LOCKKEEPER_TEST_BACKENDS";

/// Whether the backend called `name` (`"keeper"`, `"zookeeper"` or `"ensemble"`) is selected
/// by `LOCKKEEPER_TEST_BACKENDS` (Keeper and ZooKeeper are when it is unset; the ensemble only
/// when listed). Tests that build their own pair of servers (with non-default options) use
/// this to honour the same selection as [`both()`].
pub fn backend_enabled(name: &str) -> bool {
    let Ok(wanted) = std::env::var(BACKENDS_ENV) else {
        return name != "ensemble";
    };
    let wanted: Vec<&str> = wanted.split(',').map(str::trim).collect();
    for listed in &wanted {
        assert!(
            matches!(*listed, "keeper" | "zookeeper" | "ensemble"),
            "{BACKENDS_ENV} lists {listed:?}; expected `keeper`, `zookeeper` and/or `ensemble`"
        );
    }
    wanted.contains(&name)
}

/// One Keeper and one Apache ZooKeeper, in that order, each freshly started: the same test
/// body runs against each (and against a three-member ensemble, when selected: see
/// [`backend_enabled`]).
pub fn both() -> Vec<Box<dyn TestServer>> {
    let mut servers: Vec<Box<dyn TestServer>> = Vec::new();
    if backend_enabled("keeper") {
        servers.push(Box::new(Keeper::start()));
    }
    if backend_enabled("zookeeper") {
        servers.push(Box::new(ApacheZk::start()));
    }
    if backend_enabled("ensemble") {
        servers.push(Box::new(ZkEnsemble::start(3)));
    }
    servers
}
