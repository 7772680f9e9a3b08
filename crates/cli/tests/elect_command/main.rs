//! `lockkeeper elect` as operators run it: real processes of the built binary and Curator
//! `LeaderLatch` JVMs (`curator/ElectInterop.java`) in one election, against Keeper and Apache
//! ZooKeeper.
//!
//! Three command participants and two Curator participants queue in a known order; each
//! leader holds a marker file created exclusively (O_EXCL), so two leaders at once leave a
//! line in a violations file. The leader is SIGKILLed four times (command and Curator
//! participants alike, with whatever the dead leader was running) and the next one in line must
//! take over once the dead session expires; a `--listen` process must print every change of
//! leader with a rising token. `--once` exits 76 when its leadership is taken away, after
//! stopping its command, and says why. A leader whose server freezes exits 76 naming the
//! server unheard (`loss`); `--timeout` and `--try` end the wait with 75 when someone else
//! leads and 69 when the server is gone (`timeout`). Every wait is bounded.

#[allow(dead_code)]
#[path = "../../../lockkeeper/tests/curator/jvm.rs"]
mod jvm;
/// Keeper as a process of its own (`lockkeeper serve`), which a test can SIGKILL or SIGSTOP
/// (the module allows its own unused parts).
#[path = "../support/mod.rs"]
mod keeper_process;
mod loss;
mod support;
mod timeout;

use std::path::Path;

use jvm::Jvm;
use lockkeeper::zk::Session;
use lockkeeper_testkit::both;

use crate::support::{Cli, LIMIT, assert_says, queued, read, runtime, wait_until};

/// What each command participant runs while it leads: it takes the marker exclusively (or
/// records the clash), notes its term (id, token, its pid: the group to kill with it), and on
/// SIGTERM gives the marker back and exits 0.
const LEADER_SCRIPT: &str = r#"
mine=0
trap '[ $mine = 1 ] && rm -f "$MARKERS/leader"; exit 0' TERM
if (set -C; echo "$LOCKKEEPER_LEADER_ID" > "$MARKERS/leader") 2>/dev/null; then mine=1; else
  echo "$LOCKKEEPER_LEADER_ID leads while the marker is held" >> "$MARKERS/violations"; fi
echo "$LOCKKEEPER_LEADER_ID $LOCKKEEPER_FENCING_TOKEN $$" >> "$MARKERS/terms"
while :; do sleep 0.1; done
"#;

enum Participant {
    Cli(Cli),
    Curator(Jvm),
}

/// The line `LEADER_SCRIPT` of leader `id` noted in `terms` (its id, token and pid), if any.
fn term_of(markers: &Path, id: &str) -> Option<String> {
    read(&markers.join("terms"))
        .lines()
        .find(|line| line.starts_with(&format!("{id} ")))
        .map(str::to_owned)
}

