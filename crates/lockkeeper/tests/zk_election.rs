//! Leader election against Keeper and Apache ZooKeeper: order and handover, tokens across
//! terms, cancellation, a partitioned leader, the two suspension policies, a latch path
//! deleted behind everyone's back, run-as-leader, the confirmation mark and bad input.
//!
//! Curator's own `LeaderLatch` in the same election is `zk_election_curator.rs`.

mod support;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex as StdMutex};
use std::time::Duration;

use lockkeeper::Error;
use lockkeeper::LockOptions;
use lockkeeper::zk::{ConnectionState, Leadership, Session};
use support::{
    Partition, children, curator_name, for_each_backend, session, wait_children, wait_state,
};
use tokio::time::{Instant, timeout};

const PATH: &str = "/election/service";
const WAIT: Duration = Duration::from_secs(20);

/// Awaits a leadership that must come within [`WAIT`].
async fn granted(
    lead: impl Future<Output = lockkeeper::Result<Leadership>>,
    who: &str,
) -> Leadership {
    timeout(WAIT, lead)
        .await
        .unwrap_or_else(|_| panic!("{who} was not granted leadership within {WAIT:?}"))
        .unwrap_or_else(|err| panic!("{who}: {err}"))
}

/// Whether `future` is still pending after a short while.
async fn still_pending<T>(future: &mut (impl Future<Output = T> + Unpin)) -> bool {
    timeout(Duration::from_millis(300), future).await.is_err()
}

#[tokio::test]
async fn participants_lead_in_order_and_hand_over() {
    for_each_backend(|connect| async move {
        let sessions = [
            session(&connect).await,
            session(&connect).await,
            session(&connect).await,
        ];
        let latches: Vec<_> = ["a", "b", "c"]
            .iter()
            .zip(&sessions)
            .map(|(id, s)| s.leader_latch(PATH, id).unwrap())
            .collect();
        let a = latches[0].lead().await.unwrap();
        assert!(a.is_leader());
        let mut b = Box::pin(latches[1].lead());
        assert!(still_pending(&mut b).await, "b leads while a does");
        let mut c = Box::pin(latches[2].lead());
        assert!(still_pending(&mut c).await, "c leads while a does");

        // The layout is Curator's, the data is the id, and everyone names the same leader.
        let nodes = wait_children(&sessions[0], PATH, 3).await;
        assert!(nodes.iter().all(|n| curator_name(n, "latch-")), "{nodes:?}");
        let candidates = latches[2].candidates().await.unwrap();
        let ids: Vec<&str> = candidates.iter().map(|c| c.id.as_str()).collect();
        assert_eq!(ids, ["a", "b", "c"]);
        assert_eq!(
            candidates.iter().map(|c| c.is_leader).collect::<Vec<_>>(),
            [true, false, false]
        );
        assert_eq!(candidates[0].session_id, sessions[0].session_id());
        assert_eq!(candidates[0].fencing_token, a.fencing_token());
        assert_eq!(candidates[0].node, a.node());
        for latch in &latches {
            assert_eq!(latch.leader().await.unwrap().unwrap().id, "a");
        }

        // Nobody else can take it, and a failed try leaves nothing behind.
        let d = session(&connect).await;
        let d_latch = d.leader_latch(PATH, "d").unwrap();
        assert!(d_latch.try_lead().await.unwrap().is_none());
        assert_eq!(children(&d, PATH).await.len(), 3);

        // Resign wakes the next in line; every term's token is higher than the last.
        let a_token = a.fencing_token();
        a.resign().await.unwrap();
        let b = granted(b, "b").await;
        assert!(b.fencing_token() > a_token);
        assert!(still_pending(&mut c).await, "c leads while b does");
        assert_eq!(latches[0].leader().await.unwrap().unwrap().id, "b");

        // Requeue: b goes to the back, c leads, then b again with a new, higher token.
        let b_token = b.fencing_token();
        let mut b_again = tokio::spawn(b.requeue());
        let c = granted(c, "c").await;
        assert!(c.fencing_token() > b_token);
        assert!(
            still_pending(&mut b_again).await,
            "b leads again while c does"
        );
        let c_token = c.fencing_token();
        c.resign().await.unwrap();
        let b_again = granted(async { b_again.await.unwrap() }, "b (requeued)").await;
        assert!(b_again.fencing_token() > c_token);
        assert!(matches!(
            latches[2].leader().await.unwrap(),
            Some(leader) if leader.id == "b" && leader.fencing_token == b_again.fencing_token()
        ));
        b_again.resign().await.unwrap();
        assert!(latches[0].leader().await.unwrap().is_none());
        assert!(children(&d, PATH).await.is_empty());
    })
    .await;
}

