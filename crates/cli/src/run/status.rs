//! One exit code for a child's exit status, as shells report it.

use std::os::unix::process::ExitStatusExt;
use std::process::ExitStatus;

/// The child's exit code, or 128 + N when signal N ended it.
pub(super) fn exit_code(status: ExitStatus) -> u8 {
    if let Some(code) = status.code() {
        // Exit codes are 0..=255 on Unix; `code()` sign-extends nothing, this only narrows.
        return (code & 0xff) as u8;
    }
    match status.signal() {
        Some(signal) => (128 + signal).clamp(0, 255) as u8,
        // Neither exited nor signalled is impossible for a reaped child.
        None => crate::exit::SOFTWARE,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_signals() {
        assert_eq!(exit_code(ExitStatus::from_raw(3 << 8)), 3);
        assert_eq!(exit_code(ExitStatus::from_raw(0)), 0);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGKILL)), 137);
        assert_eq!(exit_code(ExitStatus::from_raw(libc::SIGTERM)), 143);
    }
}
