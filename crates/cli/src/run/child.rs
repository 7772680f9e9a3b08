//! Starting the child in a process group of its own, and signalling that group.

use std::ffi::OsString;
use std::os::unix::process::CommandExt;
use std::process::Stdio;

use crate::backend::Failure;

/// A started child: the leader of its process group.
pub(super) struct Running {
    child: tokio::process::Child,
    pid: i32,
    /// Set once reaped, so that `wait` can be asked again.
    code: Option<u8>,
}

/// The child's process group, addressed by the leader's pid.
#[derive(Clone, Copy, Debug)]
pub(super) struct Group {
    pgid: libc::pid_t,
}

/// Starts `argv` in a new process group with `env` added; stdio is inherited.
pub(super) fn spawn(argv: &[OsString], env: &[(&str, String)]) -> Result<Running, Failure> {
    let Some((program, args)) = argv.split_first() else {
        return Err(Failure::usage("no command to run"));
    };
    let mut command = std::process::Command::new(program);
    command
        .args(args)
        .envs(env.iter().map(|(k, v)| (k, v)))
        .stdin(Stdio::inherit())
        .stdout(Stdio::inherit())
        .stderr(Stdio::inherit())
        .process_group(0);
    let mut command = tokio::process::Command::from(command);
    // A child that outlives this process (which is SIGKILLed, say) is not killed with it:
    // it is the lock's end that stops it, when the backend gives the lock away.
    command.kill_on_drop(false);
    let child = command.spawn().map_err(|e| {
        Failure::software(format!("cannot start {:?}: {e}", program.to_string_lossy()))
    })?;
    let Some(pid) = child.id() else {
        return Err(Failure::software("the child exited before it had a pid"));
    };
    Ok(Running {
        child,
        pid: pid as i32,
        code: None,
    })
}

impl Running {
    pub(super) fn group(&self) -> Group {
        Group { pgid: self.pid }
    }

    /// Waits for the child to exit and reaps it: its exit code (128 + N for signal N).
    /// Cancel-safe; may be called again after it returned.
    pub(super) async fn wait(&mut self) -> u8 {
        if let Some(code) = self.code {
            return code;
        }
        let code = match self.child.wait().await {
            Ok(status) => super::status::exit_code(status),
            Err(e) => {
                eprintln!("lockkeeper: cannot wait for the child: {e}");
                crate::exit::SOFTWARE
            }
        };
        self.code = Some(code);
        code
    }
}

impl Group {
    /// Sends `signal` to every process of the group; a group that is gone is not an error.
    pub(super) fn signal(&self, signal: libc::c_int) {
        // SAFETY: kill(2) takes plain integers and touches no memory of ours.
        unsafe {
            libc::kill(-self.pgid, signal);
        }
    }

    /// True once no live process is left in the group. The leader must have been reaped
    /// first. Zombies do not count: an orphaned grandchild that died waits for init to reap
    /// it, and init in a container may never do so.
    pub(super) fn is_empty(&self) -> bool {
        // SAFETY: as above; signal 0 only checks that the group exists.
        let exists = unsafe { libc::kill(-self.pgid, 0) } == 0
            || std::io::Error::last_os_error().raw_os_error() != Some(libc::ESRCH);
        !exists || self.live_members() == Some(0)
    }

    /// How many members of the group are not zombies, from /proc; `None` if it is unreadable.
    fn live_members(&self) -> Option<usize> {
        let mut live = 0;
        for entry in std::fs::read_dir("/proc").ok()?.flatten() {
            let name = entry.file_name();
            if !name.to_string_lossy().bytes().all(|b| b.is_ascii_digit()) {
                continue;
            }
            // `pid (comm) state ppid pgrp ...`; comm may hold spaces and parentheses, so the
            // fields are counted from the last ')'.
            let Ok(stat) = std::fs::read_to_string(entry.path().join("stat")) else {
                continue; // exited meanwhile
            };
            let Some((_, fields)) = stat.rsplit_once(')') else {
                continue;
            };
            let mut fields = fields.split_whitespace();
            let state = fields.next();
            let pgrp = fields.nth(1).and_then(|p| p.parse::<libc::pid_t>().ok());
            if pgrp == Some(self.pgid) && state != Some("Z") && state != Some("X") {
                live += 1;
            }
        }
        Some(live)
    }
}
