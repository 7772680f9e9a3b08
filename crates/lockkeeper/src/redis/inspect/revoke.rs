//! [`Redis::revoke`]: takes one hold found by [`Redis::inspect`] away from its holder, for an
//! operator whose holder is stuck.
//!
//! Invariant: a hold is removed only if the same holder still has it, checked in the script
//! that removes it, and the removal wakes waiters exactly as the holder's own release would
//! (the lease and reentrant locks wake the head of their line; the others publish a release).
//! So a holder that released (and perhaps someone else who took the lock since) is never
//! touched. Waiters are not revoked: they hold nothing.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;
use tokio::time::Instant;

use super::read::NameKeys;
use super::{Kind, Participant, State};
use crate::redis::client::Redis;
use crate::redis::keys::check_name;
use crate::redis::line::LINE_LUA;
use crate::redis::script::{NOW, call};
use crate::{Error, Result};

/// What a revocation did.
///
/// ```no_run
/// # async fn demo(redis: lockkeeper::redis::Redis) -> lockkeeper::Result<()> {
/// use std::time::Duration;
/// use lockkeeper::redis::Revoked;
///
/// let inspection = redis.inspect("orders").await?;
/// for holder in inspection.holders() {
///     if redis.revoke("orders", holder, Duration::from_secs(5)).await? == Revoked::Deleted {
///         println!("{} {} revoked", holder.kind, holder.owner);
///     }
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Revoked {
    /// The hold was gone already when the revocation began.
    AlreadyGone,
    /// The holder released within the grace period (or its lease ran out).
    Released,
    /// The grace period passed and the hold was removed; the holder's fencing token is stale.
    Deleted,
}

/// KEYS: hash, line, line deadlines. ARGV: owner, channel. Deletes the reentrant lock if
/// `owner` holds it (whatever its count), and wakes the head of the line as a release does.
static REENTRANT_REVOKE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{NOW}{LINE_LUA}
if redis.call('HEXISTS', KEYS[1], ARGV[1]) == 0 then return 0 end
redis.call('DEL', KEYS[1])
line_wake(KEYS[2], KEYS[3], ARGV[2], now)
return 1
"
    ))
});

/// How often the grace period looks whether the holder has released.
const GRACE_POLL: Duration = Duration::from_millis(100);

impl Redis {
    /// Waits up to `grace` for `holder` (a holder of the lock `name`, as
    /// [`inspect`](Redis::inspect) found it) to release, then removes its hold if it still has
    /// it: the lease or writer key, the reentrant lock whatever its count, the reader's entry,
    /// or the acquisition's permits. Its guard sees the loss at its next renewal, and waiters
    /// are woken as by a release. A waiter is [`Error::InvalidArgument`]: it holds nothing.
    pub async fn revoke(
        &self,
        name: &str,
        holder: &Participant,
        grace: Duration,
    ) -> Result<Revoked> {
        check_name("lock", name)?;
        if holder.state != State::Holds {
            return Err(Error::InvalidArgument(format!(
                "{} {} of {name:?} waits in {} and holds nothing to revoke",
                holder.kind, holder.owner, holder.key
            )));
        }
        let still = async || -> Result<bool> {
            let now = self.inspect(name).await?;
            Ok(now
                .holders()
                .any(|h| h.kind == holder.kind && h.owner == holder.owner))
        };
        if !still().await? {
            return Ok(Revoked::AlreadyGone);
        }
        let until = Instant::now() + grace;
        while Instant::now() < until {
            tokio::time::sleep(GRACE_POLL.min(until - Instant::now())).await;
            if !still().await? {
                return Ok(Revoked::Released);
            }
        }
        let removed = self.remove(name, holder).await?;
        Ok(if removed {
            Revoked::Deleted
        } else {
            Revoked::Released
        })
    }

    /// The compare-and-remove of `holder`'s hold, by kind: `true` if it was still there.
    async fn remove(&self, name: &str, holder: &Participant) -> Result<bool> {
        let keys = NameKeys::new(self.prefix(), name);
        let owner = holder.owner.clone();
        let removed: i64 = match holder.kind {
            Kind::Lease => {
                let line = &keys.lease_line;
                call(
                    &crate::redis::lease_lock::RELEASE,
                    self.conn(),
                    &[&keys.lease.main, &line.line, &line.deadlines],
                    &[owner, keys.lease.channel.clone()],
                )
                .await?
            }
            Kind::Reentrant => {
                let line = &keys.reentrant_line;
                call(
                    &REENTRANT_REVOKE,
                    self.conn(),
                    &[&keys.reentrant.main, &line.line, &line.deadlines],
                    &[owner, keys.reentrant.channel.clone()],
                )
                .await?
            }
            Kind::Read => {
                call(
                    &crate::redis::rwlock::scripts::READ_RELEASE,
                    self.conn(),
                    &[&keys.readers],
                    &[owner, keys.rw.channel.clone()],
                )
                .await?
            }
            Kind::Write => {
                call(
                    &crate::redis::rwlock::scripts::WRITE_RELEASE,
                    self.conn(),
                    &[&keys.writer],
                    &[owner, keys.rw.channel.clone()],
                )
                .await?
            }
            Kind::Permit => {
                call(
                    &crate::redis::semaphore::RELEASE,
                    self.conn(),
                    &[&keys.semaphore.main],
                    &[
                        owner,
                        holder.count.to_string(),
                        keys.semaphore.channel.clone(),
                    ],
                )
                .await?
            }
        };
        Ok(removed == 1)
    }
}
