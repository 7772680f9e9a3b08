//! Curator's `DistributedAtomicLong`, `LeaderLatch` and `DistributedQueue`, measured from one
//! JVM the benchmark starts (`CuratorRecipeBench.java` in `commands` mode, compiled by [`crate::jvm`]).
//! Every exchange is bounded in time; the JVM is killed when its handle drops, when this process
//! dies, and by its own watchdog. The failover participants run in JVMs of their own (see
//! [`super::failover`]).

use std::path::Path;
use std::time::Duration;

use super::CounterRetry;
use super::measure::{GRANT_LIMIT, Handoffs, Increments};
use super::queue::{DRAIN_LIMIT, Queued, Shape};
use crate::BoxError;
use crate::jvm::{Classes, Jvm, START_LIMIT};

/// Session timeout of the JVM's counter and handoff sessions, as lockkeeper's side asks for
/// (see `locks::open`): long, so that a scheduling hiccup on a loaded machine loses nothing.
const SESSION_TIMEOUT: Duration = Duration::from_secs(30);

/// The running command JVM.
pub(super) struct CuratorRecipeJvm {
    jvm: Jvm,
    command: String,
}

impl CuratorRecipeJvm {
    /// Starts the compiled program in `commands` mode, ending itself after `watchdog`.
    pub(super) async fn start(
        java: &Path,
        classes: &Classes,
        watchdog: Duration,
    ) -> Result<CuratorRecipeJvm, BoxError> {
        let args = [
            "commands".to_string(),
            watchdog.as_secs().max(1).to_string(),
            SESSION_TIMEOUT.as_millis().to_string(),
        ];
        let jvm = Jvm::start(java, classes, &args).await?;
        Ok(CuratorRecipeJvm {
            jvm,
            command: format!(
                "{} commands (Curator DistributedAtomicLong, LeaderLatch, DistributedQueue)",
                classes.describe(java)
            ),
        })
    }

    /// The command line, printed so a reader knows what was measured.
    pub(super) fn describe(&self) -> &str {
        &self.command
    }

    /// `sessions` sessions incrementing one `DistributedAtomicLong`, up to `increments` each or
    /// until `limit` passed, retrying as `retry` says.
    pub(super) async fn counter(
        &mut self,
        connect: &str,
        path: &str,
        sessions: usize,
        increments: u32,
        retry: CounterRetry,
        limit: Duration,
    ) -> Result<Increments, BoxError> {
        let command = format!(
            "counter {connect} {path} {sessions} {increments} {} {}",
            limit.as_millis(),
            retry.name()
        );
        let lines = self.jvm.exchange(&command, limit * 2 + START_LIMIT).await?;
        let result = self.jvm.result(&lines)?;
        Ok(Increments {
            sessions,
            increments: result.number("increments")?,
            elapsed: result.micros("elapsed_us")?,
            tries: Some(result.number("tries")?),
        })
    }

    /// `participants` sessions in one `LeaderLatch` election, the leader closing its latch and
    /// joining again with a new one, up to `handoffs` handoffs or until `limit` passed.
    pub(super) async fn handoff(
        &mut self,
        connect: &str,
        path: &str,
        participants: usize,
        handoffs: u32,
        limit: Duration,
    ) -> Result<Handoffs, BoxError> {
        let command = format!(
            "handoff {connect} {path} {participants} {handoffs} {}",
            limit.as_millis()
        );
        let lines = self
            .jvm
            .exchange(&command, limit + GRANT_LIMIT * 2 + START_LIMIT)
            .await?;
        let gaps = self.jvm.micros(&lines, "GAPS")?;
        let result = self.jvm.result(&lines)?;
        let count = result.number("handoffs")?;
        if count != gaps.len() as u64 {
            return Err(self.jvm.failure(&format!(
                "{count} handoffs but {} gaps reported",
                gaps.len()
            )));
        }
        Ok(Handoffs {
            participants,
            gaps,
            elapsed: result.micros("elapsed_us")?,
        })
    }

    /// One run of a `DistributedQueue` at `path` (see [`super::queue`]), consumed at least once
    /// with the lock path `<path>-locks`; fails unless every item came exactly once.
    pub(super) async fn queue(
        &mut self,
        connect: &str,
        path: &str,
        shape: Shape,
        limit: Duration,
    ) -> Result<Queued, BoxError> {
        let Shape {
            producers,
            consumers,
            items,
        } = shape;
        let command = format!(
            "queue {connect} {path} {producers} {consumers} {items} {}",
            limit.as_millis()
        );
        let lines = self
            .jvm
            .exchange(&command, limit + DRAIN_LIMIT * 2 + START_LIMIT)
            .await?;
        let result = self.jvm.result(&lines)?;
        let (consumed, produced) = (result.number("items")?, result.number("produced")?);
        let distinct = result.number("distinct")?;
        if consumed != produced || distinct != produced {
            return Err(format!(
                "queue {path}: of {produced} items produced, {distinct} distinct ones were \
                 consumed, {consumed} consumptions in all"
            )
            .into());
        }
        Ok(Queued {
            producers,
            consumers,
            items: consumed,
            elapsed: result.micros("elapsed_us")?,
        })
    }

    /// Asks the JVM to end and waits briefly; it is killed on drop if it does not.
    pub(super) async fn stop(self) {
        self.jvm.stop().await;
    }
}
