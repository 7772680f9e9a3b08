//! lockkeeper's leader election and Apache Curator 5.4's `LeaderLatch` in one election, against
//! Keeper and Apache ZooKeeper: a leader is SIGKILLed over and over, and the two languages must
//! agree at every step.
//!
//! Four participants stand in the election at `/interop/election`: two JVMs running Curator's
//! `LeaderLatch` (`curator/Latch.java`) and two lockkeeper `LeaderLatch`es, each in a child
//! process of its own (this test binary re-run by `test_child`), all with a 4 s session. The test
//! kills whichever participant leads, by PID, with SIGKILL, [`KILLS`] times (the queue order
//! makes the victims alternate between the languages), and replaces each victim with a fresh
//! participant of the same language at the back of the queue. At the end a Curator leader and
//! then a lockkeeper leader step down gracefully.
//!
//! **What "believes it leads" means, and how it is checked.** Every participant, while it
//! believes it leads, holds the leader marker of a marker directory both languages write (see
//! [`LeaderMarker`] and its Java twin): a Curator participant from `isLeader` until `notLeader`,
//! a lockkeeper one while its [`LeaderLatch::run`] task runs (from the grant until
//! `Leadership::lost`). The marker is created atomically and exclusively, so a participant that
//! starts leading while another still holds it records an overlap; every start and end is also
//! logged with the wall clock. Asserted:
//!
//! - **No overlap, ever**: no participant starts leading while another's marker is held.
//! - **Nobody leads while the killed leader's session may live.** A SIGKILLed leader never
//!   removes its marker, and must not be treated as gone at the moment of the kill: its
//!   session, and with it its node and its leadership, lives on the server until it expires.
//!   The earliest that can happen is the session timeout after the session was last heard from,
//!   which is at most [`HEARTBEAT_SLACK`] before the kill (ZooKeeper's Java client pings after a
//!   third of the timeout of silence, lockkeeper's session reads every quarter). So the test
//!   removes the dead leader's marker only at kill + timeout - slack, and any participant that
//!   started leading before that is caught as an overlap; the new leader's logged start must
//!   also be after that moment.
//! - **Exactly one new leader within the session timeout plus two ticks** of the kill (both
//!   servers tick every 2 s and expire a session within a tick of its deadline; the rest is the
//!   watch, one read and the marker), and it is the participant that was second in the queue:
//!   both languages queue in one order. One settle period later there is still exactly one new
//!   start and no end.
//! - **Both sides name the same leader**: after every change, and while a killed leader's
//!   session may live (it still leads then), lockkeeper's [`LeaderLatch::leader`] and Curator's
//!   `getLeader()` in every live JVM name the same participant (after a change, the marker's
//!   holder), and lockkeeper's `candidates()` and Curator's `getParticipants()` list one queue.
//!   The successor's fencing token is above the leader's, whichever languages they are.
//! - **A graceful leave hands over at once**, both ways: after Curator's `close`, the next
//!   participant (a lockkeeper one) leads within a tick of the Curator leader's end, not after
//!   a timeout; after that lockkeeper leader's `run` task returns (asked through a
//!   `resign-<id>` file), a Curator participant leads within a tick, and both languages see the
//!   lockkeeper participant queued again at the back.

#[allow(dead_code)]
#[path = "curator/jvm.rs"]
mod jvm;
#[allow(dead_code)]
#[path = "curator/markers.rs"]
mod markers;
#[allow(dead_code)]
#[path = "curator/zk.rs"]
mod zk;

use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use jvm::Jvm;
use lockkeeper::zk::{Candidate, LeaderLatch, Session};
use lockkeeper_testkit::test_child::{self, ChildProcess};
use lockkeeper_testkit::{TestServer, both};
use markers::MarkerDir;
use zk::{JVM_START, STEP, connect, runtime};

