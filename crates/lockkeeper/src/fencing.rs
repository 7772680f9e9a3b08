//! Fencing tokens: the number a lock holder hands to the resource it protects.
//!
//! A lock alone cannot stop a holder that paused (GC, SIGSTOP, a slow disk) past its lease from
//! writing after someone else took the lock. The resource can: it remembers the highest token it
//! has seen and refuses anything lower. That only works if tokens for one lock strictly increase
//! over the lock's whole life, which is what each backend guarantees in its own way (the czxid
//! of a ZooKeeper lock node; an `INCR` inside the Redis acquire script).

use std::fmt;

/// A number that strictly increases with each acquisition of one lock.
///
/// Compare tokens of the *same* lock only; tokens of different locks are unrelated.
///
/// ```
/// use lockkeeper::FencingToken;
/// let older = FencingToken::new(41);
/// let newer = FencingToken::new(42);
/// assert!(newer > older);
/// assert_eq!(newer.get(), 42);
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct FencingToken(u64);

impl FencingToken {
    /// Wraps a raw token value.
    pub const fn new(value: u64) -> FencingToken {
        FencingToken(value)
    }

    /// The raw value, to send along with a write to the protected resource.
    pub const fn get(self) -> u64 {
        self.0
    }
}

impl fmt::Display for FencingToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}", self.0)
    }
}
