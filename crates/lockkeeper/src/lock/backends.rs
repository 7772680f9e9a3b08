//! Every lock of every backend as a [`Lock`], every guard as a [`Guard`]: the whole list in
//! one place, so that a lock missing from it is easy to see.
//!
//! Each implementation only forwards to the type's own methods, which carry the behaviour and
//! its documentation; the macros spell out the forwarding once.

use std::time::Duration;

use super::{BoxFuture, Guard, Lock, ReadLock, WriteLock};
use crate::error::Result;
use crate::fencing::FencingToken;

/// `impl Lock for $handle`, whose guard comes from the methods named: `$wait` (waits), `$try`
/// (one attempt) and `$timeout` (bounded), each given `$arg` (a semaphore's one lease) if
/// named; `|$l| $name` is the lock's name and `|$m, $d| $max_hold` the handle with a maximum
/// hold time, as a `Result`.
macro_rules! lock {
    (
        $handle:ty,
        name: |$l:ident| $name:expr,
        $wait:ident, $try:ident, $timeout:ident $(($arg:expr))?,
        max_hold: |$m:ident, $d:ident| $max_hold:expr $(,)?
    ) => {
        impl Lock for $handle {
            fn name(&self) -> &str {
                let $l = self;
                $name
            }

            fn lock(&self) -> BoxFuture<'_, Result<Box<dyn Guard>>> {
                Box::pin(async move {
                    let guard = self.$wait($($arg)?).await?;
                    Ok(Box::new(guard) as Box<dyn Guard>)
                })
            }

            fn try_lock(&self) -> BoxFuture<'_, Result<Option<Box<dyn Guard>>>> {
                Box::pin(async move {
                    let guard = self.$try($($arg)?).await?;
                    Ok(guard.map(|guard| Box::new(guard) as Box<dyn Guard>))
                })
            }

            fn lock_timeout(
                &self,
                timeout: Duration,
            ) -> BoxFuture<'_, Result<Option<Box<dyn Guard>>>> {
                Box::pin(async move {
                    let guard = self.$timeout($($arg,)? timeout).await?;
                    Ok(guard.map(|guard| Box::new(guard) as Box<dyn Guard>))
                })
            }

            fn with_max_hold(&self, max_hold: Duration) -> Result<Box<dyn Lock>> {
                let ($m, $d) = (self.clone(), max_hold);
                Ok(Box::new($max_hold?))
            }
        }
    };
}

/// `impl Guard for $guard` for a guard with the usual inherent methods: `fencing_token`,
/// `is_held`, `valid_until`, `lost` and `release` returning `Result<()>`; `|$g| $held_as` is
/// what records the hold, and any further items go into the impl as they are.
macro_rules! guard {
    ($guard:ty, held_as: |$g:ident| $held_as:expr $(, $($more:tt)*)?) => {
        impl Guard for $guard {
            fn fencing_token(&self) -> Option<FencingToken> {
                Some(<$guard>::fencing_token(self))
            }

            fn is_held(&self) -> bool {
                <$guard>::is_held(self)
            }

            fn valid_until(&self) -> Option<tokio::time::Instant> {
                <$guard>::valid_until(self)
            }

            fn lost(&self) -> BoxFuture<'_, ()> {
                Box::pin(<$guard>::lost(self))
            }

            fn held_as(&self) -> String {
                let $g = self;
                $held_as
            }

            fn release(self: Box<Self>) -> BoxFuture<'static, Result<()>> {
                Box::pin(<$guard>::release(*self))
            }

            $($($more)*)?
        }
    };
}

