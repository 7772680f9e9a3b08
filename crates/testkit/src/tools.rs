//! Where the external programs and jars that interop tests drive live on a Debian machine.
//!
//! Each helper panics with the Debian package to install when its program is missing, so a test
//! that cannot run says why instead of failing somewhere deep inside a child process.
//! `scripts/test` installs all of them.

use std::path::{Path, PathBuf};

/// Debian installs every Java library here, each also under a version-free name.
pub const JAVA_LIB_DIR: &str = "/usr/share/java";

/// The command-line client shipped by Debian's `zookeeper` package.
pub const ZKCLI: &str = "/usr/share/zookeeper/bin/zkCli.sh";

/// The jars a ZooKeeper or Curator client program needs. The Debian jars carry their own
/// dependencies (netty, jackson, ...) in their manifests' `Class-Path`, so naming the top-level
/// ones is enough.
const CLIENT_JARS: &[(&str, &str)] = &[
    ("zookeeper", "zookeeper"),
    ("zookeeper-jute", "zookeeper"),
    ("curator-client", "libcurator-client-java"),
    ("curator-framework", "libcurator-framework-java"),
    ("curator-recipes", "libcurator-recipes-java"),
    ("guava", "libguava-java"),
    ("slf4j-api", "libslf4j-java"),
    // The Netty client socket (TLS) needs these two, which zookeeper.jar's manifest leaves out.
    ("netty-codec", "libnetty-java"),
    ("netty-resolver", "libnetty-java"),
];

/// The jars Apache ZooKeeper's server needs, with a logging backend so that its log (kept in the
/// test's temporary directory) explains a failed start.
pub(crate) const SERVER_JARS: &[(&str, &str)] = &[
    ("zookeeper", "zookeeper"),
    ("zookeeper-jute", "zookeeper"),
    // The Netty server factory (the secure client port) needs these two, which zookeeper.jar's
    // manifest leaves out.
    ("netty-codec", "libnetty-java"),
    ("netty-resolver", "libnetty-java"),
    ("slf4j-api", "libslf4j-java"),
    ("slf4j-log4j12", "libslf4j-java"),
    ("log4j-1.2", "liblog4j1.2-java"),
];

/// The path of `/usr/share/java/<name>.jar`, or a panic naming the Debian package that has it.
pub fn java_jar(name: &str, package: &str) -> PathBuf {
    let path = Path::new(JAVA_LIB_DIR).join(format!("{name}.jar"));
    assert!(
        path.is_file(),
        "{} is missing: install the Debian package `{package}` (scripts/test does)",
        path.display()
    );
    path
}

pub(crate) fn classpath_of(jars: &[(&str, &str)]) -> String {
    jars.iter()
        .map(|(name, package)| java_jar(name, package).display().to_string())
        .collect::<Vec<_>>()
        .join(":")
}

/// A `-cp` value for Java programs that use the ZooKeeper client and Curator 5 (framework and
/// recipes), built from Debian's jars.
pub fn java_classpath() -> String {
    classpath_of(CLIENT_JARS)
}

/// The `java` launcher: `$JAVA_HOME/bin/java` when set, else `java` from `PATH`.
pub fn java() -> PathBuf {
    if let Some(home) = std::env::var_os("JAVA_HOME") {
        let candidate = Path::new(&home).join("bin/java");
        if candidate.is_file() {
            return candidate;
        }
    }
    find_on_path("java").unwrap_or_else(|| {
        panic!("no `java` on PATH: install the Debian package `default-jdk-headless`")
    })
}

/// The `javac` compiler, for tests that compile a small Java client (e.g. a Curator program).
pub fn javac() -> PathBuf {
    if let Some(home) = std::env::var_os("JAVA_HOME") {
        let candidate = Path::new(&home).join("bin/javac");
        if candidate.is_file() {
            return candidate;
        }
    }
    find_on_path("javac").unwrap_or_else(|| {
        panic!("no `javac` on PATH: install the Debian package `default-jdk-headless`")
    })
}

/// The Python 3 interpreter that has `kazoo` importable (`$PYTHON` if set, else `python3`).
pub fn python3() -> PathBuf {
    if let Some(explicit) = std::env::var_os("PYTHON") {
        return PathBuf::from(explicit);
    }
    find_on_path("python3").unwrap_or_else(|| panic!("no `python3` on PATH"))
}

/// The `zkCli.sh` script, or a panic naming the package to install.
pub fn zkcli() -> PathBuf {
    let path = PathBuf::from(ZKCLI);
    assert!(
        path.is_file(),
        "{ZKCLI} is missing: install the Debian package `zookeeper` (scripts/test does)"
    );
    path
}

/// The first executable file called `program` in a `PATH` directory.
pub fn find_on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|candidate| is_executable(candidate))
}

