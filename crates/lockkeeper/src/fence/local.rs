//! The in-process fence, for a service that owns its resource (its memory, its files).
//!
//! One std mutex guards the map from resource id to the highest token; the caller's write runs
//! while it is held, so no other write to any resource of this fence can slip between the
//! check and the write. Writes should therefore be short and must not block on I/O that can
//! wait on another writer.

use std::collections::HashMap;
use std::sync::Mutex;

use super::{Outcome, check_resource};
use crate::{FencingToken, Result};

/// Per-resource highest tokens, with writes run atomically with their check.
///
/// ```
/// use lockkeeper::FencingToken;
/// use lockkeeper::fence::{LocalFence, Outcome};
///
/// let fence = LocalFence::new();
/// let mut balance = 0;
/// let outcome = fence.write("account:7", FencingToken::new(12), || balance = 100)?;
/// assert_eq!(outcome, Outcome::Accepted);
/// // A holder that paused past its lease comes back with its older token: refused.
/// let late = fence.write("account:7", FencingToken::new(11), || balance = 50)?;
/// assert_eq!(late, Outcome::Refused { highest: FencingToken::new(12) });
/// assert_eq!(balance, 100);
/// # Ok::<(), lockkeeper::Error>(())
/// ```
#[derive(Debug, Default)]
pub struct LocalFence {
    highest: Mutex<HashMap<String, FencingToken>>,
}

impl LocalFence {
    /// A fence that has seen no token yet.
    pub fn new() -> LocalFence {
        LocalFence::default()
    }

    /// Runs `write` if `token` is at least the highest token seen for `resource`, and records
    /// it as the highest; refuses (without running `write`) otherwise. The check, `write`
    /// and the record happen under one lock. [`Error::InvalidArgument`](crate::Error) for an
    /// empty resource id.
    ///
    /// If `write` panics, the token is not recorded (the write did not complete) and the
    /// fence stays usable.
    pub fn write(
        &self,
        resource: &str,
        token: FencingToken,
        write: impl FnOnce(),
    ) -> Result<Outcome> {
        check_resource("fence resource id", resource)?;
        // A panic in an earlier `write` poisons the mutex without breaking the map: the token
        // is only recorded after its write returned.
        let mut highest = self
            .highest
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if let Some(&seen) = highest.get(resource)
            && seen > token
        {
            return Ok(Outcome::Refused { highest: seen });
        }
        write();
        highest.insert(resource.to_owned(), token);
        Ok(Outcome::Accepted)
    }

    /// The highest token accepted for `resource`, if any.
    pub fn highest(&self, resource: &str) -> Option<FencingToken> {
        let highest = self
            .highest
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        highest.get(resource).copied()
    }
}
