//! The data dir lock: one server per data directory, for the server's whole life.
//!
//! Two servers appending to one log would interleave records and each believe its own state, so
//! a server takes an exclusive advisory lock (flock(2)) on `DATA_DIR/lock` before it reads or
//! repairs anything, and holds it until its core, log writer and snapshot writer are gone. The
//! kernel drops a flock with the last descriptor of the open file, so a server killed with
//! SIGKILL never leaves the directory locked: the next one starts at once.
//!
//! Invariants:
//! - A server that cannot take the lock touches nothing in the directory: it opens the lock file
//!   (creating it only if it is missing) and reads the holder's pid from it, nothing else.
//! - The lock file holds the holder's pid, written only after the lock is taken. It says who
//!   holds the directory; it is never what decides whether it is held (a stale file left by a
//!   killed server locks nothing).
//! - flock locks belong to the open file, not the process, so a second server in the same
//!   process (the in-process test server restarted too early) is refused like any other.
//!
//! `lockkeeper verify` takes a *shared* lock with [`DataDirLock::shared`] for its run, so it
//! never reads a log a live server is writing, and no server starts (and repairs files) under it.

use std::fs::{File, OpenOptions};
use std::io::{self, Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};

/// The lock file's name inside the data dir.
pub const LOCK_FILE: &str = "lock";

/// The data dir is held by another process.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InUse {
    /// The data dir asked for.
    pub dir: PathBuf,
    /// The holder's pid as its lock file says, if it says one (a holder that has just taken the
    /// lock may not have written it yet).
    pub pid: Option<u32>,
}

impl std::fmt::Display for InUse {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "data dir {} is in use by another lockkeeper server",
            self.dir.display()
        )?;
        match self.pid {
            Some(pid) => write!(f, " (pid {pid})"),
            None => write!(f, " (pid unknown)"),
        }
    }
}

impl std::error::Error for InUse {}

/// Why a lock could not be taken.
#[derive(Debug, thiserror::Error)]
pub enum LockError {
    /// Another process holds the data dir.
    #[error(transparent)]
    InUse(#[from] InUse),
    /// The lock file could not be opened, locked or written.
    #[error("cannot lock data dir {}: {source}", path.display())]
    Io {
        /// The lock file.
        path: PathBuf,
        /// What the system said.
        source: io::Error,
    },
}

impl From<LockError> for io::Error {
    /// `InUse` keeps its type (`ErrorKind::ResourceBusy`), so a caller can tell it apart by
    /// downcasting; anything else keeps its kind, with the path in the message.
    fn from(e: LockError) -> io::Error {
        match e {
            LockError::InUse(in_use) => io::Error::new(io::ErrorKind::ResourceBusy, in_use),
            LockError::Io { ref source, .. } => io::Error::new(source.kind(), e.to_string()),
        }
    }
}

/// A held lock on a data dir; released when dropped (or when the process dies).
#[derive(Debug)]
pub struct DataDirLock {
    /// Keeping the file open is what keeps the lock.
    _file: File,
}

impl DataDirLock {
    /// Takes the exclusive lock of a server on `dir` (created if missing) and records this
    /// process's pid in it. Never waits: a held lock is [`LockError::InUse`] at once.
    pub fn exclusive(dir: &Path) -> Result<DataDirLock, LockError> {
        let path = dir.join(LOCK_FILE);
        let io = |source| LockError::Io {
            path: path.clone(),
            source,
        };
        std::fs::create_dir_all(dir).map_err(io)?;
        // No truncate: the pid of a live holder must stay readable to whoever is refused.
        let mut file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .map_err(io)?;
        if !try_flock(&file, libc::LOCK_EX).map_err(io)? {
            return Err(in_use(dir, &mut file).into());
        }
        file.set_len(0).map_err(io)?;
        file.seek(SeekFrom::Start(0)).map_err(io)?;
        writeln!(file, "{}", std::process::id()).map_err(io)?;
        Ok(DataDirLock { _file: file })
    }

