//! The reentrant lock: Redisson's `RLock` recipe, a Redis hash `{owner: count}` driven by Lua.
//!
//! Acquire creates the hash for a new owner (and takes a fencing token), or increments the
//! count if the caller's owner already holds it; either way the lease is refreshed (never
//! shortened: an outer acquisition may hold a longer one). Release decrements and deletes the
//! hash at zero, publishing to waiters. The owner is the [`Redis`] handle's owner id, so
//! re-entries are counted for whoever shares that id: every task of one handle, or several
//! processes that were given the same id.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::Script;
use tokio::time::Instant;

use super::client::Redis;
use super::conn::{Conn, unexpected_reply};
use super::keys::{LockKeys, check_name, check_owner};
use super::lease::{
    Lease, LeaseSpec, fencing_token, millis, new_token, release_by, remaining, renew_with,
};
use super::line::{LINE_LUA, LINE_REFRESH, LINE_TTL, LeaveOnDrop, LineKeys, STARVATION};
use super::script::{NOW, call};
use super::wait::{self, Attempt};
use crate::options::{Configure, LockOptions, Setting};
use crate::{Error, FencingToken, Result};

/// KEYS: hash, fence, line, line deadlines. ARGV: owner, ttl, waiter (empty for a single
/// try), line ttl, starvation threshold (ms).
///
/// `{1, count, fence}` when acquired (fence from the counter: `INCR` for a new owner, the
/// current value for a re-entry), `{0, 0, ms}` when another owner holds it (its remaining TTL)
/// or it is free but kept for a starving waiter at the head of the line (until its place
/// lapses).
/// Re-entries never wait in line.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{NOW}{LINE_LUA}
line_reap(KEYS[3], KEYS[4], now)
local ttl = tonumber(ARGV[2])
local waiter = ARGV[3]
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 1 then
  local count = redis.call('HINCRBY', KEYS[1], ARGV[1], 1)
  if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
  if waiter ~= '' then line_leave(KEYS[3], KEYS[4], waiter) end
  return {{1, count, tonumber(redis.call('GET', KEYS[2]) or '0')}}
end
local wait = redis.call('PTTL', KEYS[1])
if wait == -2 then
  local admitted, head = line_admits(KEYS[3], waiter, now, tonumber(ARGV[5]))
  if admitted then
    redis.call('HSET', KEYS[1], ARGV[1], 1)
    redis.call('PEXPIRE', KEYS[1], ttl)
    if waiter ~= '' then line_leave(KEYS[3], KEYS[4], waiter) end
    return {{1, 1, redis.call('INCR', KEYS[2])}}
  end
  wait = line_lapse(KEYS[4], head, now)
end
if waiter ~= '' then line_join(KEYS[3], KEYS[4], waiter, now, tonumber(ARGV[4])) end
return {{0, 0, wait}}
"
    ))
});

/// KEYS: hash, line, line deadlines. ARGV: owner, channel. `-1` not held by this owner, `0`
/// released (deleted, the head of the line woken), `n > 0` decremented to n.
static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{NOW}{LINE_LUA}
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return -1 end
local count = redis.call('HINCRBY', KEYS[1], ARGV[1], -1)
if count > 0 then return count end
redis.call('DEL', KEYS[1])
line_wake(KEYS[2], KEYS[3], ARGV[2], now)
return 0
"
    ))
});

/// Renewal by owner: pexpire (never shorter) if the owner still holds it.
static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
if redis.call('PTTL', KEYS[1]) < tonumber(ARGV[2]) then
  redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 1
",
    )
});

static FORCE_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local n = redis.call('DEL', KEYS[1])
if n == 1 then redis.call('PUBLISH', ARGV[1], 'released') end
return n
",
    )
});

/// What a release of a reentrant lock did.
///
/// ```no_run
/// # async fn demo(redis: lockkeeper::redis::Redis) -> lockkeeper::Result<()> {
/// use lockkeeper::redis::Unlock;
///
/// let lock = redis.reentrant_lock("orders");
/// let outer = lock.lock().await?;
/// let inner = lock.lock().await?; // the same owner re-enters
/// assert_eq!(inner.release().await?, Unlock::Decremented { remaining: 1 });
/// assert_eq!(outer.release().await?, Unlock::Released);
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Unlock {
    /// The last hold was released: the lock is free, waiters were told.
    Released,
    /// One hold was released; the owner still holds the lock this many times.
    Decremented {
        /// Holds left.
        remaining: u64,
    },
}

