//! The Apache ZooKeeper test server starts, answers, honours its options, restarts, and is gone
//! after drop.

use std::net::TcpStream;
use std::time::{Duration, Instant};

use lockkeeper_testkit::{ApacheZk, TestServer, ZkOptions, four_letter_word};

fn process_alive(pid: u32) -> bool {
    // A reaped process has no /proc entry; a zombie would still show, but Drop reaps.
    std::path::Path::new(&format!("/proc/{pid}")).exists()
}

#[test]
fn starts_answers_and_is_killed_on_drop() {
    let zk = ApacheZk::start();
    assert_eq!(zk.name(), "zookeeper");
    assert!(zk.addr().ip().is_loopback());
    assert_eq!(
        zk.connect_string(),
        format!("127.0.0.1:{}", zk.addr().port())
    );
    assert_eq!(four_letter_word(zk.addr(), "ruok"), "imok");
    let srvr = four_letter_word(zk.addr(), "srvr");
    assert!(
        srvr.contains("Zookeeper version: 3.8"),
        "srvr answered {srvr:?}"
    );
    assert!(srvr.contains("Mode: standalone"), "srvr answered {srvr:?}");
    let conf = four_letter_word(zk.addr(), "conf");
    assert!(conf.contains("tickTime=2000"), "conf answered {conf:?}");
    assert!(conf.contains("maxClientCnxns=60"), "conf answered {conf:?}");

    let pid = zk.pid();
    let addr = zk.addr();
    let dir = zk.dir().to_path_buf();
    assert!(process_alive(pid));
    drop(zk);
    assert!(
        !process_alive(pid),
        "ZooKeeper JVM {pid} still running after drop"
    );
    assert!(
        !dir.exists(),
        "temporary directory {} left behind",
        dir.display()
    );
    assert!(
        TcpStream::connect_timeout(&addr, Duration::from_secs(2)).is_err(),
        "something still listens on {addr}"
    );
}

#[test]
fn options_reach_the_server() {
    let zk = ApacheZk::start_with(ZkOptions {
        tick_time_ms: 500,
        max_client_cnxns: 7,
        ..ZkOptions::default()
    });
    let conf = four_letter_word(zk.addr(), "conf");
    assert!(conf.contains("tickTime=500"), "conf answered {conf:?}");
    assert!(conf.contains("maxClientCnxns=7"), "conf answered {conf:?}");
    // Session timeouts follow the tick: 2..20 ticks.
    assert!(
        conf.contains("minSessionTimeout=1000"),
        "conf answered {conf:?}"
    );
    assert!(
        conf.contains("maxSessionTimeout=10000"),
        "conf answered {conf:?}"
    );
    let log = zk.log();
    assert!(
        log.contains("checkIntervalMs=1000"),
        "container interval not applied:\n{log}"
    );
}

#[test]
fn servers_started_concurrently_are_each_ready_and_distinct() {
    // Starting JVMs at the same moment is the race a loaded CI meets: a server that answers
    // `ruok` is not necessarily serving yet, and must not be mistaken for someone else's.
    let starters: Vec<_> = (0..4)
        .map(|_| std::thread::spawn(ApacheZk::start))
        .collect();
    let servers: Vec<ApacheZk> = starters
        .into_iter()
        .map(|h| h.join().expect("ApacheZk::start panicked"))
        .collect();
    let mut addrs: Vec<_> = servers.iter().map(|s| s.addr()).collect();
    addrs.sort();
    addrs.dedup();
    assert_eq!(addrs.len(), servers.len(), "two servers share an address");
    for server in &servers {
        assert_eq!(four_letter_word(server.addr(), "ruok"), "imok");
        let conf = four_letter_word(server.addr(), "conf");
        assert!(
            conf.contains(&server.data_dir().display().to_string()),
            "{server:?} answers with another server's conf: {conf}"
        );
    }
}

#[test]
fn restart_keeps_address_and_data() {
    let mut zk = ApacheZk::start();
    let addr = zk.addr();
    let old_pid = zk.pid();
    zk.restart();
    assert_eq!(zk.addr(), addr);
    assert_ne!(zk.pid(), old_pid);
    assert!(!process_alive(old_pid), "the old JVM survived the restart");
    let deadline = Instant::now() + Duration::from_secs(30);
    while four_letter_word(zk.addr(), "ruok") != "imok" {
        assert!(Instant::now() < deadline, "no imok after restart");
        std::thread::sleep(Duration::from_millis(100));
    }
    let conf = four_letter_word(zk.addr(), "conf");
    assert!(
        conf.contains(&zk.data_dir().display().to_string()),
        "restarted with another data dir: {conf:?}"
    );
}