/// The session timeout of every participant, in both languages: the test servers' minimum.
const TIMEOUT: Duration = Duration::from_secs(4);
/// The tick of both test servers (testkit's `zoo.cfg` and Keeper's test configuration).
const TICK: Duration = Duration::from_secs(2);
/// How long before a kill the killed session may last have been heard from by the server
/// (heartbeats come every third or quarter of the timeout; half of it leaves room for a busy
/// machine).
const HEARTBEAT_SLACK: Duration = Duration::from_secs(2);
/// Leaders killed per backend.
const KILLS: usize = 4;
/// How long the election is watched after a change for a second, unwanted one.
const SETTLE: Duration = Duration::from_secs(1);
/// A lockkeeper participant ends on its own after this, should the test leave it behind.
const CHILD_LIMIT: Duration = Duration::from_secs(300);
/// The election every participant joins.
const ELECTION: &str = "/interop/election";
/// This test's name, by which a child re-runs it.
const TEST: &str = "curator_and_lockkeeper_elect_one_leader_through_kills";
/// The marker's name in the marker directory, and its log's.
const MARKER: &str = "leader";
const LOG: &str = "log";

#[test]
fn curator_and_lockkeeper_elect_one_leader_through_kills() {
    if test_child::role().is_some() {
        return lockkeeper_participant();
    }
    for server in both() {
        one_election(server.as_ref());
    }
}

/// The child's part: a lockkeeper participant that leads whenever its turn comes, holding the
/// leader marker for as long as it believes it leads.
fn lockkeeper_participant() {
    let var = |name: &str| std::env::var(name).unwrap_or_else(|_| panic!("{name} is not set"));
    let (connect, dir, id) = (var("ZK_CONNECT"), var("MARKER_DIR"), var("PARTICIPANT_ID"));
    let dir = PathBuf::from(dir);
    runtime().block_on(async {
        let session = Session::builder(&connect)
            .session_timeout(TIMEOUT)
            .connect()
            .await
            .unwrap_or_else(|e| panic!("participant {id} connects to {connect}: {e}"));
        let latch = session.leader_latch(ELECTION, &id).expect("leader latch");
        // The task is dropped the moment leadership can no longer be trusted, and the marker
        // with it; when it returns, the marker ends first and `run` resigns. Either way `run`
        // then queues again.
        let resign = dir.join(format!("resign-{id}"));
        let run = latch.run(|_term| {
            let marker = LeaderMarker::begin(&dir, &id);
            let resign = &resign;
            async move {
                let _marker = marker;
                // Leads until the test asks it to step down (its file, taken once).
                while std::fs::remove_file(resign).is_err() {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            }
        });
        match tokio::time::timeout(CHILD_LIMIT, run).await {
            Ok(Ok(())) => panic!("participant {id}: the election ended while the session was open"),
            Ok(Err(e)) => panic!("participant {id}: {e}"),
            Err(_) => eprintln!("participant {id}: left behind for {CHILD_LIMIT:?}; ending"),
        }
    });
}

/// The leader marker, as a lockkeeper participant holds it (`Latch.java` has the Java twin,
/// with the same rules): `leader` is a symbolic link to the holder's id, created atomically
/// and only if absent, so a participant that starts leading while another holds it appends
/// `overlap <id> <holder>` to the log. Every belief is logged as `start <id> <ms>` and
/// `end <id> <ms>` (wall clock). Dropping it ends the belief.
struct LeaderMarker {
    dir: PathBuf,
    id: String,
    created: bool,
}

impl LeaderMarker {
    fn begin(dir: &Path, id: &str) -> LeaderMarker {
        let created = match std::os::unix::fs::symlink(id, dir.join(MARKER)) {
            Ok(()) => true,
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                let holder = holder(dir).unwrap_or_else(|| "?".to_owned());
                append(dir, &format!("overlap {id} {holder}"));
                false
            }
            Err(e) => panic!("create the leader marker in {dir:?}: {e}"),
        };
        append(dir, &format!("start {id} {}", now_ms()));
        LeaderMarker {
            dir: dir.to_owned(),
            id: id.to_owned(),
            created,
        }
    }
}

impl Drop for LeaderMarker {
    fn drop(&mut self) {
        append(&self.dir, &format!("end {} {}", self.id, now_ms()));
        if self.created {
            std::fs::remove_file(self.dir.join(MARKER)).expect("remove the leader marker");
        }
    }
}

/// Milliseconds since the epoch: the clock every process of the test shares.
fn now_ms() -> u64 {
    let since = SystemTime::now().duration_since(UNIX_EPOCH);
    since.expect("the clock is past 1970").as_millis() as u64
}

