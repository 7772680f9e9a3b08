//! Connect strings and node paths: what the caller gives, checked before anything is sent.
//!
//! A connect string is `host:port,host:port[/chroot]` (a host without a port gets 2181). With
//! a chroot every path the caller names is below it on the server, and every path the server
//! reports (a created node, a notification) is given back without it.

use lockkeeper_proto::path::validate;

use crate::error::{Error, Result};

/// ZooKeeper's client port, for hosts named without one.
pub const DEFAULT_PORT: u16 = 2181;

/// A parsed connect string.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct ConnectString {
    /// `host:port` each.
    pub hosts: Vec<String>,
    /// The chroot without a trailing slash, or `None` for the root.
    pub chroot: Option<String>,
}

impl ConnectString {
    pub(crate) fn parse(text: &str) -> Result<ConnectString> {
        let (list, chroot) = match text.find('/') {
            Some(at) => (&text[..at], Some(&text[at..])),
            None => (text, None),
        };
        let chroot = match chroot {
            None | Some("/") => None,
            Some(chroot) => {
                validate(chroot).map_err(|why| {
                    Error::BadArguments(format!("connect string {text:?}: chroot {why}"))
                })?;
                Some(chroot.to_owned())
            }
        };
        let mut hosts = Vec::new();
        for host in list.split(',').map(str::trim) {
            if host.is_empty() {
                return Err(Error::BadArguments(format!(
                    "connect string {text:?}: an empty host"
                )));
            }
            let has_port = match host.rfind(']') {
                Some(bracket) => host[bracket..].contains(':'),
                None => host.contains(':'),
            };
            hosts.push(if has_port {
                host.to_owned()
            } else {
                format!("{host}:{DEFAULT_PORT}")
            });
        }
        Ok(ConnectString { hosts, chroot })
    }

    /// The server's path for the caller's `path`.
    pub(crate) fn server_path(&self, path: &str) -> String {
        match (&self.chroot, path) {
            (None, _) => path.to_owned(),
            (Some(chroot), "/") => chroot.clone(),
            (Some(chroot), _) => format!("{chroot}{path}"),
        }
    }

    /// The caller's path for a path the server reported.
    pub(crate) fn client_path(&self, path: &str) -> String {
        let Some(chroot) = &self.chroot else {
            return path.to_owned();
        };
        match path.strip_prefix(chroot.as_str()) {
            Some("") => "/".to_owned(),
            Some(rest) if rest.starts_with('/') => rest.to_owned(),
            // Not below the chroot (cannot happen for our own requests): keep it whole.
            _ => path.to_owned(),
        }
    }
}

/// Checks `path` as ZooKeeper's clients do before sending it, naming the path on failure. A
/// sequential create's path is checked with a digit appended, as the server will append its
/// sequence (so `/queue/` is a valid prefix).
pub(crate) fn check(path: &str, sequential: bool) -> Result<()> {
    let checked = if sequential {
        // Joined, not formatted: every lock's create takes this path.
        validate(&[path, "1"].concat())
    } else {
        validate(path)
    };
    checked.map_err(|why| Error::BadArguments(format!("path {path:?}: {why}")))
}

/// The hosts of a connect string (`host:port,host:port/chroot`), each as `host:port` (2181
/// when none is given): for callers that probe the hosts themselves.
pub fn hosts(connect_string: &str) -> Result<Vec<String>> {
    ConnectString::parse(connect_string).map(|parsed| parsed.hosts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connect_strings_get_default_ports_and_a_chroot() {
        let parsed = ConnectString::parse("a:1,b,[::1]:3,[::1]/app/x").unwrap();
        assert_eq!(parsed.hosts, ["a:1", "b:2181", "[::1]:3", "[::1]:2181"]);
        assert_eq!(parsed.chroot.as_deref(), Some("/app/x"));
        assert_eq!(parsed.server_path("/"), "/app/x");
        assert_eq!(parsed.server_path("/n"), "/app/x/n");
        assert_eq!(parsed.client_path("/app/x"), "/");
        assert_eq!(parsed.client_path("/app/x/n"), "/n");
        assert_eq!(parsed.client_path("/app/xy"), "/app/xy");
        assert_eq!(ConnectString::parse("a:1/").unwrap().chroot, None);
    }

    #[test]
    fn bad_connect_strings_and_paths_are_named() {
        let err = ConnectString::parse("a:1,,b").unwrap_err();
        assert!(err.to_string().contains("\"a:1,,b\""), "{err}");
        let err = ConnectString::parse("a:1/app/").unwrap_err();
        assert!(err.to_string().contains("chroot"), "{err}");
        for bad in [
            "",
            "x",
            "/a/",
            "/a//b",
            "/a/./b",
            "/a/..",
            "/a\0b",
            "/a\u{1f512}",
        ] {
            let err = check(bad, false).unwrap_err();
            assert!(err.to_string().contains(&format!("{bad:?}")), "{err}");
        }
        check("/", false).unwrap();
        check("/a/b", false).unwrap();
        check("/a/", true).unwrap();
        check("/a/b-", true).unwrap();
    }
}