#[tokio::test]
async fn abandoned_waits_leave_no_node() {
    for_each_backend(|connect| async move {
        let leader_session = session(&connect).await;
        let other = session(&connect).await;
        let leader = leader_session
            .leader_latch(PATH, "leader")
            .unwrap()
            .lead()
            .await
            .unwrap();
        let latch = other.leader_latch(PATH, "waiter").unwrap();

        assert!(
            latch
                .lead_timeout(Duration::from_millis(300))
                .await
                .unwrap()
                .is_none()
        );
        assert_eq!(children(&other, PATH).await.len(), 1);

        // A dropped wait deletes its node in the background.
        assert!(
            timeout(Duration::from_millis(300), latch.lead())
                .await
                .is_err()
        );
        wait_children(&other, PATH, 1).await;

        // A dropped leadership resigns.
        drop(leader);
        let next = granted(latch.lead(), "waiter").await;
        assert_eq!(latch.leader().await.unwrap().unwrap().id, "waiter");
        next.resign().await.unwrap();
        // A lost leadership's resign is NotLeader (resigning twice cannot be written: the
        // guard is consumed).
        let again = latch.lead().await.unwrap();
        other
            .client()
            .unwrap()
            .delete(again.node(), None)
            .await
            .unwrap();
        timeout(WAIT, again.lost())
            .await
            .expect("lost after delete");
        assert!(matches!(again.resign().await, Err(Error::NotLeader)));
    })
    .await;
}

/// The leader cut off by a partition: it stops trusting its leadership at once (default
/// policy), nobody else is granted before the moment until which the old leader could trust
/// its session, and the next term's token is higher.
#[tokio::test]
async fn a_partitioned_leader_loses_before_anyone_else_leads() {
    for_each_backend(|connect| async move {
        let partition = Partition::start(&connect).await;
        let cut_off = Session::builder(&partition.connect_string())
            .session_timeout(Duration::from_secs(4))
            .connect()
            .await
            .unwrap();
        let follower = session(&connect).await;
        let leader = cut_off
            .leader_latch(PATH, "old")
            .unwrap()
            .lead()
            .await
            .unwrap();
        let old_token = leader.fencing_token();
        let next_latch = follower.leader_latch(PATH, "new").unwrap();
        let mut next = Box::pin(next_latch.lead());
        assert!(still_pending(&mut next).await);

        let trusted_until = leader.valid_until().expect("leading");
        let cut_at = Instant::now();
        partition.cut();
        timeout(Duration::from_secs(4), leader.lost())
            .await
            .expect("lost() within the session timeout");
        let lost_at = Instant::now();
        assert!(!leader.is_leader());
        let next = granted(next, "the follower").await;
        let granted_at = Instant::now();
        eprintln!(
            "lost {:?} after the cut; next leader {:?} after the cut",
            lost_at - cut_at,
            granted_at - cut_at
        );
        assert!(
            granted_at >= trusted_until,
            "the next leader came {:?} before the old one's trusted deadline",
            trusted_until - granted_at
        );
        assert!(next.fencing_token() > old_token);

        partition.heal();
        wait_state(&cut_off, ConnectionState::Reconnected).await;
        assert!(!leader.is_leader());
        assert!(matches!(leader.resign().await, Err(Error::NotLeader)));
        next.resign().await.unwrap();
    })
    .await;
}

