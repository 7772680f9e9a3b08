//! The read-write lock: many readers or one writer, each with a lease of its own.
//!
//! Readers live in a sorted set, member = the reader's token, score = the instant (server
//! clock, ms) its lease ends; every script first drops the members whose score has passed, so a
//! reader that crashed or paused cannot hold past its lease even while other readers keep the
//! set alive. The writer is a plain `SET NX PX` key. Both share one fencing counter.
//!
//! **Writers are preferred.** A writer that finds the lock busy leaves a short-lived mark
//! (`...:intent`, its token, a few seconds' TTL) that it refreshes while it waits; new readers
//! are refused while the mark exists, so a steady stream of readers cannot starve a writer.
//! The mark goes when the writer acquires, gives up or is cancelled (a spawned clean-up), and
//! expires on its own if the writer's process dies. A consequence: a task that holds a read
//! lock and asks for a second one while a writer waits deadlocks until a lease or timeout ends
//! it. Read locks are not reentrant; take one per task.

use std::sync::Arc;
use std::time::Duration;

use tokio::time::Instant;

use super::client::Redis;
use super::conn::{Conn, unexpected_reply};
use super::keys::{LockKeys, check_name};
use super::lease::{
    Lease, LeaseSpec, fencing_token, millis, new_token, release_by, remaining, renew_with,
};
use super::script::call;
use super::wait::{self, Attempt};

pub(super) mod scripts;
use crate::options::{Configure, LockOptions, Setting};
use crate::{FencingToken, Result};
use scripts::{
    INTENT_REFRESH, INTENT_TTL, INTENT_WITHDRAW, READ_ACQUIRE, READ_RELEASE, READ_RENEW,
    WRITE_ACQUIRE, WRITE_RELEASE, WRITE_RENEW,
};

/// A distributed read-write lock: any number of readers, or one writer.
///
/// Writer-preferring (see the module docs): once a writer waits, new readers wait behind it.
/// Every holder has its own lease (watchdog by default, or [`lease`](crate::LockOptions::lease)); an
/// expired reader is dropped by the next acquisition and no longer counts. Read and write
/// guards both carry a fencing token from the lock's one counter.
///
/// ```no_run
/// # async fn demo() -> lockkeeper::Result<()> {
/// use lockkeeper::redis::Redis;
///
/// let redis = Redis::connect("redis://127.0.0.1:6379").await?;
/// let lock = redis.rw_lock("catalog");
/// let reader = lock.read().await?;
/// let another = lock.read().await?; // readers share
/// assert!(lock.try_write().await?.is_none()); // a writer waits for both
/// reader.release().await?;
/// another.release().await?;
/// let writer = lock.write().await?;
/// writer.release().await?;
/// # Ok(())
/// # }
/// ```
#[derive(Clone, Debug)]
pub struct RwLock {
    redis: Redis,
    name: Arc<str>,
    keys: Arc<RwKeys>,
    spec: LeaseSpec,
}

#[derive(Debug)]
struct RwKeys {
    readers: String,
    writer: String,
    intent: String,
    fence: String,
    channel: String,
}

/// Which side a guard holds.
///
/// ```no_run
/// # async fn demo(redis: lockkeeper::redis::Redis) -> lockkeeper::Result<()> {
/// use lockkeeper::redis::RwMode;
///
/// let guard = redis.rw_lock("catalog").read().await?;
/// assert_eq!(guard.mode(), RwMode::Read);
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum RwMode {
    /// A shared read hold.
    Read,
    /// The exclusive write hold.
    Write,
}

impl Redis {
    /// The read-write lock called `name` (see [`RwLock`]).
    pub fn rw_lock(&self, name: &str) -> RwLock {
        let keys = LockKeys::new(self.prefix(), "rw", name);
        RwLock {
            redis: self.clone(),
            name: Arc::from(name),
            keys: Arc::new(RwKeys {
                readers: keys.part("readers"),
                writer: keys.part("writer"),
                intent: keys.part("intent"),
                fence: keys.fence,
                channel: keys.channel,
            }),
            spec: self.default_lease(),
        }
    }
}

