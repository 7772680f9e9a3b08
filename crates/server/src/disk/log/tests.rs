use super::*;

fn job(seq: u64, epoch: u64, zxid: i64) -> Job {
    let now = Instant::now();
    Job {
        seq,
        epoch,
        zxid,
        segment: None,
        wakes: false,
        flushed: now,
        received: now,
        written: now,
        synced: now,
    }
}

fn publish() -> Publish {
    Publish {
        epoch: 0,
        next: 0,
        finished: Vec::new(),
    }
}

/// Where the log runs its workers, by the runtime it is opened in.
#[derive(Debug, Clone, Copy)]
enum Runtime {
    MultiThread,
    /// Multi-threaded, with one worker.
    OneWorker,
    CurrentThread,
    None,
}

fn create(i: i64) -> Txn {
    Txn::Create {
        path: format!("/n{i}"),
        data: None,
        acl: crate::state::acl::open_acl(),
        ephemeral_owner: 0,
    }
}

/// Waits (at most 10 s) until the log's mark reaches `zxid`.
async fn durable_through(log: &TxnLog, zxid: i64) {
    let mut mark = log.durable().subscribe();
    let reached = mark.wait_for(|d| d.zxid >= zxid);
    match tokio::time::timeout(std::time::Duration::from_secs(10), reached).await {
        Ok(Ok(_)) => {}
        _ => panic!("zxid {zxid} not durable within 10 s"),
    }
}

/// What a log did in one run: the zxids recovery found, what the mark said after the
/// drop, whether it ran tasks, how many descriptors of its first segment the process held
/// once a record was durable, and whether every worker was gone 10 s after the drop.
#[derive(Debug, PartialEq, Eq)]
struct Run {
    recovered: u64,
    published: i64,
    tasks: bool,
    descriptors: usize,
    workers_gone: bool,
}

/// How many of this process's open descriptors are `path`.
fn descriptors_of(path: &Path) -> usize {
    let path = path.canonicalize().unwrap();
    std::fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|fd| std::fs::read_link(fd.ok()?.path()).ok())
        .filter(|target| *target == path)
        .count()
}

/// Opens a log on `dir` in `runtime` (last zxid `FIRST_ZXID - 1`) and runs `exercise` on
/// it, with the log's events, the way the server does: on a multi-threaded runtime the log
/// is opened off the workers and flushed from a runtime worker, as the core's is.
fn run_in<F, Fut, T>(runtime: Runtime, dir: &Path, exercise: F) -> T
where
    F: FnOnce(TxnLog, tokio_mpsc::UnboundedReceiver<LogEvent>) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let first = crate::disk::recovery::FIRST_ZXID;
    let open = move |dir: &Path| {
        let (events, heard) = tokio_mpsc::unbounded_channel();
        let log = TxnLog::open(dir, SyncMode::Always, Duration::ZERO, first - 1, events).unwrap();
        (log, heard)
    };
    let current_thread = || {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    };
    match runtime {
        Runtime::MultiThread | Runtime::OneWorker => {
            let workers = if matches!(runtime, Runtime::OneWorker) {
                1
            } else {
                2
            };
            let rt = tokio::runtime::Builder::new_multi_thread()
                .worker_threads(workers)
                .enable_all()
                .build()
                .unwrap();
            let path = dir.to_path_buf();
            rt.block_on(async move {
                let (log, heard) = tokio::task::spawn_blocking(move || open(&path))
                    .await
                    .unwrap();
                tokio::spawn(exercise(log, heard)).await.unwrap()
            })
        }
        Runtime::CurrentThread => current_thread().block_on(async {
            let (log, heard) = open(dir);
            exercise(log, heard).await
        }),
        Runtime::None => {
            let (log, heard) = open(dir);
            current_thread().block_on(exercise(log, heard))
        }
    }
}

/// Drops `log` as a stopping core does and waits (at most 10 s) for its workers to let go
/// of what they share; says whether they did.
async fn drop_and_wait(log: TxnLog) -> bool {
    let shared = Arc::downgrade(&log.shared);
    drop(log);
    let until = Instant::now() + std::time::Duration::from_secs(10);
    while shared.strong_count() > 0 && Instant::now() < until {
        tokio::time::sleep(std::time::Duration::from_millis(1)).await;
    }
    shared.strong_count() == 0
}

