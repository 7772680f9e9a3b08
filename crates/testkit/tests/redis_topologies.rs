//! The restartable node, the cluster and the Sentinel set start, behave as the fault-injection
//! tests rely on, and leave no process behind.

use std::net::TcpStream;
use std::path::Path;
use std::time::Duration;

use lockkeeper_testkit::resp::Reply;
use lockkeeper_testkit::{NodeOptions, RedisCluster, RedisNode, RedisSentinel};

fn gone(pid: u32) -> bool {
    !Path::new(&format!("/proc/{pid}")).exists()
}

fn bulk(text: &str) -> Reply {
    Reply::Bulk(text.to_string())
}

#[test]
fn a_node_without_persistence_comes_back_empty_on_the_same_port() {
    let node = RedisNode::start();
    let addr = node.addr();
    assert_eq!(
        node.command(&["SET", "k", "v"]).unwrap(),
        Reply::Status("OK".into())
    );
    let first = node.pid().expect("running");
    node.kill();
    assert!(!node.is_running());
    assert_eq!(node.pid(), None);
    assert!(gone(first), "killed node {first} still running");
    assert!(TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err());

    node.restart();
    assert!(node.is_running());
    assert_eq!(node.addr(), addr, "restarted on the same port");
    assert_ne!(node.pid(), Some(first));
    assert_eq!(
        node.command(&["GET", "k"]).unwrap(),
        Reply::Nil,
        "nothing kept"
    );

    let pid = node.pid().expect("running");
    drop(node);
    assert!(gone(pid), "redis-server {pid} outlived its handle");
}

#[test]
fn a_durable_node_keeps_acknowledged_writes_and_their_expiry_across_sigkill() {
    let node = RedisNode::start_with(NodeOptions::new().durable(true));
    let reply = node.command(&["CONFIG", "GET", "appendfsync"]).unwrap();
    assert_eq!(
        reply,
        Reply::Array(vec![bulk("appendfsync"), bulk("always")])
    );
    node.command(&["SET", "k", "v", "PX", "600000"]).unwrap();
    node.restart(); // kills with SIGKILL first: no shutdown save
    assert_eq!(node.command(&["GET", "k"]).unwrap(), bulk("v"));
    let Reply::Int(ttl) = node.command(&["PTTL", "k"]).unwrap() else {
        panic!("PTTL answers an integer");
    };
    assert!(
        (1..=600_000).contains(&ttl),
        "the expiry came back too: {ttl}"
    );
}

#[test]
fn a_cluster_serves_every_slot_and_routes_by_hash_tag() {
    let cluster = RedisCluster::start();
    let addrs = cluster.addrs();
    assert_eq!(addrs.len(), 3);
    let Reply::Bulk(info) = cluster.command(1, &["CLUSTER", "INFO"]) else {
        panic!("CLUSTER INFO answers a bulk string");
    };
    assert!(info.contains("cluster_state:ok"), "{info}");
    assert!(info.contains("cluster_slots_assigned:16384"), "{info}");

    assert_eq!(cluster.keyslot("{job}:a"), cluster.keyslot("{job}:b"));
    assert_ne!(cluster.keyslot("a"), cluster.keyslot("b"));
    // The key is accepted by the master that owns its slot and redirected by the others.
    let owner = cluster.master_for("{job}:a");
    for (index, addr) in addrs.iter().enumerate() {
        let reply = cluster.command(index, &["SET", "{job}:a", "v"]);
        if *addr == owner {
            assert_eq!(reply, Reply::Status("OK".into()));
        } else {
            assert!(
                matches!(&reply, Reply::Error(e) if e.starts_with("MOVED")),
                "{addr}: {reply:?}"
            );
        }
    }

    let pids = cluster.pids();
    drop(cluster);
    for pid in pids {
        assert!(gone(pid), "cluster node {pid} outlived its handle");
    }
}

#[test]
fn sentinels_fail_over_on_request_and_when_the_master_dies() {
    let set = RedisSentinel::start(3);
    assert_eq!(set.sentinel_addrs().len(), 3);
    let first = set.current_master();
    assert_eq!(first, set.nodes()[0].addr());

    let second = set.failover();
    assert_eq!(second, set.nodes()[1].addr(), "the replica was promoted");
    // The old master is reconfigured as a replica of the new one: a write there is refused.
    let reply = set.nodes()[0].command(&["SET", "k", "v"]);
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut reply = reply.unwrap();
    while !matches!(&reply, Reply::Error(e) if e.starts_with("READONLY")) {
        assert!(
            std::time::Instant::now() < deadline,
            "old master still writable: {reply:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
        reply = set.nodes()[0].command(&["SET", "k", "v"]).unwrap();
    }

    let third = set.kill_master();
    assert_eq!(
        third, first,
        "the old master, now a replica, was promoted back"
    );
    assert!(!set.nodes()[1].is_running());
}
