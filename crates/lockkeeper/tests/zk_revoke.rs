//! Revocable locks against Keeper and Apache ZooKeeper: cooperative requests (heard by the
//! holder, before or after it listens; on a mutex and both sides of a read-write lock), forced
//! revocation (a holder that lets go in its grace period, one that does not, and one paused
//! with SIGSTOP whose late write a fenced resource then refuses), Curator's `Revoker` and
//! `makeRevocable` in both directions, and bad input.

mod support;

#[allow(dead_code)]
#[path = "curator/jvm.rs"]
mod jvm;
#[allow(dead_code)]
#[path = "curator/zk.rs"]
mod zk;

use std::time::Duration;

use jvm::Jvm;
use lockkeeper::zk::{ConnectionState, Revoked, Session};
use lockkeeper::{Error, FencingToken};
use lockkeeper_testkit::both;
use lockkeeper_testkit::test_child::{self, ChildProcess};
use support::{
    Partition, children, for_each_backend, long_session, requests_received, session, wait_children,
    wait_state, wait_watches,
};
use tokio::time::{Instant, timeout};
use zk::{JVM_START, STEP, runtime};

const WAIT: Duration = Duration::from_secs(20);

/// Whether `future` is still pending after a short while.
async fn still_pending<T>(future: &mut (impl Future<Output = T> + Unpin)) -> bool {
    timeout(Duration::from_millis(300), future).await.is_err()
}

#[tokio::test]
async fn a_holder_hears_a_revocation_request() {
    for_each_backend(|connect| async move {
        let holder = session(&connect).await;
        let revoker = session(&connect).await;

        // Mutex: the request is heard while listening.
        let guard = holder.mutex("/revoke/mutex").unwrap().lock().await.unwrap();
        let mut asked = Box::pin(guard.revocation_requested());
        assert!(still_pending(&mut asked).await, "heard before anyone asked");
        assert!(revoker.request_revocation(guard.node()).await.unwrap());
        timeout(WAIT, asked).await.expect("the request was heard");
        assert!(guard.is_held(), "a request alone takes nothing away");
        guard.release().await.unwrap();

        // Both sides of a read-write lock; a request made before listening counts too.
        let rw = holder.rw_lock("/revoke/rw").unwrap();
        let write = rw.write().await.unwrap();
        assert!(revoker.request_revocation(write.node()).await.unwrap());
        timeout(WAIT, write.revocation_requested())
            .await
            .expect("an earlier request is heard");
        write.release().await.unwrap();
        let read = rw.read().await.unwrap();
        assert!(revoker.request_revocation(read.node()).await.unwrap());
        timeout(WAIT, read.revocation_requested())
            .await
            .expect("a reader hears it");
        let node = read.node().to_owned();
        read.release().await.unwrap();

        // Nobody holds through a node that is gone.
        assert!(!revoker.request_revocation(&node).await.unwrap());
        assert_eq!(
            revoker.revoke(&node, Duration::ZERO).await.unwrap(),
            Revoked::AlreadyGone
        );
    })
    .await;
}

/// A holder that starts listening while its connection is down hears a request written
/// meanwhile, once the same session is back: the failed read is sent again, not given up.
#[tokio::test]
async fn a_request_written_while_the_holder_is_cut_off_is_heard_after_the_reconnect() {
    for_each_backend(|connect| async move {
        if support::is_ensemble(&connect) {
            eprintln!("skipped on an ensemble: the proxy cuts a single server");
            return;
        }
        let partition = Partition::start(&connect).await;
        let holder = Session::builder(&partition.connect_string())
            .session_timeout(Duration::from_secs(20))
            .connect()
            .await
            .expect("connect through the proxy");
        let revoker = session(&connect).await;
        let guard = holder.mutex("/revoke/cut").unwrap().lock().await.unwrap();
        partition.cut();
        wait_state(&holder, ConnectionState::Suspended).await;
        let mut asked = Box::pin(guard.revocation_requested());
        assert!(still_pending(&mut asked).await, "heard before anyone asked");
        assert!(revoker.request_revocation(guard.node()).await.unwrap());
        partition.heal();
        wait_state(&holder, ConnectionState::Reconnected).await;
        timeout(WAIT, asked)
            .await
            .expect("the request written while cut off was heard after the reconnect");
        guard.release().await.unwrap();
    })
    .await;
}

