//! Validation of the paths users pass in, before anything is sent.
//!
//! ZooKeeper would reject most bad paths too, but only after a round trip and with an error
//! that names no argument; a recipe's path is also used to build child paths, so a trailing
//! slash or a relative path would produce surprising nodes rather than an error. Every recipe
//! checks its path here, naming the argument (`lock path`, `cache path`, ...) in the error.

use crate::error::{Error, Result};

/// Checks that `path` is a well-formed absolute ZooKeeper path (the root included); `what`
/// names the argument in the error.
pub(crate) fn validate_path(what: &str, path: &str) -> Result<()> {
    let invalid = |why: &str| Err(Error::InvalidArgument(format!("{what} {path:?}: {why}")));
    if path.is_empty() {
        return invalid("is empty");
    }
    if !path.starts_with('/') {
        return invalid("must start with '/'");
    }
    if path == "/" {
        return Ok(());
    }
    if path.ends_with('/') {
        return invalid("must not end with '/'");
    }
    for segment in path[1..].split('/') {
        if segment.is_empty() {
            return invalid("has an empty segment ('//')");
        }
        if segment == "." || segment == ".." {
            return invalid("'.' and '..' are not allowed");
        }
    }
    if path.chars().any(|c| c == '\0' || c.is_control()) {
        return invalid("contains a control character");
    }
    Ok(())
}

/// Checks a path a recipe creates nodes at or under: well formed, and neither the root nor
/// the server's reserved `/zookeeper`.
pub(crate) fn validate_node_path(what: &str, path: &str) -> Result<()> {
    validate_path(what, path)?;
    let invalid = |why: &str| Err(Error::InvalidArgument(format!("{what} {path:?}: {why}")));
    if path == "/" {
        return invalid("the root cannot be used");
    }
    if path == "/zookeeper" || path.starts_with("/zookeeper/") {
        return invalid("/zookeeper is reserved by the server");
    }
    Ok(())
}

/// Checks that `path` is usable as the parent of lock nodes.
pub(crate) fn validate_lock_path(path: &str) -> Result<()> {
    validate_node_path("lock path", path)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn accepts_ordinary_paths() {
        for path in ["/locks", "/locks/orders", "/a/b-c_d.e/f"] {
            validate_lock_path(path).unwrap();
        }
    }

    #[test]
    fn rejects_bad_paths_with_the_path_in_the_message() {
        for path in [
            "",
            "locks",
            "/",
            "/locks/",
            "/a//b",
            "/a/./b",
            "/a/..",
            "/a\0b",
            "/a\nb",
            "/zookeeper/x",
        ] {
            match validate_lock_path(path) {
                Err(Error::InvalidArgument(message)) => {
                    assert!(message.contains(&format!("{path:?}")), "{message}")
                }
                other => panic!("{path:?}: {other:?}"),
            }
        }
    }
}