impl RwLock {
    /// The lock's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// How the read-write lock is held ([`LockOptions`]): `lease`, `watchdog`, `max_hold` and
    /// `lock_delay`, as for a [`LeaseLock`](crate::redis::LeaseLock::with_options).
    /// [`Error::InvalidArgument`](crate::Error::InvalidArgument) for a duration under 1 ms, a
    /// lease and a watchdog together, or `keep_through_suspension` (a ZooKeeper option).
    pub fn with_options(self, options: LockOptions) -> Result<RwLock> {
        options.apply(self)
    }

    /// The sorted set of readers (token → lease end, server ms), for inspection.
    pub fn readers_key(&self) -> &str {
        &self.keys.readers
    }

    /// The writer's key, for inspection.
    pub fn writer_key(&self) -> &str {
        &self.keys.writer
    }

    /// Waits for a read hold.
    pub async fn read(&self) -> Result<RwGuard> {
        self.acquire(RwMode::Read, Wait::Forever)
            .await
            .map(expect_held)
    }

    /// One attempt at a read hold.
    pub async fn try_read(&self) -> Result<Option<RwGuard>> {
        self.acquire(RwMode::Read, Wait::Once).await
    }

    /// Waits at most `timeout` for a read hold.
    pub async fn read_timeout(&self, timeout: Duration) -> Result<Option<RwGuard>> {
        self.acquire(RwMode::Read, Wait::For(timeout)).await
    }

    /// Waits for the write hold.
    pub async fn write(&self) -> Result<RwGuard> {
        self.acquire(RwMode::Write, Wait::Forever)
            .await
            .map(expect_held)
    }

    /// One attempt at the write hold (it leaves no waiting mark behind).
    pub async fn try_write(&self) -> Result<Option<RwGuard>> {
        self.acquire(RwMode::Write, Wait::Once).await
    }

    /// Waits at most `timeout` for the write hold.
    pub async fn write_timeout(&self, timeout: Duration) -> Result<Option<RwGuard>> {
        self.acquire(RwMode::Write, Wait::For(timeout)).await
    }

    /// How many live readers hold the lock now.
    pub async fn readers(&self) -> Result<u64> {
        check_name("lock", &self.name)?;
        let now_ms: Vec<String> = self.redis.command(&redis::cmd("TIME")).await?;
        let now = server_ms(&now_ms)?;
        let count: u64 = self
            .redis
            .command(
                redis::cmd("ZCOUNT")
                    .arg(&self.keys.readers)
                    .arg(format!("({now}"))
                    .arg("+inf"),
            )
            .await?;
        Ok(count)
    }

    /// Whether a writer holds the lock now.
    pub async fn is_write_locked(&self) -> Result<bool> {
        check_name("lock", &self.name)?;
        let exists: i64 = self
            .redis
            .command(redis::cmd("EXISTS").arg(&self.keys.writer))
            .await?;
        Ok(exists == 1)
    }

    async fn acquire(&self, mode: RwMode, wait_for: Wait) -> Result<Option<RwGuard>> {
        check_name("lock", &self.name)?;
        self.spec.check()?;
        let token = new_token();
        let attempt = || self.attempt(mode, token.clone(), matches!(wait_for, Wait::Once));
        match wait_for {
            Wait::Once => match attempt().await? {
                Attempt::Acquired(guard) => Ok(Some(guard)),
                Attempt::Busy(_) => Ok(None),
            },
            Wait::Forever | Wait::For(_) => {
                let deadline = match wait_for {
                    Wait::For(timeout) => Some(wait::deadline_in(timeout)?),
                    _ => None,
                };
                // A writer that stops waiting (timeout, cancellation, error) withdraws its mark.
                let mut withdraw = Withdraw {
                    conn: self.redis.conn(),
                    keys: Arc::clone(&self.keys),
                    token: token.clone(),
                    armed: mode == RwMode::Write,
                };
                let acquired = wait::acquire(
                    self.redis.subscriber(),
                    &self.keys.channel,
                    "",
                    deadline,
                    attempt,
                )
                .await?;
                if acquired.is_some() {
                    // The acquire script removed the mark already.
                    withdraw.armed = false;
                }
                Ok(acquired)
            }
        }
    }