fn is_executable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    path.metadata()
        .map(|meta| meta.is_file() && meta.permissions().mode() & 0o111 != 0)
        .unwrap_or(false)
}

/// Curator, ZooKeeper's client and their dependencies, plus a logger that discards (so a Java
/// program's output is only what it prints itself): the classpath of the Curator test programs.
/// Panics naming the Debian package of a missing jar.
pub fn curator_classpath() -> String {
    format!(
        "{}:{}",
        java_classpath(),
        java_jar("slf4j-nop", "libslf4j-java").display()
    )
}

/// The jars of [`curator_classpath`] where Debian installs them, not checked: for a program that
/// takes the classpath as a flag and reports a missing jar when `javac` or `java` fails.
pub fn curator_classpath_unchecked() -> String {
    CLIENT_JARS
        .iter()
        .map(|(name, _)| *name)
        .chain(["slf4j-nop"])
        .map(|name| format!("{JAVA_LIB_DIR}/{name}.jar"))
        .collect::<Vec<_>>()
        .join(":")
}

/// `javac` compiling `sources` against `classpath` into `out_dir`, warnings off, sources read as
/// UTF-8: the one way Java programs are compiled, by [`compile_java`] and by the benchmark.
pub fn javac_command(
    javac: &Path,
    out_dir: &Path,
    classpath: &str,
    sources: &[PathBuf],
) -> std::process::Command {
    let mut command = std::process::Command::new(javac);
    command
        .args(["-nowarn", "-encoding", "UTF-8", "-d"])
        .arg(out_dir)
        .arg("-cp")
        .arg(classpath)
        .args(sources)
        .stdin(std::process::Stdio::null());
    command
}

/// Compiles every `.java` file in `sources` against [`curator_classpath`] into a directory
/// under `cache` named after `label` and a hash of the sources, and returns that directory.
///
/// Test processes that run at the same time share one copy: each compiles into a staging
/// directory and renames it into place, and a process that loses the race uses the winner's
/// copy, so nobody ever sees a half-written class directory. Unchanged sources are not
/// compiled again.
pub fn compile_java(sources: &Path, cache: &Path, label: &str) -> PathBuf {
    use std::collections::hash_map::DefaultHasher;
    use std::hash::{Hash, Hasher};

    let mut files: Vec<PathBuf> = std::fs::read_dir(sources)
        .unwrap_or_else(|e| panic!("list the Java sources in {sources:?}: {e}"))
        .map(|entry| entry.expect("read a directory entry").path())
        .filter(|path| path.extension().is_some_and(|ext| ext == "java"))
        .collect();
    files.sort();
    assert!(!files.is_empty(), "no Java sources in {sources:?}");
    let mut hasher = DefaultHasher::new();
    for file in &files {
        file.file_name().hash(&mut hasher);
        std::fs::read(file)
            .expect("read a Java source")
            .hash(&mut hasher);
    }
    let target = cache.join(format!("{label}-classes-{:016x}", hasher.finish()));
    // The marker is written into the staging directory before the rename, so its presence at
    // the target means a complete copy.
    let complete = target.join(".complete");
    if complete.is_file() {
        return target;
    }
    std::fs::create_dir_all(cache).expect("create the Java class cache directory");
    let staging = tempfile::Builder::new()
        .prefix(&format!("{label}-classes-build-"))
        .tempdir_in(cache)
        .expect("create a staging directory for javac");
    let output = javac_command(&javac(), staging.path(), &curator_classpath(), &files)
        .output()
        .expect("run javac");
    assert!(
        output.status.success(),
        "javac failed ({}):\n{}{}",
        output.status,
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    std::fs::write(staging.path().join(".complete"), b"").expect("mark the classes complete");
    let staged = staging.keep();
    if std::fs::rename(&staged, &target).is_ok() {
        return target;
    }
    if complete.is_file() {
        // Another process got there first with the same sources; use its copy.
        let _ = std::fs::remove_dir_all(&staged);
        return target;
    }
    // Something incomplete is in the way (left by an interrupted run): use our own copy.
    staged
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_unchecked_curator_classpath_is_the_checked_one() {
        // scripts/test installs the jars, so the checked list does not panic here.
        assert_eq!(curator_classpath_unchecked(), curator_classpath());
        let javac = javac_command(
            Path::new("/jdk/bin/javac"),
            Path::new("/out"),
            "a.jar",
            &[PathBuf::from("A.java")],
        );
        let args: Vec<_> = javac.get_args().collect();
        assert_eq!(
            args,
            [
                "-nowarn",
                "-encoding",
                "UTF-8",
                "-d",
                "/out",
                "-cp",
                "a.jar",
                "A.java"
            ]
        );
    }
}
