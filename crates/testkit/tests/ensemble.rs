//! The Apache ZooKeeper ensemble of the test kit behaves as a real one: it starts with one
//! leader, keeps serving writes with one member down, elects a new leader when the leader is
//! killed, stops taking writes without a quorum, loses nothing acknowledged, and leaves no
//! process behind.
//!
//! One test, one ensemble: three JVMs at a time on a two-core machine is the budget.

use std::collections::BTreeSet;
use std::time::{Duration, Instant};

use lockkeeper_testkit::{MemberMode, ZkEnsemble, four_letter_word};
use tokio::runtime::Runtime;
use zookeeper_client::{Acls, Client, CreateMode};

/// How long a write may keep failing (while clients find a member that serves) before the
/// test fails.
const WRITE_WITHIN: Duration = Duration::from_secs(20);

/// How long a new leader may take after the old one was killed.
const ELECTION_WITHIN: Duration = Duration::from_secs(20);

async fn open(connect: &str, within: Duration) -> Result<Client, String> {
    let connecting = Client::connector()
        .with_session_timeout(Duration::from_secs(6))
        .with_connection_timeout(within)
        .connect(connect);
    match tokio::time::timeout(within, connecting).await {
        Ok(Ok(client)) => Ok(client),
        Ok(Err(err)) => Err(format!("connect {connect}: {err}")),
        Err(_) => Err(format!("connect {connect}: no session within {within:?}")),
    }
}

/// Creates `path` through a fresh session on `connect`; the error says what failed.
async fn try_create(connect: &str, path: &str) -> Result<(), String> {
    let client = open(connect, Duration::from_secs(3)).await?;
    let options = CreateMode::Persistent.with_acls(Acls::anyone_all());
    match tokio::time::timeout(Duration::from_secs(3), client.create(path, b"x", &options)).await {
        Ok(Ok(_)) => Ok(()),
        Ok(Err(err)) => Err(format!("create {path}: {err}")),
        Err(_) => Err(format!("create {path}: no answer within 3 s")),
    }
}

/// Creates `path`, retrying (bounded) while the ensemble or the client is not ready; records
/// it as acknowledged.
fn create_acknowledged(
    rt: &Runtime,
    connect: &str,
    path: &str,
    acknowledged: &mut BTreeSet<String>,
) -> Duration {
    let started = Instant::now();
    let mut last = String::new();
    while started.elapsed() < WRITE_WITHIN {
        match rt.block_on(try_create(connect, path)) {
            Ok(()) => {
                acknowledged.insert(path.rsplit('/').next().unwrap_or(path).to_owned());
                return started.elapsed();
            }
            Err(err) => last = err,
        }
        std::thread::sleep(Duration::from_millis(100));
    }
    panic!("no write of {path} succeeded within {WRITE_WITHIN:?}; last: {last}");
}

fn alive(pid: u32) -> bool {
    match std::fs::read_to_string(format!("/proc/{pid}/stat")) {
        Ok(stat) => stat
            .rsplit_once(") ")
            .is_some_and(|(_, rest)| !rest.starts_with('Z') && !rest.starts_with('X')),
        Err(_) => false,
    }
}

fn one_leader(zk: &ZkEnsemble) -> usize {
    let modes = zk.modes();
    let leaders: Vec<usize> = (0..modes.len())
        .filter(|&i| modes[i] == MemberMode::Leader)
        .collect();
    assert_eq!(leaders.len(), 1, "exactly one leader: {modes:?}");
    assert!(
        modes.iter().all(|m| m.is_serving()),
        "the others follow: {modes:?}"
    );
    leaders[0]
}