/// Opens a log in `runtime`, makes three flushes durable one by one and two more at once,
/// then queues a record, a roll and a record in the next segment and drops the log at
/// once, as a stopping core does.
fn log_through(runtime: Runtime) -> Run {
    let dir = tempfile::tempdir().unwrap();
    let first = crate::disk::recovery::FIRST_ZXID;
    let segment = dir.path().join(segment_name(first));
    let exercise = move |mut log: TxnLog, _| async move {
        let tasks = matches!(log.workers, Workers::Task(_));
        let mut descriptors = 0;
        for i in 0..3 {
            log.append(first + i, 1000, &create(i));
            log.flush();
            durable_through(&log, first + i).await;
            if i == 0 {
                descriptors = descriptors_of(&segment);
            }
        }
        for i in 3..5 {
            log.append(first + i, 1000, &create(i));
            log.flush();
        }
        durable_through(&log, first + 4).await;
        log.append(first + 5, 1000, &create(5));
        log.roll();
        log.append(first + 6, 1000, &create(6));
        let mark = log.durable();
        let workers_gone = drop_and_wait(log).await;
        (mark.get().zxid - first, tasks, descriptors, workers_gone)
    };
    let (published, tasks, descriptors, workers_gone) = run_in(runtime, dir.path(), exercise);
    let recovered =
        crate::disk::recovery::recover(dir.path(), crate::disk::recovery::Mode::Repair).unwrap();
    assert_eq!(recovered.last_zxid, first + 6, "{runtime:?}");
    Run {
        recovered: recovered.replayed,
        published,
        tasks,
        descriptors,
        workers_gone,
    }
}

/// Waits (at most 10 s) for the log's next event.
async fn next_event(heard: &mut tokio_mpsc::UnboundedReceiver<LogEvent>) -> LogEvent {
    match tokio::time::timeout(std::time::Duration::from_secs(10), heard.recv()).await {
        Ok(Some(event)) => event,
        other => panic!("no log event within 10 s: {other:?}"),
    }
}

/// A worker panics writing the second record: the core must hear of a failure, nothing
/// after the first record may be published or written (the records flushed after the
/// panic included, even by the drop), and a resume must make the log durable again.
fn panic_through(runtime: Runtime) {
    let dir = tempfile::tempdir().unwrap();
    let first = crate::disk::recovery::FIRST_ZXID;
    let exercise = move |mut log: TxnLog, mut heard| async move {
        log.append(first, 1000, &create(0));
        log.flush();
        durable_through(&log, first).await;

        log.shared.panic_at_write.store(true, Ordering::SeqCst);
        log.append(first + 1, 1000, &create(1));
        log.flush();
        let failed = next_event(&mut heard).await;
        assert!(
            matches!(&failed, LogEvent::Failed(e) if e.contains("panicked")),
            "{failed:?}"
        );
        log.append(first + 2, 1000, &create(2));
        log.flush();
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
        assert_eq!(log.durable_zxid(), first, "published past the panic");

        // As the core does: the records since the durable mark are given up, and a resume
        // starts a clean segment.
        log.resume(first + 1);
        let resumed = next_event(&mut heard).await;
        assert!(matches!(resumed, LogEvent::Resumed), "{resumed:?}");
        log.append(first + 1, 1000, &create(11));
        log.flush();
        durable_through(&log, first + 1).await;

        // A second panic, then the drop at once: the drop must not write past it either.
        log.shared.panic_at_write.store(true, Ordering::SeqCst);
        log.append(first + 2, 1000, &create(12));
        log.flush();
        assert!(matches!(next_event(&mut heard).await, LogEvent::Failed(_)));
        log.append(first + 3, 1000, &create(13));
        log.flush();
        let mark = log.durable();
        assert!(drop_and_wait(log).await, "the workers outlived the log");
        assert_eq!(
            mark.get().zxid,
            first + 1,
            "published past the second panic"
        );
    };
    run_in(runtime, dir.path(), exercise);
    let recovered =
        crate::disk::recovery::recover(dir.path(), crate::disk::recovery::Mode::Repair).unwrap();
    assert_eq!(recovered.last_zxid, first + 1, "{runtime:?}");
}

#[test]
fn a_panicking_log_task_fails_the_log_and_resumes() {
    panic_through(Runtime::MultiThread);
}

#[test]
fn a_panicking_log_thread_fails_the_log_and_resumes() {
    panic_through(Runtime::None);
}

