//! Child processes for multi-process tests: the test binary runs itself again, restricted to
//! the current test, with `LOCKKEEPER_CHILD` set. The test function checks the variable first
//! and plays the child's part when it is set, so no separate helper binary is needed. Used by
//! the ZooKeeper and the Redis lock tests alike.

use std::process::{Child, Command, Stdio};

/// The variable that tells a re-run test to play a child's part; its value is the role.
pub const ROLE_ENV: &str = "LOCKKEEPER_CHILD";

/// The role this process plays, if it is a child.
pub fn role() -> Option<String> {
    std::env::var(ROLE_ENV).ok()
}

/// A child process, killed (by PID) and reaped on drop.
pub struct ChildProcess {
    child: Child,
}

impl ChildProcess {
    /// Re-runs this test binary's test `test` (its full path, e.g. `processes::exclusion`) as a
    /// child with role `role` and the extra environment `env`.
    pub fn spawn(test: &str, role: &str, env: &[(&str, String)]) -> ChildProcess {
        let exe = std::env::current_exe().expect("current test binary");
        let mut command = Command::new(exe);
        command
            .args([test, "--exact", "--nocapture", "--test-threads", "1"])
            .env(ROLE_ENV, role)
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(Stdio::inherit());
        for (key, value) in env {
            command.env(key, value);
        }
        ChildProcess {
            child: command.spawn().expect("spawn child test process"),
        }
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Sends `signal` (e.g. `STOP`) to this child only.
    pub fn signal(&self, signal: &str) {
        crate::child::send_signal(self.pid(), signal);
    }

    /// Kills the child at once (SIGKILL) and reaps it.
    pub fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// Waits (bounded) for the child to exit; its success.
    pub fn wait_success(&mut self, limit: std::time::Duration) -> bool {
        match crate::child::wait_bounded(&mut self.child, limit) {
            Some(status) => status.success(),
            None => {
                self.kill();
                panic!("child {} did not exit within {limit:?}", self.pid());
            }
        }
    }
}

impl Drop for ChildProcess {
    fn drop(&mut self) {
        // SIGKILL ends a stopped (SIGSTOP) child too.
        self.kill();
    }
}