/// A short cut that reconnects to the same session: the default policy gives leadership up,
/// `keep_through_suspension` keeps it (and keeps watching its node).
#[tokio::test]
async fn keep_through_suspension_rides_out_a_short_cut() {
    for_each_backend(|connect| async move {
        let partition = Partition::start(&connect).await;
        let through = Session::builder(&partition.connect_string())
            .session_timeout(Duration::from_secs(10))
            .connect()
            .await
            .unwrap();
        let first_id = through.session_id();
        let keeper = through
            .leader_latch("/election/keep", "keeps")
            .unwrap()
            .with_options(LockOptions::new().keep_through_suspension())
            .unwrap()
            .lead()
            .await
            .unwrap();
        let standard = through
            .leader_latch("/election/standard", "gives-up")
            .unwrap()
            .lead()
            .await
            .unwrap();

        partition.cut();
        wait_state(&through, ConnectionState::Suspended).await;
        timeout(Duration::from_secs(2), standard.lost())
            .await
            .expect("the standard policy gives up at the suspension");
        assert!(!standard.is_leader());
        assert!(
            keeper.is_leader(),
            "kept while suspended, within its deadline"
        );
        tokio::time::sleep(Duration::from_secs(1)).await;
        partition.heal();
        wait_state(&through, ConnectionState::Reconnected).await;
        assert_eq!(through.session_id(), first_id, "the same session came back");

        assert!(keeper.is_leader());
        let mut lost = Box::pin(keeper.lost());
        assert!(
            still_pending(&mut lost).await,
            "kept leadership reported lost"
        );
        // Still watching its node after the reconnect: a deletion is noticed.
        let observer = session(&connect).await;
        observer
            .client()
            .unwrap()
            .delete(keeper.node(), None)
            .await
            .unwrap();
        timeout(WAIT, lost)
            .await
            .expect("lost after the node was deleted");
        assert!(!keeper.is_leader());
    })
    .await;
}

