//! Replays the fuzz corpus (`fuzz/corpus/<target>/`) and every input that once failed
//! (`fuzz/regressions/<target>/`) through the fuzz targets' entry points, so what the fuzzer
//! found stays fixed without a fuzzer in CI. A panic here is a decoder that failed on bytes from
//! the network or the disk; the message names the target and the input file.

use std::fs;
use std::path::{Path, PathBuf};

use lockkeeper_server::fuzzing;

fn fuzz_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("../../fuzz")
}

/// The files under `fuzz/<kind>/<target>/`, sorted.
fn inputs(kind: &str, target: &str) -> Vec<PathBuf> {
    let dir = fuzz_dir().join(kind).join(target);
    let Ok(entries) = fs::read_dir(&dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .map(|e| e.expect("a corpus entry").path())
        .filter(|p| p.is_file())
        .collect();
    files.sort();
    files
}

fn replay(kind: &str) -> usize {
    let mut replayed = 0;
    for target in fuzzing::TARGETS {
        for file in inputs(kind, target) {
            let data = fs::read(&file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
            let ran = std::panic::catch_unwind(|| fuzzing::run(target, &data));
            match ran {
                Ok(true) => replayed += 1,
                Ok(false) => panic!("no fuzz target {target}"),
                Err(_) => panic!("fuzz target {target} panicked on {}", file.display()),
            }
        }
    }
    replayed
}

#[test]
fn every_target_has_a_corpus_and_replays_it_without_a_panic() {
    for target in fuzzing::TARGETS {
        assert!(
            !inputs("corpus", target).is_empty(),
            "fuzz/corpus/{target}/ is empty: run the target (fuzz/README.md) and commit its corpus"
        );
    }
    let replayed = replay("corpus");
    eprintln!("replayed {replayed} corpus inputs");
}

#[test]
fn every_input_that_once_failed_passes() {
    let replayed = replay("regressions");
    eprintln!("replayed {replayed} regression inputs");
}

#[test]
fn every_target_directory_names_a_target() {
    for kind in ["corpus", "regressions"] {
        let Ok(entries) = fs::read_dir(fuzz_dir().join(kind)) else {
            continue;
        };
        for entry in entries {
            let name = entry.expect("an entry").file_name();
            let name = name.to_string_lossy();
            assert!(
                fuzzing::TARGETS.contains(&name.as_ref()),
                "fuzz/{kind}/{name} is no fuzz target's"
            );
        }
    }
}