    /// Takes a shared lock on `dir` for a reader that changes nothing (`lockkeeper verify`).
    /// `Ok(None)` if the directory has no lock file: no server has ever run on it (or only one
    /// from before the lock existed), and a reader must not create files.
    pub fn shared(dir: &Path) -> Result<Option<DataDirLock>, LockError> {
        let path = dir.join(LOCK_FILE);
        let mut file = match File::open(&path) {
            Ok(file) => file,
            Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(None),
            Err(source) => return Err(LockError::Io { path, source }),
        };
        match try_flock(&file, libc::LOCK_SH) {
            Ok(true) => Ok(Some(DataDirLock { _file: file })),
            Ok(false) => Err(in_use(dir, &mut file).into()),
            Err(source) => Err(LockError::Io { path, source }),
        }
    }
}

/// `flock(fd, op | LOCK_NB)`: true when taken, false when someone else holds a conflicting lock.
fn try_flock(file: &File, op: libc::c_int) -> io::Result<bool> {
    loop {
        // SAFETY: flock on a descriptor this `File` owns and keeps open for the call.
        let rc = unsafe { libc::flock(file.as_raw_fd(), op | libc::LOCK_NB) };
        if rc == 0 {
            return Ok(true);
        }
        let e = io::Error::last_os_error();
        match e.raw_os_error() {
            Some(libc::EWOULDBLOCK) => return Ok(false),
            Some(libc::EINTR) => continue,
            _ => return Err(e),
        }
    }
}

/// Who holds `dir`, from its lock file. A holder writes its pid right after taking the lock, so
/// an empty file is read again a few times before the pid is reported unknown.
fn in_use(dir: &Path, file: &mut File) -> InUse {
    let mut pid = None;
    for _ in 0..20 {
        let mut text = String::new();
        let read = file
            .seek(SeekFrom::Start(0))
            .and_then(|_| file.read_to_string(&mut text));
        pid = read.ok().and_then(|_| text.trim().parse().ok());
        if pid.is_some() {
            break;
        }
        std::thread::sleep(std::time::Duration::from_millis(5));
    }
    InUse {
        dir: dir.to_path_buf(),
        pid,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_second_exclusive_lock_is_refused_with_the_holders_pid() {
        let dir = tempfile::tempdir().unwrap();
        let held = DataDirLock::exclusive(dir.path()).unwrap();
        match DataDirLock::exclusive(dir.path()) {
            Err(LockError::InUse(in_use)) => {
                assert_eq!(in_use.pid, Some(std::process::id()));
                assert_eq!(in_use.dir, dir.path());
                let message = in_use.to_string();
                assert!(
                    message.contains(&dir.path().display().to_string()),
                    "{message}"
                );
                assert!(message.contains(&format!("pid {}", std::process::id())));
            }
            other => panic!("expected InUse, got {other:?}"),
        }
        drop(held);
        DataDirLock::exclusive(dir.path()).expect("free again once dropped");
    }

    #[test]
    fn readers_share_and_exclude_a_server() {
        let dir = tempfile::tempdir().unwrap();
        assert!(DataDirLock::shared(dir.path()).unwrap().is_none());
        assert!(
            !dir.path().join(LOCK_FILE).exists(),
            "a reader creates nothing"
        );
        drop(DataDirLock::exclusive(dir.path()).unwrap());
        let reader = DataDirLock::shared(dir.path())
            .unwrap()
            .expect("a lock file");
        let second = DataDirLock::shared(dir.path()).unwrap();
        assert!(second.is_some());
        assert!(matches!(
            DataDirLock::exclusive(dir.path()),
            Err(LockError::InUse(_))
        ));
        drop((reader, second));
        let server = DataDirLock::exclusive(dir.path()).unwrap();
        assert!(matches!(
            DataDirLock::shared(dir.path()),
            Err(LockError::InUse(InUse { pid: Some(_), .. }))
        ));
        drop(server);
    }

    #[test]
    fn in_use_converts_to_a_busy_io_error_that_keeps_its_type() {
        let e: io::Error = LockError::InUse(InUse {
            dir: PathBuf::from("/x"),
            pid: Some(7),
        })
        .into();
        assert_eq!(e.kind(), io::ErrorKind::ResourceBusy);
        let inner = e.get_ref().and_then(|i| i.downcast_ref::<InUse>());
        assert_eq!(inner.map(|i| i.pid), Some(Some(7)));
        assert_eq!(
            e.to_string(),
            "data dir /x is in use by another lockkeeper server (pid 7)"
        );
    }
}
