//! [`Semaphore`]: at most `n` holders of a name on etcd.

use std::sync::Arc;
use std::time::Duration;

use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::etcd::guard::{HoldOptions, LockGuard};
use crate::etcd::queue::{Place, acquire};
use crate::etcd::session::Session;
use crate::etcd::{check_name, unique_suffix};
use crate::options::{Configure, Delay, LockOptions, Setting};

/// A distributed counting semaphore on etcd (lockkeeper's layout): each acquisition puts
/// `NAME/{lease:x}-{unique}` with the session's lease and holds a permit while fewer than `n`
/// keys under `NAME/` are older than its own. Every handle of one name must use the same `n`.
///
/// - **Fair**: permits go in order of arrival.
/// - **Few wake-ups**: a waiter watches the `n` keys just before its own; it cannot be granted
///   before one of them goes, so releases further ahead do not wake it.
/// - A crashed holder's permit returns one lease TTL later; each permit has a fencing token
///   (its key's create revision; tokens of one semaphore's permits are distinct and grow, but
///   several permits are valid at once, so a fence must allow `n` concurrent holders).
///
/// ```no_run
/// # async fn demo(session: lockkeeper::etcd::Session) -> lockkeeper::Result<()> {
/// let downloads = session.semaphore("downloads", 3)?;
/// let permit = downloads.acquire().await?; // one of at most 3
/// permit.release().await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct Semaphore {
    session: Session,
    name: Arc<str>,
    permits: usize,
    options: HoldOptions,
}

impl Session {
    /// The semaphore called `name` with `permits` permits (see [`Semaphore`]).
    /// [`Error::InvalidArgument`] for an empty name or zero permits.
    pub fn semaphore(&self, name: &str, permits: usize) -> Result<Semaphore> {
        check_name("semaphore", name)?;
        if permits == 0 {
            return Err(Error::InvalidArgument(format!(
                "the etcd semaphore {name:?} needs at least one permit, got 0"
            )));
        }
        Ok(Semaphore {
            session: self.clone(),
            name: Arc::from(name),
            permits,
            options: HoldOptions::default(),
        })
    }
}

impl Semaphore {
    /// How permits are held ([`LockOptions`]): `max_hold`, each permit given up that long
    /// after its grant, as for a [`Mutex`](crate::etcd::Mutex::with_options).
    /// [`Error::InvalidArgument`] for zero or an option a semaphore does not take.
    pub fn with_options(self, options: LockOptions) -> Result<Semaphore> {
        options.apply(self)
    }

    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many permits it has.
    pub fn permits(&self) -> usize {
        self.permits
    }

    /// Waits for a permit.
    pub async fn acquire(&self) -> Result<LockGuard> {
        self.take(Deadline::Never).await?.ok_or(Error::SessionLost)
    }

    /// A permit only if one is free now (and nobody waits before us).
    pub async fn try_acquire(&self) -> Result<Option<LockGuard>> {
        self.take(Deadline::Now).await
    }

    /// Waits at most `timeout` for a permit; `None` if none came in time.
    pub async fn acquire_timeout(&self, timeout: Duration) -> Result<Option<LockGuard>> {
        self.take(Deadline::after(timeout)?).await
    }

    async fn take(&self, deadline: Deadline) -> Result<Option<LockGuard>> {
        let place = Place {
            key: format!(
                "{}/{:x}-{}",
                self.name,
                self.session.lease_id(),
                unique_suffix()
            )
            .into_bytes(),
            value: Vec::new(),
            wait_on: format!("{}/", self.name).into_bytes(),
            admits: self.permits - 1,
            per_session: false,
        };
        acquire(&self.session, &place, &self.options, deadline).await
    }
}

impl Configure for Semaphore {
    fn described(&self) -> String {
        format!("the etcd semaphore {:?}", self.name)
    }

    fn set(&mut self, setting: Setting) -> Result<bool> {
        self.options.set(&self.name, setting, Delay::NotTaken)
    }
}