    async fn attempt(&self, mode: RwMode, token: String, once: bool) -> Result<Attempt<RwGuard>> {
        let ttl = self.spec.server_ttl();
        let conn = self.redis.conn();
        let keys = Arc::clone(&self.keys);
        let sent = Instant::now();
        let attempt = {
            let (conn, keys, token) = (conn.clone(), Arc::clone(&keys), token.clone());
            async move { acquire_once(conn, &keys, mode, &token, ttl, once).await }
        };
        let undo = {
            let (conn, keys, token) = (conn.clone(), Arc::clone(&keys), token.clone());
            move |abandoned: Attempt<FencingToken>| async move {
                if let Attempt::Acquired(_) = abandoned {
                    let _ = release_once(conn, &keys, mode, &token).await;
                }
            }
        };
        Ok(match wait::cancel_safe(&conn, attempt, undo).await? {
            Attempt::Acquired(fencing) => {
                let renew = {
                    let (conn, keys, token) = (conn.clone(), Arc::clone(&keys), token.clone());
                    renew_with(move |ttl| {
                        renew_once(conn.clone(), Arc::clone(&keys), mode, token.clone(), ttl)
                    })
                };
                let release = {
                    let (conn, keys, token) = (conn.clone(), Arc::clone(&keys), token.clone());
                    release_by(move || {
                        let (conn, keys, token) = (conn.clone(), Arc::clone(&keys), token.clone());
                        async move { release_once(conn, &keys, mode, &token).await }
                    })
                };
                Attempt::Acquired(RwGuard {
                    conn,
                    keys,
                    name: Arc::clone(&self.name),
                    mode,
                    token,
                    fencing,
                    lease: Lease::start(sent, self.spec, renew, release),
                    released: false,
                })
            }
            Attempt::Busy(retry) => Attempt::Busy(match mode {
                // A waiting writer comes back at least this often to keep its mark alive.
                RwMode::Write => Some(retry.map_or(INTENT_REFRESH, |r| r.min(INTENT_REFRESH))),
                RwMode::Read => retry,
            }),
        })
    }
}

enum Wait {
    Once,
    Forever,
    For(Duration),
}

/// `read()`/`write()` wait without a deadline, so they only return with the lock.
fn expect_held(acquired: Option<RwGuard>) -> RwGuard {
    acquired.expect("acquire without a deadline returns the lock")
}

fn server_ms(time: &[String]) -> Result<u64> {
    let parse = |i: usize| time.get(i).and_then(|v| v.parse::<u64>().ok());
    match (parse(0), parse(1)) {
        (Some(secs), Some(micros)) => Ok(secs * 1000 + micros / 1000),
        _ => Err(unexpected_reply("unexpected TIME answer", time).into()),
    }
}

async fn acquire_once(
    conn: Conn,
    keys: &RwKeys,
    mode: RwMode,
    token: &str,
    ttl: Duration,
    once: bool,
) -> Result<Attempt<FencingToken>> {
    let all = [
        keys.readers.as_str(),
        keys.writer.as_str(),
        keys.intent.as_str(),
        keys.fence.as_str(),
    ];
    let reply: Vec<i64> = match mode {
        RwMode::Read => {
            call(
                &READ_ACQUIRE,
                conn,
                &all,
                &[token.to_string(), millis(ttl).to_string()],
            )
            .await?
        }
        RwMode::Write => {
            // A single try leaves no mark: it would hold readers up for nothing.
            let intent = if once { 0 } else { millis(INTENT_TTL) };
            call(
                &WRITE_ACQUIRE,
                conn,
                &all,
                &[
                    token.to_string(),
                    millis(ttl).to_string(),
                    intent.to_string(),
                ],
            )
            .await?
        }
    };
    match reply.as_slice() {
        [1, fence] => Ok(Attempt::Acquired(fencing_token(*fence)?)),
        [0, wait] => Ok(Attempt::Busy(remaining(*wait))),
        _ => Err(unexpected_reply(
            "unexpected answer from the read-write acquire script",
            reply,
        )
        .into()),
    }
}