/// A listener whose node is deleted, or was deleted before it began, stays pending (`lost()`
/// reports the deletion) and stops asking: one read each, nothing more.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_listener_on_a_deleted_node_stays_pending_and_stops_asking() {
    for_each_backend(|connect| async move {
        let holder = long_session(&connect).await;
        let operator = session(&connect).await;
        let guard = holder
            .mutex("/revoke/deleted")
            .unwrap()
            .lock()
            .await
            .unwrap();
        // The hold's own watch is set by a task of its own: counted before, not in the window.
        wait_watches(&connect, 1).await;
        let before = requests_received(&connect, &holder);
        let mut asked = Box::pin(guard.revocation_requested());
        assert!(still_pending(&mut asked).await, "heard before anyone asked");
        operator
            .client()
            .unwrap()
            .delete(guard.node(), None)
            .await
            .expect("delete the holder's node");
        timeout(WAIT, guard.lost())
            .await
            .expect("lost() at the deletion");
        assert!(
            still_pending(&mut asked).await,
            "a deleted node is not a request"
        );
        let mut late = Box::pin(guard.revocation_requested());
        assert!(
            still_pending(&mut late).await,
            "a listener begun after the deletion"
        );
        // Both reads arrive (however slowly), and nothing follows them.
        let deadline = Instant::now() + WAIT;
        while requests_received(&connect, &holder) - before < 2 && Instant::now() < deadline {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        assert!(still_pending(&mut late).await);
        let sent = requests_received(&connect, &holder) - before;
        assert_eq!(sent, 2, "one read per listener, none after the deletion");
    })
    .await;
}

#[tokio::test]
async fn forced_revocation_waits_for_a_release_then_deletes() {
    for_each_backend(|connect| async move {
        let holder = session(&connect).await;
        let revoker = session(&connect).await;
        let next = session(&connect).await;
        let path = "/revoke/forced";

        // A cooperative holder lets go within the grace period.
        let guard = holder.mutex(path).unwrap().lock().await.unwrap();
        let node = guard.node().to_owned();
        let cooperative = tokio::spawn(async move {
            guard.revocation_requested().await;
            guard.release().await
        });
        assert_eq!(
            revoker.revoke(&node, WAIT).await.unwrap(),
            Revoked::Released
        );
        timeout(WAIT, cooperative).await.unwrap().unwrap().unwrap();

        // One that does not listen loses its node after the grace period; the next waiter is
        // granted with a higher token, and the old guard knows it lost the lock.
        let stubborn = holder.mutex(path).unwrap().lock().await.unwrap();
        let old_token = stubborn.fencing_token();
        let waiter = next.mutex(path).unwrap();
        let waiting = tokio::spawn(async move { waiter.lock().await });
        wait_children(&revoker, path, 2).await;
        let started = Instant::now();
        let grace = Duration::from_millis(500);
        assert_eq!(
            revoker.revoke(stubborn.node(), grace).await.unwrap(),
            Revoked::Deleted
        );
        assert!(
            started.elapsed() >= grace,
            "deleted before the grace period ended"
        );
        timeout(WAIT, stubborn.lost())
            .await
            .expect("lost() after the delete");
        assert!(!stubborn.is_held());
        let granted = timeout(WAIT, waiting).await.unwrap().unwrap().unwrap();
        assert!(granted.fencing_token() > old_token);
        assert!(matches!(stubborn.release().await, Err(Error::NotHeld)));
        granted.release().await.unwrap();
        assert!(children(&revoker, path).await.is_empty());
    })
    .await;
}