/// A group writes a record, rolls, and then cannot create the next segment. The roll syncs
/// the record; it must publish it too. Otherwise the old segment, which a resume does not cut
/// back, holds a record past the mark: the core reloads without it after the fault, and a
/// restart would replay it.
fn roll_fault_through(runtime: Runtime) {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().to_path_buf();
    let first = crate::disk::recovery::FIRST_ZXID;
    let exercise = move |mut log: TxnLog, mut heard| async move {
        // A thread holds `publish` while a worker takes the first record, so that worker stops
        // holding the writer; what is queued meanwhile is taken next, as one group.
        let shared = log.shared.clone();
        let (held_tx, held) = tokio::sync::oneshot::channel();
        let (release, release_rx) = mpsc::channel::<()>();
        let holder = std::thread::spawn(move || {
            let _publish = lock(&shared.publish);
            let _ = held_tx.send(());
            let _ = release_rx.recv();
        });
        held.await.unwrap();
        log.append(first, 1000, &create(0));
        log.flush();
        let until = Instant::now() + std::time::Duration::from_secs(10);
        while log.shared.queued_msgs.load(Ordering::SeqCst) > 0 {
            assert!(
                Instant::now() < until,
                "the first record was not taken in 10 s"
            );
            tokio::time::sleep(std::time::Duration::from_millis(1)).await;
        }
        log.shared.fail_at_new_segment.store(true, Ordering::SeqCst);
        log.append(first + 1, 1000, &create(1));
        log.roll();
        log.append(first + 2, 1000, &create(2));
        log.flush();
        release.send(()).unwrap();
        tokio::task::spawn_blocking(move || holder.join().unwrap())
            .await
            .unwrap();

        let failed = next_event(&mut heard).await;
        assert!(
            matches!(&failed, LogEvent::Failed(e) if e.contains("new segment")),
            "{failed:?}"
        );
        let on_disk =
            crate::disk::recovery::recover(&path, crate::disk::recovery::Mode::Check).unwrap();
        assert_eq!(
            on_disk.last_zxid,
            log.durable_zxid(),
            "the disk holds a record the mark does not cover, in a segment no resume cuts back"
        );
        assert_eq!(
            log.durable_zxid(),
            first + 1,
            "the roll published what it synced"
        );

        log.resume(first + 2);
        let resumed = next_event(&mut heard).await;
        assert!(matches!(resumed, LogEvent::Resumed), "{resumed:?}");
        log.append(first + 2, 1000, &create(12));
        log.flush();
        durable_through(&log, first + 2).await;
        assert!(drop_and_wait(log).await, "the workers outlived the log");
    };
    run_in(runtime, dir.path(), exercise);
    let recovered =
        crate::disk::recovery::recover(dir.path(), crate::disk::recovery::Mode::Repair).unwrap();
    assert_eq!(
        (recovered.last_zxid, recovered.replayed),
        (first + 2, 3),
        "{runtime:?}"
    );
}

#[test]
fn a_log_task_that_rolls_and_then_fails_leaves_nothing_past_the_mark() {
    roll_fault_through(Runtime::MultiThread);
}

#[test]
fn log_threads_that_roll_and_then_fail_leave_nothing_past_the_mark() {
    roll_fault_through(Runtime::None);
}

#[test]
fn on_a_multi_threaded_runtime_the_log_runs_as_tasks_and_loses_nothing_at_its_drop() {
    let run = log_through(Runtime::MultiThread);
    assert_eq!(
        run,
        Run {
            recovered: 7,
            published: 6,
            tasks: true,
            descriptors: 1,
            workers_gone: true
        }
    );
}

#[test]
fn elsewhere_the_log_runs_threads_and_loses_nothing_at_its_drop() {
    for runtime in [Runtime::CurrentThread, Runtime::None] {
        let run = log_through(runtime);
        let expected = Run {
            recovered: 7,
            published: 6,
            tasks: false,
            descriptors: SYNCERS,
            workers_gone: true,
        };
        assert_eq!(run, expected, "{runtime:?}");
    }
}

