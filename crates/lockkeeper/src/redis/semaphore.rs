//! The semaphore: N permits whose leases expire with their holder.
//!
//! Permits live in a sorted set, member = `acquisition-id:i`, score = the instant (server clock,
//! ms) the permit's lease ends. The acquire script first drops every member whose score has
//! passed, so a holder that crashed gives its permits back one lease later instead of leaking
//! them forever; a live holder's watchdog keeps pushing its scores forward. When there are too
//! few permits, the script answers how long until enough of them expire, and the waiter sleeps
//! that long at most (a release wakes it sooner, through the lock's channel).
//!
//! The permit count N travels with every acquire rather than living in Redis: every user of a
//! semaphore must be created with the same N (the acquire script admits while fewer than the
//! caller's N are taken).
//!
//! A waiter keeps a place in the semaphore's line (`...:line`, [`line`](super::line)) while it
//! waits, refreshed by each attempt, so that an operator can see who waits
//! ([`Redis::inspect`]). The line does not decide who gets permits: waiters are not served in
//! order, and a place lapses on its own if its waiter dies.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::Script;
use tokio::time::Instant;

use super::client::Redis;
use super::conn::{Conn, unexpected_reply};
use super::keys::{LockKeys, check_name};
use super::lease::{
    Lease, LeaseSpec, fencing_token, millis, new_token, release_by, remaining, renew_with,
};
use super::line::{LINE_LUA, LINE_REFRESH, LINE_TTL, LeaveOnDrop, LineKeys};
use super::script::{NOW, call};
use super::wait::{self, Attempt};
use crate::options::{Configure, LockOptions, Setting};
use crate::{Error, FencingToken, Result};

/// KEYS: permits, fence, line, line deadlines. ARGV: id, n, limit, ttl, waiter (empty for a
/// single try, which never joins the line), line ttl. `{1, fence}` or `{0, wait ms}`; a
/// waiting caller that gets no permits joins (or refreshes its place in) the line.
static ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{NOW}{LINE_LUA}
line_reap(KEYS[3], KEYS[4], now)
local waiter = ARGV[5]
local n = tonumber(ARGV[2])
local limit = tonumber(ARGV[3])
local ttl = tonumber(ARGV[4])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local used = redis.call('ZCARD', KEYS[1])
if used + n <= limit then
  for i = 1, n do redis.call('ZADD', KEYS[1], now + ttl, ARGV[1] .. ':' .. i) end
  if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
  if waiter ~= '' then line_leave(KEYS[3], KEYS[4], waiter) end
  return {{1, redis.call('INCR', KEYS[2])}}
end
if waiter ~= '' then line_join(KEYS[3], KEYS[4], waiter, now, tonumber(ARGV[6])) end
local need = used + n - limit
local nth = redis.call('ZRANGE', KEYS[1], need - 1, need - 1, 'WITHSCORES')
if #nth == 0 then return {{0, -1}} end
return {{0, tonumber(nth[2]) - now}}
"
    ))
});

/// KEYS: permits. ARGV: id, n, ttl. 1 if the permits were still live (and are renewed).
static RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{NOW}
local n = tonumber(ARGV[2])
local ttl = tonumber(ARGV[3])
local score = redis.call('ZSCORE', KEYS[1], ARGV[1] .. ':1')
if not score or tonumber(score) <= now then return 0 end
for i = 1, n do redis.call('ZADD', KEYS[1], 'XX', now + ttl, ARGV[1] .. ':' .. i) end
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
return 1
"
    ))
});

/// KEYS: permits. ARGV: id, n, channel. 1 if the permits were still live.
pub(crate) static RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{NOW}
local n = tonumber(ARGV[2])
local score = redis.call('ZSCORE', KEYS[1], ARGV[1] .. ':1')
local held = score and tonumber(score) > now
for i = 1, n do redis.call('ZREM', KEYS[1], ARGV[1] .. ':' .. i) end
redis.call('PUBLISH', ARGV[3], 'released')
if held then return 1 end
return 0
"
    ))
});