#[tokio::test]
async fn bad_input_is_refused_by_name() {
    for_each_backend(|connect| async move {
        let s = session(&connect).await;
        for node in ["", "relative", "/a/", "/a//b", "/"] {
            for outcome in [
                s.request_revocation(node).await.map(|_| ()),
                s.revoke(node, Duration::ZERO).await.map(|_| ()),
            ] {
                match outcome {
                    Err(Error::InvalidArgument(message)) => {
                        assert!(message.contains("lock node"), "{message}");
                        assert!(message.contains(&format!("{node:?}")), "{message}");
                    }
                    other => panic!("{node:?}: {other:?}"),
                }
            }
        }
    })
    .await;
}

/// The shared resource of the paused-holder test: a node holding the highest fencing token it
/// accepted. A write is accepted only with a token at least that high, checked and stored in
/// one versioned write, as a fenced store does.
async fn write_fenced(session: &Session, token: FencingToken) -> bool {
    const RESOURCE: &str = "/revoke-resource";
    let client = session.client().unwrap();
    let deadline = Instant::now() + WAIT;
    loop {
        assert!(Instant::now() < deadline, "the resource stayed contended");
        let ours = token.get().to_be_bytes();
        let (stored, version) = match client.get_data(RESOURCE).await {
            Ok((data, stat)) => {
                let bytes: [u8; 8] = data.as_slice().try_into().expect("8-byte token");
                (u64::from_be_bytes(bytes), stat.version)
            }
            Err(lockkeeper_zk_client::Error::NoNode) => {
                let options = &lockkeeper_zk_client::CreateOptions::new(
                    lockkeeper_zk_client::CreateMode::Persistent,
                );
                match client.create(RESOURCE, &ours, options).await {
                    Ok(_) => return true,
                    Err(lockkeeper_zk_client::Error::NodeExists) => continue,
                    Err(err) => panic!("create the resource: {err}"),
                }
            }
            Err(err) => panic!("read the resource: {err}"),
        };
        if token.get() < stored {
            return false;
        }
        match client.set_data(RESOURCE, &ours, Some(version)).await {
            Ok(_) => return true,
            Err(lockkeeper_zk_client::Error::BadVersion) => continue,
            Err(err) => panic!("write the resource: {err}"),
        }
    }
}

/// The child of the paused-holder test: takes the lock, writes with its token, then waits to
/// be frozen; once resumed it writes again with the same token and exits 0 if the resource
/// refused that late write.
async fn paused_holder_child() {
    let connect = std::env::var("ZK_CONNECT").expect("ZK_CONNECT");
    let session = Session::builder(&connect)
        .session_timeout(Duration::from_secs(20))
        .connect()
        .await
        .unwrap();
    let guard = session
        .mutex("/revoke/paused")
        .unwrap()
        .lock()
        .await
        .unwrap();
    assert!(write_fenced(&session, guard.fencing_token()).await);
    // Tell the test the first write is in (the test waits for this node).
    session
        .client()
        .unwrap()
        .create(
            "/revoke-child-wrote",
            &[],
            &lockkeeper_zk_client::CreateOptions::new(lockkeeper_zk_client::CreateMode::Ephemeral),
        )
        .await
        .unwrap();
    // A pause shows as a gap between two ticks of this loop.
    let mut last = std::time::Instant::now();
    for _ in 0..600 {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let gap = last.elapsed();
        last = std::time::Instant::now();
        if gap > Duration::from_secs(1) {
            // The late write of a holder that does not know its node was deleted.
            let accepted = write_fenced(&session, guard.fencing_token()).await;
            eprintln!("after a {gap:?} pause, the late write was accepted: {accepted}");
            std::process::exit(if accepted { 3 } else { 0 });
        }
    }
    eprintln!("never paused");
    std::process::exit(4);
}