/// `rw.read_lock()` and `rw.write_lock()` for a backend's `RwLock`, and the two sides as locks.
macro_rules! rw_lock {
    ($rw:ty, name: |$l:ident| $name:expr, max_hold: |$m:ident, $d:ident| $max_hold:expr $(,)?) => {
        impl $rw {
            /// The read side, as a [`Lock`](crate::Lock) (Curator's `readLock()`).
            pub fn read_lock(&self) -> ReadLock<$rw> {
                ReadLock(self.clone())
            }

            /// The write side, as a [`Lock`](crate::Lock) (Curator's `writeLock()`).
            pub fn write_lock(&self) -> WriteLock<$rw> {
                WriteLock(self.clone())
            }
        }

        lock!(
            ReadLock<$rw>,
            name: |side| { let $l = &side.0; $name },
            read, try_read, read_timeout,
            max_hold: |side, d| { let ($m, $d) = (side.0, d); $max_hold.map(ReadLock) },
        );
        lock!(
            WriteLock<$rw>,
            name: |side| { let $l = &side.0; $name },
            write, try_write, write_timeout,
            max_hold: |side, d| { let ($m, $d) = (side.0, d); $max_hold.map(WriteLock) },
        );
    };
}

/// A leadership released as a guard: the trait's "it was gone already" is
/// [`Error::NotHeld`](crate::Error::NotHeld) for every guard, a resign's is `NotLeader`.
fn not_leader_is_not_held(resigned: Result<()>) -> Result<()> {
    match resigned {
        Err(crate::Error::NotLeader) => Err(crate::Error::NotHeld),
        other => other,
    }
}

impl<L> std::ops::Deref for ReadLock<L> {
    type Target = L;

    fn deref(&self) -> &L {
        &self.0
    }
}

impl<L> std::ops::Deref for WriteLock<L> {
    type Target = L;

    fn deref(&self) -> &L {
        &self.0
    }
}

// ---------------------------------------------------------------------------------------------
// ZooKeeper.
// ---------------------------------------------------------------------------------------------

mod zk {
    use super::*;
    use crate::zk::{
        LeaderLatch, Leadership, Leases, LockGuard, Mutex, RwLock, Semaphore, SimpleLock,
    };

    lock!(Mutex, name: |l| l.path(), lock, try_lock, lock_timeout,
        max_hold: |m, d| m.max_hold(d));
    lock!(SimpleLock, name: |l| l.path(), lock, try_lock, lock_timeout,
        max_hold: |m, d| m.max_hold(d));
    rw_lock!(RwLock, name: |l| l.path(), max_hold: |m, d| m.max_hold(d));
    // A semaphore as a lock is one lease of it.
    lock!(Semaphore, name: |l| l.path(), acquire, try_acquire, acquire_timeout(1),
        max_hold: |m, d| m.max_hold(d));

    // Leading is holding the latch: `lock()` waits to lead, the guard resigns on release.
    lock!(LeaderLatch, name: |l| l.path(), lead, try_lead, lead_timeout,
        max_hold: |m, d| m.max_hold(d));

    guard!(LockGuard, held_as: |g| g.node().to_owned(),
        fn revocation_requested(&self) -> BoxFuture<'_, ()> {
            Box::pin(LockGuard::revocation_requested(self))
        }
    );

    /// Leadership: held while leading; released by resigning.
    impl Guard for Leadership {
        fn fencing_token(&self) -> Option<FencingToken> {
            Some(Leadership::fencing_token(self))
        }

        fn is_held(&self) -> bool {
            self.is_leader()
        }

        fn valid_until(&self) -> Option<tokio::time::Instant> {
            Leadership::valid_until(self)
        }

        fn lost(&self) -> BoxFuture<'_, ()> {
            Box::pin(Leadership::lost(self))
        }

        fn held_as(&self) -> String {
            self.node().to_owned()
        }

        fn release(self: Box<Self>) -> BoxFuture<'static, Result<()>> {
            Box::pin(async move { not_leader_is_not_held(self.resign().await) })
        }
    }

    /// Leases of a semaphore: the first lease's token ([`Leases::fencing_tokens`] has each).
    impl Guard for Leases {
        fn fencing_token(&self) -> Option<FencingToken> {
            self.fencing_tokens().first().copied()
        }

        fn is_held(&self) -> bool {
            Leases::is_held(self)
        }

        fn valid_until(&self) -> Option<tokio::time::Instant> {
            Leases::valid_until(self)
        }

        fn lost(&self) -> BoxFuture<'_, ()> {
            Box::pin(Leases::lost(self))
        }

        fn held_as(&self) -> String {
            self.nodes().join(",")
        }

        fn release(self: Box<Self>) -> BoxFuture<'static, Result<()>> {
            Box::pin(Leases::release(*self))
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Redis.
// ---------------------------------------------------------------------------------------------

