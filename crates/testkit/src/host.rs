//! Where a test server runs: on loopback (the default), or on a host of its own, a network
//! namespace with its own address, so that a test can cut packets between servers silently.
//!
//! The namespace is the caller's (created with `ip netns add` and wired to the others); a
//! server placed on it is started through `ip netns exec NAME PROGRAM`, which enters the
//! namespace and execs the program, so the server keeps the PID that was spawned and is
//! signalled and reaped as any other child.

use std::ffi::OsString;
use std::net::Ipv4Addr;

/// A network namespace and the address a server binds there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Host {
    /// The namespace's name (`ip netns list`).
    pub netns: String,
    /// The address of the namespace's interface, reachable from the other hosts.
    pub ip: Ipv4Addr,
}

impl Host {
    /// The program and leading arguments that run `program` inside this host's namespace.
    pub(crate) fn wrap(&self, program: impl Into<OsString>) -> (OsString, Vec<OsString>) {
        (
            "ip".into(),
            vec![
                "netns".into(),
                "exec".into(),
                self.netns.clone().into(),
                program.into(),
            ],
        )
    }
}

/// The program and leading arguments that run `program` on `host`, or on this one.
pub(crate) fn command_on(
    host: Option<&Host>,
    program: impl Into<OsString>,
) -> (OsString, Vec<OsString>) {
    match host {
        Some(host) => host.wrap(program),
        None => (program.into(), Vec::new()),
    }
}
