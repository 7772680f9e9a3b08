//! The lease lock: Redis's `SET key token NX PX ttl` recipe, with a fencing token and a
//! watchdog.
//!
//! Acquire sets the key to a fresh random 128-bit token only if it does not exist, and in the
//! same script `INCR`s the lock's fencing counter. Release and extend compare the token first
//! (compare-and-delete, compare-and-pexpire), so a holder whose lease ran out cannot release or
//! extend a lock that someone else holds by now: it gets [`Error::NotHeld`].

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::Script;
use tokio::time::Instant;

use super::client::Redis;
use super::conn::{Conn, unexpected_reply};
use super::keys::{LockKeys, check_name};
use super::lease::{
    Lease, LeaseSpec, Renew, check_ttl, fencing_token, millis, new_token, release_by, remaining,
    renew_with,
};
use super::line::{LINE_LUA, LINE_REFRESH, LINE_TTL, LeaveOnDrop, LineKeys, STARVATION};
use super::script::NOW;
use super::wait::{self, Attempt};
use crate::grant::trusted_until;
use crate::options::{Configure, LockOptions, Setting};
use crate::{Error, FencingToken, Result};

/// KEYS: lock, fence, line, line deadlines. ARGV: token, ttl, waiter (empty for a single
/// try, which never joins the line), line ttl, starvation threshold (ms).
///
/// `SET PX` if the lock is free and the line admits the caller (see `line_admits`); then the fencing
/// `INCR`. Otherwise `{0, ms}`: the holder's remaining TTL, or the time until the head of the
/// line loses its place; a waiting caller joins (or refreshes its place in) the line.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{NOW}{LINE_LUA}
line_reap(KEYS[3], KEYS[4], now)
local waiter = ARGV[3]
local wait = redis.call('PTTL', KEYS[1])
if wait == -2 then
  local admitted, head = line_admits(KEYS[3], waiter, now, tonumber(ARGV[5]))
  if admitted then
    redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
    if waiter ~= '' then line_leave(KEYS[3], KEYS[4], waiter) end
    return {{1, redis.call('INCR', KEYS[2])}}
  end
  wait = line_lapse(KEYS[4], head, now)
end
if waiter ~= '' then line_join(KEYS[3], KEYS[4], waiter, now, tonumber(ARGV[4])) end
return {{0, wait}}
"
    ))
});

/// KEYS: lock, line, line deadlines. ARGV: token, channel. Compare-and-delete, then wake the
/// head of the line (everyone when nobody is in line).
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{NOW}{LINE_LUA}
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  line_wake(KEYS[2], KEYS[3], ARGV[2], now)
  return 1
end
return 0
"
    ))
});

/// Compare-and-pexpire.
static EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
",
    )
});

/// Deletes the lock whoever holds it.
static FORCE_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local n = redis.call('DEL', KEYS[1])
if n == 1 then redis.call('PUBLISH', ARGV[1], 'released') end
return n
",
    )
});

/// A mutual-exclusion lock held as a Redis key with a lease.
///
/// Without an explicit [`lease`](crate::LockOptions::lease), the lock is held with the handle's watchdog
/// lease (30 s by default) and renewed every third of it for as long as the guard lives, like
/// Redisson's `RLock`; a holder that crashes frees the lock at most one lease later. With an
/// explicit lease nothing renews it: the guard's [`is_held`](LeaseGuard::is_held) turns false
/// at the (conservatively computed) end of the lease.
///
/// Waiting is woken by a pub/sub message from the release, or by the holder's lease running
/// out; there is no polling loop (a waiter re-attempts once a second at most, to keep its
/// place in line). Fairness is not promised, but nobody starves: a waiter whose first attempt
/// failed joins the lock's line, each release wakes only the head of the line, and once the
/// head has waited 50 ms a free lock is kept for it (before that, whoever asks first may take
/// it, which keeps a contended lock fast; see the `line` module docs, also for when places
/// lapse). Use a ZooKeeper lock when strict order matters.
///
/// ```no_run
/// # async fn demo() -> lockkeeper::Result<()> {
/// use std::time::Duration;
/// use lockkeeper::redis::Redis;
///
/// let redis = Redis::connect("redis://127.0.0.1:6379").await?;
/// let lock = redis.lease_lock("nightly-report");
/// if let Some(guard) = lock.lock_timeout(Duration::from_secs(5)).await? {
///     let token = guard.fencing_token(); // send it along with every write
///     tokio::select! {
///         _ = guard.lost() => eprintln!("lock lost; stop writing"),
///         _ = tokio::time::sleep(Duration::from_secs(1)) => println!("work done with {token}"),
///     }
///     guard.release().await?;
/// }
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct LeaseLock {
    redis: Redis,
    name: Arc<str>,
    keys: Arc<LockKeys>,
    line: Arc<LineKeys>,
    spec: LeaseSpec,
}

