//! Redlock: one lock over N independent Redis masters, held while a majority of them hold it.
//!
//! A lock on one Redis is lost with that Redis (a failover to a replica that had not yet
//! received the key hands the lock to a second client). Redlock spreads the lock over N
//! masters that do not replicate to each other, so that no single crash can take it away:
//!
//! 1. Note the time, pick a random token, and send `SET key token NX PX ttl` to every master
//!    at once, each with a short timeout (by default min(50 ms, ttl/10)) so that a dead master
//!    costs little of the lease.
//! 2. The lock is acquired when a majority (N/2 + 1) said OK and time is left: the *validity*
//!    is `ttl - elapsed - drift`, with `drift = ttl * 1% + 2 ms` for clocks that run at slightly
//!    different rates. The holder may trust the lock only until then.
//! 3. Otherwise, delete the key on every master, compare-and-delete by token so that nobody
//!    else's key is touched (including masters that timed out: the `SET` may have landed late),
//!    and try again after a random delay, so that contenders who split the vote do not split it
//!    again in lockstep.
//! 4. Extending is the same vote with compare-and-`PEXPIRE`.
//!
//! # What Redlock does not guarantee
//!
//! - **No fencing token.** A safe token must come from one totally ordered source that every
//!   acquisition passes through. Redlock has none: each master could count its own, but two
//!   majorities need share only one master, and that master's count says nothing about the
//!   others; a master restarted without its data would count from the start again. A number
//!   handed out here would look like a fencing token and not be one, so none is offered. When
//!   the protected resource must reject a paused holder's late writes, use a lock with a real
//!   token: [`Redis::lease_lock`](super::Redis::lease_lock) on one Redis (`INCR` in the acquire
//!   script) or a ZooKeeper lock (the lock node's czxid).
//! - **Bounded clocks and pauses.** Validity is measured on the client's monotonic clock and
//!   the expiry on each master's; a master whose clock jumps forward (or runs fast) expires the
//!   key early. A client process paused (GC, SIGSTOP, swapping) past its validity does not know
//!   it lost the lock and may act as holder beside the next one. Check [`RedlockGuard::is_held`]
//!   or race [`RedlockGuard::lost`] against the work; it narrows the window, it cannot close it.
//! - **Masters must not forget.** A master that crashes and comes back empty before the TTL has
//!   passed can give a second client a majority while the first still holds the lock. Either
//!   keep a crashed master down for longer than the longest TTL in use, or run every master
//!   with `appendonly yes` and `appendfsync always` so that an acknowledged `SET` survives the
//!   crash. (The crash-restart test reproduces both outcomes.)
//! - **Masters must be distinct.** Two URLs that reach the same server count twice towards the
//!   majority; identical URLs are refused, aliases (a host name and its address) cannot be seen.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use rand::Rng;
use redis::RedisError;
use tokio::time::Instant;

use super::keys::{self, DEFAULT_PREFIX, LockKeys};
use super::lease::{Lease, LeaseSpec, Renew, check_ttl, release_by};
use crate::grant::trusted_until;
use crate::options::{Configure, LockOptions, Setting};
use crate::{Error, Result};

mod node;

use node::{Node, Tally, join_all};

/// The lease a Redlock lock sets when none is given as a [`lease`](crate::LockOptions::lease).
pub const DEFAULT_REDLOCK_TTL: Duration = Duration::from_secs(30);

/// The longest one master may take to answer by default; less when the lease is short (a
/// tenth of it), so that a dead master costs a small part of the validity.
pub const DEFAULT_NODE_TIMEOUT: Duration = Duration::from_millis(50);

const DEFAULT_RETRY_DELAY: Duration = Duration::from_millis(100);

/// Settings of a [`Redlock`].
///
/// ```
/// use std::time::Duration;
/// use lockkeeper::redis::redlock::RedlockOptions;
///
/// let options = RedlockOptions::new()
///     .key_prefix("billing")
///     .node_timeout(Duration::from_millis(20))
///     .retry_delay(Duration::from_millis(200));
/// # let _ = options;
/// ```
#[derive(Clone, Debug)]
pub struct RedlockOptions {
    prefix: String,
    node_timeout: Option<Duration>,
    retry_delay: Duration,
    connect_timeout: Duration,
}

