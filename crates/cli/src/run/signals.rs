//! The signals an operator sends to `lockkeeper` that are meant for the command (or, before
//! there is one, for the wait): SIGINT, SIGTERM and SIGHUP.
//!
//! Once these streams exist the signals no longer end this process by their default action:
//! each is received here and acted on (forwarded, or ending a wait cleanly).

use tokio::signal::unix::{Signal, SignalKind, signal};

use crate::backend::Failure;

/// SIGINT, SIGTERM and SIGHUP as one stream.
pub(crate) struct Signals {
    int: Signal,
    term: Signal,
    hup: Signal,
}

impl Signals {
    pub(crate) fn new() -> Result<Signals, Failure> {
        let install = |kind| {
            signal(kind)
                .map_err(|e| Failure::software(format!("cannot install signal handlers: {e}")))
        };
        Ok(Signals {
            int: install(SignalKind::interrupt())?,
            term: install(SignalKind::terminate())?,
            hup: install(SignalKind::hangup())?,
        })
    }

    /// The next signal received, as its number. Cancel-safe.
    pub(crate) async fn recv(&mut self) -> libc::c_int {
        tokio::select! {
            _ = self.int.recv() => libc::SIGINT,
            _ = self.term.recv() => libc::SIGTERM,
            _ = self.hup.recv() => libc::SIGHUP,
        }
    }
}
