//! Apache Curator's `InterProcessMutex`, measured from a JVM the benchmark starts.
//!
//! The benchmark binary carries `CuratorLockBench.java` (included at compile time), so
//! `lockkeeper-bench --locks` needs only a JDK and Debian's Curator jars: it compiles the program
//! with javac into a temporary directory and runs one JVM for the whole run. Commands go to the
//! JVM's stdin and results come back on its stdout, one line each (see the Java file), every
//! exchange bounded in time (the compiling and the exchange are [`crate::jvm`]'s). The JVM
//! is killed when its handle drops, when this process dies (the parent-death signal), and by its
//! own watchdog.

use std::path::Path;
use std::time::Duration;

use super::measure::{Contended, Uncontended};
use crate::BoxError;
use crate::jvm::{Classes, Jvm, START_LIMIT};

/// The Java program, carried by the binary.
const SOURCE: &str = include_str!("../CuratorLockBench.java");
const CLASS: &str = "CuratorLockBench";

/// The running JVM.
pub(super) struct CuratorJvm {
    jvm: Jvm,
    command: String,
    /// Holds the compiled class for as long as the JVM runs.
    _classes: Classes,
}

impl CuratorJvm {
    /// Compiles the program and starts it with `java`, ending itself after `watchdog`.
    pub(super) async fn start(
        java: &Path,
        classpath: &str,
        watchdog: Duration,
    ) -> Result<CuratorJvm, BoxError> {
        let classes = Classes::compile(java, classpath, CLASS, SOURCE).await?;
        let jvm = Jvm::start(java, &classes, &[watchdog.as_secs().max(1).to_string()]).await?;
        Ok(CuratorJvm {
            jvm,
            command: format!("{} (Curator InterProcessMutex)", classes.describe(java)),
            _classes: classes,
        })
    }

    /// The command line, printed so a reader knows what was measured.
    pub(super) fn describe(&self) -> &str {
        &self.command
    }

    /// Up to `cycles` acquire+release cycles on one session, or until `limit` passed, after
    /// up to `warmup_cycles` unmeasured ones within `warmup`.
    pub(super) async fn uncontended(
        &mut self,
        connect: &str,
        path: &str,
        warmup_cycles: u32,
        warmup: Duration,
        cycles: u32,
        limit: Duration,
    ) -> Result<Uncontended, BoxError> {
        let command = format!(
            "uncontended {connect} {path} {warmup_cycles} {} {cycles} {}",
            warmup.as_millis(),
            limit.as_millis()
        );
        let lines = self
            .jvm
            .exchange(&command, warmup + limit * 2 + START_LIMIT)
            .await?;
        let result = self.jvm.result(&lines)?;
        Ok(Uncontended {
            cycles: result.number("cycles")?,
            elapsed: result.micros("elapsed_us")?,
        })
    }

    /// `clients` sessions on one lock, each looping acquire -> release up to `cycles` times or
    /// until `limit` passed.
    pub(super) async fn contended(
        &mut self,
        connect: &str,
        path: &str,
        clients: usize,
        cycles: u32,
        limit: Duration,
    ) -> Result<Contended, BoxError> {
        let command = format!(
            "contended {connect} {path} {clients} {cycles} {}",
            limit.as_millis()
        );
        let lines = self.jvm.exchange(&command, limit * 2 + START_LIMIT).await?;
        let waits = self.jvm.micros(&lines, "WAITS")?;
        let result = self.jvm.result(&lines)?;
        let handoffs = result.number("cycles")?;
        if handoffs != waits.len() as u64 {
            return Err(self.jvm.failure(&format!(
                "{handoffs} handoffs but {} waits reported",
                waits.len()
            )));
        }
        Ok(Contended::from_waits(
            clients,
            &waits,
            result.micros("elapsed_us")?,
        ))
    }

    /// Asks the JVM to end and waits briefly; it is killed on drop if it does not.
    pub(super) async fn stop(self) {
        self.jvm.stop().await;
    }
}
