//! The same counters read and written by Curator 5.4's `SharedCount` and
//! `DistributedAtomicLong` (`curator/Counters.java`, driven over stdin and stdout) and by
//! kazoo's `Counter(support_curator=True)` (`kazoo/counter.py`, one run per step).

use std::path::Path;
use std::process::Command;
use std::time::Duration;

use lockkeeper_testkit::python3;

use super::jvm::Jvm;
use super::support::{for_each_backend, session};
use super::{LIMIT, raw_bytes, wait_count};

/// Bound on a JVM's start and on one of its answers.
const JVM_LIMIT: Duration = Duration::from_secs(120);

/// Runs `kazoo/counter.py` against `connect`: one step, one line of output (the value).
fn kazoo(connect: &str, args: &[&str]) -> String {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/kazoo/counter.py");
    let output = Command::new(python3())
        .arg(script)
        .arg(connect)
        .args(args)
        .env("PYTHONDONTWRITEBYTECODE", "1")
        .output()
        .expect("run python3");
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "kazoo {args:?} failed ({}):\n{stdout}\n{}",
        output.status,
        String::from_utf8_lossy(&output.stderr)
    );
    stdout.trim().to_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kazoo_counter_with_curator_support_shares_shared_count() {
    for_each_backend(|connect| async move {
        let session = session(&connect).await;
        // lockkeeper seeds and sets; kazoo reads, adds, and its adds are seen by the watch.
        let path = "/interop/kazoo/shared";
        let count = session.shared_count(path, 41).await.unwrap();
        assert_eq!(kazoo(&connect, &[path, "read"]), "41");
        assert_eq!(kazoo(&connect, &[path, "add", "1"]), "42");
        wait_count(&count, 42).await;
        count.store(-5).await.unwrap();
        assert_eq!(kazoo(&connect, &[path, "add", "-10"]), "-15");
        wait_count(&count, -15).await;
        assert_eq!(count.read().await.unwrap().value, -15);

        // kazoo creates the node (empty, then 4 bytes); lockkeeper reads what it wrote.
        let path = "/interop/kazoo/from-kazoo";
        assert_eq!(kazoo(&connect, &[path, "add", "2147483647"]), "2147483647");
        assert_eq!(raw_bytes(&session, path).await, [0x7f, 0xff, 0xff, 0xff]);
        let count = session.shared_count(path, 0).await.unwrap();
        assert_eq!(count.load(), i32::MAX);
        // kazoo refuses to go past i32::MAX (struct.error) and leaves the node as it was.
        assert_eq!(kazoo(&connect, &[path, "add", "1"]), "error: struct.error");
        assert_eq!(count.read().await.unwrap().value, i32::MAX);

        // Contention: kazoo's adds and lockkeeper's try_set loop on one node lose nothing.
        let path = "/interop/kazoo/contended";
        let count = session.shared_count(path, 0).await.unwrap();
        let kazoo_side = {
            let connect = connect.clone();
            tokio::task::spawn_blocking(move || kazoo(&connect, &[path, "add-each", "1", "200"]))
        };
        for _ in 0..200 {
            loop {
                let seen = count.read().await.unwrap();
                if count.try_set(&seen, seen.value + 1).await.unwrap() {
                    break;
                }
            }
        }
        assert_eq!(kazoo_side.await.unwrap(), "done");
        assert_eq!(count.read().await.unwrap().value, 400);
    })
    .await;
}