/// Appends one line to the marker log; appends of a few bytes are atomic, so lines from
/// processes never mix.
fn append(dir: &Path, line: &str) {
    let mut log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(dir.join(LOG))
        .expect("open the marker log");
    log.write_all(format!("{line}\n").as_bytes())
        .expect("append to the marker log");
}

/// Who holds the leader marker now.
fn holder(dir: &Path) -> Option<String> {
    match std::fs::read_link(dir.join(MARKER)) {
        Ok(target) => Some(target.to_string_lossy().into_owned()),
        Err(e) if e.kind() == ErrorKind::NotFound => None,
        Err(e) => panic!("read the leader marker in {dir:?}: {e}"),
    }
}

/// One line of the marker log.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Event {
    Start {
        id: String,
        at: u64,
    },
    End {
        id: String,
        at: u64,
    },
    Overlap {
        id: String,
        holder: String,
    },
    /// The test removed a killed leader's marker: the earliest its session could expire.
    Expired {
        id: String,
        at: u64,
    },
}

/// The marker log so far: its complete lines (a line being appended right now waits for the
/// next read).
fn events(dir: &Path) -> Vec<Event> {
    let text = std::fs::read_to_string(dir.join(LOG)).unwrap_or_default();
    text.split_inclusive('\n')
        .filter_map(|line| line.strip_suffix('\n'))
        .map(|line| {
            let words: Vec<&str> = line.split(' ').collect();
            let at = || {
                words[2]
                    .parse()
                    .unwrap_or_else(|_| panic!("log line {line:?}"))
            };
            match words.as_slice() {
                ["start", id, _] => Event::Start {
                    id: id.to_string(),
                    at: at(),
                },
                ["end", id, _] => Event::End {
                    id: id.to_string(),
                    at: at(),
                },
                ["expired", id, _] => Event::Expired {
                    id: id.to_string(),
                    at: at(),
                },
                ["overlap", id, holder] => Event::Overlap {
                    id: id.to_string(),
                    holder: holder.to_string(),
                },
                _ => panic!("malformed marker log line {line:?}"),
            }
        })
        .collect()
}

/// The starts among `events`.
fn starts(events: &[Event]) -> Vec<(String, u64)> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::Start { id, at } => Some((id.clone(), *at)),
            _ => None,
        })
        .collect()
}

#[derive(Clone, Copy, PartialEq, Eq, Debug)]
enum Language {
    Curator,
    Lockkeeper,
}

/// A participant's process: killed with SIGKILL by PID when dropped.
enum Process {
    Curator(Jvm),
    Lockkeeper(ChildProcess),
}

struct Participant {
    id: String,
    process: Process,
}

/// Everything one election run needs at hand.
struct Election<'a> {
    server: &'a dyn TestServer,
    rt: tokio::runtime::Runtime,
    /// The test's own view: a latch that never joins, for `leader()` and `candidates()`.
    observer: LeaderLatch,
    markers: MarkerDir,
    participants: Vec<Participant>,
    /// Participants started so far per language, for fresh ids.
    started: [usize; 2],
}

