//! Clock jumps on a server: our own `LD_PRELOAD` library (`shim/wallclock.c`, embedded here
//! and compiled with the system `cc` on first use) shifts a running redis-server's wall clock
//! by the whole seconds written in an offset file, and [`ServerClock::jump`] rewrites that file.
//!
//! libfaketime (see `clock.rs`) cannot do this for a server: Debian's redis-server is linked
//! with jemalloc, which calls `clock_gettime` while libfaketime initialises, and the server
//! never answers. The shim has nothing to initialise: it reads the real clocks by system call,
//! never allocates and never calls `dlsym`.
//!
//! Invariants:
//! - Only the wall clock moves (`CLOCK_REALTIME`, `CLOCK_REALTIME_COARSE`, `gettimeofday`,
//!   `time`); `CLOCK_MONOTONIC` and every other clock are the real ones, as on a machine
//!   whose clock is stepped by NTP or `date -s`.
//! - A jump takes effect within 100 ms: the server re-reads the file at most that often.
//! - The file is replaced atomically (write a sibling, rename), so the server never reads a
//!   half-written offset.
//! - The library is compiled at most once per directory per process, and published by rename,
//!   so a server never preloads a half-written library.

use std::collections::HashSet;
use std::ffi::OsString;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::Mutex;

use lockkeeper_testkit::NodeOptions;

/// The shim's C source, built into every binary that uses it so it runs from any directory.
const SOURCE: &str = include_str!("../shim/wallclock.c");

/// The environment variable naming the offset file (the shim's only setting).
pub(crate) const OFFSET_FILE_ENV: &str = "LOCKKEEPER_WALLCLOCK_FILE";

/// The compiled library's file name inside the directory given to [`build_shim`].
const LIBRARY: &str = "libwallclock.so";

/// Directories a library has been built into by this process.
static BUILT: Mutex<Option<HashSet<PathBuf>>> = Mutex::new(None);

/// Compiles the shim into `dir/libwallclock.so` with `cc -shared -fPIC -O2` (once per
/// directory per process) and returns the library's path. The error names `cc`, the source
/// file and the compiler's output.
pub(crate) fn build_shim(dir: &Path) -> Result<PathBuf, String> {
    let library = dir.join(LIBRARY);
    // Held while compiling: two callers for one directory must not both write it.
    let mut built = BUILT
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner);
    let built = built.get_or_insert_with(HashSet::new);
    if built.contains(dir) && library.exists() {
        return Ok(library);
    }
    let source = dir.join("wallclock.c");
    std::fs::write(&source, SOURCE).map_err(|e| {
        format!(
            "writing the wall-clock shim's source {}: {e}",
            source.display()
        )
    })?;
    let partial = dir.join(format!("{LIBRARY}.{}.tmp", std::process::id()));
    let output = Command::new("cc")
        .args(["-shared", "-fPIC", "-O2", "-o"])
        .arg(&partial)
        .arg(&source)
        .output()
        .map_err(|e| {
            format!(
                "running `cc` to compile {}: {e} (install Debian's gcc package)",
                source.display()
            )
        })?;
    if !output.status.success() {
        return Err(format!(
            "`cc -shared -fPIC -O2` failed to compile {} ({}): {}",
            source.display(),
            output.status,
            String::from_utf8_lossy(&output.stderr).trim()
        ));
    }
    std::fs::rename(&partial, &library).map_err(|e| {
        format!(
            "moving the compiled shim {} to {}: {e}",
            partial.display(),
            library.display()
        )
    })?;
    built.insert(dir.to_path_buf());
    Ok(library)
}

/// A wall clock a server can be started on and then stepped: the compiled shim plus one
/// offset file. Every process started with [`ServerClock::apply`] (or a [`RedisNode`] started
/// with [`ServerClock::node_options`]) follows the same file.
///
/// [`RedisNode`]: lockkeeper_testkit::RedisNode
#[derive(Clone, Debug)]
pub(crate) struct ServerClock {
    library: PathBuf,
    file: PathBuf,
}

impl ServerClock {
    /// A clock whose offset file is `file`, starting at the real time (`+0`); the shim is
    /// compiled into `file`'s directory.
    pub(crate) fn new(file: PathBuf) -> Result<ServerClock, String> {
        let dir = match file.parent() {
            Some(dir) if !dir.as_os_str().is_empty() => dir,
            _ => Path::new("."),
        };
        let library = build_shim(dir)?;
        let clock = ServerClock { library, file };
        clock
            .jump(0)
            .map_err(|e| format!("writing the clock file {}: {e}", clock.file.display()))?;
        Ok(clock)
    }

    /// The environment that makes a program follow this clock: `LD_PRELOAD` and the file.
    pub(crate) fn env(&self) -> [(&'static str, OsString); 2] {
        [
            ("LD_PRELOAD", self.library.clone().into_os_string()),
            (OFFSET_FILE_ENV, self.file.clone().into_os_string()),
        ]
    }

    /// Makes `command` follow this clock.
    pub(crate) fn apply(&self, command: &mut Command) {
        command.envs(self.env());
    }

    /// `options` for a [`lockkeeper_testkit::RedisNode`] that follows this clock, across
    /// restarts too.
    pub(crate) fn node_options(&self, options: NodeOptions) -> NodeOptions {
        self.env()
            .into_iter()
            .fold(options, |options, (key, value)| options.env(key, value))
    }

    /// Steps the followers' wall clock to `seconds` ahead of real time (negative: behind;
    /// 0: back to real time). They see it within 100 ms.
    pub(crate) fn jump(&self, seconds: i64) -> std::io::Result<()> {
        let mut partial = self.file.clone().into_os_string();
        partial.push(".tmp");
        std::fs::write(&partial, format!("{seconds:+}\n"))?;
        std::fs::rename(&partial, &self.file)
    }
}
