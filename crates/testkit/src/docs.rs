//! The repository's documentation as tests read it: the Markdown files a reader meets (the
//! root's README.md and CHANGELOG.md, and everything under docs/), for the tests that check
//! their links, their Rust examples and their `lockkeeper` command lines.

use std::path::{Path, PathBuf};

/// The repository's root, from any crate of the workspace (`crates/NAME`).
pub fn repository_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../..")
}

/// The README, the changelog and every Markdown file under `docs/`, sorted; panics, naming
/// the directory, if one cannot be read.
pub fn markdown_pages() -> Vec<PathBuf> {
    let root = repository_root();
    let mut pages: Vec<PathBuf> = ["README.md", "CHANGELOG.md"]
        .iter()
        .map(|name| root.join(name))
        .filter(|path| path.exists())
        .collect();
    let mut dirs = vec![root.join("docs")];
    while let Some(dir) = dirs.pop() {
        let entries = std::fs::read_dir(&dir).unwrap_or_else(|e| panic!("{}: {e}", dir.display()));
        for entry in entries {
            let path = entry.expect("directory entry").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|ext| ext == "md") {
                pages.push(path);
            }
        }
    }
    pages.sort();
    pages
}
