//! Free loopback ports for servers started by tests.
//!
//! The kernel picks a free port when we bind port 0; we release it at once and hand the number
//! to a server that binds it itself (Apache ZooKeeper reads its port from zoo.cfg). A port handed
//! out once is never handed out again by this process, so two servers started side by side in
//! one test binary cannot be given the same number. Another process may still grab the port in
//! the short window before our server binds it; callers that can retry (see `ApacheZk`) do.

use std::collections::HashSet;
use std::io;
use std::net::{Ipv4Addr, TcpListener};
use std::sync::Mutex;

static HANDED_OUT: Mutex<Option<HashSet<u16>>> = Mutex::new(None);

/// A port on 127.0.0.1 that was free a moment ago and that this process has not handed out
/// before. Panics when none can be found, which on a working machine does not happen.
pub fn free_port() -> u16 {
    try_free_port().unwrap_or_else(|e| panic!("{e}"))
}

/// [`free_port`] for programs that report failures instead of panicking (the benchmark).
pub fn try_free_port() -> io::Result<u16> {
    // Bounded: the ephemeral range has thousands of ports, so a few hundred tries always suffice.
    for _ in 0..512 {
        let listener = TcpListener::bind((Ipv4Addr::LOCALHOST, 0)).map_err(|e| {
            io::Error::new(e.kind(), format!("bind 127.0.0.1:0 for a free port: {e}"))
        })?;
        let port = listener.local_addr()?.port();
        drop(listener);
        let mut handed_out = HANDED_OUT
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if handed_out.get_or_insert_with(HashSet::new).insert(port) {
            return Ok(port);
        }
    }
    Err(io::Error::new(
        io::ErrorKind::AddrNotAvailable,
        "no free port on 127.0.0.1 after 512 tries",
    ))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ports_are_distinct_and_bindable() {
        let ports: Vec<u16> = (0..50).map(|_| free_port()).collect();
        let distinct: HashSet<u16> = ports.iter().copied().collect();
        assert_eq!(
            distinct.len(),
            ports.len(),
            "a port was handed out twice: {ports:?}"
        );
        // The last one is very likely still free: bind it as a server would.
        let last = *ports.last().expect("50 ports");
        TcpListener::bind((Ipv4Addr::LOCALHOST, last)).expect("a fresh free port binds");
    }
}