/// A reentrant mutual-exclusion lock: the same owner may acquire it again without waiting,
/// and must release it as many times.
///
/// The owner is the handle's [owner id](Redis::owner_id): by default a random UUID per
/// [`Redis`] handle, so **every task using one handle (and its clones) is the same owner** and
/// they do not exclude each other. Give tasks that must exclude each other handles of their
/// own ([`Redis::with_owner_id`] shares the connections), or set one owner id in several
/// processes to let a lock taken in one be re-entered and released in another.
///
/// Leases work as for [`LeaseLock`](super::LeaseLock): a watchdog unless an explicit
/// [`lease`](crate::LockOptions::lease) is set. Each acquisition gets a guard with its own lease
/// and watchdog; the hash expires when the longest of them ends. A hold that outlives its
/// lease is gone even though the count said otherwise: the next acquisition (by anyone) starts
/// afresh at count 1 with a new fencing token.
///
/// Waiting works as for the lease lock: woken by the release, and in line after a failed
/// attempt so that no owner starves (not a fairness guarantee).
///
/// ```no_run
/// # async fn demo() -> lockkeeper::Result<()> {
/// use lockkeeper::redis::{Redis, Unlock};
///
/// let redis = Redis::connect("redis://127.0.0.1:6379").await?;
/// let lock = redis.reentrant_lock("accounts");
/// let outer = lock.lock().await?;
/// let inner = lock.lock().await?; // same owner: no wait
/// assert_eq!(inner.fencing_token(), outer.fencing_token());
/// assert_eq!(inner.release().await?, Unlock::Decremented { remaining: 1 });
/// assert_eq!(outer.release().await?, Unlock::Released);
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct ReentrantLock {
    redis: Redis,
    name: Arc<str>,
    owner: Arc<str>,
    keys: Arc<LockKeys>,
    line: Arc<LineKeys>,
    spec: LeaseSpec,
}

impl Redis {
    /// The reentrant lock called `name`, owned by this handle's owner id (see
    /// [`ReentrantLock`]).
    pub fn reentrant_lock(&self, name: &str) -> ReentrantLock {
        let keys = LockKeys::new(self.prefix(), "reentrant", name);
        ReentrantLock {
            redis: self.clone(),
            name: Arc::from(name),
            owner: Arc::from(self.owner_id()),
            line: Arc::new(LineKeys::for_lock(&keys)),
            keys: Arc::new(keys),
            spec: self.default_lease(),
        }
    }
}

impl ReentrantLock {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The owner id this lock acquires and releases for.
    pub fn owner_id(&self) -> &str {
        &self.owner
    }

    /// Acquire and release for `owner` instead of the handle's owner id.
    pub fn owner(mut self, owner: impl Into<String>) -> ReentrantLock {
        self.owner = Arc::from(owner.into());
        self
    }

    /// How the reentrant lock is held ([`LockOptions`]): `lease`, `watchdog`, `max_hold` and
    /// `lock_delay`, as for a [`LeaseLock`](crate::redis::LeaseLock::with_options).
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a duration under 1 ms, a
    /// lease and a watchdog together, or `keep_through_suspension` (a ZooKeeper option).
    pub fn with_options(self, options: LockOptions) -> Result<ReentrantLock> {
        options.apply(self)
    }

    /// The hash holding `{owner: count}`, for inspection.
    pub fn key(&self) -> &str {
        &self.keys.main
    }

    /// Waits until acquired (at once if this owner holds it already).
    pub async fn lock(&self) -> Result<ReentrantGuard> {
        self.check()?;
        let acquired = self.wait(None).await?;
        // Without a deadline, `wait` only returns once it holds the lock.
        Ok(acquired.expect("acquire without a deadline returns the lock"))
    }

    /// One attempt: `Ok(None)` if another owner holds it (or it is free but kept for a waiter
    /// that has waited past the starvation threshold).
    pub async fn try_lock(&self) -> Result<Option<ReentrantGuard>> {
        self.check()?;
        match self.attempt(None).await? {
            Attempt::Acquired(guard) => Ok(Some(guard)),
            Attempt::Busy(_) => Ok(None),
        }
    }

    /// Waits at most `timeout`; `Ok(None)` if another owner still holds it then.
    pub async fn lock_timeout(&self, timeout: Duration) -> Result<Option<ReentrantGuard>> {
        self.check()?;
        let deadline = wait::deadline_in(timeout)?;
        self.wait(Some(deadline)).await
    }

    /// Attempts until acquired or `deadline`, in line after the first failure.
    async fn wait(&self, deadline: Option<Instant>) -> Result<Option<ReentrantGuard>> {
        let waiter = new_token();
        let mut leave = LeaveOnDrop {
            conn: self.redis.conn(),
            keys: Arc::clone(&self.line),
            waiter: waiter.clone(),
            armed: true,
        };
        let acquired = wait::acquire(
            self.redis.subscriber(),
            &self.keys.channel,
            &waiter,
            deadline,
            || self.attempt(Some(&waiter)),
        )
        .await?;
        if acquired.is_some() {
            // The acquire script took us out of the line.
            leave.armed = false;
        }
        Ok(acquired)
    }