/// A counting semaphore of `permits` permits, shared by every process that uses the same name
/// (and the same permit count).
///
/// Permits are held with a lease like a lock (a watchdog by default, or
/// [`lease`](crate::LockOptions::lease)), so a holder that crashes or hangs loses its permits when its
/// lease ends rather than leaking them. Each acquisition gets a fencing token from the
/// semaphore's counter. Waiters are not served in order.
///
/// ```no_run
/// # async fn demo() -> lockkeeper::Result<()> {
/// use lockkeeper::redis::Redis;
///
/// let redis = Redis::connect("redis://127.0.0.1:6379").await?;
/// let pool = redis.semaphore("db-connections", 10);
/// let two = pool.acquire(2).await?;
/// assert_eq!(two.permits(), 2);
/// two.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct Semaphore {
    redis: Redis,
    name: Arc<str>,
    keys: Arc<LockKeys>,
    line: Arc<LineKeys>,
    permits: u32,
    spec: LeaseSpec,
}

impl Redis {
    /// The semaphore called `name` with `permits` permits (see [`Semaphore`]).
    pub fn semaphore(&self, name: &str, permits: u32) -> Semaphore {
        let keys = LockKeys::new(self.prefix(), "semaphore", name);
        Semaphore {
            redis: self.clone(),
            name: Arc::from(name),
            line: Arc::new(LineKeys::for_lock(&keys)),
            keys: Arc::new(keys),
            permits,
            spec: self.default_lease(),
        }
    }
}

impl Semaphore {
    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many permits it has in all.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// How the semaphore is held ([`LockOptions`]): `lease`, `watchdog`, `max_hold` and
    /// `lock_delay`, as for a [`LeaseLock`](crate::redis::LeaseLock::with_options).
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a duration under 1 ms, a
    /// lease and a watchdog together, or `keep_through_suspension` (a ZooKeeper option).
    pub fn with_options(self, options: LockOptions) -> Result<Semaphore> {
        options.apply(self)
    }

    /// The sorted set of permits (`id:i` → lease end, server ms), for inspection.
    pub fn key(&self) -> &str {
        &self.keys.main
    }

    /// Waits for `n` permits.
    pub async fn acquire(&self, n: u32) -> Result<SemaphorePermit> {
        self.check(n)?;
        let acquired = self.wait(n, None).await?;
        // Without a deadline, `acquire` only returns once it holds the permits.
        Ok(acquired.expect("acquire without a deadline returns the permits"))
    }

    /// One attempt at `n` permits.
    pub async fn try_acquire(&self, n: u32) -> Result<Option<SemaphorePermit>> {
        self.check(n)?;
        match self.attempt(&new_token(), n, false).await? {
            Attempt::Acquired(permit) => Ok(Some(permit)),
            Attempt::Busy(_) => Ok(None),
        }
    }

    /// Waits at most `timeout` for `n` permits.
    pub async fn acquire_timeout(
        &self,
        n: u32,
        timeout: Duration,
    ) -> Result<Option<SemaphorePermit>> {
        self.check(n)?;
        let deadline = wait::deadline_in(timeout)?;
        self.wait(n, Some(deadline)).await
    }

    /// Attempts until acquired or `deadline`, in line after the first failure. The
    /// acquisition id doubles as the place in line; whatever ends the wait other than success
    /// leaves the line. Any release wakes the waiter (`me` is empty): the line only shows who
    /// waits, it does not order them.
    async fn wait(&self, n: u32, deadline: Option<Instant>) -> Result<Option<SemaphorePermit>> {
        let id = new_token();
        let mut leave = LeaveOnDrop {
            conn: self.redis.conn(),
            keys: Arc::clone(&self.line),
            waiter: id.clone(),
            armed: true,
        };
        let acquired = wait::acquire(
            self.redis.subscriber(),
            &self.keys.channel,
            "",
            deadline,
            || self.attempt(&id, n, true),
        )
        .await?;
        if acquired.is_some() {
            // The acquire script took us out of the line.
            leave.armed = false;
        }
        Ok(acquired)
    }