impl Default for RedlockOptions {
    fn default() -> RedlockOptions {
        RedlockOptions {
            prefix: DEFAULT_PREFIX.to_string(),
            node_timeout: None,
            retry_delay: DEFAULT_RETRY_DELAY,
            connect_timeout: Duration::from_secs(10),
        }
    }
}

impl RedlockOptions {
    /// The defaults: prefix `lockkeeper`, per-master timeout min(50 ms, lease/10), retries
    /// after 50-150 ms, 10 s to connect in the background.
    pub fn new() -> RedlockOptions {
        RedlockOptions::default()
    }

    /// The first part of the key (`PREFIX:redlock:{name}`). Must not contain braces.
    pub fn key_prefix(mut self, prefix: impl Into<String>) -> RedlockOptions {
        self.prefix = prefix.into();
        self
    }

    /// How long each master may take to answer one command, connecting included. Must be
    /// shorter than the lease: the time spent waiting comes out of the validity.
    pub fn node_timeout(mut self, timeout: Duration) -> RedlockOptions {
        self.node_timeout = Some(timeout);
        self
    }

    /// The mean pause between two attempts of [`lock`](RedlockLock::lock) and
    /// [`lock_timeout`](RedlockLock::lock_timeout); each pause is drawn at random from half to
    /// one and a half times this, so that contenders who split the vote do not meet again.
    pub fn retry_delay(mut self, delay: Duration) -> RedlockOptions {
        self.retry_delay = delay;
        self
    }

    /// How long a (background) connect to one master may take.
    pub fn connect_timeout(mut self, timeout: Duration) -> RedlockOptions {
        self.connect_timeout = timeout;
        self
    }

    fn check(&self) -> Result<()> {
        keys::check_prefix(&self.prefix)?;
        if let Some(timeout) = self.node_timeout {
            check_ttl("node timeout", timeout)?;
        }
        check_ttl("retry delay", self.retry_delay)?;
        check_ttl("connect timeout", self.connect_timeout)?;
        Ok(())
    }
}

/// A set of independent Redis masters that Redlock locks are taken on. Cheap to clone.
///
/// Creating it sends nothing: each master is connected to in the background on first use,
/// and a master that is down only counts as a "no" until it is back.
///
/// ```no_run
/// # async fn demo() -> lockkeeper::Result<()> {
/// use std::time::Duration;
/// use lockkeeper::redis::redlock::Redlock;
///
/// let redlock = Redlock::new(&[
///     "redis://10.0.0.1:6379",
///     "redis://10.0.0.2:6379",
///     "redis://10.0.0.3:6379",
/// ])?;
/// let lease = lockkeeper::LockOptions::new().lease(Duration::from_secs(60));
/// let lock = redlock.lease_lock("nightly-report").with_options(lease)?;
/// if let Some(guard) = lock.try_lock().await? {
///     // Valid for guard.validity(); no fencing token (see the module docs).
///     guard.release().await?;
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct Redlock {
    shared: Arc<Shared>,
}

struct Shared {
    nodes: Vec<Arc<Node>>,
    options: RedlockOptions,
}

impl Shared {
    /// A majority of the masters.
    fn quorum(&self) -> usize {
        self.nodes.len() / 2 + 1
    }

    /// Compare-and-delete on every master at once; a tally of the answers.
    async fn release_everywhere(&self, key: &str, token: &str, limit: Duration) -> Tally {
        let calls = self
            .nodes
            .iter()
            .map(|node| node.release(limit, key, token))
            .collect();
        Tally::of(join_all(calls).await)
    }
}

impl Redlock {
    /// Redlock over the masters at `masters` (`redis://host:port` URLs) with default options.
    /// Use an odd number of at least three: with N masters, N/2 + 1 must agree.
    pub fn new<S: AsRef<str>>(masters: &[S]) -> Result<Redlock> {
        Redlock::with_options(masters, RedlockOptions::default())
    }

