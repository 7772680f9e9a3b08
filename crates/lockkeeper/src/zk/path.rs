//! Validation of the paths users pass in, before anything is sent.
//!
//! ZooKeeper would reject most bad paths too, but only after a round trip and with an error
//! that names no argument; a recipe's path is also used to build child paths, so a trailing
//! slash or a relative path would produce surprising nodes rather than an error. Every recipe
//! checks its path here, naming the argument (`lock path`, `cache path`, ...) in the error.

use lockkeeper_proto::path::validate;

use crate::error::{Error, Result};

/// Checks that `path` is a well-formed absolute ZooKeeper path (the root included), by
/// ZooKeeper's own rules (`lockkeeper_proto::path`, which Keeper and lockkeeper's client apply
/// too); `what` names the argument in the error.
pub(crate) fn validate_path(what: &str, path: &str) -> Result<()> {
    validate(path).map_err(|why| Error::InvalidArgument(format!("{what} {path:?}: {why}")))
}

/// Why `name` cannot be one node name (a single path segment: a member id, a site), if it
/// cannot: the rules of a path, and no '/'.
pub(crate) fn node_name_problem(name: &str) -> Option<&'static str> {
    if name.is_empty() {
        return Some("is empty");
    }
    if name.contains('/') {
        return Some("must not contain '/'");
    }
    validate(&format!("/{name}")).err()
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
    fn node_names_follow_the_path_rules() {
        assert_eq!(node_name_problem("worker-1"), None);
        for bad in ["", "a/b", ".", "..", "a\0b", "a\u{7f}", "\u{1f600}"] {
            assert!(node_name_problem(bad).is_some(), "{bad:?}");
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
            // Characters ZooKeeper refuses though Rust calls them printable.
            "/a\u{e000}",
            "/lock-\u{1f512}",
            "/zookeeper/x",
        ] {
            match validate_lock_path(path) {
                Err(Error::InvalidArgument(message)) => {
                    assert!(message.contains(&format!("{path:?}")), "{message}");
                }
                other => panic!("{path:?}: {other:?}"),
            }
        }
    }
}