/// A holder paused with SIGSTOP is revoked by force: the next holder's writes are accepted,
/// and the old holder's late write, once it runs again, is refused by its fencing token.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_paused_holder_is_revoked_and_its_late_write_refused() {
    if test_child::role().is_some() {
        return paused_holder_child().await;
    }
    for_each_backend(|connect| async move {
        let revoker = session(&connect).await;
        let mut child = ChildProcess::spawn(
            "a_paused_holder_is_revoked_and_its_late_write_refused",
            "holder",
            &[("ZK_CONNECT", connect.clone())],
        );
        let deadline = Instant::now() + Duration::from_secs(60);
        let client = revoker.client().unwrap();
        while client
            .check_stat("/revoke-child-wrote")
            .await
            .unwrap()
            .is_none()
        {
            assert!(Instant::now() < deadline, "the child never wrote");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        child.signal("STOP");
        let holder = wait_children(&revoker, "/revoke/paused", 1).await.remove(0);
        let node = format!("/revoke/paused/{holder}");
        // The paused holder cannot answer: the revoker deletes its node after the grace.
        assert_eq!(
            revoker
                .revoke(&node, Duration::from_millis(300))
                .await
                .unwrap(),
            Revoked::Deleted
        );
        let guard = timeout(WAIT, revoker.mutex("/revoke/paused").unwrap().lock())
            .await
            .expect("granted after the revocation")
            .unwrap();
        assert!(
            write_fenced(&revoker, guard.fencing_token()).await,
            "the new holder's write"
        );
        tokio::time::sleep(Duration::from_millis(1500)).await;
        child.signal("CONT");
        assert!(
            tokio::task::spawn_blocking(move || child.wait_success(Duration::from_secs(60)))
                .await
                .unwrap(),
            "the paused holder's late write was accepted (see its stderr)"
        );
        assert!(write_fenced(&revoker, guard.fencing_token()).await);
        guard.release().await.unwrap();
        client.delete("/revoke-resource", None).await.unwrap();
    })
    .await;
}

/// Curator's `Revoker.attemptRevoke` asks a lockkeeper holder, and lockkeeper's
/// `request_revocation` asks a Curator holder that called `makeRevocable`; each gives the
/// lock up and the other side gets it.
#[test]
fn cooperative_revocation_works_both_ways_with_curator() {
    for server in both() {
        let server = server.as_ref();
        let rt = runtime();
        let session = rt.block_on(zk::connect(server));
        let mut curator = Jvm::spawn("Revoke", &[&server.connect_string()]);
        curator.expect_line("READY", JVM_START);

        for (kind, path) in [
            ("mutex", "/revoke/curator-mutex"),
            ("write", "/revoke/curator-rw"),
        ] {
            // lockkeeper holds; Curator's Revoker asks; lockkeeper lets go.
            let guard = rt.block_on(async {
                match kind {
                    "mutex" => session.mutex(path).unwrap().lock().await.unwrap(),
                    _ => session.rw_lock(path).unwrap().write().await.unwrap(),
                }
            });
            let node = guard.node().to_owned();
            assert_eq!(curator.request(&format!("revoke {node}"), STEP), "OK");
            rt.block_on(async {
                timeout(STEP, guard.revocation_requested())
                    .await
                    .expect("lockkeeper heard Curator's request");
                guard.release().await.unwrap();
            });

            // Curator holds, revocable; lockkeeper asks; Curator lets go and lockkeeper gets
            // the lock.
            assert_eq!(
                curator.request(&format!("hold {kind} {path}"), STEP),
                "OK held"
            );
            rt.block_on(async {
                let holders = wait_children(&session, path, 1).await;
                let node = format!("{path}/{}", holders[0]);
                assert!(session.request_revocation(&node).await.unwrap());
            });
            assert_eq!(curator.next_line(STEP), "REVOKED released");
            rt.block_on(async {
                let guard = match kind {
                    "mutex" => session.mutex(path).unwrap().try_lock().await.unwrap(),
                    _ => session.rw_lock(path).unwrap().try_write().await.unwrap(),
                };
                guard
                    .expect("free once Curator released")
                    .release()
                    .await
                    .unwrap();
            });
        }
        curator.send("quit");
        curator.expect_line("BYE", STEP);
    }
}
