//! lockkeeper and Apache Curator 5.4 sharing one lock, against Keeper and Apache ZooKeeper.
//!
//! lockkeeper's `Mutex` and `RwLock` lay out their nodes as Curator's `InterProcessMutex` and
//! `InterProcessReadWriteLock` do, so that a Java service and a Rust service can guard one
//! resource with one lock. These tests hold that claim to account with unmodified Curator from
//! Debian's jars, driven by the small Java programs in `curator/`:
//!
//! - **contention**: Curator sessions in two JVMs and lockkeeper sessions in this process take
//!   the same lock over and over, each holding a shared resource (a marker directory, see
//!   `curator/markers.rs`) that records every overlap; no overlap, every contender finishes its
//!   iterations, and no lock node is left behind;
//! - **layout**: step by step, each side sees the other's holder (a try fails), waiters of each
//!   side are woken by the other side's release, and read locks are shared across the languages
//!   while write locks exclude.
//!
//! Every check runs against each backend of `both()`.

#[path = "curator/contend.rs"]
mod contend;
#[path = "curator/jvm.rs"]
mod jvm;
#[path = "curator/markers.rs"]
mod markers;
#[path = "curator/zk.rs"]
mod zk;

use std::time::Duration;

use contend::{Kind, contend};
use jvm::Jvm;
use lockkeeper_testkit::both;
use zk::{JVM_START, STEP, connect, lock_nodes, runtime};

/// Curator's InterProcessMutex and lockkeeper's Mutex, contending from two JVMs and this
/// process at once, never hold the lock together.
#[test]
fn mutex_excludes_curator_and_lockkeeper_contenders() {
    for server in both() {
        contend(server.as_ref(), Kind::Mutex);
    }
}

/// Curator's InterProcessReadWriteLock and lockkeeper's RwLock, mixing reads and writes from
/// two JVMs and this process: a writer never overlaps anybody.
#[test]
fn rw_lock_excludes_curator_and_lockkeeper_contenders() {
    for server in both() {
        contend(server.as_ref(), Kind::ReadWrite);
    }
}

/// Step by step: each side's holder keeps the other side out, each side's waiter is woken by
/// the other side's release, and nothing is left on the server.
#[test]
fn mutex_layout_is_shared_with_curator() {
    for server in both() {
        let server = server.as_ref();
        let path = "/interop/layout-mutex";
        let mut curator = Jvm::spawn("Driver", &[&server.connect_string()]);
        curator.expect_line("READY", JVM_START);
        let rt = runtime();
        let session = rt.block_on(connect(server));
        let mutex = session.mutex(path).expect("mutex");
        let on = server.name();

        // Curator holds: lockkeeper is kept out.
        assert_eq!(
            curator.request(&format!("acquire mutex {path}"), STEP),
            "OK true"
        );
        assert!(
            rt.block_on(mutex.try_lock()).expect("try_lock").is_none(),
            "lockkeeper took the mutex Curator holds, on {on}"
        );
        assert!(
            rt.block_on(mutex.lock_timeout(Duration::from_millis(200)))
                .expect("lock_timeout")
                .is_none(),
            "lockkeeper's lock_timeout got the mutex Curator holds, on {on}"
        );

        // A lockkeeper waiter (a session of its own) is woken by Curator's release.
        let other = rt.block_on(connect(server));
        let waiter = rt.spawn(async move {
            let mutex = other.mutex(path)?;
            let guard = mutex.lock().await?;
            guard.release().await
        });
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            !waiter.is_finished(),
            "the waiter got the lock while Curator held it, on {on}"
        );
        assert_eq!(
            curator.request(&format!("release mutex {path}"), STEP),
            "OK"
        );
        rt.block_on(async { tokio::time::timeout(STEP, waiter).await })
            .expect("the lockkeeper waiter woke after Curator's release")
            .expect("waiter task")
            .expect("lock");

        // lockkeeper holds: Curator is kept out, and its waiter wakes on lockkeeper's release.
        let guard = rt
            .block_on(mutex.try_lock())
            .expect("try_lock")
            .expect("the mutex is free again");
        assert_eq!(
            curator.request(&format!("try mutex {path}"), STEP),
            "OK false",
            "Curator took the mutex lockkeeper holds, on {on}"
        );
        curator.send(&format!("acquire mutex {path}"));
        assert_eq!(
            curator.line_within(Duration::from_millis(300)),
            None,
            "Curator's waiter got the mutex lockkeeper holds, on {on}"
        );
        rt.block_on(guard.release()).expect("release");
        assert_eq!(
            curator.next_line(STEP),
            "OK true",
            "Curator's waiter, on {on}"
        );
        assert_eq!(
            curator.request(&format!("release mutex {path}"), STEP),
            "OK"
        );
        assert_eq!(
            curator.request(&format!("try mutex {path}"), STEP),
            "OK true"
        );
        assert_eq!(
            curator.request(&format!("release mutex {path}"), STEP),
            "OK"
        );

        assert_eq!(curator.request("quit", STEP), "BYE");
        let left = rt.block_on(lock_nodes(server, path));
        assert!(left.is_empty(), "lock nodes left on {on}: {left:?}");
    }
}