/// Deleting the whole latch path (CURATOR-724): every participant running `run` queues again
/// and one of them leads, with a token higher than any before.
#[tokio::test]
async fn a_deleted_latch_path_is_rejoined() {
    for_each_backend(|connect| async move {
        let path = "/election/deleted";
        let leading = Arc::new(StdMutex::new(Vec::<(String, u64)>::new()));
        let mut runners = Vec::new();
        let mut sessions = Vec::new();
        for id in ["x", "y", "z"] {
            let s = session(&connect).await;
            let latch = s.leader_latch(path, id).unwrap();
            let leading = leading.clone();
            runners.push(tokio::spawn(async move {
                latch
                    .run(|term| {
                        let leading = leading.clone();
                        async move {
                            leading
                                .lock()
                                .unwrap()
                                .push((id.to_owned(), term.fencing_token().get()));
                            std::future::pending::<()>().await;
                        }
                    })
                    .await
            }));
            sessions.push(s);
        }
        let admin = session(&connect).await;
        wait_children(&admin, path, 3).await;
        let before = wait_terms(&leading, 1).await;

        // Delete everything, racing the participants that queue again, until the path itself
        // is gone once.
        let client = admin.client().unwrap();
        let deadline = Instant::now() + WAIT;
        loop {
            for child in children(&admin, path).await {
                let _ = client.delete(&format!("{path}/{child}"), None).await;
            }
            match client.delete(path, None).await {
                Ok(()) | Err(lockkeeper_zk_client::Error::NoNode) => break,
                Err(_) => assert!(Instant::now() < deadline, "could not delete {path}"),
            }
        }

        // Everyone is back in the election and one leads with a higher token.
        wait_children(&admin, path, 3).await;
        let terms = wait_terms(&leading, before.len() + 1).await;
        let (newest_leader, newest) = terms.last().unwrap().clone();
        assert!(newest > before.last().unwrap().1, "{terms:?}");
        let latch = admin.leader_latch(path, "observer").unwrap();
        let deadline = Instant::now() + WAIT;
        loop {
            let named = latch
                .leader()
                .await
                .unwrap()
                .map(|c| (c.id, c.fencing_token.get()));
            let last = leading.lock().unwrap().last().cloned();
            if named.is_some() && named == last {
                break;
            }
            assert!(
                Instant::now() < deadline,
                "leader {named:?}, last term {last:?}"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        eprintln!("rejoined: {newest_leader} leads with {newest}");
        for session in &sessions {
            session.close().await;
        }
        for runner in runners {
            let ended = timeout(WAIT, runner).await.expect("run ends on close");
            assert!(matches!(ended, Ok(Ok(()))), "{ended:?}");
        }
    })
    .await;
}

/// Waits until at least `count` terms were recorded; returns them all.
/// `run` outlives its session: when the session expires (the participant cut off past its
/// timeout) whether it leads or waits in line, it queues again in the next session and leads
/// again, with a higher token; it ends, `Ok`, only when the session is closed.
#[tokio::test]
async fn run_leads_again_in_the_next_session_and_ends_at_close() {
    for_each_backend(|connect| async move {
        if support::is_ensemble(&connect) {
            eprintln!("skipped on an ensemble: the proxy cuts a single server");
            return;
        }
        let path = "/election/expiring";
        let partition = Partition::start(&connect).await;
        let s = session(&partition.connect_string()).await;
        let latch = s.leader_latch(path, "runner").unwrap();
        let leading = Arc::new(StdMutex::new(Vec::<(String, u64)>::new()));
        let runner = tokio::spawn({
            let leading = leading.clone();
            async move {
                latch
                    .run(|term| {
                        let leading = leading.clone();
                        async move {
                            leading
                                .lock()
                                .unwrap()
                                .push(("runner".to_owned(), term.fencing_token().get()));
                            std::future::pending::<()>().await;
                        }
                    })
                    .await
            }
        });
        let first = wait_terms(&leading, 1).await;
        let other = session(&connect).await;
        let other_latch = other.leader_latch(path, "other").unwrap();
        let mut terms = first;
        // Expired while leading, then while waiting behind another leader.
        for waiting in [false, true] {
            let expired = s.session_id();
            let other_leads = if waiting {
                let leads = other_latch.lead();
                partition.cut();
                let leads = timeout(WAIT, leads)
                    .await
                    .expect("the other leads")
                    .unwrap();
                wait_state(&s, ConnectionState::Lost).await;
                Some(leads)
            } else {
                partition.cut();
                wait_state(&s, ConnectionState::Lost).await;
                None
            };
            partition.heal();
            wait_state(&s, ConnectionState::Reconnected).await;
            assert_ne!(s.session_id(), expired, "a new session");
            assert!(!runner.is_finished(), "run ended at a session's expiry");
            if let Some(leads) = other_leads {
                leads.resign().await.unwrap();
            }
            let now = wait_terms(&leading, terms.len() + 1).await;
            assert!(now.last().unwrap().1 > terms.last().unwrap().1, "{now:?}");
            terms = now;
        }
        s.close().await;
        let ended = timeout(WAIT, runner).await.expect("run ends at close");
        assert!(matches!(ended, Ok(Ok(()))), "{ended:?}");
    })
    .await;
}

async fn wait_terms(leading: &StdMutex<Vec<(String, u64)>>, count: usize) -> Vec<(String, u64)> {
    let deadline = Instant::now() + WAIT;
    loop {
        let terms = leading.lock().unwrap().clone();
        if terms.len() >= count {
            return terms;
        }
        assert!(
            Instant::now() < deadline,
            "{} terms, want {count}",
            terms.len()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Sets a flag when dropped: shows that a leader task was cancelled.
struct DropFlag(Arc<AtomicBool>);

impl Drop for DropFlag {
    fn drop(&mut self) {
        self.0.store(true, Ordering::SeqCst);
    }
}

#[tokio::test]
async fn run_once_runs_while_leading_and_drops_the_task_on_loss() {
    for_each_backend(|connect| async move {
        let s = session(&connect).await;
        let latch = s.leader_latch(PATH, "runner").unwrap();

        // A task that finishes: its output, and the node is gone afterwards.
        let output = latch
            .run_once(|term| async move { term.fencing_token().get() })
            .await
            .unwrap();
        assert!(output.is_some_and(|token| token > 0));
        assert!(children(&s, PATH).await.is_empty());

        // A task that would run forever is dropped when its node is deleted.
        let dropped = Arc::new(AtomicBool::new(false));
        let started = Arc::new(AtomicUsize::new(0));
        let run = {
            let (dropped, started) = (dropped.clone(), started.clone());
            let latch = latch.clone();
            tokio::spawn(async move {
                latch
                    .run_once(|_term| async move {
                        let _flag = DropFlag(dropped);
                        started.fetch_add(1, Ordering::SeqCst);
                        std::future::pending::<()>().await;
                    })
                    .await
            })
        };
        let node = wait_children(&s, PATH, 1).await.remove(0);
        while started.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let admin = session(&connect).await;
        admin
            .client()
            .unwrap()
            .delete(&format!("{PATH}/{node}"), None)
            .await
            .unwrap();
        let outcome = timeout(WAIT, run).await.expect("run_once returns").unwrap();
        assert!(matches!(outcome, Ok(None)), "{outcome:?}");
        assert!(dropped.load(Ordering::SeqCst), "the task was not dropped");
    })
    .await;
}

#[tokio::test]
async fn followers_wait_for_the_current_leaders_confirmation() {
    for_each_backend(|connect| async move {
        let (sa, sb, so) = (
            session(&connect).await,
            session(&connect).await,
            session(&connect).await,
        );
        let observer = so.leader_latch(PATH, "observer").unwrap();
        assert_eq!(observer.id(), "observer");
        let short = Duration::from_millis(300);
        assert!(
            observer
                .confirmed_leader_timeout(short)
                .await
                .unwrap()
                .is_none()
        );

        let a = sa.leader_latch(PATH, "a").unwrap().lead().await.unwrap();
        assert!(
            observer
                .confirmed_leader_timeout(short)
                .await
                .unwrap()
                .is_none(),
            "confirmed before confirm()"
        );
        let waiting = tokio::spawn({
            let observer = observer.clone();
            async move { observer.confirmed_leader().await }
        });
        tokio::time::sleep(Duration::from_millis(100)).await;
        a.confirm().await.unwrap();
        let confirmed = timeout(WAIT, waiting).await.unwrap().unwrap().unwrap();
        assert_eq!(confirmed.id, "a");
        assert_eq!(confirmed.fencing_token, a.fencing_token());

        // A new leader: the old mark no longer counts until the new leader confirms.
        let b_latch = sb.leader_latch(PATH, "b").unwrap();
        let b = tokio::spawn(async move { b_latch.lead().await });
        wait_children(&so, PATH, 2).await;
        a.resign().await.unwrap();
        let b = timeout(WAIT, b).await.unwrap().unwrap().unwrap();
        assert!(
            observer
                .confirmed_leader_timeout(short)
                .await
                .unwrap()
                .is_none(),
            "a deposed leader's mark was taken for the new leader's"
        );
        b.confirm().await.unwrap();
        b.confirm().await.unwrap(); // confirming twice is fine
        let confirmed = observer.confirmed_leader_timeout(WAIT).await.unwrap();
        assert_eq!(confirmed.map(|c| c.id).as_deref(), Some("b"));
        // The new leader's mark is its own node, not the deposed leader's rewritten: it stays
        // when the deposed leader's session ends.
        sa.close().await;
        let confirmed = observer.confirmed_leader_timeout(short).await.unwrap();
        assert_eq!(
            confirmed.map(|c| c.id).as_deref(),
            Some("b"),
            "the mark went with the deposed leader's session"
        );

        // Only a leader can confirm.
        let node = b.node().to_owned();
        so.client().unwrap().delete(&node, None).await.unwrap();
        timeout(WAIT, b.lost()).await.unwrap();
        assert!(matches!(b.confirm().await, Err(Error::NotLeader)));
    })
    .await;
}

#[tokio::test]
async fn bad_input_is_refused_by_name() {
    for_each_backend(|connect| async move {
        let s = session(&connect).await;
        for path in ["", "election", "/election/", "/a//b", "/"] {
            match s.leader_latch(path, "id") {
                Err(Error::InvalidArgument(message)) => {
                    assert!(message.contains("election path"), "{message}");
                    assert!(message.contains(&format!("{path:?}")), "{message}");
                }
                other => panic!("{path:?}: {other:?}"),
            }
        }
        match s.leader_latch(PATH, "") {
            Err(Error::InvalidArgument(message)) => {
                assert!(
                    message.contains("id") && message.contains(PATH),
                    "{message}"
                );
            }
            other => panic!("empty id: {other:?}"),
        }
        let latch = s.leader_latch(PATH, "ok").unwrap();
        assert!(matches!(
            latch.lead_timeout(Duration::ZERO).await,
            Err(Error::InvalidArgument(_))
        ));
        assert!(matches!(
            latch.confirmed_leader_timeout(Duration::ZERO).await,
            Err(Error::InvalidArgument(_))
        ));
        // A closed session: waits end at once.
        s.close().await;
        assert!(matches!(latch.lead().await, Err(Error::SessionLost)));
        assert!(matches!(latch.try_lead().await, Err(Error::SessionLost)));
    })
    .await;
}