    /// Releases one hold of this lock's owner without a guard: for code that keeps no guard
    /// (another task or process sharing the owner id). [`Error::NotHeld`] if the owner holds
    /// none. A guard whose hold was released this way still releases one hold when dropped;
    /// `std::mem::forget` it.
    pub async fn unlock(&self) -> Result<Unlock> {
        check_name("lock", &self.name)?;
        check_owner(&self.owner)?;
        release_once(self.redis.conn(), &self.keys, &self.owner).await
    }

    /// How many times this lock's owner holds it right now (0: not at all).
    pub async fn hold_count(&self) -> Result<u64> {
        check_name("lock", &self.name)?;
        check_owner(&self.owner)?;
        let count: Option<u64> = self
            .redis
            .command(redis::cmd("HGET").arg(&self.keys.main).arg(&*self.owner))
            .await?;
        Ok(count.unwrap_or(0))
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

    /// Whether any owner holds the lock.
    pub async fn is_locked(&self) -> Result<bool> {
        check_name("lock", &self.name)?;
        let exists: i64 = self
            .redis
            .command(redis::cmd("EXISTS").arg(&self.keys.main))
            .await?;
        Ok(exists == 1)
    }

    /// Deletes the lock whoever holds it and however often; whether there was one.
    pub async fn force_unlock(&self) -> Result<bool> {
        check_name("lock", &self.name)?;
        let deleted: i64 = call(
            &FORCE_RELEASE,
            self.redis.conn(),
            &[&self.keys.main],
            std::slice::from_ref(&self.keys.channel),
        )
        .await?;
        Ok(deleted == 1)
    }

    fn check(&self) -> Result<()> {
        check_name("lock", &self.name)?;
        check_owner(&self.owner)?;
        self.spec.check()
    }

    /// One cancel-safe attempt; a `waiter` joins the line if another owner holds the lock.
    async fn attempt(&self, waiter: Option<&str>) -> Result<Attempt<ReentrantGuard>> {
        let ttl = self.spec.server_ttl();
        let conn = self.redis.conn();
        let sent = Instant::now();
        let waiter = waiter.map(str::to_string);
        let attempt = {
            let (conn, keys, line, owner, waiter) = (
                conn.clone(),
                Arc::clone(&self.keys),
                Arc::clone(&self.line),
                Arc::clone(&self.owner),
                waiter.clone(),
            );
            async move { acquire_once(conn, &keys, &line, &owner, waiter.as_deref(), ttl).await }
        };
        let undo = {
            let (conn, keys, owner) = (
                conn.clone(),
                Arc::clone(&self.keys),
                Arc::clone(&self.owner),
            );
            let (line, waiter) = (Arc::clone(&self.line), waiter.clone());
            move |abandoned: Attempt<(u64, FencingToken)>| async move {
                match (abandoned, waiter) {
                    (Attempt::Acquired(_), _) => {
                        let _ = release_once(conn, &keys, &owner).await;
                    }
                    (Attempt::Busy(_), Some(waiter)) => {
                        super::line::leave(conn, &line, &waiter).await;
                    }
                    (Attempt::Busy(_), None) => {}
                }
            }
        };
        Ok(match wait::cancel_safe(&conn, attempt, undo).await? {
            Attempt::Acquired((count, fencing)) => {
                let renew = {
                    let (conn, keys, owner) = (
                        conn.clone(),
                        Arc::clone(&self.keys),
                        Arc::clone(&self.owner),
                    );
                    renew_with(move |ttl| {
                        let (conn, keys, owner) =
                            (conn.clone(), Arc::clone(&keys), Arc::clone(&owner));
                        async move {
                            let renewed: i64 = call(
                                &RENEW,
                                conn,
                                &[&keys.main],
                                &[owner.to_string(), millis(ttl).to_string()],
                            )
                            .await?;
                            Ok(renewed == 1)
                        }
                    })
                };
                let release = {
                    let (conn, keys, owner) = (
                        conn.clone(),
                        Arc::clone(&self.keys),
                        Arc::clone(&self.owner),
                    );
                    release_by(move || {
                        let (conn, keys, owner) =
                            (conn.clone(), Arc::clone(&keys), Arc::clone(&owner));
                        async move { Ok(release_once(conn, &keys, &owner).await.is_ok()) }
                    })
                };
                Attempt::Acquired(ReentrantGuard {
                    conn,
                    keys: Arc::clone(&self.keys),
                    name: Arc::clone(&self.name),
                    owner: Arc::clone(&self.owner),
                    count,
                    fencing,
                    lease: Lease::start(sent, self.spec, renew, release),
                    released: false,
                })
            }
            // A waiter comes back at least this often to keep its place in line.
            Attempt::Busy(retry) if waiter.is_some() => {
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
    owner: &str,
    waiter: Option<&str>,
    ttl: Duration,
) -> Result<Attempt<(u64, FencingToken)>> {
    let reply: Vec<i64> = call(
        &ACQUIRE,
        conn,
        &[&keys.main, &keys.fence, &line.line, &line.deadlines],
        &[
            owner.to_string(),
            millis(ttl).to_string(),
            waiter.unwrap_or("").to_string(),
            millis(LINE_TTL).to_string(),
            millis(STARVATION).to_string(),
        ],
    )
    .await?;
    match reply.as_slice() {
        [1, count, fence] if *count > 0 => Ok(Attempt::Acquired((
            u64::try_from(*count).unwrap_or(1),
            fencing_token(*fence)?,
        ))),
        [0, _, pttl] => Ok(Attempt::Busy(remaining(*pttl))),
        _ => Err(
            unexpected_reply("unexpected answer from the reentrant acquire script", reply).into(),
        ),
    }
}

async fn release_once(conn: Conn, keys: &LockKeys, owner: &str) -> Result<Unlock> {
    let line = LineKeys::for_lock(keys);
    let left: i64 = call(
        &RELEASE,
        conn,
        &[&keys.main, &line.line, &line.deadlines],
        &[owner.to_string(), keys.channel.clone()],
    )
    .await?;
    match left {
        0 => Ok(Unlock::Released),
        n if n > 0 => Ok(Unlock::Decremented {
            remaining: u64::try_from(n).unwrap_or(0),
        }),
        _ => Err(Error::NotHeld),
    }
}

/// One hold of a [`ReentrantLock`]. Dropping it releases the hold (best effort, in a spawned
/// task); [`release`](ReentrantGuard::release) releases and reports what it did.
///
/// ```no_run
/// # async fn demo(redis: lockkeeper::redis::Redis) -> lockkeeper::Result<()> {
/// let guard = redis.reentrant_lock("accounts").lock().await?;
/// println!("hold #{} with token {}", guard.count(), guard.fencing_token());
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
pub struct ReentrantGuard {
    conn: Conn,
    keys: Arc<LockKeys>,
    name: Arc<str>,
    owner: Arc<str>,
    count: u64,
    fencing: FencingToken,
    lease: Lease,
    released: bool,
}

impl ReentrantGuard {
    /// The name of the lock held.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// The owner id holding it.
    pub fn owner_id(&self) -> &str {
        &self.owner
    }

    /// The owner's hold count right after this acquisition (1 for the first).
    pub fn count(&self) -> u64 {
        self.count
    }

    /// The fencing token of the owner's first acquisition (re-entries share it).
    pub fn fencing_token(&self) -> FencingToken {
        self.fencing
    }

    /// Whether this hold's lease is still good (see [`LeaseGuard::is_held`](super::LeaseGuard::is_held)).
    pub fn is_held(&self) -> bool {
        self.lease.is_held()
    }

    /// The instant this hold's lease ends, while held.
    pub fn valid_until(&self) -> Option<Instant> {
        self.lease.valid_until()
    }

    /// Resolves when this hold can no longer be trusted (renewal failed, or the lease ended).
    pub fn lost(&self) -> impl Future<Output = ()> + Send + use<> {
        self.lease.lost()
    }

    /// Releases this hold: [`Unlock::Released`] if it was the owner's last, otherwise how many
    /// remain; [`Error::NotHeld`] if the owner holds the lock no more (its lease ran out, or it
    /// was force-unlocked).
    pub async fn release(mut self) -> Result<Unlock> {
        self.released = true;
        if !self.lease.end() {
            // Given back at the maximum hold time already.
            return Err(Error::NotHeld);
        }
        release_once(self.conn.clone(), &self.keys, &self.owner).await
    }
}

impl Drop for ReentrantGuard {
    fn drop(&mut self) {
        if self.released || !self.lease.end() {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (conn, keys, owner) = (
                self.conn.clone(),
                Arc::clone(&self.keys),
                Arc::clone(&self.owner),
            );
            self.conn.spawn_cleanup(&runtime, async move {
                let _ = release_once(conn, &keys, &owner).await;
            });
        }
    }
}

impl std::fmt::Debug for ReentrantGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ReentrantGuard")
            .field("name", &self.name)
            .field("owner", &self.owner)
            .field("count", &self.count)
            .field("fencing_token", &self.fencing)
            .field("held", &self.is_held())
            .finish()
    }
}

impl Configure for ReentrantLock {
    fn described(&self) -> String {
        format!("the Redis reentrant lock {:?}", self.name)
    }

    fn set(&mut self, setting: Setting) -> Result<bool> {
        self.spec.set(setting)
    }
}