impl Redis {
    /// The lease lock called `name` (see [`LeaseLock`]).
    pub fn lease_lock(&self, name: &str) -> LeaseLock {
        let keys = LockKeys::new(self.prefix(), "lease", name);
        LeaseLock {
            redis: self.clone(),
            name: Arc::from(name),
            line: Arc::new(LineKeys::for_lock(&keys)),
            keys: Arc::new(keys),
            spec: self.default_lease(),
        }
    }
}

impl LeaseLock {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How the lock is held ([`LockOptions`]); options left unset keep this handle's (at
    /// first a watchdog lease of the client's default TTL):
    /// - `lease`: hold each acquisition for exactly that long, with no watchdog.
    /// - `watchdog`: renew a lease of that TTL every third of it while the guard lives.
    /// - `max_hold`: each acquisition is given up that long after it: the guard's `lost()`
    ///   resolves and `is_held()` turns false at that instant, and the next holder gets the
    ///   lock at once, or under lock-delay after the delay (the holder is still at work).
    /// - `lock_delay`: the key outlives the holder's lease on the server by the delay, so a
    ///   holder that lapsed (crashed, paused, cut off) keeps everyone out for the delay after
    ///   its own validity ended and its in-flight writes land first; a clean release (or a
    ///   release at the maximum hold time) hands over at once.
    ///
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a duration under 1 ms
    /// (Redis counts in milliseconds), a lease and a watchdog together, or
    /// `keep_through_suspension` (a ZooKeeper option).
    pub fn with_options(self, options: LockOptions) -> Result<LeaseLock> {
        options.apply(self)
    }

    /// The key holding the lock, for inspection (`PTTL`, `GET`).
    pub fn key(&self) -> &str {
        &self.keys.main
    }

    /// Waits until the lock is acquired.
    pub async fn lock(&self) -> Result<LeaseGuard> {
        self.check()?;
        let acquired = self.wait(None).await?;
        // Without a deadline, `wait` only returns once it holds the lock.
        Ok(acquired.expect("acquire without a deadline returns the lock"))
    }

    /// One attempt: `Ok(None)` if the lock is held by someone else (or free but kept for a
    /// waiter that has waited past the starvation threshold).
    pub async fn try_lock(&self) -> Result<Option<LeaseGuard>> {
        self.check()?;
        match self.attempt(new_token(), false).await? {
            Attempt::Acquired(guard) => Ok(Some(guard)),
            Attempt::Busy(_) => Ok(None),
        }
    }

    /// Waits at most `timeout`; `Ok(None)` if the lock could not be had by then.
    pub async fn lock_timeout(&self, timeout: Duration) -> Result<Option<LeaseGuard>> {
        self.check()?;
        let deadline = wait::deadline_in(timeout)?;
        self.wait(Some(deadline)).await
    }

    /// Attempts until acquired or `deadline`, in line after the first failure. The token
    /// doubles as the place in line; whatever ends the wait other than success leaves the line.
    async fn wait(&self, deadline: Option<Instant>) -> Result<Option<LeaseGuard>> {
        let token = new_token();
        let mut leave = LeaveOnDrop {
            conn: self.redis.conn(),
            keys: Arc::clone(&self.line),
            waiter: token.clone(),
            armed: true,
        };
        let acquired = wait::acquire(
            self.redis.subscriber(),
            &self.keys.channel,
            &token,
            deadline,
            || self.attempt(token.clone(), true),
        )
        .await?;
        if acquired.is_some() {
            // The acquire script took us out of the line.
            leave.armed = false;
        }
        Ok(acquired)
    }

    /// How long the current holder's lease has left on the server (Redisson's
    /// `remainTimeToLive`); `None` when nobody holds the lock.
    pub async fn remaining_lease(&self) -> Result<Option<Duration>> {
        check_name("lock", &self.name)?;
        let pttl: i64 = self
            .redis
            .command(redis::cmd("PTTL").arg(&self.keys.main))
            .await?;
        Ok(remaining(pttl))
    }