#[test]
fn curator_reads_lockkeepers_counters_and_lockkeeper_reads_curators() {
    for server in lockkeeper_testkit::both() {
        let connect = server.connect_string();
        let on = server.name();
        let rt = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(2)
            .enable_all()
            .build()
            .unwrap();
        let session = rt.block_on(session(&connect));
        let mut curator = Jvm::spawn("Counters", &[&connect]);
        curator.expect_line("READY", JVM_LIMIT);
        let mut ask = |command: &str| curator.request(command, JVM_LIMIT);

        // SharedCount: lockkeeper writes, Curator reads; Curator writes, lockkeeper reads.
        let path = "/interop/curator/shared";
        let count = rt.block_on(session.shared_count(path, 17)).unwrap();
        assert_eq!(ask(&format!("count-get {path} 99")), "OK 17 0", "on {on}");
        rt.block_on(count.store(-3)).unwrap();
        assert_eq!(ask(&format!("count-get {path} 99")), "OK -3 1", "on {on}");
        assert_eq!(ask(&format!("count-set {path} 123456")), "OK", "on {on}");
        rt.block_on(wait_count(&count, 123456));
        // Curator's versioned try-set against the versions of the writes so far.
        assert_eq!(
            ask(&format!("count-tryset {path} 1 123456 5")),
            "OK false",
            "on {on}"
        );
        assert_eq!(
            ask(&format!("count-tryset {path} 2 123456 5")),
            "OK true",
            "on {on}"
        );
        rt.block_on(wait_count(&count, 5));
        assert_eq!(count.versioned().version, 3);
        // Curator's watch sees lockkeeper's write.
        curator.send(&format!("count-await {path} 2024"));
        assert_eq!(curator.next_line(JVM_LIMIT), "WATCHING", "on {on}");
        rt.block_on(count.store(2024)).unwrap();
        assert_eq!(curator.next_line(JVM_LIMIT), "OK 2024", "on {on}");
        let mut ask = |command: &str| curator.request(command, JVM_LIMIT);
        // Curator seeds a node; lockkeeper reads the seed.
        let seeded = "/interop/curator/seeded";
        assert_eq!(ask(&format!("count-get {seeded} -8")), "OK -8 0", "on {on}");
        let count = rt.block_on(session.shared_count(seeded, 0)).unwrap();
        assert_eq!(count.load(), -8);

        // DistributedAtomicLong: each side increments what the other wrote.
        let path = "/interop/curator/long";
        let counter = session.atomic_long(path).unwrap();
        assert_eq!(
            ask(&format!("long-get {path}")),
            "OK 0",
            "absent reads 0 on {on}"
        );
        assert_eq!(
            rt.block_on(counter.add_fetch(1_000_000_000_000)).unwrap(),
            1_000_000_000_000
        );
        assert_eq!(
            ask(&format!("long-add {path} 5")),
            "OK 1000000000005",
            "on {on}"
        );
        assert_eq!(
            rt.block_on(counter.add_fetch(-1)).unwrap(),
            1_000_000_000_004
        );
        assert_eq!(
            ask(&format!("long-get {path}")),
            "OK 1000000000004",
            "on {on}"
        );
        assert_eq!(ask(&format!("long-cas {path} 1000000000004 -1")), "OK true");
        assert_eq!(
            rt.block_on(counter.compare_exchange(-1, i64::MAX)).unwrap(),
            Ok(-1)
        );
        // Both wrap at the top.
        assert_eq!(
            ask(&format!("long-add {path} 1")),
            "OK -9223372036854775808"
        );
        assert_eq!(rt.block_on(counter.load()).unwrap(), i64::MIN);

        // Contention across the languages: Curator's increments (with its promoted lock) and
        // lockkeeper's (with the same lock path) add up exactly.
        let path = "/interop/curator/contended";
        let lock = "/interop/curator/contended-lock";
        curator.send(&format!("long-inc-many {path} {lock} 300"));
        let counter = session
            .atomic_long(path)
            .unwrap()
            .promote_to_lock(lock, LIMIT)
            .unwrap();
        rt.block_on(async {
            for _ in 0..300 {
                counter
                    .add_fetch(1)
                    .await
                    .expect("increment beside Curator");
            }
        });
        assert_eq!(curator.next_line(JVM_LIMIT), "OK 300", "on {on}");
        assert_eq!(rt.block_on(counter.load()).unwrap(), 600, "on {on}");

        assert_eq!(curator.request("quit", JVM_LIMIT), "BYE");
        let finished = curator.finish(JVM_LIMIT);
        assert!(finished.success, "{}", finished.transcript);
    }
}
