//! The exit codes of the operator commands (`lock`, `elect`, `inspect`, `revoke`).
//!
//! They follow BSD's `sysexits.h` where it has a meaning that fits, so scripts and cron wrappers
//! can tell "someone else holds it" from "the backend is down" from "the command failed".
//! A child's own exit code passes through unchanged (128 + N when it died of signal N), so
//! these codes are chosen above the range a well-behaved program usually returns. A wait for
//! a lock that a signal N interrupts also ends with 128 + N, as a shell reports a process that
//! signal ended.

use std::process::ExitCode;

/// Bad usage: an unknown flag, a malformed backend URL, an invalid name. `EX_USAGE`.
pub(crate) const USAGE: u8 = 64;
/// The backend could not be reached within the connect timeout, or stopped answering while the
/// command worked with it (retries exhausted, session lost before the lock or leadership was
/// granted, or unreachable when a `--timeout` wait ended: it could not say whether someone
/// else holds the lock or leads, so this is never reported as [`NOT_ACQUIRED`]).
/// `EX_UNAVAILABLE`.
pub(crate) const UNAVAILABLE: u8 = 69;
/// Something failed inside lockkeeper itself (a child that could not be started, an
/// unexpected backend error after connecting). `EX_SOFTWARE`.
pub(crate) const SOFTWARE: u8 = 70;
/// The lock was not acquired, as the backend said: `--try` found it held (or all of a
/// semaphore's leases taken), or `--timeout` passed with it still held; for `elect`, `--try`
/// or `--timeout` found someone else leading. `EX_TEMPFAIL`.
pub(crate) const NOT_ACQUIRED: u8 = 75;
/// The backend refused the credentials (`--sasl-user`'s password): retrying will not help.
/// `EX_NOPERM`.
pub(crate) const NO_PERMISSION: u8 = 77;
/// The lock (or leadership) was lost, or its revocation requested, while the child ran; the
/// child's process group was stopped (SIGTERM, then SIGKILL after the grace period). The
/// message names the cause. Releasing and closing afterwards are bounded by
/// `--release-timeout`; past it the exit happens anyway, saying the release was not confirmed.
pub(crate) const LOST: u8 = 76;

/// An exit code from one of the constants above.
pub(crate) fn code(code: u8) -> ExitCode {
    ExitCode::from(code)
}
