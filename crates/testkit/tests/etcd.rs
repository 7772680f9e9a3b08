//! The etcd test servers: a single member serves and keeps its data across a crash; a
//! three-member cluster elects a leader, keeps acknowledged writes when the leader is killed,
//! elects another within a bounded time and takes the killed member back; `etcdctl lock`
//! excludes a second holder (the later interop tests drive it). Every etcd here is started by
//! the test and killed by its PID.

use std::collections::HashSet;
use std::fs;
use std::time::{Duration, Instant};

use lockkeeper_testkit::{Etcd, EtcdCluster, etcdctl};

fn get(endpoints: &[String], key: &str, extra: &[&str]) -> Result<String, String> {
    let mut args = vec!["get", key, "--print-value-only"];
    args.extend_from_slice(extra);
    etcdctl(endpoints, &args)
}

/// The local addresses of the TCP sockets process `pid` listens on, read from /proc: the
/// inodes of its socket descriptors matched against the kernel's LISTEN entries.
fn listening(pid: u32) -> Vec<String> {
    let inodes: HashSet<String> = fs::read_dir(format!("/proc/{pid}/fd"))
        .expect("read the etcd process's descriptors")
        .filter_map(|fd| fs::read_link(fd.ok()?.path()).ok())
        .filter_map(|target| {
            let target = target.to_string_lossy().into_owned();
            Some(
                target
                    .strip_prefix("socket:[")?
                    .strip_suffix(']')?
                    .to_owned(),
            )
        })
        .collect();
    let mut addrs = Vec::new();
    for table in ["tcp", "tcp6"] {
        let text = fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let fields: Vec<&str> = line.split_whitespace().collect();
            // local_address, state (0A is LISTEN), inode.
            if fields.len() > 9 && fields[3] == "0A" && inodes.contains(fields[9]) {
                addrs.push(fields[1].to_owned());
            }
        }
    }
    addrs
}

#[test]
fn single_member_serves_and_keeps_its_data_across_a_crash() {
    let etcd = Etcd::start();
    let endpoint = etcd.endpoint();
    assert_eq!(endpoint, format!("http://127.0.0.1:{}", etcd.addr().port()));
    let endpoints = [endpoint.clone()];

    // Client and peer listeners only, both on 127.0.0.1 (0100007F in /proc's notation).
    let pid = etcd.pid().expect("etcd runs");
    let addrs = listening(pid);
    assert_eq!(
        addrs.len(),
        2,
        "etcd should listen on client and peer ports only: {addrs:?}"
    );
    for addr in &addrs {
        assert!(
            addr.starts_with("0100007F:"),
            "etcd listens beyond loopback: {addrs:?}"
        );
    }

    etcdctl(&endpoints, &["put", "greeting", "hello"]).expect("put");
    assert_eq!(get(&endpoints, "greeting", &[]).expect("get"), "hello\n");

    etcd.kill();
    assert_eq!(etcd.pid(), None);
    let down = get(
        &endpoints,
        "greeting",
        &["--command-timeout=1s", "--dial-timeout=1s"],
    );
    assert!(down.is_err(), "a killed etcd still answered: {down:?}");

    etcd.restart();
    let again = etcd.pid().expect("etcd runs again");
    assert_ne!(again, pid, "restart started a new process");
    assert_eq!(etcd.endpoint(), endpoint, "restart keeps the port");
    assert_eq!(
        get(&endpoints, "greeting", &[]).expect("get after restart"),
        "hello\n",
        "the key written before the crash survives it"
    );
}

#[test]
fn cluster_replaces_a_killed_leader_and_takes_it_back() {
    let cluster = EtcdCluster::start(3);
    let endpoints = cluster.endpoints();
    assert_eq!(endpoints.len(), 3);
    assert_eq!(endpoints.iter().collect::<HashSet<_>>().len(), 3);

    etcdctl(&endpoints, &["put", "before", "1"]).expect("put before the leader dies");
    let old = cluster.kill_leader();
    assert_eq!(cluster.pid(old), None);
    let killed_at = Instant::now();
    let new = cluster.leader();
    let elected_in = killed_at.elapsed();
    assert_ne!(new, old, "a killed member cannot lead");
    eprintln!("etcd elected member {new} {elected_in:?} after killing leader {old}");
    assert!(
        elected_in < Duration::from_secs(10),
        "no new leader within 10 s: {elected_in:?}"
    );

    let survivors: Vec<String> = (0..3)
        .filter(|i| *i != old)
        .map(|i| endpoints[i].clone())
        .collect();
    assert_eq!(get(&survivors, "before", &[]).expect("get"), "1\n");
    etcdctl(&survivors, &["put", "during", "2"]).expect("two of three still take writes");

    cluster.restart(old);
    assert!(cluster.pid(old).is_some());
    // A serializable read answers from the member's own copy: it has caught up when it shows
    // the write made while it was down. Bounded: Raft catches it up in milliseconds.
    let own = [endpoints[old].clone()];
    let started = Instant::now();
    loop {
        let local = get(&own, "during", &["--consistency=s"]);
        if local.as_deref() == Ok("2\n") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the restarted member never caught up: {local:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert!(cluster.leader() < 3);
}

#[test]
fn etcdctl_lock_excludes_a_second_holder() {
    let cluster = EtcdCluster::start(3);
    let endpoints = cluster.endpoints();
    let dir = tempfile::tempdir().expect("a temporary directory");
    let trace = dir.path().join("trace");
    let trace_arg = trace.display().to_string();

    // The first holder records that it holds the lock, keeps it a while, records leaving.
    let first = {
        let (endpoints, trace) = (endpoints.clone(), trace_arg.clone());
        std::thread::spawn(move || {
            let script = format!("echo a-in >> '{trace}'; sleep 2; echo a-out >> '{trace}'");
            etcdctl(
                &endpoints,
                &["lock", "testkit-lock", "--", "sh", "-c", &script],
            )
        })
    };
    let started = Instant::now();
    while !fs::read_to_string(&trace)
        .unwrap_or_default()
        .contains("a-in")
    {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the first etcdctl lock never ran its command"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
    // The second can run only once the first has released.
    let script = format!("echo b-in >> '{trace_arg}'");
    etcdctl(
        &endpoints,
        &["lock", "testkit-lock", "--", "sh", "-c", &script],
    )
    .expect("the second etcdctl lock");
    first
        .join()
        .expect("the first holder's thread")
        .expect("the first etcdctl lock");
    assert_eq!(
        fs::read_to_string(&trace).expect("the trace"),
        "a-in\na-out\nb-in\n"
    );
}
