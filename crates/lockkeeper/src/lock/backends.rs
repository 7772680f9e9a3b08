//! Every lock of every backend as a [`Lock`], every guard as a [`Guard`]: the whole list in
//! one place, so that a lock missing from it is easy to see.
//!
//! Each implementation only forwards to the type's own methods, which carry the behaviour and
//! its documentation; the macros spell out the forwarding once.

use std::time::Duration;

use super::{BoxFuture, Guard, Lock, ReadLock, WriteLock};
use crate::error::Result;
use crate::fencing::FencingToken;
use crate::options::LockOptions;

/// `impl Lock for $handle`, whose guard comes from the methods named: `$wait` (waits), `$try`
/// (one attempt) and `$timeout` (bounded), each given `$arg` (a semaphore's one lease) if
/// named; `|$l| $name` is the lock's name. `with_options` is the handle's own.
macro_rules! lock {
    (
        $handle:ty,
        name: |$l:ident| $name:expr,
        $wait:ident, $try:ident, $timeout:ident $(($arg:expr))? $(,)?
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

            fn with_options(&self, options: LockOptions) -> Result<Box<dyn Lock>> {
                Ok(Box::new(self.clone().with_options(options)?))
            }
        }
    };
}

/// `impl Guard for $guard`: `|g| ...` says how `g` answers the fencing token, whether it is
/// held, what records the hold and how it is released (`g` by value, in an `async` block);
/// `valid_until` and `lost` are the guard's own. The short form is for a guard whose inherent
/// `fencing_token`, `is_held` and `release` (to `Result<()>`) are what the trait asks. Any
/// further items go into the impl as they are.
macro_rules! guard {
    (
        $guard:ty,
        token: |$t:ident| $token:expr,
        held: |$h:ident| $held:expr,
        held_as: |$a:ident| $held_as:expr,
        release: |$r:ident| $release:expr
        $(, $($more:tt)*)?
    ) => {
        impl Guard for $guard {
            fn fencing_token(&self) -> Option<FencingToken> {
                let $t = self;
                $token
            }

            fn is_held(&self) -> bool {
                let $h = self;
                $held
            }

            fn valid_until(&self) -> Option<tokio::time::Instant> {
                <$guard>::valid_until(self)
            }

            fn lost(&self) -> BoxFuture<'_, ()> {
                Box::pin(<$guard>::lost(self))
            }

            fn held_as(&self) -> String {
                let $a = self;
                $held_as
            }

            fn release(self: Box<Self>) -> BoxFuture<'static, Result<()>> {
                let $r = *self;
                Box::pin(async move { $release })
            }

            $($($more)*)?
        }
    };
    ($guard:ty, held_as: |$a:ident| $held_as:expr $(, $($more:tt)*)?) => {
        guard!(
            $guard,
            token: |g| Some(g.fencing_token()),
            held: |g| g.is_held(),
            held_as: |$a| $held_as,
            release: |g| g.release().await
            $(, $($more)*)?
        );
    };
}