mod redis {
    use super::*;
    use crate::redis::redlock::{RedlockGuard, RedlockLock};
    use crate::redis::{
        LeaseGuard, LeaseLock, LocalReentrantGuard, LocalReentrantLock, ReentrantGuard,
        ReentrantLock, RwGuard, RwLock, Semaphore, SemaphorePermit,
    };

    /// Redis handles check their maximum hold time when they acquire; the trait's contract is
    /// to refuse a bad one at once, with the same message.
    fn checked(max_hold: Duration) -> Result<Duration> {
        crate::redis::lease::check_ttl("max_hold (the maximum hold time)", max_hold)?;
        Ok(max_hold)
    }

    lock!(LeaseLock, name: |l| l.name(), lock, try_lock, lock_timeout,
        max_hold: |m, d| checked(d).map(|d| m.max_hold(d)));
    lock!(RedlockLock, name: |l| l.name(), lock, try_lock, lock_timeout,
        max_hold: |m, d| checked(d).map(|d| m.max_hold(d)));
    lock!(ReentrantLock, name: |l| l.name(), lock, try_lock, lock_timeout,
        max_hold: |m, d| checked(d).map(|d| m.max_hold(d)));
    rw_lock!(RwLock, name: |l| l.name(), max_hold: |m, d| checked(d).map(|d| m.max_hold(d)));
    // A semaphore as a lock is one permit of it.
    lock!(Semaphore, name: |l| l.name(), acquire, try_acquire, acquire_timeout(1),
        max_hold: |m, d| checked(d).map(|d| m.max_hold(d)));

    guard!(LeaseGuard, held_as: |g| g.name().to_owned());
    guard!(RwGuard, held_as: |g| g.name().to_owned());
    guard!(SemaphorePermit, held_as: |g| g.name().to_owned());

    /// A local-count reentrant lock's handle is one owner (its count is in the handle), so it
    /// is a [`Lock`] by reference: `&lock` or an `Arc` of it where one is needed, and
    /// [`with_max_hold`](Lock::with_max_hold) is a new owner.
    impl Lock for LocalReentrantLock {
        fn name(&self) -> &str {
            self.lease_lock().name()
        }

        fn lock(&self) -> BoxFuture<'_, Result<Box<dyn Guard>>> {
            Box::pin(async move {
                Ok(Box::new(LocalReentrantLock::lock(self).await?) as Box<dyn Guard>)
            })
        }