/// A log opened on a runtime that shuts down before the log is dropped: the task's work goes
/// on on a thread, so a flush after the shutdown still becomes durable, promptly, and the
/// drop loses nothing.
#[test]
fn a_log_task_whose_runtime_shuts_down_first_hands_its_work_to_a_thread() {
    let dir = tempfile::tempdir().unwrap();
    let first = crate::disk::recovery::FIRST_ZXID;
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let (events, _heard) = tokio_mpsc::unbounded_channel();
    let mut log = runtime
        .block_on(async {
            TxnLog::open(
                dir.path(),
                SyncMode::Always,
                Duration::ZERO,
                first - 1,
                events,
            )
        })
        .unwrap();
    assert!(matches!(log.workers, Workers::Task(_)));
    let waiter = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    log.append(first, 1000, &create(0));
    log.flush();
    waiter.block_on(durable_through(&log, first));

    runtime.shutdown_timeout(std::time::Duration::from_secs(10));
    for i in 1..3 {
        log.append(first + i, 1000, &create(i));
        log.flush();
        waiter.block_on(durable_through(&log, first + i));
    }
    log.append(first + 3, 1000, &create(3));
    let mark = log.durable();
    assert!(
        waiter.block_on(drop_and_wait(log)),
        "the heir outlived the log"
    );
    assert_eq!(mark.get().zxid, first + 3);
    let recovered =
        crate::disk::recovery::recover(dir.path(), crate::disk::recovery::Mode::Check).unwrap();
    assert_eq!((recovered.last_zxid, recovered.replayed), (first + 3, 4));
}

#[test]
fn a_later_sync_waits_for_the_earlier_one_then_both_publish_at_once() {
    let mut p = publish();
    assert!(
        p.finish(job(1, 0, 20)).is_none(),
        "group 0 is still syncing"
    );
    let newest = p.finish(job(0, 0, 10)).expect("both finished");
    assert_eq!((newest.seq, newest.zxid), (1, 20));
    assert_eq!(p.finish(job(2, 0, 30)).map(|j| j.zxid), Some(30));
}

#[test]
fn nothing_from_before_a_fault_is_published() {
    let mut p = publish();
    assert!(p.finish(job(1, 0, 20)).is_none());
    p.fault();
    assert!(
        p.finish(job(0, 0, 10)).is_none(),
        "group 0 is from before the fault"
    );
    p.restart(2);
    assert_eq!(p.finish(job(2, 1, 30)).map(|j| j.zxid), Some(30));
}

/// A follow window far longer than any machine needs between two flushes, so that what the
/// tests below see does not depend on the machine's speed.
const LONG_WINDOW: Duration = Duration::from_secs(30);

/// Opens a log on a multi-threaded runtime, as the server does, with `window` as the follow
/// window, makes a first flush durable, which woke watchers if `woke`, and runs `then` on it.
fn after_a_first_flush<F, Fut, T>(woke: bool, window: Duration, then: F) -> T
where
    F: FnOnce(TxnLog, i64) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = T> + Send + 'static,
    T: Send + 'static,
{
    let dir = tempfile::tempdir().unwrap();
    let first = crate::disk::recovery::FIRST_ZXID;
    run_in(
        Runtime::MultiThread,
        dir.path(),
        move |mut log, _| async move {
            lock(&log.shared.follow).window = window;
            log.append(first, 1000, &create(0));
            if woke {
                log.woke_watchers();
            }
            log.flush();
            durable_through(&log, first).await;
            then(log, first + 1).await
        },
    )
}

#[test]
fn after_a_write_that_woke_watchers_the_next_waits_for_the_woken_and_both_take_one_sync() {
    let (syncs, alone, handoffs) =
        after_a_first_flush(true, LONG_WINDOW, |mut log, next| async move {
            let (syncs, handoffs) = (log.fsync_time().count(), log.handoffs());
            log.append(next, 1000, &create(1));
            log.flush();
            tokio::time::sleep(Duration::from_millis(50)).await;
            let alone = log.durable_zxid() >= next;
            log.append(next + 1, 1000, &create(2));
            log.flush();
            durable_through(&log, next + 1).await;
            (
                log.fsync_time().count() - syncs,
                alone,
                log.handoffs() - handoffs,
            )
        });
    assert!(!alone, "the first flush was synced without waiting");
    assert_eq!(syncs, 1, "the two flushes were synced apart");
    // The wait held the log task's thread: its other tasks (the core's, which makes the
    // awaited write) were handed to another thread first.
    assert!(
        handoffs >= 1,
        "the wait for the woken held a worker with its tasks"
    );
}

fn records(bytes: usize, wakes: bool) -> WriterMsg {
    WriterMsg::Records {
        bytes: vec![0; bytes],
        first_zxid: Some(1),
        last_zxid: 1,
        flushed: Instant::now(),
        wakes,
    }
}

