//! Running a task as leader (what Curator's `LeaderSelector` is for): the task runs only
//! while this participant leads, and is dropped the moment it can no longer be sure it does.
//!
//! Dropping is the cancellation: an async task stops at its next await, so a leader's work
//! should await between its steps (and pass the term's fencing token with every write, which
//! is what stops a step already in flight when the leadership was lost).

use std::future::Future;

use crate::error::{Error, Result};
use crate::zk::leader::{LeaderLatch, LeaderTerm};
use crate::zk::session::ConnectionState;

impl LeaderLatch {
    /// Leads once: waits for the turn, runs `task` while leading, then resigns. `Some` with
    /// the task's output if it finished while leading; `None` if leadership was lost first
    /// (the task's future was dropped at that moment).
    ///
    /// ```no_run
    /// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
    /// let latch = session.leader_latch("/jobs/compaction", "worker-7")?;
    /// let done = latch
    ///     .run_once(|term| async move {
    ///         println!("compacting with fencing token {}", term.fencing_token());
    ///         // ... each write carries term.fencing_token()
    ///     })
    ///     .await?;
    /// if done.is_none() {
    ///     eprintln!("leadership was lost before the compaction finished");
    /// }
    /// # Ok(()) }
    /// ```
    pub async fn run_once<F, Fut, T>(&self, task: F) -> Result<Option<T>>
    where
        F: FnOnce(LeaderTerm) -> Fut,
        Fut: Future<Output = T>,
    {
        let leadership = self.lead().await?;
        let term = leadership.term();
        let outcome = tokio::select! {
            output = task(term) => Some(output),
            () = leadership.lost() => None,
        };
        match leadership.resign().await {
            Ok(()) | Err(Error::NotLeader) => Ok(outcome),
            Err(err) => {
                tracing::error!(
                    path = self.path(),
                    %err,
                    "resigning after a leader task failed; the latch node stays until the session ends"
                );
                Err(err)
            }
        }
    }

    /// Leads over and over: every time this participant leads, runs `task` with that term;
    /// when the task returns or leadership is lost (the task is then dropped), resigns and
    /// queues again at the back. Session losses and connection trouble do not end it: it
    /// queues again once connected, in the next session if need be.
    ///
    /// Returns `Ok(())` once the session is [closed](crate::zk::Session::close), or the first
    /// error that retrying cannot cure.
    ///
    /// ```no_run
    /// # async fn demo(session: lockkeeper::zk::Session) -> lockkeeper::Result<()> {
    /// let latch = session.leader_latch("/services/scheduler/leader", "scheduler-a")?;
    /// latch
    ///     .run(|term| async move {
    ///         loop {
    ///             // one scheduling round, its writes fenced by term.fencing_token()
    ///             tokio::time::sleep(std::time::Duration::from_secs(1)).await;
    ///         }
    ///     })
    ///     .await?;
    /// # Ok(()) }
    /// ```
    pub async fn run<F, Fut>(&self, mut task: F) -> Result<()>
    where
        F: FnMut(LeaderTerm) -> Fut,
        Fut: Future<Output = ()>,
    {
        let mut failures = 0;
        loop {
            match self.run_once(&mut task).await {
                Ok(_) => failures = 0,
                Err(Error::SessionLost) if self.session.state() == ConnectionState::Closed => {
                    return Ok(());
                }
                // The session ended while waiting or leading: the next one is being connected,
                // and `lead` waits for it.
                Err(Error::SessionLost) => {}
                Err(err @ Error::RetriesExhausted { .. }) => {
                    failures += 1;
                    let pause = self.session.generation().retry_policy().delay(failures);
                    tracing::warn!(path = self.path(), %err, ?pause, "leader election interrupted; queueing again");
                    tokio::time::sleep(pause).await;
                }
                Err(err) => return Err(err),
            }
        }
    }
}