    /// Redlock over `masters` with `options`. Refuses an empty list and a URL given twice
    /// (one server must not vote twice).
    pub fn with_options<S: AsRef<str>>(masters: &[S], options: RedlockOptions) -> Result<Redlock> {
        options.check()?;
        if masters.is_empty() {
            return Err(Error::InvalidArgument(
                "Redlock needs at least one master URL (three or more to survive a failure)".into(),
            ));
        }
        let mut nodes: Vec<Arc<Node>> = Vec::with_capacity(masters.len());
        for url in masters {
            let url = url.as_ref().trim();
            if url.is_empty() {
                return Err(Error::InvalidArgument(
                    "a Redlock master URL must not be empty".into(),
                ));
            }
            if nodes.iter().any(|n| n.url() == url) {
                return Err(Error::InvalidArgument(format!(
                    "Redlock master {url} is listed twice: it would vote twice"
                )));
            }
            nodes.push(Arc::new(Node::open(url, options.connect_timeout)?));
        }
        Ok(Redlock {
            shared: Arc::new(Shared { nodes, options }),
        })
    }

    /// How many masters there are.
    pub fn masters(&self) -> usize {
        self.shared.nodes.len()
    }

    /// How many masters must agree: a majority, N/2 + 1.
    pub fn quorum(&self) -> usize {
        self.shared.quorum()
    }

    /// The lock called `name` (key `PREFIX:redlock:{name}` on every master), with the default
    /// lease of 30 s. Nothing is sent until it is locked.
    pub fn lease_lock(&self, name: &str) -> RedlockLock {
        let keys = LockKeys::new(&self.shared.options.prefix, "redlock", name);
        RedlockLock {
            shared: Arc::clone(&self.shared),
            name: Arc::from(name),
            key: Arc::from(keys.main),
            ttl: DEFAULT_REDLOCK_TTL,
            max_hold: None,
            lock_delay: None,
        }
    }
}

impl std::fmt::Debug for Redlock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let urls: Vec<&str> = self.shared.nodes.iter().map(|n| n.url()).collect();
        f.debug_struct("Redlock")
            .field("masters", &urls)
            .field("options", &self.shared.options)
            .finish()
    }
}

/// One named Redlock lock. Taking it sets the key on a majority of the masters; there is no
/// queue and no wake-up, so waiting is retrying after a random delay.
///
/// ```no_run
/// # async fn demo(redlock: lockkeeper::redis::redlock::Redlock) -> lockkeeper::Result<()> {
/// use std::time::Duration;
/// let lease = lockkeeper::LockOptions::new().lease(Duration::from_secs(10));
/// let lock = redlock.lease_lock("orders").with_options(lease)?;
/// match lock.lock_timeout(Duration::from_secs(2)).await? {
///     Some(guard) => {
///         tokio::select! {
///             _ = guard.lost() => eprintln!("validity ran out before the work was done"),
///             _ = tokio::time::sleep(Duration::from_secs(1)) => {}
///         }
///         guard.release().await?;
///     }
///     None => eprintln!("someone else holds orders"),
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone)]
pub struct RedlockLock {
    shared: Arc<Shared>,
    name: Arc<str>,
    key: Arc<str>,
    ttl: Duration,
    max_hold: Option<Duration>,
    lock_delay: Option<Duration>,
}

/// What one attempt came to.
enum Attempt {
    Acquired(RedlockGuard),
    /// Others hold the lock on enough masters (or the vote was split).
    Busy,
    /// Too many masters failed to answer for a majority to be possible.
    Unreachable(RedisError),
}

impl RedlockLock {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The key set on each master.
    pub fn key(&self) -> &str {
        &self.key
    }

    /// How the lock is held ([`LockOptions`]); options left unset keep this handle's:
    /// - `lease`: the TTL each master sets (the default is the client's). The holder's
    ///   validity is this minus the time the vote took and the clock-drift allowance
    ///   (1% + 2 ms). Redlock has no watchdog: a lease is renewed only by `extend`.
    /// - `max_hold`: each acquisition is given up that long after it (when that comes before
    ///   the validity's end): the guard's `lost()` resolves and `is_held()` turns false at
    ///   that instant. Without lock-delay the key is deleted on every master at once; under
    ///   lock-delay it is left to expire (its TTL is the validity plus the delay), since a
    ///   holder past its maximum hold time is still at work.
    /// - `lock_delay`: each master keeps the key that much longer than the lease the holder
    ///   trusts, so a holder that lapsed keeps everyone out for the delay after its validity
    ///   ended; a clean release deletes the key at once.
    ///
    /// [`Error::InvalidArgument`] for a duration under 1 ms, or for `watchdog` and
    /// `keep_through_suspension`, which Redlock does not take.
    pub fn with_options(self, options: LockOptions) -> Result<RedlockLock> {
        options.apply(self)
    }

