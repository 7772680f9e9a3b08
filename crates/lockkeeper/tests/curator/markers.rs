//! The resource the contenders share, as the Rust side touches it: a directory of marker files
//! (the Java twin is `Markers.java`, with the same rules).
//!
//! A writer (any mutex holder) creates `writer` with create-exclusive semantics, which fails if
//! another writer is inside, then looks for `reader-*` files; a reader creates its own
//! `reader-<who>`, then looks for `writer`. Operations on one directory are atomic and totally
//! ordered, so of two holders that overlap the later one sees the earlier one's marker, while
//! holders that do not overlap never see each other (each removes its marker before releasing).
//! Every conflict seen counts as one violation of the lock's exclusion. Every holder also appends
//! its name to `log`, so the test can tell that the languages took turns.

use std::fs::OpenOptions;
use std::io::{ErrorKind, Write};
use std::path::{Path, PathBuf};
use std::time::Duration;

/// A fresh marker directory under the cargo target's temporary directory, removed on drop.
pub(crate) struct MarkerDir {
    dir: PathBuf,
}

impl MarkerDir {
    /// An empty directory named after `label` and this process.
    pub(crate) fn new(label: &str) -> MarkerDir {
        let dir = Path::new(env!("CARGO_TARGET_TMPDIR"))
            .join(format!("zk-curator-markers-{label}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create the marker directory");
        MarkerDir { dir }
    }

    pub(crate) fn path(&self) -> &Path {
        &self.dir
    }

    /// Holds the resource exclusively for `hold`; returns the conflicts seen.
    pub(crate) async fn as_writer(&self, who: &str, hold: Duration) -> usize {
        let mut violations = 0;
        let mine = self.dir.join("writer");
        let created = match OpenOptions::new().write(true).create_new(true).open(&mine) {
            Ok(_) => true,
            Err(e) if e.kind() == ErrorKind::AlreadyExists => {
                violations += 1;
                eprintln!("violation: writer {who} found another writer inside");
                false
            }
            Err(e) => panic!("create {mine:?}: {e}"),
        };
        for reader in self.readers() {
            violations += 1;
            eprintln!("violation: writer {who} found {reader}");
        }
        self.log(who);
        tokio::time::sleep(hold).await;
        if created {
            std::fs::remove_file(&mine).expect("remove the writer marker");
        }
        violations
    }

    /// Holds the resource, shared with other readers, for `hold`; returns the conflicts seen.
    pub(crate) async fn as_reader(&self, who: &str, hold: Duration) -> usize {
        let mut violations = 0;
        let mine = self.dir.join(format!("reader-{who}"));
        // `who` is unique per contender, so this only fails if the test itself is wrong.
        OpenOptions::new()
            .write(true)
            .create_new(true)
            .open(&mine)
            .unwrap_or_else(|e| panic!("create {mine:?}: {e}"));
        if self.dir.join("writer").exists() {
            violations += 1;
            eprintln!("violation: reader {who} found a writer inside");
        }
        self.log(who);
        tokio::time::sleep(hold).await;
        std::fs::remove_file(&mine).expect("remove the reader marker");
        violations
    }

    /// Appends one line; appends of a few bytes are atomic, so lines from processes never mix.
    fn log(&self, who: &str) {
        let mut log = OpenOptions::new()
            .create(true)
            .append(true)
            .open(self.dir.join("log"))
            .expect("open the holder log");
        log.write_all(format!("{who}\n").as_bytes())
            .expect("append to the holder log");
    }

    /// Every holder so far, in the order they held.
    pub(crate) fn holders(&self) -> Vec<String> {
        std::fs::read_to_string(self.dir.join("log"))
            .unwrap_or_default()
            .lines()
            .map(str::to_owned)
            .collect()
    }

    /// Marker files still present (none once every holder is done).
    pub(crate) fn leftovers(&self) -> Vec<String> {
        std::fs::read_dir(&self.dir)
            .expect("list the marker directory")
            .map(|e| e.expect("entry").file_name().to_string_lossy().into_owned())
            .filter(|name| name != "log")
            .collect()
    }

    fn readers(&self) -> Vec<String> {
        self.leftovers()
            .into_iter()
            .filter(|name| name.starts_with("reader-"))
            .collect()
    }
}

impl Drop for MarkerDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}