    /// Permits free right now (expired ones count as free).
    pub async fn available(&self) -> Result<u32> {
        self.check(1)?;
        let time: Vec<String> = self.redis.command(&redis::cmd("TIME")).await?;
        let now = match (
            time.first().and_then(|s| s.parse::<u64>().ok()),
            time.get(1).and_then(|s| s.parse::<u64>().ok()),
        ) {
            (Some(secs), Some(micros)) => secs * 1000 + micros / 1000,
            _ => return Err(unexpected_reply("unexpected TIME answer", time).into()),
        };
        let taken: u64 = self
            .redis
            .command(
                redis::cmd("ZCOUNT")
                    .arg(&self.keys.main)
                    .arg(format!("({now}"))
                    .arg("+inf"),
            )
            .await?;
        Ok(u64::from(self.permits).saturating_sub(taken) as u32)
    }

    fn check(&self, n: u32) -> Result<()> {
        check_name("semaphore", &self.name)?;
        if self.permits == 0 {
            return Err(Error::InvalidArgument(
                "a semaphore needs at least one permit".into(),
            ));
        }
        if n == 0 {
            return Err(Error::InvalidArgument(
                "acquire at least one permit (asked for 0)".into(),
            ));
        }
        if n > self.permits {
            return Err(Error::InvalidArgument(format!(
                "asked for {n} permits of a semaphore that has {}",
                self.permits
            )));
        }
        self.spec.check()
    }