impl Election<'_> {
    fn on(&self) -> &'static str {
        self.server.name()
    }

    fn dir(&self) -> &Path {
        self.markers.path()
    }

    fn candidates(&self) -> Vec<Candidate> {
        let candidates = self
            .rt
            .block_on(async { tokio::time::timeout(STEP, self.observer.candidates()).await });
        candidates
            .unwrap_or_else(|_| panic!("no candidate list within {STEP:?} on {}", self.on()))
            .unwrap_or_else(|e| panic!("candidates on {}: {e}", self.on()))
    }

    fn ids(&self) -> Vec<String> {
        self.candidates().into_iter().map(|c| c.id).collect()
    }

    /// Starts a participant of `language` and waits until its node is last in the queue.
    fn join(&mut self, language: Language) {
        let n = &mut self.started[language as usize];
        let id = match language {
            Language::Curator => format!("curator-{n}"),
            Language::Lockkeeper => format!("rust-{n}"),
        };
        *n += 1;
        let connect = self.server.connect_string();
        let dir = self.dir().display().to_string();
        let process = match language {
            Language::Curator => {
                let mut jvm = Jvm::spawn("Latch", &[&connect, ELECTION, &dir, &id]);
                jvm.expect_line("READY", JVM_START);
                Process::Curator(jvm)
            }
            Language::Lockkeeper => Process::Lockkeeper(ChildProcess::spawn(
                TEST,
                "participant",
                &[
                    ("ZK_CONNECT", connect),
                    ("MARKER_DIR", dir),
                    ("PARTICIPANT_ID", id.clone()),
                ],
            )),
        };
        let deadline = Instant::now() + JVM_START;
        loop {
            let ids = self.ids();
            if ids.contains(&id) {
                assert_eq!(
                    ids.last(),
                    Some(&id),
                    "{id} did not queue at the back on {}",
                    self.on()
                );
                break;
            }
            assert!(
                Instant::now() < deadline,
                "{id} did not queue within {JVM_START:?} on {}: {ids:?}",
                self.on()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
        self.participants.push(Participant { id, process });
    }

    /// Waits until `deadline` for the first start after `mark` log lines: its log position,
    /// participant and time.
    fn next_start(&self, mark: usize, deadline: Instant) -> Option<(usize, String, u64)> {
        loop {
            let found = events(self.dir())
                .into_iter()
                .enumerate()
                .skip(mark)
                .find_map(|(at_line, e)| match e {
                    Event::Start { id, at } => Some((at_line, id, at)),
                    _ => None,
                });
            if found.is_some() {
                return found;
            }
            if Instant::now() > deadline {
                return None;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    /// After a change to `leader`, since log line `mark`: one settle period later it is still
    /// the only new leader, it holds the marker, and both languages name it.
    fn settle_on(&mut self, leader: &str, mark: usize) {
        std::thread::sleep(SETTLE);
        let on = self.on();
        let since = events(self.dir())[mark..].to_vec();
        let started: Vec<String> = starts(&since).into_iter().map(|(id, _)| id).collect();
        assert_eq!(started, [leader], "new leaders on {on}: {since:?}");
        assert!(
            !since.iter().any(|e| matches!(e, Event::End { .. })),
            "a leadership ended unasked on {on}: {since:?}"
        );
        assert_eq!(
            holder(self.dir()).as_deref(),
            Some(leader),
            "marker on {on}"
        );
        self.both_name(leader);
    }

    /// lockkeeper's `leader()` and Curator's `getLeader()` in every live JVM name `leader`,
    /// and lockkeeper's `candidates()` and Curator's `getParticipants()` list one queue.
    fn both_name(&mut self, leader: &str) {
        let on = self.on();
        let named = self
            .rt
            .block_on(async { tokio::time::timeout(STEP, self.observer.leader()).await });
        let named = named
            .unwrap_or_else(|_| panic!("no leader() within {STEP:?} on {on}"))
            .unwrap_or_else(|e| panic!("leader() on {on}: {e}"))
            .map(|c| c.id);
        assert_eq!(
            named.as_deref(),
            Some(leader),
            "lockkeeper's leader() on {on}"
        );
        let queue = self.ids().join(",");
        for participant in &mut self.participants {
            if let Process::Curator(jvm) = &mut participant.process {
                let named = curator_leader(jvm);
                assert_eq!(
                    named, leader,
                    "Curator's getLeader() in {} on {on}",
                    participant.id
                );
                let listed = ask(jvm, "participants");
                assert_eq!(
                    listed.strip_prefix("OK participants "),
                    Some(queue.as_str()),
                    "Curator's getParticipants() in {} on {on}",
                    participant.id
                );
            }
        }
    }

    /// Kills the leader with SIGKILL, checks its successor (see the module docs), and puts a
    /// fresh participant of the same language at the back. Returns the victim's language and
    /// the time from the kill to the new leader's start.
    fn kill_the_leader(&mut self) -> (Language, Duration) {
        let on = self.on();
        let queue = self.candidates();
        assert!(queue.len() >= 2, "nobody to take over on {on}: {queue:?}");
        let (leader, next) = (queue[0].id.clone(), queue[1].id.clone());
        // Whatever the language, a later term fences out an earlier one.
        assert!(
            queue[1].fencing_token > queue[0].fencing_token,
            "the successor's token is not above the leader's on {on}: {queue:?}"
        );
        assert_eq!(
            holder(self.dir()).as_deref(),
            Some(leader.as_str()),
            "marker on {on}"
        );
        let index = self
            .participants
            .iter()
            .position(|p| p.id == leader)
            .unwrap_or_else(|| panic!("the leader {leader} is none of ours on {on}"));
        let victim = self.participants.remove(index);
        let mark = events(self.dir()).len();

        let killed = Instant::now();
        let killed_ms = now_ms();
        let language = match victim.process {
            // Dropping a Jvm or a ChildProcess sends SIGKILL to its PID and reaps it.
            Process::Curator(jvm) => {
                drop(jvm);
                Language::Curator
            }
            Process::Lockkeeper(mut child) => {
                child.kill();
                Language::Lockkeeper
            }
        };

        // Its session lives on for now, and with it its node: both sides still name it.
        let earliest_expiry = killed + TIMEOUT - HEARTBEAT_SLACK;
        self.both_name(&leader);
        assert!(
            Instant::now() < earliest_expiry,
            "asking who leads took until past the earliest expiry on {on}"
        );
        // The dead leader's marker stands until its session may have expired.
        std::thread::sleep(earliest_expiry.saturating_duration_since(Instant::now()));
        if holder(self.dir()).as_deref() == Some(leader.as_str()) {
            append(self.dir(), &format!("expired {leader} {}", now_ms()));
            std::fs::remove_file(self.dir().join(MARKER)).expect("remove the dead leader's marker");
        }

        let bound = TIMEOUT + TICK * 2;
        // Polling goes a little past the bound, so a late leader is reported with its delay.
        let (_, new, at) = self
            .next_start(mark, killed + bound + TICK)
            .unwrap_or_else(|| panic!("no new leader after killing {leader} on {on}"));
        let delay = Duration::from_millis(at.saturating_sub(killed_ms));
        assert_eq!(
            new, next,
            "killing {leader} on {on}: the second in line must lead"
        );
        assert!(
            at >= killed_ms + (TIMEOUT - HEARTBEAT_SLACK).as_millis() as u64,
            "{new} led {delay:?} after {leader} was killed on {on}: its session may still have lived"
        );
        assert!(
            delay <= bound,
            "{new} led {delay:?} after {leader} was killed on {on}, beyond {bound:?}"
        );
        self.settle_on(&new, mark);
        assert!(
            !self.ids().contains(&leader),
            "{leader}'s node outlived its session on {on}"
        );
        self.join(language);
        (language, delay)
    }

    /// The leader steps down on purpose: a Curator one closes its latch, a lockkeeper one
    /// ends its `run` task (which resigns and queues again at the back). The next in line leads
    /// within a tick of the leader's end, not after a session timeout. Returns who stepped down
    /// and the time from the leader's end to the new leader's start.
    fn step_down(&mut self) -> (Language, Duration) {
        let on = self.on();
        let queue = self.ids();
        let (leader, next) = (queue[0].clone(), queue[1].clone());
        let mark = events(self.dir()).len();
        let dir = self.dir().to_owned();
        let participant = self
            .participants
            .iter_mut()
            .find(|p| p.id == leader)
            .unwrap_or_else(|| panic!("the leader {leader} is none of ours on {on}"));
        let language = match &mut participant.process {
            Process::Curator(jvm) => {
                assert_eq!(ask(jvm, "close"), "OK closed");
                Language::Curator
            }
            Process::Lockkeeper(_) => {
                std::fs::write(dir.join(format!("resign-{leader}")), b"")
                    .expect("ask the leader to resign");
                Language::Lockkeeper
            }
        };
        let (line, new, at) = self
            .next_start(mark, Instant::now() + STEP)
            .unwrap_or_else(|| panic!("no new leader after {leader} stepped down on {on}"));
        assert_eq!(new, next, "after {leader} stepped down on {on}");
        let ended = events(self.dir())[mark..].iter().find_map(|e| match e {
            Event::End { id, at } if *id == leader => Some(*at),
            _ => None,
        });
        let ended = ended.unwrap_or_else(|| panic!("{leader} never logged its end on {on}"));
        let gap = Duration::from_millis(at.saturating_sub(ended));
        assert!(
            gap <= TICK,
            "{new} led {gap:?} after {leader} stepped down on {on}"
        );
        if language == Language::Lockkeeper {
            // `run` queues again at the back, seen alike by both languages (`settle_on`).
            let deadline = Instant::now() + STEP;
            while self.ids().last() != Some(&leader) {
                assert!(
                    Instant::now() < deadline,
                    "{leader} did not queue again on {on}: {:?}",
                    self.ids()
                );
                std::thread::sleep(Duration::from_millis(20));
            }
        }
        // The leader's end comes before the new start: settle from the start on.
        self.settle_on(&new, line);
        (language, gap)
    }
}

/// Sends `command` to a Latch JVM and returns its reply, skipping its event lines.
fn ask(jvm: &mut Jvm, command: &str) -> String {
    jvm.send(command);
    let deadline = Instant::now() + STEP;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        let line = jvm.next_line(left.max(Duration::from_millis(1)));
        if line.starts_with("OK") {
            return line;
        }
        assert!(
            line.starts_with("LEADER ") || line.starts_with("NOTLEADER "),
            "{command:?} answered {line:?}\n{}",
            jvm.transcript()
        );
    }
}

/// Curator's `getLeader().getId()` in `jvm`.
fn curator_leader(jvm: &mut Jvm) -> String {
    let reply = ask(jvm, "leader");
    match reply.strip_prefix("OK leader ") {
        Some(id) => id.to_owned(),
        None => panic!("`leader` answered {reply:?}\n{}", jvm.transcript()),
    }
}

/// The whole run against `server`: join, [`KILLS`] kills, a graceful leave, no overlap.
fn one_election(server: &dyn TestServer) {
    let on = server.name();
    eprintln!("--- against {on}");
    let rt = runtime();
    let observer = rt.block_on(connect(server));
    let mut election = Election {
        server,
        observer: observer.leader_latch(ELECTION, "observer").expect("latch"),
        rt,
        markers: MarkerDir::new(&format!("election-{on}")),
        participants: Vec::new(),
        started: [0, 0],
    };
    // Alternating languages, so the kills alternate too.
    for language in [
        Language::Curator,
        Language::Lockkeeper,
        Language::Curator,
        Language::Lockkeeper,
    ] {
        election.join(language);
    }
    let first = election
        .next_start(0, Instant::now() + STEP)
        .unwrap_or_else(|| panic!("nobody led on {on}"));
    assert_eq!(first.1, "curator-0", "the first to queue leads on {on}");
    election.settle_on("curator-0", 0);

    let mut measured = Vec::new();
    for _ in 0..KILLS {
        measured.push(election.kill_the_leader());
    }
    // The queue now holds curator-2, rust-2, curator-3, rust-3: one graceful handover each way.
    let stepped = [election.step_down(), election.step_down()];
    assert_eq!(
        stepped.map(|(language, _)| language),
        [Language::Curator, Language::Lockkeeper],
        "the queue order on {on}"
    );

    let log = events(election.dir());
    let overlaps: Vec<&Event> = log
        .iter()
        .filter(|e| matches!(e, Event::Overlap { .. }))
        .collect();
    assert!(overlaps.is_empty(), "two leaders at once on {on}: {log:?}");
    let languages: Vec<Language> = measured.iter().map(|(l, _)| *l).collect();
    assert!(
        languages.contains(&Language::Curator) && languages.contains(&Language::Lockkeeper),
        "the kills should have hit both languages on {on}: {languages:?}"
    );
    eprintln!("{on}: kill -> new leader: {measured:?}; end -> start on stepping down: {stepped:?}");

    // The JVMs end on a closed stdin; the lockkeeper children are killed on drop.
    for participant in election.participants.drain(..) {
        if let Process::Curator(jvm) = participant.process {
            let done = jvm.finish(STEP);
            assert!(
                done.success && !done.lines.iter().any(|l| l.starts_with("FAIL")),
                "{} failed on {on}\n{}",
                participant.id,
                done.transcript
            );
        }
    }
    election.rt.block_on(observer.close());
}
