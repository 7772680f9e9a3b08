//! systemd's readiness protocol (`sd_notify(3)`): with `Type=notify`, systemd counts a service
//! as started only once it sends `READY=1` to the datagram socket named by `NOTIFY_SOCKET`, so
//! the units ordered after Keeper start once it serves, not once its process exists.
//!
//! `NOTIFY_SOCKET` is a file system path, or with a leading `@` a Linux abstract socket name.
//! Without the variable (any start but systemd's) nothing is sent. A send that fails is logged
//! and otherwise ignored: the server serves either way, and systemd's start timeout reports it.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::net::UnixDatagram;

/// Tells systemd `state` (`READY=1`, `STOPPING=1`) if it started this process to listen.
pub(crate) fn notify(state: &str) {
    let Some(socket) = std::env::var_os("NOTIFY_SOCKET") else {
        return;
    };
    if let Err(e) = send(&socket, state) {
        tracing::warn!("cannot tell systemd {state} on NOTIFY_SOCKET {socket:?}: {e}");
    }
}

fn send(socket: &OsStr, state: &str) -> std::io::Result<()> {
    let sender = UnixDatagram::unbound()?;
    match socket.as_bytes().strip_prefix(b"@") {
        #[cfg(target_os = "linux")]
        Some(name) => {
            use std::os::linux::net::SocketAddrExt;
            let address = std::os::unix::net::SocketAddr::from_abstract_name(name)?;
            sender.send_to_addr(state.as_bytes(), &address)?;
        }
        #[cfg(not(target_os = "linux"))]
        Some(_) => {
            return Err(std::io::Error::new(
                std::io::ErrorKind::Unsupported,
                "abstract socket names exist on Linux only",
            ));
        }
        None => {
            sender.send_to(state.as_bytes(), socket)?;
        }
    }
    Ok(())
}