/// `rw.read_lock()` and `rw.write_lock()` for a backend's `RwLock`, and the two sides as locks.
macro_rules! rw_lock {
    ($rw:ty, name: |$l:ident| $name:expr $(,)?) => {
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

        impl ReadLock<$rw> {
            /// The read side of the lock held with `options` (see the lock's own
            /// `with_options`, which both sides share).
            pub fn with_options(self, options: LockOptions) -> Result<ReadLock<$rw>> {
                Ok(ReadLock(self.0.with_options(options)?))
            }
        }

        impl WriteLock<$rw> {
            /// The write side of the lock held with `options` (see the lock's own
            /// `with_options`, which both sides share).
            pub fn with_options(self, options: LockOptions) -> Result<WriteLock<$rw>> {
                Ok(WriteLock(self.0.with_options(options)?))
            }
        }

        lock!(
            ReadLock<$rw>,
            name: |side| { let $l = &side.0; $name },
            read, try_read, read_timeout,
        );
        lock!(
            WriteLock<$rw>,
            name: |side| { let $l = &side.0; $name },
            write, try_write, write_timeout,
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

    lock!(Mutex, name: |l| l.path(), lock, try_lock, lock_timeout);
    lock!(SimpleLock, name: |l| l.path(), lock, try_lock, lock_timeout);
    rw_lock!(RwLock, name: |l| l.path());
    // A semaphore as a lock is one lease of it.
    lock!(Semaphore, name: |l| l.path(), acquire, try_acquire, acquire_timeout(1));

    // Leading is holding the latch: `lock()` waits to lead, the guard resigns on release.
    lock!(LeaderLatch, name: |l| l.path(), lead, try_lead, lead_timeout);

    guard!(LockGuard, held_as: |g| g.node().to_owned(),
        fn revocation_requested(&self) -> BoxFuture<'_, ()> {
            Box::pin(LockGuard::revocation_requested(self))
        }
    );

    // Leadership: held while leading; released by resigning.
    guard!(Leadership,
        token: |g| Some(g.fencing_token()),
        held: |g| g.is_leader(),
        held_as: |g| g.node().to_owned(),
        release: |g| not_leader_is_not_held(g.resign().await));

    // Leases of a semaphore: the first lease's token (`Leases::fencing_tokens` has each).
    guard!(Leases,
        token: |g| g.fencing_tokens().first().copied(),
        held: |g| g.is_held(),
        held_as: |g| g.nodes().join(","),
        release: |g| g.release().await);
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

    lock!(LeaseLock, name: |l| l.name(), lock, try_lock, lock_timeout);
    lock!(RedlockLock, name: |l| l.name(), lock, try_lock, lock_timeout);
    lock!(ReentrantLock, name: |l| l.name(), lock, try_lock, lock_timeout);
    rw_lock!(RwLock, name: |l| l.name());
    // A semaphore as a lock is one permit of it.
    lock!(Semaphore, name: |l| l.name(), acquire, try_acquire, acquire_timeout(1));

    guard!(LeaseGuard, held_as: |g| g.name().to_owned());
    guard!(RwGuard, held_as: |g| g.name().to_owned());
    guard!(SemaphorePermit, held_as: |g| g.name().to_owned());

    /// A local-count reentrant lock's handle is one owner (its count is in the handle), so it
    /// is a [`Lock`] by reference: `&lock` or an `Arc` of it where one is needed, and
    /// [`with_options`](Lock::with_options) is a new owner.
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

        fn with_options(&self, options: LockOptions) -> Result<Box<dyn Lock>> {
            let lock = self.lease_lock().clone().with_options(options)?;
            Ok(Box::new(LocalReentrantLock::new(lock)))
        }
    }

    // Redlock has no fencing token: its masters are independent and share no counter.
    guard!(RedlockGuard,
        token: |_g| None,
        held: |g| g.is_held(),
        held_as: |g| g.name().to_owned(),
        release: |g| g.release().await);

    // A reentrant guard's release gives back one hold; the trait's `Ok` does not say whether
    // it was the last (the inherent `release` does).
    guard!(ReentrantGuard,
        token: |g| Some(g.fencing_token()),
        held: |g| g.is_held(),
        held_as: |g| g.name().to_owned(),
        release: |g| g.release().await.map(drop));

    // As for `ReentrantGuard`: one hold given back.
    guard!(LocalReentrantGuard,
        token: |g| Some(g.fencing_token()),
        held: |g| g.is_held(),
        held_as: |g| g.name().to_owned(),
        release: |g| g.release().await.map(drop));
}

// ---------------------------------------------------------------------------------------------
// etcd.
// ---------------------------------------------------------------------------------------------

#[cfg(feature = "etcd")]
mod etcd {
    use super::*;
    use crate::etcd::{Candidacy, Leadership, LockGuard, Mutex, RwLock, Semaphore};

    lock!(Mutex, name: |l| l.name(), lock, try_lock, lock_timeout);
    rw_lock!(RwLock, name: |l| l.name());
    // A semaphore as a lock is one permit of it (an etcd semaphore's holds are one each).
    lock!(Semaphore, name: |l| l.name(), acquire, try_acquire, acquire_timeout);

    lock!(Candidacy, name: |l| l.election().name(), campaign, try_campaign, campaign_timeout);

    guard!(LockGuard, held_as: |g| g.key());

    // Leadership: held while leading; released by resigning.
    guard!(Leadership,
        token: |g| Some(g.fencing_token()),
        held: |g| g.is_held(),
        held_as: |g| g.key(),
        release: |g| not_leader_is_not_held(g.resign().await));
}