/// Read locks are shared across the languages and write locks exclude, both ways.
#[test]
fn rw_lock_layout_is_shared_with_curator() {
    for server in both() {
        let server = server.as_ref();
        let path = "/interop/layout-rw";
        let mut curator = Jvm::spawn("Driver", &[&server.connect_string()]);
        curator.expect_line("READY", JVM_START);
        let rt = runtime();
        let session = rt.block_on(connect(server));
        // Separate handles are separate owners: one reads, one writes (a handle that holds
        // the read lock may not ask for the write lock).
        let reader = session.rw_lock(path).expect("rw lock");
        let writer = session.rw_lock(path).expect("rw lock");
        let on = server.name();
        let mut ask = |command: &str| curator.request(&format!("{command} {path}"), STEP);

        // Curator reads: lockkeeper may read too, but not write.
        assert_eq!(ask("acquire read"), "OK true");
        let read = rt
            .block_on(reader.try_read())
            .expect("try_read")
            .unwrap_or_else(|| panic!("a read lock was refused beside Curator's reader, on {on}"));
        assert!(
            rt.block_on(writer.try_write())
                .expect("try_write")
                .is_none(),
            "lockkeeper wrote beside Curator's reader, on {on}"
        );
        rt.block_on(read.release()).expect("release read");
        assert_eq!(ask("release read"), "OK");

        // Curator writes: lockkeeper can neither read nor write, and a lockkeeper reader that
        // waits is let in by Curator's release.
        assert_eq!(ask("acquire write"), "OK true");
        assert!(
            rt.block_on(reader.try_read()).expect("try_read").is_none(),
            "lockkeeper read beside Curator's writer, on {on}"
        );
        assert!(
            rt.block_on(writer.try_write())
                .expect("try_write")
                .is_none(),
            "lockkeeper wrote beside Curator's writer, on {on}"
        );
        let waiting = rt.spawn({
            let reader = reader.clone();
            async move {
                let guard = reader.read().await?;
                guard.release().await
            }
        });
        std::thread::sleep(Duration::from_millis(300));
        assert!(
            !waiting.is_finished(),
            "a lockkeeper reader got in beside Curator's writer, on {on}"
        );
        assert_eq!(ask("release write"), "OK");
        rt.block_on(async { tokio::time::timeout(STEP, waiting).await })
            .expect("the lockkeeper reader woke after Curator's release")
            .expect("reader task")
            .expect("read");

        // lockkeeper writes: Curator can neither read nor write.
        let write = rt
            .block_on(writer.try_write())
            .expect("try_write")
            .expect("the lock is free");
        assert_eq!(
            ask("try read"),
            "OK false",
            "Curator read beside lockkeeper's writer, on {on}"
        );
        assert_eq!(
            ask("try write"),
            "OK false",
            "Curator wrote beside lockkeeper's writer, on {on}"
        );
        rt.block_on(write.release()).expect("release write");

        // lockkeeper reads: Curator may read too, but not write; a Curator writer that waits is
        // let in by lockkeeper's release.
        let read = rt
            .block_on(reader.try_read())
            .expect("try_read")
            .expect("the lock is free");
        assert_eq!(
            ask("try read"),
            "OK true",
            "Curator's read refused beside lockkeeper's reader, on {on}"
        );
        assert_eq!(ask("release read"), "OK");
        assert_eq!(
            ask("try write"),
            "OK false",
            "Curator wrote beside lockkeeper's reader, on {on}"
        );
        curator.send(&format!("acquire write {path}"));
        assert_eq!(
            curator.line_within(Duration::from_millis(300)),
            None,
            "Curator's writer got in beside lockkeeper's reader, on {on}"
        );
        rt.block_on(read.release()).expect("release read");
        assert_eq!(
            curator.next_line(STEP),
            "OK true",
            "Curator's waiting writer, on {on}"
        );
        assert_eq!(
            curator.request(&format!("release write {path}"), STEP),
            "OK"
        );

        assert_eq!(curator.request("quit", STEP), "BYE");
        let left = rt.block_on(lock_nodes(server, path));
        assert!(left.is_empty(), "lock nodes left on {on}: {left:?}");
    }
}