    /// One cancel-safe attempt; `waiting` joins the line if too few permits are free.
    async fn attempt(&self, id: &str, n: u32, waiting: bool) -> Result<Attempt<SemaphorePermit>> {
        let ttl = self.spec.server_ttl();
        let conn = self.redis.conn();
        let keys = Arc::clone(&self.keys);
        let id: Arc<str> = Arc::from(id);
        let limit = self.permits;
        let sent = Instant::now();
        let attempt = {
            let (conn, keys, line, id) = (
                conn.clone(),
                Arc::clone(&keys),
                Arc::clone(&self.line),
                Arc::clone(&id),
            );
            async move {
                let waiter = if waiting {
                    id.to_string()
                } else {
                    String::new()
                };
                let reply: Vec<i64> = call(
                    &ACQUIRE,
                    conn,
                    &[&keys.main, &keys.fence, &line.line, &line.deadlines],
                    &[
                        id.to_string(),
                        n.to_string(),
                        limit.to_string(),
                        millis(ttl).to_string(),
                        waiter,
                        millis(LINE_TTL).to_string(),
                    ],
                )
                .await?;
                match reply.as_slice() {
                    [1, fence] => Ok(Attempt::Acquired(fencing_token(*fence)?)),
                    [0, wait] => Ok(Attempt::Busy(remaining(*wait))),
                    _ => Err(unexpected_reply(
                        "unexpected answer from the semaphore acquire script",
                        reply,
                    )
                    .into()),
                }
            }
        };
        let undo = {
            let (conn, keys, line, id) = (
                conn.clone(),
                Arc::clone(&keys),
                Arc::clone(&self.line),
                Arc::clone(&id),
            );
            move |abandoned: Attempt<FencingToken>| async move {
                match abandoned {
                    Attempt::Acquired(_) => {
                        let _ = release_once(conn, &keys, &id, n).await;
                    }
                    Attempt::Busy(_) if waiting => super::line::leave(conn, &line, &id).await,
                    Attempt::Busy(_) => {}
                }
            }
        };
        Ok(match wait::cancel_safe(&conn, attempt, undo).await? {
            Attempt::Acquired(fencing) => {
                let renew = {
                    let (conn, keys, id) = (conn.clone(), Arc::clone(&keys), Arc::clone(&id));
                    renew_with(move |ttl| {
                        let (conn, keys, id) = (conn.clone(), Arc::clone(&keys), Arc::clone(&id));
                        async move {
                            let renewed: i64 = call(
                                &RENEW,
                                conn,
                                &[&keys.main],
                                &[id.to_string(), n.to_string(), millis(ttl).to_string()],
                            )
                            .await?;
                            Ok(renewed == 1)
                        }
                    })
                };
                let release = {
                    let (conn, keys, id) = (conn.clone(), Arc::clone(&keys), Arc::clone(&id));
                    release_by(move || {
                        let (conn, keys, id) = (conn.clone(), Arc::clone(&keys), Arc::clone(&id));
                        async move { release_once(conn, &keys, &id, n).await }
                    })
                };
                Attempt::Acquired(SemaphorePermit {
                    conn,
                    keys,
                    name: Arc::clone(&self.name),
                    id,
                    permits: n,
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

async fn release_once(conn: Conn, keys: &LockKeys, id: &str, n: u32) -> Result<bool> {
    let released: i64 = call(
        &RELEASE,
        conn,
        &[&keys.main],
        &[id.to_string(), n.to_string(), keys.channel.clone()],
    )
    .await?;
    Ok(released == 1)
}

/// Permits held from a [`Semaphore`]; given back (best effort) when dropped.
///
/// ```no_run
/// # async fn demo(redis: lockkeeper::redis::Redis) -> lockkeeper::Result<()> {
/// let permit = redis.semaphore("db-connections", 10).acquire(1).await?;
/// assert!(permit.is_held());
/// permit.release().await?;
/// # Ok(())
/// # }
/// ```
pub struct SemaphorePermit {
    conn: Conn,
    keys: Arc<LockKeys>,
    name: Arc<str>,
    id: Arc<str>,
    permits: u32,
    fencing: FencingToken,
    lease: Lease,
    released: bool,
}

impl SemaphorePermit {
    /// The semaphore's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How many permits this acquisition holds.
    pub fn permits(&self) -> u32 {
        self.permits
    }

    /// This acquisition's fencing token.
    pub fn fencing_token(&self) -> FencingToken {
        self.fencing
    }

    /// Whether the permits' lease is still good.
    pub fn is_held(&self) -> bool {
        self.lease.is_held()
    }

    /// The instant the permits' lease ends, while held.
    pub fn valid_until(&self) -> Option<Instant> {
        self.lease.valid_until()
    }

    /// Resolves when the permits can no longer be trusted.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + use<> {
        self.lease.lost()
    }

    /// Gives the permits back; [`Error::NotHeld`] if their lease had ended.
    pub async fn release(mut self) -> Result<()> {
        self.released = true;
        let (conn, keys, id, permits) = (&self.conn, &self.keys, &self.id, self.permits);
        self.lease
            .release_with(|| release_once(conn.clone(), keys, id, permits))
            .await
    }
}

impl Drop for SemaphorePermit {
    fn drop(&mut self) {
        if self.released || !self.lease.end() {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (conn, keys, id, n) = (
                self.conn.clone(),
                Arc::clone(&self.keys),
                Arc::clone(&self.id),
                self.permits,
            );
            self.conn.spawn_cleanup(&runtime, async move {
                let _ = release_once(conn, &keys, &id, n).await;
            });
        }
    }
}

impl std::fmt::Debug for SemaphorePermit {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SemaphorePermit")
            .field("name", &self.name)
            .field("permits", &self.permits)
            .field("fencing_token", &self.fencing)
            .field("held", &self.is_held())
            .finish()
    }
}

impl Configure for Semaphore {
    fn described(&self) -> String {
        format!("the Redis semaphore {:?}", self.name)
    }

    fn set(&mut self, setting: Setting) -> Result<bool> {
        self.spec.set(setting)
    }
}