    /// How this lock's leases are kept.
    fn spec(&self) -> LeaseSpec {
        LeaseSpec {
            max_hold: self.max_hold,
            lock_delay: self.lock_delay,
            ..fixed(self.ttl)
        }
    }

    /// One attempt: the lock if a majority granted it in time, `Ok(None)` if not (held
    /// elsewhere, or a split vote). An error when so many masters failed to answer that no
    /// majority was possible. Whatever this attempt set is deleted again before it returns.
    pub async fn try_lock(&self) -> Result<Option<RedlockGuard>> {
        self.check()?;
        match self.attempt().await {
            Attempt::Acquired(guard) => Ok(Some(guard)),
            Attempt::Busy => Ok(None),
            Attempt::Unreachable(error) => Err(error.into()),
        }
    }

    /// Attempts until one succeeds or `timeout` has passed (attempts are `retry_delay` apart
    /// on average, so their number is bounded by the timeout). `Ok(None)` when the time ran
    /// out with the lock held elsewhere; the last error when it ran out with too many masters
    /// unreachable. Cancel-safe: dropping the future deletes what an attempt in flight set.
    pub async fn lock_timeout(&self, timeout: Duration) -> Result<Option<RedlockGuard>> {
        self.check()?;
        check_ttl("lock timeout", timeout)?;
        let give_up = Instant::now() + timeout;
        loop {
            let outcome = self.attempt().await;
            let last_error = match outcome {
                Attempt::Acquired(guard) => return Ok(Some(guard)),
                Attempt::Busy => None,
                Attempt::Unreachable(error) => Some(error),
            };
            let pause = self.pause();
            if Instant::now() + pause >= give_up {
                return match last_error {
                    Some(error) => Err(error.into()),
                    None => Ok(None),
                };
            }
            tokio::time::sleep(pause).await;
        }
    }

    /// Attempts until one succeeds, however long that takes, through busy rounds and
    /// unreachable masters alike (each such round is logged). Cancel-safe.
    pub async fn lock(&self) -> Result<RedlockGuard> {
        self.check()?;
        loop {
            match self.attempt().await {
                Attempt::Acquired(guard) => return Ok(guard),
                Attempt::Busy => {}
                Attempt::Unreachable(error) => {
                    tracing::warn!(lock = %self.name, %error, "Redlock: no majority of masters reachable; retrying");
                }
            }
            tokio::time::sleep(self.pause()).await;
        }
    }

    fn check(&self) -> Result<()> {
        keys::check_name("lock", &self.name)?;
        check_ttl("lease time", self.ttl)?;
        self.spec().check()?;
        if self.node_timeout() >= self.ttl {
            return Err(Error::InvalidArgument(format!(
                "the node timeout ({:?}) must be shorter than the lease ({:?})",
                self.node_timeout(),
                self.ttl
            )));
        }
        Ok(())
    }

    fn node_timeout(&self) -> Duration {
        node_timeout_for(self.shared.options.node_timeout, self.ttl)
    }

    fn pause(&self) -> Duration {
        random_pause(self.shared.options.retry_delay)
    }