    /// Whether anyone holds the lock right now.
    pub async fn is_locked(&self) -> Result<bool> {
        check_name("lock", &self.name)?;
        let exists: i64 = self
            .redis
            .command(redis::cmd("EXISTS").arg(&self.keys.main))
            .await?;
        Ok(exists == 1)
    }

    /// Deletes the lock whoever holds it (an operator's tool for a stuck lock; the holder's
    /// guard finds out at its next renewal). Returns whether there was a lock to delete.
    pub async fn force_unlock(&self) -> Result<bool> {
        check_name("lock", &self.name)?;
        let mut conn = self.redis.conn();
        let deleted: i64 = FORCE_RELEASE
            .key(&self.keys.main)
            .arg(&self.keys.channel)
            .invoke_async(&mut conn)
            .await?;
        Ok(deleted == 1)
    }

    fn check(&self) -> Result<()> {
        check_name("lock", &self.name)?;
        self.spec.check()
    }

    /// One cancel-safe acquire attempt; `waiting` joins the line if the lock is busy.
    async fn attempt(&self, token: String, waiting: bool) -> Result<Attempt<LeaseGuard>> {
        let ttl = self.spec.server_ttl();
        let conn = self.redis.conn();
        let keys = Arc::clone(&self.keys);
        let sent = Instant::now();
        let attempt = {
            let (conn, keys, line, token) = (
                conn.clone(),
                Arc::clone(&keys),
                Arc::clone(&self.line),
                token.clone(),
            );
            async move { acquire_once(conn, &keys, &line, &token, ttl, waiting).await }
        };
        let undo = {
            let (conn, keys, line, token) = (
                conn.clone(),
                Arc::clone(&keys),
                Arc::clone(&self.line),
                token.clone(),
            );
            move |abandoned: Attempt<FencingToken>| async move {
                match abandoned {
                    Attempt::Acquired(_) => {
                        let _ = release_once(conn, &keys, &token).await;
                    }
                    Attempt::Busy(_) if waiting => super::line::leave(conn, &line, &token).await,
                    Attempt::Busy(_) => {}
                }
            }
        };
        Ok(match wait::cancel_safe(&conn, attempt, undo).await? {
            Attempt::Acquired(fencing) => {
                let renew = renewer(conn.clone(), Arc::clone(&keys), token.clone());
                let release = {
                    let (conn, keys, token) = (conn.clone(), Arc::clone(&keys), token.clone());
                    release_by(move || {
                        let (conn, keys, token) = (conn.clone(), Arc::clone(&keys), token.clone());
                        async move { release_once(conn, &keys, &token).await }
                    })
                };
                Attempt::Acquired(LeaseGuard {
                    conn,
                    keys,
                    name: Arc::clone(&self.name),
                    token,
                    fencing,
                    lease: Lease::start(sent, self.spec, renew, release),
                    released: false,
                })
            }
            // A waiter comes back at least this often to keep its place in line.
            Attempt::Busy(retry) if waiting => {
                Attempt::Busy(Some(retry.map_or(LINE_REFRESH, |r| r.min(LINE_REFRESH))))
            }
            Attempt::Busy(retry) => Attempt::Busy(retry),
        })
    }
}

async fn acquire_once(
    conn: Conn,
    keys: &LockKeys,
    line: &LineKeys,
    token: &str,
    ttl: Duration,
    waiting: bool,
) -> Result<Attempt<FencingToken>> {
    let waiter = if waiting { token } else { "" };
    let reply: Vec<i64> = super::script::call(
        &ACQUIRE,
        conn,
        &[&keys.main, &keys.fence, &line.line, &line.deadlines],
        &[
            token.to_string(),
            millis(ttl).to_string(),
            waiter.to_string(),
            millis(LINE_TTL).to_string(),
            millis(STARVATION).to_string(),
        ],
    )
    .await?;
    match reply.as_slice() {
        [1, fence] => Ok(Attempt::Acquired(fencing_token(*fence)?)),
        [0, wait] => Ok(Attempt::Busy(remaining(*wait))),
        _ => Err(unexpected_reply("unexpected answer from the lock acquire script", reply).into()),
    }
}

async fn release_once(mut conn: Conn, keys: &LockKeys, token: &str) -> Result<bool> {
    let line = LineKeys::for_lock(keys);
    let released: i64 = RELEASE
        .key(&keys.main)
        .key(&line.line)
        .key(&line.deadlines)
        .arg(token)
        .arg(&keys.channel)
        .invoke_async(&mut conn)
        .await?;
    Ok(released == 1)
}