#[test]
fn one_leader_at_a_time_across_cli_and_curator_with_failover_on_sigkill() {
    let rt = runtime();
    for server in both() {
        let name = server.name();
        eprintln!("--- against {name}");
        let connect = server.connect_string();
        let backend = format!("zk://{connect}");
        let dir = tempfile::tempdir().expect("marker dir");
        let markers = dir.path();
        let path = "/elect/e";
        let session = rt.block_on(Session::connect(&connect)).expect("session");

        let listen = Cli::spawn(&["elect", "--backend", &backend, "--listen", path], markers);
        assert_eq!(listen.line(LIMIT), "no leader", "{name}");

        let order = ["cli-1", "cur-1", "cli-2", "cur-2", "cli-3"];
        let mut participants = Vec::new();
        for (n, id) in order.iter().enumerate() {
            let participant = if id.starts_with("cli") {
                Participant::Cli(Cli::spawn(
                    &[
                        "elect",
                        "--backend",
                        &backend,
                        "--id",
                        id,
                        "--session-timeout",
                        "4s",
                        "--kill-after",
                        "2s",
                        path,
                        "--",
                        "sh",
                        "-c",
                        LEADER_SCRIPT,
                    ],
                    markers,
                ))
            } else {
                let markers = markers.to_str().expect("utf-8 temp path");
                let mut jvm = Jvm::spawn("ElectInterop", &[&connect, path, markers, id]);
                assert_eq!(jvm.next_line(LIMIT), "READY", "{}", jvm.transcript());
                Participant::Curator(jvm)
            };
            participants.push(Some(participant));
            wait_until(&format!("{name}: {id} queued"), || {
                queued(&rt, &session, path) == n + 1
            });
        }

        // Each leader in turn holds the marker, then dies by SIGKILL with what it ran.
        for (n, id) in order.iter().enumerate().take(4) {
            wait_until(&format!("{name}: {id} leads"), || {
                read(&markers.join("leader")).trim() == *id
            });
            assert_eq!(read(&markers.join("violations")), "", "{name}");
            match participants[n].take() {
                Some(Participant::Cli(cli)) => {
                    // The script notes its term just after taking the marker.
                    wait_until(&format!("{name}: {id} notes its term"), || {
                        term_of(markers, id).is_some()
                    });
                    cli.signal(libc::SIGKILL);
                    let term = term_of(markers, id).expect("the term was noted");
                    let pid: libc::pid_t = term
                        .rsplit(' ')
                        .next()
                        .and_then(|pid| pid.parse().ok())
                        .expect("the term names its pid");
                    // The command outlives a SIGKILLed supervisor (its own group): kill it too,
                    // as a machine that died would have.
                    // SAFETY: kill(2) on the process group the dead participant started.
                    unsafe { libc::kill(-pid, libc::SIGKILL) };
                }
                // Dropping the JVM SIGKILLs it.
                Some(Participant::Curator(jvm)) => drop(jvm),
                None => unreachable!("each participant leads once"),
            }
            // Nobody else can lead before the dead session expires: the marker is free by then.
            std::fs::remove_file(markers.join("leader")).expect("remove the dead leader's marker");
        }

        // The last one resigns when its command ends on SIGTERM: exit 0, marker given back.
        wait_until(&format!("{name}: cli-3 leads"), || {
            read(&markers.join("leader")).trim() == "cli-3"
        });
        let Some(Participant::Cli(mut last)) = participants.pop().flatten() else {
            panic!("cli-3 is a command participant");
        };
        // Its term is noted after its trap is set and the marker is known to be its own: a
        // SIGTERM before then would end the script before it could give the marker back.
        wait_until(&format!("{name}: cli-3 notes its term"), || {
            term_of(markers, "cli-3").is_some()
        });
        last.signal(libc::SIGTERM);
        assert_eq!(
            last.exit_code(LIMIT),
            Some(0),
            "{name}: the command's own code"
        );
        assert_eq!(
            read(&markers.join("leader")),
            "",
            "{name}: marker given back"
        );
        assert_eq!(read(&markers.join("violations")), "", "{name}");

        // --listen saw every leader, in order, with rising tokens, then nobody.
        let mut previous = 0u64;
        let mut printed = Vec::new();
        for id in order {
            let line = listen.line(LIMIT);
            let words: Vec<&str> = line.split(' ').collect();
            assert_eq!(words[..2], ["leader", id], "{name}: {line}");
            let token: u64 = words[3].parse().expect("a token");
            assert!(token > previous, "{name}: tokens rise: {line}");
            previous = token;
            printed.push(format!("{id} {token}"));
        }
        assert_eq!(listen.line(LIMIT), "no leader", "{name}");
        listen.signal(libc::SIGINT);
        let mut listen = listen;
        assert_eq!(listen.exit_code(LIMIT), Some(0), "{name}");
        // The command participants' tokens are the ones --listen printed for them.
        let terms = read(&markers.join("terms"));
        assert_eq!(
            terms.lines().count(),
            3,
            "{name}: one term per command participant\n{terms}"
        );
        for term in terms.lines() {
            let (id_token, _pid) = term.rsplit_once(' ').expect("id token pid");
            assert!(
                printed.iter().any(|p| p == id_token),
                "{name}: {term} vs {printed:?}"
            );
        }
        rt.block_on(session.close());
    }
}

#[test]
fn once_exits_76_when_leadership_is_taken_and_redis_is_refused() {
    let rt = runtime();
    for server in both() {
        let name = server.name();
        let connect = server.connect_string();
        let backend = format!("zk://{connect}");
        let dir = tempfile::tempdir().expect("temp dir");
        let pidfile = dir.path().join("pid");
        let envfile = dir.path().join("env");
        let script = format!(
            "echo \"$LOCKKEEPER_BACKEND $LOCKKEEPER_LEADER_ID $LOCKKEEPER_FENCING_TOKEN \
             $LOCKKEEPER_LEADER_NODE\" > {}; \
             echo $$ > {}; trap 'exit 3' TERM; while :; do sleep 0.1; done",
            envfile.display(),
            pidfile.display()
        );
        let mut cli = Cli::spawn(
            &[
                "elect",
                "--backend",
                &backend,
                "--once",
                "--id",
                "solo",
                "/elect/once",
                "--",
                "sh",
                "-c",
                &script,
            ],
            dir.path(),
        );
        wait_until(&format!("{name}: the command runs"), || {
            !read(&pidfile).trim().is_empty()
        });
        let pid: libc::pid_t = read(&pidfile).trim().parse().expect("pid");
        // Take the leadership away: delete the leader's node, as `revoke --force` would.
        let session = rt.block_on(Session::connect(&connect)).expect("session");
        let inspection = rt
            .block_on(session.inspect("/elect/once"))
            .expect("inspect");
        let holder = inspection.holders().next().expect("a leader");
        assert_eq!(
            read(&envfile).trim(),
            format!("{backend} solo {} {}", holder.fencing_token, holder.path),
            "{name}: the command's environment"
        );
        let leader = holder.path.clone();
        rt.block_on(session.client().expect("client").delete(&leader, None))
            .expect("delete the leader's node");
        assert_eq!(cli.exit_code(LIMIT), Some(76), "{name}: --once on loss");
        // The cause is the deletion, not this process or its session.
        assert_says(
            name,
            &cli.stderr(),
            &[&format!("{leader} was deleted by another client")],
            &["paused", "expired", "local deadline"],
        );
        // SAFETY: kill(2) with signal 0 only asks whether the pid still exists.
        let alive = unsafe { libc::kill(pid, 0) } == 0;
        assert!(!alive, "{name}: the command was stopped and reaped");
        rt.block_on(session.close());
    }
    let mut redis = Cli::spawn(
        &[
            "elect",
            "--backend",
            "redis://127.0.0.1:1",
            "/x",
            "--",
            "true",
        ],
        Path::new("/"),
    );
    assert_eq!(
        redis.exit_code(LIMIT),
        Some(64),
        "a Redis backend is a usage error"
    );
}