async fn renew_once(
    conn: Conn,
    keys: Arc<RwKeys>,
    mode: RwMode,
    token: String,
    ttl: Duration,
) -> Result<bool> {
    let (script, key) = match mode {
        RwMode::Read => (&*READ_RENEW, &keys.readers),
        RwMode::Write => (&*WRITE_RENEW, &keys.writer),
    };
    let renewed: i64 = call(script, conn, &[key], &[token, millis(ttl).to_string()]).await?;
    Ok(renewed == 1)
}

async fn release_once(conn: Conn, keys: &RwKeys, mode: RwMode, token: &str) -> Result<bool> {
    let (script, key) = match mode {
        RwMode::Read => (&*READ_RELEASE, &keys.readers),
        RwMode::Write => (&*WRITE_RELEASE, &keys.writer),
    };
    let released: i64 = call(
        script,
        conn,
        &[key],
        &[token.to_string(), keys.channel.clone()],
    )
    .await?;
    Ok(released == 1)
}

/// Withdraws a waiting writer's mark when dropped armed (in a spawned task).
struct Withdraw {
    conn: Conn,
    keys: Arc<RwKeys>,
    token: String,
    armed: bool,
}

impl Drop for Withdraw {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (conn, keys, token) = (
                self.conn.clone(),
                Arc::clone(&self.keys),
                self.token.clone(),
            );
            self.conn.spawn_cleanup(&runtime, async move {
                let _: Result<i64> = call(
                    &INTENT_WITHDRAW,
                    conn,
                    &[&keys.intent],
                    &[token, keys.channel.clone()],
                )
                .await;
            });
        }
    }
}

/// A read or write hold of an [`RwLock`]; released (best effort) when dropped.
///
/// ```no_run
/// # async fn demo(redis: lockkeeper::redis::Redis) -> lockkeeper::Result<()> {
/// use lockkeeper::redis::RwMode;
/// let guard = redis.rw_lock("catalog").write().await?;
/// assert_eq!(guard.mode(), RwMode::Write);
/// guard.release().await?;
/// # Ok(())
/// # }
/// ```
pub struct RwGuard {
    conn: Conn,
    keys: Arc<RwKeys>,
    name: Arc<str>,
    mode: RwMode,
    token: String,
    fencing: FencingToken,
    lease: Lease,
    released: bool,
}

impl RwGuard {
    /// The name of the lock held.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Read or write.
    pub fn mode(&self) -> RwMode {
        self.mode
    }

    /// This hold's fencing token (readers and writers draw from one counter).
    pub fn fencing_token(&self) -> FencingToken {
        self.fencing
    }

    /// Whether this hold's lease is still good.
    pub fn is_held(&self) -> bool {
        self.lease.is_held()
    }

    /// The instant this hold's lease ends, while held.
    pub fn valid_until(&self) -> Option<Instant> {
        self.lease.valid_until()
    }

    /// Resolves when this hold can no longer be trusted.
    pub fn lost(&self) -> impl Future<Output = ()> + Send + use<> {
        self.lease.lost()
    }

    /// Releases the hold; [`Error::NotHeld`](crate::Error::NotHeld) if its lease had ended (or it was removed).
    pub async fn release(mut self) -> Result<()> {
        self.released = true;
        let (conn, keys, mode, token) = (&self.conn, &self.keys, self.mode, &self.token);
        self.lease
            .release_with(|| release_once(conn.clone(), keys, mode, token))
            .await
    }
}

impl Drop for RwGuard {
    fn drop(&mut self) {
        if self.released || !self.lease.end() {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (conn, keys, token, mode) = (
                self.conn.clone(),
                Arc::clone(&self.keys),
                self.token.clone(),
                self.mode,
            );
            self.conn.spawn_cleanup(&runtime, async move {
                let _ = release_once(conn, &keys, mode, &token).await;
            });
        }
    }
}

impl std::fmt::Debug for RwGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RwGuard")
            .field("name", &self.name)
            .field("mode", &self.mode)
            .field("fencing_token", &self.fencing)
            .field("held", &self.is_held())
            .finish()
    }
}

impl Configure for RwLock {
    fn described(&self) -> String {
        format!("the Redis read-write lock {:?}", self.name)
    }

    fn set(&mut self, setting: Setting) -> Result<bool> {
        self.spec.set(setting)
    }
}
