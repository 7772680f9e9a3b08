//! Where each lock lives in Redis: key and channel names, and the checks on a lock's name.
//!
//! Every key of one lock carries the lock's name as a hash tag (`{name}`), so that in Redis
//! Cluster they all hash to one slot and a script can touch them together. The pub/sub channel
//! carries it too, for readability; classic pub/sub is cluster-wide, slots do not apply.

use crate::{Error, Result};

/// The key prefix used when none is configured: `lockkeeper:lease:{orders}` and so on.
pub const DEFAULT_PREFIX: &str = "lockkeeper";

/// The keys and the channel of one lock, computed once when the lock is created.
#[derive(Clone, Debug)]
pub(crate) struct LockKeys {
    /// The key holding the lock itself (a string, hash or sorted set, by kind).
    pub main: String,
    /// The per-lock fencing counter, `INCR`ed by every acquisition. It has no expiry: a counter
    /// that vanished would start again at 1 and hand out tokens lower than ones already used.
    pub fence: String,
    /// Where releases are published, for waiters.
    pub channel: String,
}

impl LockKeys {
    /// Keys for the lock `name` of kind `kind` (`lease`, `reentrant`, `rw`, `semaphore`).
    ///
    /// The kind is part of the key so that a lease lock and a semaphore of the same name do not
    /// trample each other's data (they would read each other's keys with the wrong type).
    pub(super) fn new(prefix: &str, kind: &str, name: &str) -> LockKeys {
        let base = format!("{prefix}:{kind}:{{{name}}}");
        LockKeys {
            main: base.clone(),
            fence: format!("{base}:fence"),
            channel: format!("{base}:released"),
        }
    }
}

impl LockKeys {
    /// Another key of the same lock (same hash tag), e.g. the writer of a read-write lock.
    pub(super) fn part(&self, suffix: &str) -> String {
        format!("{}:{suffix}", self.main)
    }
}

/// Checks a lock name: not empty, and no braces (a `}` inside the name would end the hash tag
/// early, and a name starting with `}` would leave an empty tag, which Redis Cluster ignores;
/// either way the keys of one lock could land in different slots).
pub(crate) fn check_name(what: &str, name: &str) -> Result<()> {
    if name.is_empty() {
        return Err(Error::InvalidArgument(format!(
            "{what} name must not be empty"
        )));
    }
    if name.contains(['{', '}']) {
        return Err(Error::InvalidArgument(format!(
            "{what} name {name:?} must not contain '{{' or '}}': it becomes the Redis Cluster hash tag"
        )));
    }
    Ok(())
}

/// Checks a key prefix: braces would become the hash tag instead of the lock's name.
pub(crate) fn check_prefix(prefix: &str) -> Result<()> {
    if prefix.contains(['{', '}']) {
        return Err(Error::InvalidArgument(format!(
            "key prefix {prefix:?} must not contain '{{' or '}}'"
        )));
    }
    Ok(())
}

/// Checks an owner id (reentrant locks): not empty.
pub(crate) fn check_owner(owner: &str) -> Result<()> {
    if owner.is_empty() {
        return Err(Error::InvalidArgument("owner id must not be empty".into()));
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The slot-relevant part of a key, as Redis Cluster computes it.
    fn hash_tag(key: &str) -> &str {
        if let Some(open) = key.find('{')
            && let Some(len) = key[open + 1..].find('}')
            && len > 0
        {
            return &key[open + 1..open + 1 + len];
        }
        key
    }

    #[test]
    fn all_keys_of_a_lock_share_its_name_as_hash_tag() {
        let keys = LockKeys::new("app", "lease", "orders:eu");
        for key in [&keys.main, &keys.fence, &keys.channel] {
            assert_eq!(hash_tag(key), "orders:eu", "{key}");
        }
        assert_eq!(hash_tag(&keys.part("writer")), "orders:eu");
        assert_ne!(keys.main, keys.fence);
        assert_ne!(
            LockKeys::new("app", "lease", "x").main,
            LockKeys::new("app", "semaphore", "x").main
        );
    }

    #[test]
    fn names_are_checked() {
        assert!(check_name("lock", "orders").is_ok());
        for bad in ["", "a}b", "}x", "{x}"] {
            assert!(
                matches!(check_name("lock", bad), Err(Error::InvalidArgument(_))),
                "{bad:?} accepted"
            );
        }
        assert!(check_prefix("app:v1").is_ok());
        assert!(check_prefix("a{b").is_err());
        assert!(check_owner("").is_err());
    }
}