    /// One vote: `SET NX PX` everywhere, count, keep or undo.
    async fn attempt(&self) -> Attempt {
        let shared = &self.shared;
        let token = uuid::Uuid::new_v4().to_string();
        let limit = self.node_timeout();
        let mut undo = UndoOnDrop {
            shared: Some(Arc::clone(shared)),
            key: Arc::clone(&self.key),
            token: token.clone(),
            limit,
        };
        let sent = Instant::now();
        let calls = shared
            .nodes
            .iter()
            .map(|node| node.acquire(limit, &self.key, &token, self.spec().server_ttl()))
            .collect();
        let tally = Tally::of(join_all(calls).await);
        let valid_until = trusted_until(sent, self.ttl);
        if tally.yes >= shared.quorum() && Instant::now() < valid_until {
            undo.shared = None;
            let release = {
                let (shared, key, token) =
                    (Arc::clone(shared), Arc::clone(&self.key), token.clone());
                release_by(move || {
                    let (shared, key, token) =
                        (Arc::clone(&shared), Arc::clone(&key), token.clone());
                    async move {
                        let tally = shared.release_everywhere(&key, &token, limit).await;
                        Ok(tally.yes > 0)
                    }
                })
            };
            let lease = Lease::start(sent, self.spec(), no_renewal(), release);
            return Attempt::Acquired(RedlockGuard {
                shared: Arc::clone(shared),
                name: Arc::clone(&self.name),
                key: Arc::clone(&self.key),
                token,
                lease,
                released: false,
            });
        }
        // Undo everywhere, not only where we know the SET landed: one that timed out may
        // still have landed.
        shared.release_everywhere(&self.key, &token, limit).await;
        undo.shared = None;
        match tally.first_error {
            Some(error) if tally.unreachable(shared.quorum()) => Attempt::Unreachable(error),
            _ => Attempt::Busy,
        }
    }
}

impl std::fmt::Debug for RedlockLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedlockLock")
            .field("name", &self.name)
            .field("key", &self.key)
            .field("lease", &self.ttl)
            .finish()
    }
}

/// Deletes (in a spawned task) what an attempt set if the attempt is dropped half-way, so that
/// a cancelled `lock()` leaves nothing behind.
struct UndoOnDrop {
    shared: Option<Arc<Shared>>,
    key: Arc<str>,
    token: String,
    limit: Duration,
}

impl Drop for UndoOnDrop {
    fn drop(&mut self) {
        if let Some(shared) = self.shared.take()
            && let Ok(runtime) = tokio::runtime::Handle::try_current()
        {
            let (key, token, limit) = (Arc::clone(&self.key), self.token.clone(), self.limit);
            runtime.spawn(async move {
                shared.release_everywhere(&key, &token, limit).await;
            });
        }
    }
}

/// A held Redlock lock, valid until [`valid_until`](Self::valid_until). Released by
/// [`release`](Self::release) or, best effort, on drop.
///
/// There is deliberately no `fencing_token()`: Redlock has no source of one (see the module
/// docs). [`token`](Self::token) is the random value stored in the key, which identifies this
/// acquisition but does not order it against others.
///
/// ```no_run
/// # async fn demo(redlock: lockkeeper::redis::redlock::Redlock) -> lockkeeper::Result<()> {
/// use std::time::Duration;
/// let mut guard = redlock.lease_lock("orders").lock().await?;
/// assert!(guard.is_held());
/// println!("valid for another {:?}", guard.validity());
/// guard.extend(Duration::from_secs(30)).await?; // a new vote, on a majority
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
pub struct RedlockGuard {
    shared: Arc<Shared>,
    name: Arc<str>,
    key: Arc<str>,
    token: String,
    lease: Lease,
    released: bool,
}

impl RedlockGuard {
    /// The name of the lock held.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The random value stored in the key on the masters while this guard holds it.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Whether the validity has not run out yet (and the guard was not released or found
    /// lost by [`extend`](Self::extend)).
    pub fn is_held(&self) -> bool {
        self.lease.is_held()
    }

    /// The instant the validity ends, while held: the time the vote was sent plus the lease,
    /// minus the drift allowance.
    pub fn valid_until(&self) -> Option<Instant> {
        self.lease.valid_until()
    }

    /// How much validity is left (zero once it ran out).
    pub fn validity(&self) -> Duration {
        self.valid_until().map_or(Duration::ZERO, |until| {
            until.saturating_duration_since(Instant::now())
        })
    }

