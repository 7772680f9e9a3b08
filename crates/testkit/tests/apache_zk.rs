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
    let mut addrs: Vec<_> = servers
        .iter()
        .map(lockkeeper_testkit::TestServer::addr)
        .collect();
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

/// Whether `pid` is a live process (not gone, not a zombie waiting to be reaped).
fn running(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        // The state is the field after the parenthesised command name.
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X')),
        Err(_) => false,
    }
}

const ORPHAN_HELPER_ENV: &str = "LOCKKEEPER_TESTKIT_ORPHAN_HELPER";

/// Run only as a child of `jvm_dies_with_a_killed_test_process`: starts ZooKeeper, says its
/// PID, and waits to be killed.
#[test]
#[ignore = "helper process for jvm_dies_with_a_killed_test_process"]
fn orphan_helper() {
    if std::env::var_os(ORPHAN_HELPER_ENV).is_none() {
        return;
    }
    let zk = ApacheZk::start();
    println!("ZK_PID={}", zk.pid());
    std::thread::sleep(Duration::from_secs(120));
}

#[test]
fn jvm_dies_with_a_killed_test_process() {
    use std::io::{BufRead, BufReader};
    use std::process::{Command, Stdio};

    let mut helper = Command::new(std::env::current_exe().expect("test binary path"))
        .args([
            "--exact",
            "orphan_helper",
            "--ignored",
            "--nocapture",
            "--test-threads=1",
        ])
        .env(ORPHAN_HELPER_ENV, "1")
        .stdout(Stdio::piped())
        .stderr(Stdio::null())
        .spawn()
        .expect("start the helper test process");
    let stdout = helper.stdout.take().expect("piped stdout");
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines().map_while(Result::ok) {
            // libtest prints it after "test orphan_helper ... " on the same line.
            if let Some((_, pid)) = line.split_once("ZK_PID=") {
                let _ = tx.send(pid.trim().parse::<u32>().expect("numeric pid"));
                return;
            }
        }
    });
    let jvm = match rx.recv_timeout(Duration::from_secs(90)) {
        Ok(pid) => pid,
        Err(e) => {
            let _ = helper.kill();
            let _ = helper.wait();
            panic!("the helper did not report a ZooKeeper PID: {e}");
        }
    };
    assert!(
        running(jvm),
        "ZooKeeper {jvm} should run while its test process does"
    );
    assert_eq!(
        std::fs::read_to_string(format!("/proc/{jvm}/comm")).expect("comm of the JVM"),
        "java\n",
        "pid() must be the JVM itself"
    );
    // SIGKILL: no destructor runs, as when a runner kills a test that timed out.
    helper.kill().expect("kill the helper");
    helper.wait().expect("reap the helper");
    let deadline = Instant::now() + Duration::from_secs(20);
    while running(jvm) {
        assert!(
            Instant::now() < deadline,
            "ZooKeeper {jvm} outlived its killed test process by 20 s"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}
