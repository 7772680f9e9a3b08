//! Znode paths: a path's parent and its ancestors. What a valid path is lives in
//! `lockkeeper_proto::path`, shared with the client, so both refuse what ZooKeeper refuses.

pub(crate) use lockkeeper_proto::path::validate;

/// The parent of a non-root path ("/a/b" -> "/a", "/a" -> "/"). `None` for "/" or a path
/// without a slash.
pub(crate) fn parent(path: &str) -> Option<&str> {
    let slash = path.rfind('/')?;
    if path.len() == 1 {
        return None;
    }
    Some(if slash == 0 { "/" } else { &path[..slash] })
}

/// `path` itself, then each ancestor up to "/" (for persistent recursive watches).
pub(crate) fn self_and_ancestors(path: &str) -> impl Iterator<Item = &str> {
    std::iter::successors(Some(path), |p| parent(p))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn splits_paths() {
        assert_eq!(parent("/a/b"), Some("/a"));
        assert_eq!(parent("/a"), Some("/"));
        assert_eq!(parent("/"), None);
        assert_eq!(
            self_and_ancestors("/a/b").collect::<Vec<_>>(),
            ["/a/b", "/a", "/"]
        );
    }
}