    /// Resolves when the validity runs out (or an extend found the lock gone). Race it against
    /// the work the lock protects.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + 'static {
        self.lease.lost()
    }

    /// Sets the lease to `ttl` from now on every master that still holds our key; succeeds when
    /// a majority did so within the new validity. When masters said the key is not ours any
    /// more, the guard counts as lost and this is [`Error::NotHeld`]; when too many masters
    /// failed to answer, the error, and the old validity stands.
    pub async fn extend(&mut self, ttl: Duration) -> Result<()> {
        check_ttl("lease time", ttl)?;
        if !self.is_held() {
            return Err(Error::NotHeld);
        }
        let limit = node_timeout_for(self.shared.options.node_timeout, ttl);
        if limit >= ttl {
            return Err(Error::InvalidArgument(format!(
                "the node timeout ({limit:?}) must be shorter than the lease ({ttl:?})"
            )));
        }
        let sent = Instant::now();
        let calls = self
            .shared
            .nodes
            .iter()
            .map(|node| node.extend(limit, &self.key, &self.token, self.lease.on_server(ttl)))
            .collect();
        let tally = Tally::of(join_all(calls).await);
        let valid_until = trusted_until(sent, ttl);
        let quorum = self.shared.quorum();
        if tally.yes >= quorum && Instant::now() < valid_until {
            self.lease.renewed(valid_until);
            return Ok(());
        }
        match tally.first_error {
            Some(error) if tally.unreachable(quorum) => Err(error.into()),
            _ => {
                self.lease.mark_lost();
                Err(Error::NotHeld)
            }
        }
    }

    /// Deletes the key (compare-and-delete) on every master. [`Error::NotHeld`] if the validity
    /// had already run out (the delete still went out, harmlessly: it only removes our own
    /// key); the error if fewer than a majority answered (the rest expire with their lease).
    pub async fn release(mut self) -> Result<()> {
        let was_held = self.is_held();
        self.released = true;
        if !self.lease.end() {
            // Released at the maximum hold time already.
            return Err(Error::NotHeld);
        }
        let limit = node_timeout_for(self.shared.options.node_timeout, DEFAULT_REDLOCK_TTL);
        let tally = self
            .shared
            .release_everywhere(&self.key, &self.token, limit)
            .await;
        if !was_held {
            return Err(Error::NotHeld);
        }
        match tally.first_error {
            Some(error) if tally.unreachable(self.shared.quorum()) => Err(error.into()),
            _ => Ok(()),
        }
    }
}

impl Drop for RedlockGuard {
    fn drop(&mut self) {
        if self.released || !self.lease.end() {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let shared = Arc::clone(&self.shared);
            let (key, token) = (Arc::clone(&self.key), self.token.clone());
            let limit = node_timeout_for(shared.options.node_timeout, DEFAULT_REDLOCK_TTL);
            runtime.spawn(async move {
                shared.release_everywhere(&key, &token, limit).await;
            });
        }
    }
}

impl std::fmt::Debug for RedlockGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedlockGuard")
            .field("name", &self.name)
            .field("held", &self.is_held())
            .field("validity", &self.validity())
            .finish()
    }
}

/// The per-master timeout for a lease of `ttl`: the configured one, else min(50 ms, ttl/10).
fn node_timeout_for(configured: Option<Duration>, ttl: Duration) -> Duration {
    configured
        .unwrap_or_else(|| DEFAULT_NODE_TIMEOUT.min(ttl / 10))
        .max(Duration::from_millis(1))
}