async fn extend_once(
    mut conn: Conn,
    keys: Arc<LockKeys>,
    token: String,
    ttl: Duration,
) -> Result<bool> {
    let extended: i64 = EXTEND
        .key(&keys.main)
        .arg(&token)
        .arg(millis(ttl))
        .invoke_async(&mut conn)
        .await?;
    Ok(extended == 1)
}

fn renewer(conn: Conn, keys: Arc<LockKeys>, token: String) -> Renew {
    renew_with(move |ttl| extend_once(conn.clone(), Arc::clone(&keys), token.clone(), ttl))
}

/// Proof of holding a [`LeaseLock`]. Released (best effort, in a spawned task) when dropped;
/// [`release`](LeaseGuard::release) releases and reports.
///
/// ```no_run
/// # async fn demo(redis: lockkeeper::redis::Redis) -> lockkeeper::Result<()> {
/// let guard = redis.lease_lock("orders").lock().await?;
/// assert!(guard.is_held());
/// let token = guard.fencing_token();
/// guard.release().await?;
/// # let _ = token;
/// # Ok(())
/// # }
/// ```
pub struct LeaseGuard {
    conn: Conn,
    keys: Arc<LockKeys>,
    name: Arc<str>,
    token: String,
    fencing: FencingToken,
    lease: Lease,
    released: bool,
}

impl LeaseGuard {
    /// The name of the lock held.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// This acquisition's fencing token: larger than that of every earlier acquisition of this
    /// lock (on one Redis whose data survives; see the module docs about failover).
    pub fn fencing_token(&self) -> FencingToken {
        self.fencing
    }

    /// The random token stored in the lock key while this guard holds it.
    pub fn token(&self) -> &str {
        &self.token
    }

    /// Whether the lock is still ours, as far as this process can tell: the lease has not run
    /// out, renewal has not failed, and the guard has not been released.
    pub fn is_held(&self) -> bool {
        self.lease.is_held()
    }

    /// The instant the current lease ends (earlier than the key's expiry on the server), while
    /// held.
    pub fn valid_until(&self) -> Option<Instant> {
        self.lease.valid_until()
    }

    /// Resolves when the holder can no longer be sure it holds the lock: renewal found the key
    /// gone or taken over, renewals failed until the deadline, or the lease ran out. Race it
    /// against the work the lock protects.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + use<> {
        self.lease.lost()
    }

    /// Sets the lease to `lease` from now if the lock is still ours; [`Error::NotHeld`] (and
    /// the guard is lost) if it is not. With a watchdog running, its next renewal sets the
    /// watchdog lease again.
    pub async fn extend(&mut self, lease: Duration) -> Result<()> {
        check_ttl("lease time", lease)?;
        let sent = Instant::now();
        if extend_once(
            self.conn.clone(),
            Arc::clone(&self.keys),
            self.token.clone(),
            self.lease.on_server(lease),
        )
        .await?
        {
            self.lease.renewed(trusted_until(sent, lease));
            Ok(())
        } else {
            self.lease.mark_lost();
            Err(Error::NotHeld)
        }
    }

    /// Releases the lock. [`Error::NotHeld`] if it was not ours any more (its lease ran out,
    /// or someone deleted it). A release whose answer is lost with the connection is sent
    /// again; if the retry finds the lock gone, the first one may have released it, and it
    /// counts as released when it was sent within the lease.
    pub async fn release(mut self) -> Result<()> {
        self.released = true;
        let (conn, keys, token) = (&self.conn, &self.keys, &self.token);
        self.lease
            .release_with(|| release_once(conn.clone(), keys, token))
            .await
    }
}

impl Drop for LeaseGuard {
    fn drop(&mut self) {
        if self.released || !self.lease.end() {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (conn, keys, token) = (
                self.conn.clone(),
                Arc::clone(&self.keys),
                self.token.clone(),
            );
            self.conn.spawn_cleanup(&runtime, async move {
                let _ = release_once(conn, &keys, &token).await;
            });
        }
    }
}

impl std::fmt::Debug for LeaseGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("LeaseGuard")
            .field("name", &self.name)
            .field("fencing_token", &self.fencing)
            .field("held", &self.is_held())
            .finish()
    }
}

impl Configure for LeaseLock {
    fn described(&self) -> String {
        format!("the Redis lock {:?}", self.name)
    }

    fn set(&mut self, setting: Setting) -> Result<bool> {
        self.spec.set(setting)
    }
}