        fn try_lock(&self) -> BoxFuture<'_, Result<Option<Box<dyn Guard>>>> {
            Box::pin(async move {
                let guard = LocalReentrantLock::try_lock(self).await?;
                Ok(guard.map(|guard| Box::new(guard) as Box<dyn Guard>))
            })
        }

        fn lock_timeout(&self, timeout: Duration) -> BoxFuture<'_, Result<Option<Box<dyn Guard>>>> {
            Box::pin(async move {
                let guard = LocalReentrantLock::lock_timeout(self, timeout).await?;
                Ok(guard.map(|guard| Box::new(guard) as Box<dyn Guard>))
            })
        }

        fn with_max_hold(&self, max_hold: Duration) -> Result<Box<dyn Lock>> {
            let lock = self.lease_lock().clone().max_hold(checked(max_hold)?);
            Ok(Box::new(LocalReentrantLock::new(lock)))
        }
    }

    /// Redlock has no fencing token: its masters are independent and share no counter.
    impl Guard for RedlockGuard {
        fn fencing_token(&self) -> Option<FencingToken> {
            None
        }

        fn is_held(&self) -> bool {
            RedlockGuard::is_held(self)
        }

        fn valid_until(&self) -> Option<tokio::time::Instant> {
            RedlockGuard::valid_until(self)
        }

        fn lost(&self) -> BoxFuture<'_, ()> {
            Box::pin(RedlockGuard::lost(self))
        }

        fn held_as(&self) -> String {
            self.name().to_owned()
        }

        fn release(self: Box<Self>) -> BoxFuture<'static, Result<()>> {
            Box::pin(RedlockGuard::release(*self))
        }
    }

    /// A reentrant guard's release gives back one hold; the trait's `Ok` does not say whether
    /// it was the last (the inherent `release` does).
    impl Guard for ReentrantGuard {
        fn fencing_token(&self) -> Option<FencingToken> {
            Some(ReentrantGuard::fencing_token(self))
        }

        fn is_held(&self) -> bool {
            ReentrantGuard::is_held(self)
        }

        fn valid_until(&self) -> Option<tokio::time::Instant> {
            ReentrantGuard::valid_until(self)
        }

        fn lost(&self) -> BoxFuture<'_, ()> {
            Box::pin(ReentrantGuard::lost(self))
        }

        fn held_as(&self) -> String {
            self.name().to_owned()
        }

        fn release(self: Box<Self>) -> BoxFuture<'static, Result<()>> {
            Box::pin(async move { ReentrantGuard::release(*self).await.map(drop) })
        }
    }

    /// As for [`ReentrantGuard`]: one hold given back.
    impl Guard for LocalReentrantGuard {
        fn fencing_token(&self) -> Option<FencingToken> {
            Some(LocalReentrantGuard::fencing_token(self))
        }

        fn is_held(&self) -> bool {
            LocalReentrantGuard::is_held(self)
        }

        fn valid_until(&self) -> Option<tokio::time::Instant> {
            LocalReentrantGuard::valid_until(self)
        }

        fn lost(&self) -> BoxFuture<'_, ()> {
            Box::pin(LocalReentrantGuard::lost(self))
        }

        fn held_as(&self) -> String {
            LocalReentrantGuard::name(self).to_owned()
        }

        fn release(self: Box<Self>) -> BoxFuture<'static, Result<()>> {
            Box::pin(async move { LocalReentrantGuard::release(*self).await.map(drop) })
        }
    }
}

// ---------------------------------------------------------------------------------------------
// etcd.
// ---------------------------------------------------------------------------------------------

#[cfg(feature = "etcd")]
mod etcd {
    use super::*;
    use crate::etcd::{Candidacy, Leadership, LockGuard, Mutex, RwLock, Semaphore};

    lock!(Mutex, name: |l| l.name(), lock, try_lock, lock_timeout,
        max_hold: |m, d| m.max_hold(d));
    rw_lock!(RwLock, name: |l| l.name(), max_hold: |m, d| m.max_hold(d));
    // A semaphore as a lock is one permit of it (an etcd semaphore's holds are one each).
    lock!(Semaphore, name: |l| l.name(), acquire, try_acquire, acquire_timeout,
        max_hold: |m, d| m.max_hold(d));

    lock!(Candidacy, name: |l| l.election().name(), campaign, try_campaign, campaign_timeout,
        max_hold: |m, d| m.max_hold(d));

    guard!(LockGuard, held_as: |g| g.key());

    /// Leadership: held while leading; released by resigning.
    impl Guard for Leadership {
        fn fencing_token(&self) -> Option<FencingToken> {
            Some(Leadership::fencing_token(self))
        }

        fn is_held(&self) -> bool {
            Leadership::is_held(self)
        }

        fn valid_until(&self) -> Option<tokio::time::Instant> {
            Leadership::valid_until(self)
        }

        fn lost(&self) -> BoxFuture<'_, ()> {
            Box::pin(Leadership::lost(self))
        }

        fn held_as(&self) -> String {
            self.key()
        }

        fn release(self: Box<Self>) -> BoxFuture<'static, Result<()>> {
            Box::pin(async move { not_leader_is_not_held(self.resign().await) })
        }
    }
}
