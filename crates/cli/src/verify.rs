//! `lockkeeper verify DATA_DIR`: checks a data dir offline, changing nothing.
//!
//! It runs the same recovery the server runs at start, without truncating anything, and says
//! per file what it found. Exit status: 0 when the data dir is sound (a torn tail, which the
//! server would cut off, counts as sound and is reported), 1 on corruption, 2 when the
//! directory cannot be read at all, 3 when a live server holds it (the log is being written, so
//! what verify would read could be cut mid-record by the writer, not by damage; stop the server
//! or check a copy).
//!
//! For its run it holds the data dir's lock shared, so no server can start (and repair files)
//! underneath it; a server that tries is refused as by any other holder.

use std::path::PathBuf;
use std::process::ExitCode;

use lockkeeper_server::datadir_lock::{DataDirLock, LockError};
use lockkeeper_server::recovery::{self, Mode};

/// Exit status when a live server holds the data dir.
const IN_USE: u8 = 3;

#[derive(clap::Args, Debug)]
#[command(
    after_help = "Exit status: 0 sound, 1 corrupt, 2 unreadable, 3 in use by a running server."
)]
pub(crate) struct VerifyArgs {
    /// The data directory to check (what `serve --data-dir` was given).
    data_dir: PathBuf,
}

pub(crate) fn run(args: VerifyArgs) -> ExitCode {
    if !args.data_dir.is_dir() {
        eprintln!(
            "lockkeeper verify: {} is not a directory",
            args.data_dir.display()
        );
        return ExitCode::from(2);
    }
    let _lock = match DataDirLock::shared(&args.data_dir) {
        Ok(lock) => lock,
        Err(LockError::InUse(in_use)) => {
            eprintln!("lockkeeper verify: {in_use}; stop it first, or verify a copy");
            return ExitCode::from(IN_USE);
        }
        Err(e) => {
            eprintln!("lockkeeper verify: {e}");
            return ExitCode::from(2);
        }
    };
    match recovery::recover(&args.data_dir, Mode::Check) {
        Ok(recovered) => {
            for file in &recovered.files {
                println!("{}: {}", file.file.display(), file.status);
            }
            if let Some(torn) = &recovered.torn_tail {
                println!(
                    "torn tail: {} at offset {} ({} bytes never acknowledged; the server truncates them at start)",
                    torn.file.display(),
                    torn.offset,
                    torn.dropped_bytes
                );
            }
            println!(
                "OK: {} nodes, {} sessions, last zxid {:#x}",
                recovered.tree.len(),
                recovered.sessions.len(),
                recovered.last_zxid
            );
            ExitCode::SUCCESS
        }
        Err(corruption) => {
            println!("CORRUPT: {corruption}");
            ExitCode::from(1)
        }
    }
}