#[test]
fn kills_restarts_and_quorum_loss() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a runtime for the clients");
    let started = Instant::now();
    let zk = ZkEnsemble::start(3);
    eprintln!("ensemble of 3 ready in {:?}", started.elapsed());
    let all = zk.connect_string();
    assert_eq!(all.split(',').count(), 3, "{all}");
    for i in 0..3 {
        assert!(zk.member_addr(i).ip().is_loopback());
        assert_eq!(zk.member_connect(i), zk.member_addr(i).to_string());
        assert!(all.contains(&zk.member_connect(i)), "{all}");
        // Each member is the server its myid says, in the ensemble of the others.
        let conf = four_letter_word(zk.member_addr(i), "conf");
        assert!(conf.contains(&format!("serverId={}", i + 1)), "{conf}");
        assert!(
            conf.contains(&zk.data_dir(i).display().to_string()),
            "{conf}"
        );
    }
    let leader = one_leader(&zk);
    assert_eq!(zk.leader(), leader);
    assert_eq!(zk.try_leader(), Some(leader));

    let mut acknowledged = BTreeSet::new();
    create_acknowledged(&rt, &all, "/ensemble", &mut BTreeSet::new());
    create_acknowledged(&rt, &all, "/ensemble/before", &mut acknowledged);

    // A follower down: two of three are a quorum, writes go on.
    let follower = (leader + 1) % 3;
    let follower_pid = zk.pid(follower).expect("a running follower");
    zk.kill(follower);
    assert!(!alive(follower_pid), "the killed follower's JVM is gone");
    assert_eq!(zk.mode(follower), MemberMode::Down);
    assert_eq!(zk.pid(follower), None);
    create_acknowledged(&rt, &all, "/ensemble/follower-down", &mut acknowledged);
    assert_eq!(zk.try_leader(), Some(leader), "the leader stays");

    // Bring it back, then kill the leader: the two others elect a new one.
    zk.restart(follower);
    let killed_at = Instant::now();
    let old_leader = zk.kill_leader();
    assert_eq!(old_leader, leader);
    let new_leader = zk.wait_for_quorum(ELECTION_WITHIN);
    let elected_in = killed_at.elapsed();
    assert_ne!(new_leader, old_leader, "a killed member cannot lead");
    let resumed_in =
        create_acknowledged(&rt, &all, "/ensemble/leader-killed", &mut acknowledged) + elected_in;
    eprintln!(
        "leader (member {}) killed: member {} leads after {elected_in:?}, writes resumed \
         after {resumed_in:?}",
        old_leader + 1,
        new_leader + 1
    );
    zk.restart(old_leader);
    assert_eq!(
        zk.mode(old_leader),
        MemberMode::Follower,
        "the old leader rejoins"
    );
    let leader = one_leader(&zk);

    // Two down: the survivor has no quorum and takes no writes.
    let survivor = (leader + 1) % 3;
    let (a, b) = (leader, (leader + 2) % 3);
    zk.kill(a);
    zk.kill(b);
    let deadline = Instant::now() + Duration::from_secs(10);
    while zk.mode(survivor) != MemberMode::NotServing {
        assert!(
            Instant::now() < deadline,
            "the survivor still serves alone: {:?}",
            zk.modes()
        );
        std::thread::sleep(Duration::from_millis(50));
    }
    for attempt in 0..3 {
        let outcome = rt.block_on(try_create(&all, &format!("/ensemble/no-quorum-{attempt}")));
        assert!(
            outcome.is_err(),
            "a write succeeded without a quorum ({:?})",
            zk.modes()
        );
    }

    // Both back: writes resume and everything acknowledged is there.
    zk.restart_no_wait(a);
    zk.restart(b);
    zk.wait_serving(a, Duration::from_secs(60));
    one_leader(&zk);
    create_acknowledged(&rt, &all, "/ensemble/after", &mut acknowledged);
    let children: BTreeSet<String> = rt.block_on(async {
        let client = open(&all, Duration::from_secs(10)).await.expect("connect");
        client
            .list_children("/ensemble")
            .await
            .expect("list /ensemble")
            .into_iter()
            .collect()
    });
    assert_eq!(
        children, acknowledged,
        "exactly the acknowledged writes survive"
    );

    // Dropping the ensemble kills every member and removes its directory.
    let pids: Vec<u32> = (0..3).filter_map(|i| zk.pid(i)).collect();
    assert_eq!(pids.len(), 3);
    let dir = zk.dir().to_path_buf();
    drop(zk);
    for pid in pids {
        assert!(!alive(pid), "member JVM {pid} survived the drop");
    }
    assert!(!dir.exists(), "{} left behind", dir.display());
}
