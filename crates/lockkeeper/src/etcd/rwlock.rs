//! [`RwLock`]: a fair read-write lock on etcd, readers sharing, writers alone.

use std::sync::Arc;
use std::time::Duration;

use crate::deadline::Deadline;
use crate::error::Result;
use crate::etcd::guard::{HoldOptions, LockGuard};
use crate::etcd::queue::{Place, acquire};
use crate::etcd::session::Session;
use crate::etcd::{check_name, unique_suffix};
use crate::options::{Configure, Delay, LockOptions, Setting};

/// A distributed read-write lock on etcd (lockkeeper's layout; etcd's Go packages have none):
///
/// - a reader puts `NAME/read/{lease:x}-{unique}` and waits until no key under `NAME/write/`
///   is older than its own: readers wait only for earlier writers, so they share the lock;
/// - a writer puts `NAME/write/{lease:x}-{unique}` and waits until no key under `NAME/` is
///   older than its own: writers wait for everything earlier, readers included.
///
/// Grants follow arrival order (a reader that arrives after a waiting writer waits for it), so
/// neither side starves. Each side waits on one key, the one just before it among those it
/// counts, so a release wakes only the waiters it can let in. Each acquisition has its own key,
/// so several read guards of one session coexist; a session holding a read guard that asks for
/// the write lock waits for its own reader: release the read guard first.
///
/// ```no_run
/// # async fn demo(session: lockkeeper::etcd::Session) -> lockkeeper::Result<()> {
/// let lock = session.rw_lock("catalog")?;
/// let reading = lock.read().await?;
/// let another = lock.read().await?; // readers share
/// drop((reading, another));
/// let writing = lock.write().await?;
/// println!("writing with token {}", writing.fencing_token());
/// writing.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RwLock {
    session: Session,
    name: Arc<str>,
    options: HoldOptions,
}

/// Which side of a [`RwLock`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Side {
    Read,
    Write,
}

impl Session {
    /// The read-write lock called `name` (see [`RwLock`]); its keys live under `name/`.
    /// [`Error::InvalidArgument`](crate::Error) for an empty name.
    pub fn rw_lock(&self, name: &str) -> Result<RwLock> {
        check_name("read-write lock", name)?;
        Ok(RwLock {
            session: self.clone(),
            name: Arc::from(name),
            options: HoldOptions::default(),
        })
    }
}

impl RwLock {
    /// How both sides hold the lock ([`LockOptions`]): `max_hold` and `lock_delay` (one
    /// record for both sides, `NAME.lock-delay`), as for a [`Mutex`].
    /// [`Error::InvalidArgument`](crate::Error) for zero or an option an etcd lock does not
    /// take.
    ///
    /// [`Mutex`]: crate::etcd::Mutex::with_options
    pub fn with_options(self, options: LockOptions) -> Result<RwLock> {
        options.apply(self)
    }

    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Waits for a read lock.
    pub async fn read(&self) -> Result<LockGuard> {
        self.acquire(Side::Read, Deadline::Never)
            .await?
            .ok_or(crate::Error::SessionLost)
    }

    /// A read lock only if no writer holds or waits before us now.
    pub async fn try_read(&self) -> Result<Option<LockGuard>> {
        self.acquire(Side::Read, Deadline::Now).await
    }

    /// Waits at most `timeout` for a read lock; `None` if not granted in time.
    pub async fn read_timeout(&self, timeout: Duration) -> Result<Option<LockGuard>> {
        self.acquire(Side::Read, Deadline::after(timeout)?).await
    }

    /// Waits for the write lock.
    pub async fn write(&self) -> Result<LockGuard> {
        self.acquire(Side::Write, Deadline::Never)
            .await?
            .ok_or(crate::Error::SessionLost)
    }

    /// The write lock only if nobody holds or waits for either side now.
    pub async fn try_write(&self) -> Result<Option<LockGuard>> {
        self.acquire(Side::Write, Deadline::Now).await
    }

    /// Waits at most `timeout` for the write lock; `None` if not granted in time.
    pub async fn write_timeout(&self, timeout: Duration) -> Result<Option<LockGuard>> {
        self.acquire(Side::Write, Deadline::after(timeout)?).await
    }

    async fn acquire(&self, side: Side, deadline: Deadline) -> Result<Option<LockGuard>> {
        let (dir, wait_on) = match side {
            Side::Read => ("read", format!("{}/write/", self.name)),
            Side::Write => ("write", format!("{}/", self.name)),
        };
        let place = Place {
            key: format!(
                "{}/{dir}/{:x}-{}",
                self.name,
                self.session.lease_id(),
                unique_suffix()
            )
            .into_bytes(),
            value: Vec::new(),
            wait_on: wait_on.into_bytes(),
            admits: 0,
            per_session: false,
        };
        acquire(&self.session, &place, &self.options, deadline).await
    }
}

impl Configure for RwLock {
    fn described(&self) -> String {
        format!("the etcd read-write lock {:?}", self.name)
    }

    fn set(&mut self, setting: Setting) -> Result<bool> {
        self.options.set(&self.name, setting, Delay::Taken)
    }
}
