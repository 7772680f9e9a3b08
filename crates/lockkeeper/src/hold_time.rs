//! The durations a lock's options take (maximum hold time, lock-delay): the checks every
//! backend makes of them, in one place, so a value one backend refuses no other takes.

use std::time::Duration;

use crate::error::{Error, Result};

/// The longest maximum hold time or lock-delay taken: far beyond any real use, and short
/// enough that adding it to an instant or a lease cannot overflow.
pub(crate) const LONGEST: Duration = Duration::from_secs(100 * 365 * 24 * 3600);

/// `duration` unless it is longer than [`LONGEST`]; the error names `option`.
pub(crate) fn at_most_longest(option: &str, duration: Duration) -> Result<Duration> {
    if duration > LONGEST {
        return Err(Error::InvalidArgument(format!(
            "{option} must be at most 100 years, got {duration:?}"
        )));
    }
    Ok(duration)
}

/// A zero duration would silently mean "never hold" or "no delay": refused, naming the option
/// and `lock` (e.g. `the lock "/locks/x"`), as is one too long to add to an instant.
pub(crate) fn positive(option: &str, lock: &str, duration: Duration) -> Result<Duration> {
    if duration.is_zero() {
        return Err(Error::InvalidArgument(format!(
            "{option} for {lock} must be greater than zero"
        )));
    }
    at_most_longest(&format!("{option} for {lock}"), duration)
}