/// A pause drawn uniformly from [delay/2, 3*delay/2).
fn random_pause(delay: Duration) -> Duration {
    let low = delay / 2;
    let span = delay.max(Duration::from_millis(1));
    low + span.mul_f64(rand::thread_rng().r#gen::<f64>())
}

/// A fixed lease: Redlock renews only when asked ([`RedlockGuard::extend`]).
fn fixed(ttl: Duration) -> LeaseSpec {
    LeaseSpec {
        fixed: Some(ttl),
        watchdog: ttl,
        max_hold: None,
        lock_delay: None,
    }
}

/// The renewal a fixed lease never calls.
fn no_renewal() -> Renew {
    Arc::new(|_| Box::pin(async { Ok(false) }))
}

impl Configure for RedlockLock {
    fn described(&self) -> String {
        format!("the Redlock lock {:?}", self.name)
    }

    fn set(&mut self, setting: Setting) -> Result<bool> {
        match setting {
            Setting::Lease(ttl) => self.ttl = ttl,
            Setting::MaxHold(max_hold) => self.max_hold = Some(max_hold),
            Setting::LockDelay(delay) => self.lock_delay = Some(delay),
            Setting::Watchdog(_) | Setting::KeepThroughSuspension => return Ok(false),
        }
        self.check()?;
        Ok(true)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_node_timeout_defaults_to_a_tenth_of_the_lease_at_most_50ms() {
        let ms = Duration::from_millis;
        assert_eq!(node_timeout_for(None, Duration::from_secs(30)), ms(50));
        assert_eq!(node_timeout_for(None, ms(200)), ms(20));
        assert_eq!(node_timeout_for(None, ms(5)), ms(1));
        assert_eq!(
            node_timeout_for(Some(ms(300)), Duration::from_secs(30)),
            ms(300)
        );
    }

    #[test]
    fn pauses_are_random_within_half_to_one_and_a_half_delays() {
        let delay = Duration::from_millis(100);
        let pauses: Vec<Duration> = (0..200).map(|_| random_pause(delay)).collect();
        for pause in &pauses {
            assert!((delay / 2..delay * 3 / 2).contains(pause), "{pause:?}");
        }
        let distinct: std::collections::HashSet<_> = pauses.iter().collect();
        assert!(
            distinct.len() > 100,
            "not random: {} distinct",
            distinct.len()
        );
    }

    #[test]
    fn quorum_is_a_majority() {
        for (masters, quorum) in [(1, 1), (2, 2), (3, 2), (4, 3), (5, 3), (7, 4)] {
            let urls: Vec<String> = (0..masters)
                .map(|i| format!("redis://127.0.0.1:{}", 7000 + i))
                .collect();
            let redlock = Redlock::new(&urls).expect("valid URLs");
            assert_eq!(redlock.masters(), masters);
            assert_eq!(redlock.quorum(), quorum, "{masters} masters");
        }
    }

    #[test]
    fn bad_configuration_is_refused_before_anything_is_sent() {
        let invalid = |r: Result<Redlock>| matches!(r, Err(Error::InvalidArgument(_)));
        assert!(invalid(Redlock::new::<&str>(&[])));
        assert!(invalid(Redlock::new(&["redis://127.0.0.1:1", " "])));
        assert!(invalid(Redlock::new(&[
            "redis://127.0.0.1:1",
            "redis://127.0.0.1:1"
        ])));
        let zero = RedlockOptions::new().node_timeout(Duration::ZERO);
        assert!(invalid(Redlock::with_options(
            &["redis://127.0.0.1:1"],
            zero
        )));
        let braces = RedlockOptions::new().key_prefix("a{b}");
        assert!(invalid(Redlock::with_options(
            &["redis://127.0.0.1:1"],
            braces
        )));
        assert!(matches!(Redlock::new(&["not a url"]), Err(Error::Redis(_))));
    }

    #[tokio::test]
    async fn bad_locks_are_refused_before_anything_is_sent() {
        // Nothing listens on port 1: a refusal that reached the network would be an I/O error.
        let options = RedlockOptions::new().node_timeout(Duration::from_secs(1));
        let redlock = Redlock::with_options(&["redis://127.0.0.1:1"], options).unwrap();
        let invalid = |r: Result<Option<RedlockGuard>>| matches!(r, Err(Error::InvalidArgument(_)));
        assert!(invalid(redlock.lease_lock("").try_lock().await));
        assert!(invalid(redlock.lease_lock("a}b").try_lock().await));
        let lease = |lease| {
            let options = crate::LockOptions::new().lease(lease);
            redlock.lease_lock("x").with_options(options)
        };
        assert!(matches!(
            lease(Duration::ZERO),
            Err(Error::InvalidArgument(_))
        ));
        let shorter_than_node_timeout = lease(Duration::from_millis(500));
        assert!(matches!(
            shorter_than_node_timeout,
            Err(Error::InvalidArgument(_))
        ));
        let lock = redlock.lease_lock("x");
        assert!(invalid(lock.lock_timeout(Duration::ZERO).await));
        let unnamed = redlock.lease_lock("").lock().await;
        assert!(
            matches!(unnamed, Err(Error::InvalidArgument(_))),
            "{unnamed:?}"
        );
    }
}
