//! The etcd read-write lock, semaphore and election on a real etcd: readers share and wait only
//! for earlier writers, writers wait for everything earlier; at most n permits; one leader,
//! observed, proclaimed and resigned; every grant with a higher fencing token.
#![cfg(feature = "etcd")]

mod support_etcd;

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::time::Duration;

use lockkeeper::Error;
use lockkeeper::LockOptions;
use lockkeeper_testkit::{Etcd, etcdctl};
use support_etcd::{keys, ranges_served, session};

#[tokio::test]
async fn readers_share_writers_wait_in_order() {
    let etcd = Etcd::start();
    let a = session(&etcd).await;
    let b = session(&etcd).await;
    let lock_a = a.rw_lock("catalog").expect("rw_lock");
    let lock_b = b.rw_lock("catalog").expect("rw_lock");

    let r1 = lock_a.read().await.expect("read");
    let r2 = lock_a
        .read()
        .await
        .expect("a second reader of the same session");
    let r3 = lock_b
        .try_read()
        .await
        .expect("try_read")
        .expect("readers share");
    assert!(
        lock_b.try_write().await.expect("try_write").is_none(),
        "readers hold"
    );
    assert_eq!(keys(&etcd, "catalog/").len(), 3, "try_write left no key");

    let writer = tokio::spawn({
        let lock = lock_b.clone();
        async move { lock.write().await.expect("write") }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    // A reader arriving after the waiting writer waits for it (no writer starvation).
    assert!(lock_a.try_read().await.expect("try_read").is_none());
    let late_reader = tokio::spawn({
        let lock = lock_a.clone();
        async move { lock.read().await.expect("read") }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    let tokens = [r1.fencing_token(), r2.fencing_token(), r3.fencing_token()];
    r1.release().await.expect("release");
    r2.release().await.expect("release");
    assert!(!writer.is_finished(), "one reader still holds");
    r3.release().await.expect("release");
    let w = tokio::time::timeout(Duration::from_secs(5), writer)
        .await
        .expect("the writer is granted after the last reader")
        .expect("task");
    assert!(tokens.iter().all(|t| w.fencing_token() > *t));
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(
        !late_reader.is_finished(),
        "the later reader waits for the writer"
    );
    let wt = w.fencing_token();
    w.release().await.expect("release");
    let r = tokio::time::timeout(Duration::from_secs(5), late_reader)
        .await
        .expect("granted after the writer")
        .expect("task");
    // The token is the create revision: the reader queued after the writer.
    assert!(r.fencing_token() > wt);
    r.release().await.expect("release");
    assert_eq!(keys(&etcd, "catalog/").len(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_exclude_everyone() {
    let etcd = Etcd::start();
    let inside_w = Arc::new(AtomicUsize::new(0));
    let inside_r = Arc::new(AtomicUsize::new(0));
    let bad = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for i in 0..4 {
        let lock = session(&etcd).await.rw_lock("table").expect("rw_lock");
        let (inside_w, inside_r, bad) = (inside_w.clone(), inside_r.clone(), bad.clone());
        tasks.push(tokio::spawn(async move {
            for round in 0..5 {
                if (i + round) % 2 == 0 {
                    let g = lock.write().await.expect("write");
                    if inside_w.fetch_add(1, Ordering::SeqCst) != 0
                        || inside_r.load(Ordering::SeqCst) != 0
                    {
                        bad.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    inside_w.fetch_sub(1, Ordering::SeqCst);
                    g.release().await.expect("release");
                } else {
                    let g = lock.read().await.expect("read");
                    inside_r.fetch_add(1, Ordering::SeqCst);
                    if inside_w.load(Ordering::SeqCst) != 0 {
                        bad.fetch_add(1, Ordering::SeqCst);
                    }
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    inside_r.fetch_sub(1, Ordering::SeqCst);
                    g.release().await.expect("release");
                }
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    assert_eq!(
        bad.load(Ordering::SeqCst),
        0,
        "a writer overlapped another holder"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn at_most_n_permits() {
    let etcd = Etcd::start();
    let a = session(&etcd).await;
    let pool = a.semaphore("pool", 2).expect("semaphore");
    let p1 = pool.acquire().await.expect("acquire");
    let p2 = pool
        .try_acquire()
        .await
        .expect("try_acquire")
        .expect("second permit");
    assert!(
        pool.try_acquire().await.expect("try_acquire").is_none(),
        "full"
    );
    assert!(
        pool.acquire_timeout(Duration::from_millis(200))
            .await
            .expect("acquire_timeout")
            .is_none()
    );
    assert_eq!(keys(&etcd, "pool/").len(), 2, "refusals left no key");
    let waiter = tokio::spawn({
        let pool = session(&etcd)
            .await
            .semaphore("pool", 2)
            .expect("semaphore");
        async move { pool.acquire().await.expect("acquire") }
    });
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!waiter.is_finished());
    // Releasing the *first* permit (not the one just before the waiter) lets it in.
    p1.release().await.expect("release");
    let p3 = tokio::time::timeout(Duration::from_secs(5), waiter)
        .await
        .expect("granted")
        .expect("task");
    assert!(p3.fencing_token() > p2.fencing_token());
    drop((p2, p3));

    // Contention: 5 tasks, 3 permits, never more than 3 inside.
    let inside = Arc::new(AtomicUsize::new(0));
    let most = Arc::new(AtomicUsize::new(0));
    let mut tasks = Vec::new();
    for _ in 0..5 {
        let pool = session(&etcd)
            .await
            .semaphore("workers", 3)
            .expect("semaphore");
        let (inside, most) = (inside.clone(), most.clone());
        tasks.push(tokio::spawn(async move {
            for _ in 0..4 {
                let permit = pool.acquire().await.expect("acquire");
                let now = inside.fetch_add(1, Ordering::SeqCst) + 1;
                most.fetch_max(now, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_millis(15)).await;
                inside.fetch_sub(1, Ordering::SeqCst);
                permit.release().await.expect("release");
            }
        }));
    }
    for task in tasks {
        task.await.expect("task");
    }
    let most = most.load(Ordering::SeqCst);
    assert!(most <= 3, "{most} holders at once");
    assert!(most >= 2, "the permits were shared ({most})");
}

#[tokio::test]
async fn one_leader_observed_proclaimed_and_resigned() {
    let etcd = Etcd::start();
    let a = session(&etcd).await;
    let b = session(&etcd).await;
    let ea = a.election("scheduler").expect("election");
    let eb = b.election("scheduler").expect("election");
    assert_eq!(ea.leader().await.expect("leader"), None);
    let mut observer = eb.observe();

    let lead_a = ea.campaign("a:1").await.expect("campaign");
    assert_eq!(lead_a.key(), format!("scheduler/{:x}", a.lease_id()));
    let seen = observer.next().await.expect("observe");
    assert_eq!(
        (seen.key.as_str(), seen.value.as_slice()),
        (lead_a.key().as_str(), &b"a:1"[..])
    );
    assert!(
        eb.try_campaign("b:1")
            .await
            .expect("try_campaign")
            .is_none()
    );
    let campaign = tokio::spawn({
        let eb = eb.clone();
        async move { eb.campaign("b:1").await.expect("campaign") }
    });
    lead_a.proclaim("a:2").await.expect("proclaim");
    let seen = observer.next().await.expect("observe");
    assert_eq!(seen.value, b"a:2");
    assert_eq!(
        ea.leader().await.expect("leader").expect("led").value,
        b"a:2"
    );
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!campaign.is_finished(), "b waits while a leads");

    let token_a = lead_a.fencing_token();
    lead_a.resign().await.expect("resign");
    let lead_b = tokio::time::timeout(Duration::from_secs(5), campaign)
        .await
        .expect("b elected after a resigned")
        .expect("task");
    assert!(lead_b.fencing_token() > token_a);
    let seen = observer.next().await.expect("observe");
    assert_eq!(seen.value, b"b:1");
    assert_eq!(seen.token, lead_b.fencing_token());

    // A leader whose key is deleted behind its back knows, and cannot proclaim.
    etcdctl(&[etcd.endpoint()], &["del", &lead_b.key()]).expect("etcdctl del");
    tokio::time::timeout(Duration::from_secs(5), lead_b.lost())
        .await
        .expect("lost fires");
    assert!(matches!(
        lead_b.proclaim("b:2").await,
        Err(Error::NotLeader)
    ));
    assert!(matches!(lead_b.resign().await, Err(Error::NotLeader)));
}

/// An election's maximum hold time ends the leadership on time and elects the next candidate.
#[tokio::test]
async fn an_elections_maximum_hold_time_ends_the_leadership() {
    let etcd = Etcd::start();
    let a = session(&etcd).await;
    let b = session(&etcd).await;
    let max_hold = Duration::from_millis(400);
    let ea = a
        .election("capped")
        .expect("election")
        .with_options(LockOptions::new().max_hold(max_hold))
        .expect("max_hold");
    let before = tokio::time::Instant::now();
    let lead_a = ea.campaign("a").await.expect("campaign");
    let campaign = tokio::spawn({
        let eb = b.election("capped").expect("election");
        async move { eb.campaign("b").await.expect("campaign") }
    });
    tokio::time::timeout(Duration::from_secs(10), lead_a.lost())
        .await
        .expect("lost at the maximum hold time");
    assert!(tokio::time::Instant::now() >= before + max_hold);
    assert!(!lead_a.is_held());
    let lead_b = tokio::time::timeout(Duration::from_secs(10), campaign)
        .await
        .expect("b elected after a's maximum hold time")
        .expect("task");
    assert!(lead_b.fencing_token() > lead_a.fencing_token());
    assert!(matches!(lead_a.resign().await, Err(Error::NotLeader)));
    assert!(matches!(
        b.election("capped")
            .expect("election")
            .with_options(LockOptions::new().max_hold(Duration::ZERO)),
        Err(Error::InvalidArgument(_))
    ));
    lead_b.resign().await.expect("resign");
}

/// The bounded campaigns win an election nobody leads, and give up behind a leader leaving no
/// candidacy behind.
#[tokio::test]
async fn try_and_timed_campaigns_win_an_empty_election_and_give_up_behind_a_leader() {
    let etcd = Etcd::start();
    let a = session(&etcd).await;
    let b = session(&etcd).await;
    let ea = a.election("bounded").expect("election");
    let eb = b.election("bounded").expect("election");
    let lead = ea
        .try_campaign("a")
        .await
        .expect("try_campaign")
        .expect("nobody leads: the try wins");
    assert!(lead.is_held());
    assert!(
        eb.campaign_timeout("b", Duration::from_millis(300))
            .await
            .expect("campaign_timeout")
            .is_none(),
        "a timed campaign behind a leader gives up"
    );
    assert_eq!(
        keys(&etcd, "bounded/").len(),
        1,
        "the timed candidacy was withdrawn"
    );
    lead.resign().await.expect("resign");
    let lead = eb
        .campaign_timeout("b", Duration::from_secs(10))
        .await
        .expect("campaign_timeout")
        .expect("nobody leads: the timed campaign wins");
    assert!(lead.is_held());
    lead.resign().await.expect("resign");
}

/// An observer of a quiet election watches, it does not poll: once it has answered the leader,
/// waiting two seconds for the next one costs etcd no reads, and a change made after that is
/// still answered.
#[tokio::test]
async fn an_observer_of_a_quiet_election_watches_not_polls() {
    let etcd = Etcd::start();
    let a = session(&etcd).await;
    let election = a.election("quiet").expect("election");
    let leadership = election.campaign("a:1").await.expect("campaign");
    let mut observer = election.observe();
    assert_eq!(observer.next().await.expect("observe").value, b"a:1");
    let waiting = tokio::spawn(async move { observer.next().await });
    // Let the observer's watch take its first answer before counting.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = ranges_served(&etcd).await;
    tokio::time::sleep(Duration::from_secs(2)).await;
    let reads = ranges_served(&etcd).await - before;
    assert!(
        reads <= 2,
        "{reads} reads of etcd while an observer waited on a quiet election"
    );
    assert!(!waiting.is_finished(), "no change, no answer");
    leadership.proclaim("a:2").await.expect("proclaim");
    let seen = tokio::time::timeout(Duration::from_secs(10), waiting)
        .await
        .expect("the change is answered")
        .expect("task")
        .expect("observe");
    assert_eq!(seen.value, b"a:2");
}

/// What an election and a candidacy say about themselves: the name, the value campaigned with,
/// a leadership's deadline, and the election named in a refused option; and a candidacy's
/// bounded campaigns behave as the election's.
#[tokio::test]
async fn an_election_and_its_candidacy_describe_themselves() {
    let etcd = Etcd::start();
    let a = session(&etcd).await;
    let b = session(&etcd).await;
    let election = a.election("described").expect("election");
    assert_eq!(election.name(), "described");
    let candidacy = election.candidacy("host-a:8080");
    assert_eq!(candidacy.value(), b"host-a:8080");
    assert_eq!(candidacy.election().name(), "described");
    let observer = election.observe();
    assert!(
        format!("{observer:?}").contains("\"described\""),
        "an observer names its election: {observer:?}"
    );
    let refused = a
        .election("described")
        .expect("election")
        .with_options(LockOptions::new().keep_through_suspension())
        .expect_err("keep_through_suspension is ZooKeeper's");
    assert!(
        refused.to_string().contains("\"described\""),
        "the refusal names the election: {refused}"
    );

    let leadership = candidacy
        .try_campaign()
        .await
        .expect("try_campaign")
        .expect("an empty election is won at once");
    let until = leadership
        .valid_until()
        .expect("a leadership has a deadline");
    let now = tokio::time::Instant::now();
    assert!(until > now, "the deadline is ahead");
    assert!(
        until <= now + Duration::from_secs(5),
        "and within the 5 s lease"
    );

    let rival = b
        .election("described")
        .expect("election")
        .candidacy("host-b:8080");
    assert!(rival.try_campaign().await.expect("try_campaign").is_none());
    assert!(
        rival
            .campaign_timeout(Duration::from_millis(300))
            .await
            .expect("campaign_timeout")
            .is_none()
    );
    leadership.resign().await.expect("resign");
    let next = rival
        .campaign_timeout(Duration::from_secs(10))
        .await
        .expect("campaign_timeout")
        .expect("won once the leader resigned");
    assert_eq!(
        election.leader().await.expect("leader").expect("led").value,
        b"host-b:8080"
    );
    next.resign().await.expect("resign");
}

/// An observer rides out an etcd restart: the broken watch and the refused reads while etcd is
/// down are passing failures, and the next leader is answered once etcd is back.
#[tokio::test]
async fn an_observer_waits_through_an_etcd_restart() {
    let etcd = Etcd::start();
    let a = session(&etcd).await;
    let election = a.election("restarted").expect("election");
    let leadership = election.campaign("a:1").await.expect("campaign");
    let mut observer = election.observe();
    assert_eq!(observer.next().await.expect("observe").value, b"a:1");
    let waiting = tokio::spawn(async move { observer.next().await });
    etcd.kill();
    // Down long enough for the observer's watch to break and a read to be refused.
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!waiting.is_finished(), "an outage is no answer");
    etcd.restart();
    // A new leader once etcd is back: a resigns (or its lease ends, if the outage outlived it).
    let b = session(&etcd).await;
    let _ = leadership.resign().await;
    let lead_b = tokio::time::timeout(
        Duration::from_secs(60),
        b.election("restarted").expect("election").campaign("b:1"),
    )
    .await
    .expect("b leads once a is gone")
    .expect("campaign");
    let seen = tokio::time::timeout(Duration::from_secs(60), waiting)
        .await
        .expect("the new leader is answered")
        .expect("task")
        .expect("the outage was not an error");
    assert_eq!(seen.value, b"b:1");
    lead_b.resign().await.expect("resign");
}

/// A failure etcd will not get over by itself is the observer's answer, at once: a name too
/// long for any request etcd takes.
#[tokio::test]
async fn an_observer_answers_a_lasting_failure_instead_of_retrying() {
    let etcd = Etcd::start();
    let a = session(&etcd).await;
    let name = "n".repeat(3 << 20);
    let mut observer = a.election(&name).expect("election").observe();
    let answer = tokio::time::timeout(Duration::from_secs(30), observer.next())
        .await
        .expect("answered, not retried for ever");
    let err = answer.expect_err("etcd refuses a 3 MiB key");
    assert!(matches!(err, Error::Etcd(_)), "{err}");
}
