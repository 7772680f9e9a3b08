//! Caches and names: once a fault has healed and the writes have stopped, every cache holds
//! what the server holds (the same nodes, each with the same data), and every name watch the
//! address the name's node holds.
//!
//! Both sides are whole views, read after the writes stopped: the cache's from memory, the
//! server's by a fresh session; a difference that outlasts the scenario's convergence wait is
//! a cache that stopped following the server.

use std::collections::BTreeMap;

/// A tree by full path: each node's data.
pub(crate) type Tree = BTreeMap<String, Vec<u8>>;

/// What `cache` holds that `server` does not, and the other way round, one line a node:
/// a node the cache lacks, one it still holds after the server deleted it, one whose data
/// differs. Empty when they agree.
pub(crate) fn diff(cache: &Tree, server: &Tree) -> Vec<String> {
    let mut problems = Vec::new();
    for (path, data) in server {
        match cache.get(path) {
            None => problems.push(format!("{path}: on the server, not in the cache")),
            Some(cached) if cached != data => problems.push(format!(
                "{path}: the cache holds {:?}, the server {:?}",
                String::from_utf8_lossy(cached),
                String::from_utf8_lossy(data)
            )),
            Some(_) => {}
        }
    }
    for path in cache.keys().filter(|path| !server.contains_key(*path)) {
        problems.push(format!("{path}: in the cache, deleted on the server"));
    }
    problems
}

/// A name watch's address against the name's node on the server (`None`: no node, or no
/// address in it); a line if they differ.
pub(crate) fn name(path: &str, watched: Option<&str>, server: Option<&str>) -> Option<String> {
    (watched != server)
        .then(|| format!("{path}: the name watch says {watched:?}, the server {server:?}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tree(nodes: &[(&str, &str)]) -> Tree {
        nodes
            .iter()
            .map(|(path, data)| (path.to_string(), data.as_bytes().to_vec()))
            .collect()
    }

    #[test]
    fn equal_views_agree() {
        let server = tree(&[("/c", ""), ("/c/a", "1"), ("/c/a/x", "2")]);
        assert!(diff(&server.clone(), &server).is_empty());
        assert!(diff(&Tree::new(), &Tree::new()).is_empty());
    }

    #[test]
    fn a_missing_node_is_caught() {
        let server = tree(&[("/c", ""), ("/c/a", "1"), ("/c/b", "2")]);
        let cache = tree(&[("/c", ""), ("/c/a", "1")]);
        assert_eq!(
            diff(&cache, &server),
            ["/c/b: on the server, not in the cache"]
        );
    }

    #[test]
    fn a_node_deleted_on_the_server_is_caught() {
        let server = tree(&[("/c", "")]);
        let cache = tree(&[("/c", ""), ("/c/gone", "old")]);
        assert_eq!(
            diff(&cache, &server),
            ["/c/gone: in the cache, deleted on the server"]
        );
    }

    #[test]
    fn stale_data_is_caught() {
        let server = tree(&[("/c", ""), ("/c/a", "new")]);
        let cache = tree(&[("/c", ""), ("/c/a", "old")]);
        assert_eq!(
            diff(&cache, &server),
            [r#"/c/a: the cache holds "old", the server "new""#]
        );
    }

    #[test]
    fn a_stale_name_is_caught() {
        assert_eq!(name("/n", Some("h:1"), Some("h:1")), None);
        assert_eq!(name("/n", None, None), None);
        assert_eq!(
            name("/n", Some("h:1"), Some("h:2")).as_deref(),
            Some(r#"/n: the name watch says Some("h:1"), the server Some("h:2")"#)
        );
        assert!(name("/n", Some("h:1"), None).is_some());
    }
}