#[test]
fn a_group_may_hold_its_thread_long_when_others_need_the_core_or_the_disk_is_slow() {
    use SyncMode::{Always, None as Never};
    let quick = QUICK_SYNC_US;
    let lone = [records(100, false)];
    assert!(
        !holds_long(Always, false, &lone, quick),
        "one client's lone write"
    );
    assert!(
        holds_long(Always, true, &lone, quick),
        "waits for the woken"
    );
    let two = [records(100, false), records(100, false)];
    assert!(holds_long(Always, false, &two, quick), "several writers");
    assert!(
        holds_long(Always, false, &[records(100, true)], quick),
        "woke watchers"
    );
    let big = [records(OVERLAP_MAX + 1, false)];
    assert!(
        holds_long(Always, false, &big, quick),
        "a heavy load's group"
    );
    assert!(
        !holds_long(Always, false, &[records(OVERLAP_MAX, false)], quick),
        "at the bound"
    );
    assert!(
        holds_long(Always, false, &lone, quick + 1),
        "after a slow sync"
    );
    // Never synced: a write(2) alone, whatever the group.
    assert!(!holds_long(Never, false, &big, quick + 1));
}

/// Flushes `groups` records one by one in `runtime`, each made durable before the next;
/// answers how many of them the log took after a thread hand-off, and how many of them came
/// after a sync slower than `QUICK_SYNC_US` (a segment's first sync, which writes its zeros
/// ahead, often is).
fn handoffs_of_lone_flushes(runtime: Runtime, groups: i64) -> (u64, u64) {
    let dir = tempfile::tempdir().unwrap();
    let first = crate::disk::recovery::FIRST_ZXID;
    run_in(runtime, dir.path(), move |mut log, _| async move {
        let mut after_slow = 0;
        let mut last_sync_us = 0;
        for i in 0..groups {
            after_slow += u64::from(last_sync_us > QUICK_SYNC_US);
            log.append(first + i, 1000, &create(i));
            log.flush();
            durable_through(&log, first + i).await;
            // Stored before the mark was published.
            last_sync_us = log.shared.last_sync_us.load(Ordering::Relaxed);
        }
        (log.handoffs(), after_slow)
    })
}

#[test]
fn a_light_group_on_a_runtime_worker_is_taken_without_a_thread_hand_off() {
    let (handoffs, after_slow) = handoffs_of_lone_flushes(Runtime::MultiThread, 6);
    assert_eq!(
        handoffs, after_slow,
        "only the groups after a slow sync were taken after a hand-off"
    );
}

#[test]
fn on_a_runtime_of_one_worker_every_group_is_taken_after_a_thread_hand_off() {
    // The worker's other tasks have no other worker to run on while it syncs.
    let (handoffs, _) = handoffs_of_lone_flushes(Runtime::OneWorker, 3);
    assert_eq!(handoffs, 3);
}

#[test]
fn a_write_that_woke_nobody_makes_the_next_wait_for_nothing() {
    after_a_first_flush(false, LONG_WINDOW, |mut log, next| async move {
        log.append(next, 1000, &create(1));
        log.flush();
        // Within 10 s, a third of the window.
        durable_through(&log, next).await;
    });
}

#[test]
fn the_wait_for_the_woken_ends_with_its_window() {
    // Nobody follows: the flush is synced alone once the window has passed.
    after_a_first_flush(
        true,
        Duration::from_millis(200),
        |mut log, next| async move {
            log.append(next, 1000, &create(1));
            log.flush();
            durable_through(&log, next).await;
        },
    );
}

#[test]
fn written_flush_buffers_are_reused() {
    let dir = tempfile::tempdir().unwrap();
    let first = crate::disk::recovery::FIRST_ZXID;
    run_in(
        Runtime::MultiThread,
        dir.path(),
        move |mut log, _| async move {
            for i in 0..20 {
                log.append(first + i, 1000, &create(i));
                log.flush();
                durable_through(&log, first + i).await;
            }
            let spare = lock(&log.shared.spare).len();
            assert!((1..=SPARE_BUFFERS).contains(&spare), "{spare} buffers kept");
            // The next flush takes a kept one instead of allocating.
            let kept: Vec<*const u8> = lock(&log.shared.spare).iter().map(Vec::as_ptr).collect();
            log.append(first + 20, 1000, &create(20));
            log.flush();
            assert!(
                kept.contains(&log.batch.as_ptr()),
                "a new buffer was allocated"
            );
        },
    );
}

#[test]
fn groups_published_together_wake_if_any_of_them_did() {
    let mut p = publish();
    let mut older = job(0, 0, 10);
    older.wakes = true;
    assert!(
        p.finish(job(1, 0, 20)).is_none(),
        "group 0 is still syncing"
    );
    let newest = p.finish(older).expect("both finished");
    assert_eq!(newest.zxid, 20);
    assert!(newest.wakes, "the older group's watchers were forgotten");
}
