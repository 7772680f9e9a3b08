//! Clock jumps with libfaketime (Debian's `faketime` package): a program started with
//! `LD_PRELOAD=libfaketime.so.1` and `FAKETIME_TIMESTAMP_FILE` reads its clock offset from
//! that file, so the suite steps a running client's clock by rewriting the file.
//!
//! Only clients get one: Debian's redis-server is linked with jemalloc, which calls
//! `clock_gettime` while libfaketime initialises, and libfaketime 0.9.10 then cannot start
//! the server (it reports unexpected recursive calls and Redis never answers), so a jump on a
//! Redis server cannot be injected this way: `shim.rs` does that with a library of our own.
//!
//! Invariants:
//! - Only the wall clock is faked (`FAKETIME_DONT_FAKE_MONOTONIC=1`): a jump models an NTP
//!   step or an operator's `date -s`, which move the wall clock and never the monotonic one.
//! - The offset is re-read at most a second late (`FAKETIME_CACHE_DURATION=1`), so a jump
//!   takes effect within a second of [`FakeClock::jump`].

use std::path::{Path, PathBuf};
use std::process::Command;

/// Where Debian's `libfaketime` package puts the library.
pub(crate) const LIBFAKETIME: &str = "/usr/lib/x86_64-linux-gnu/faketime/libfaketime.so.1";

/// How far a clock jump steps a clock, in seconds: far past every lease and session.
pub(crate) const CLOCK_JUMP: i64 = 60;

/// One offset file: whoever was started with [`FakeClock::apply`] follows it.
#[derive(Debug)]
pub(crate) struct FakeClock {
    file: PathBuf,
}

impl FakeClock {
    /// A clock file at `file`, starting at the real time.
    pub(crate) fn new(file: PathBuf) -> std::io::Result<FakeClock> {
        std::fs::write(&file, "+0\n")?;
        Ok(FakeClock { file })
    }

    /// Sets the environment that makes `command` follow this clock. Errors if libfaketime is
    /// not installed, naming the package.
    pub(crate) fn apply(&self, command: &mut Command) -> Result<(), String> {
        if !Path::new(LIBFAKETIME).exists() {
            return Err(format!(
                "{LIBFAKETIME} is missing: install Debian's faketime package (scripts/test does)"
            ));
        }
        command
            .env("LD_PRELOAD", LIBFAKETIME)
            .env("FAKETIME_TIMESTAMP_FILE", &self.file)
            .env("FAKETIME_CACHE_DURATION", "1")
            .env("FAKETIME_DONT_FAKE_MONOTONIC", "1");
        Ok(())
    }

    /// Steps the wall clock to `seconds` ahead of real time (negative: behind).
    pub(crate) fn jump(&self, seconds: i64) -> std::io::Result<()> {
        std::fs::write(&self.file, format!("{seconds:+}\n"))
    }
}
