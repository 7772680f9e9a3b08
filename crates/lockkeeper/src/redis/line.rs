//! Waiting in line: how the lease and reentrant locks keep waiters from starving without
//! polling.
//!
//! Pub/sub wakes every waiter of a lock at each release and they race; left alone, the same
//! waiters tend to win (the subscriber that Redis notifies first, the one on the least loaded
//! connection) and a few wait for a very long time. So a waiter whose first attempt failed
//! joins the lock's *line*, a sorted set ordered by when it joined. A free lock still goes to
//! whoever asks first (*barging*: the holder that just released can take it straight back, no
//! hand-over round trip, which is what keeps throughput up under contention) until the waiter
//! at the head of the line has waited [`STARVATION`]; from then on a free lock is kept for the
//! longest-waiting live waiter. Go's `sync.Mutex` switches into its starvation mode the same
//! way. That bounds starvation; it is not a fairness guarantee.
//!
//! A place in line lapses unless its waiter refreshes it, which every attempt does, and a
//! waiting lock call attempts at least every [`LINE_REFRESH`]. A waiter that stops waiting
//! leaves the line (a spawned clean-up when a call times out or is cancelled); one that crashed
//! or paused loses its place after [`LINE_TTL`], so a dead waiter at the head delays the
//! next acquisition by at most that long.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use redis::Script;

use super::conn::Conn;
use super::script::{NOW, call};

/// How long a place in line lasts without a refresh.
pub(crate) const LINE_TTL: Duration = Duration::from_secs(3);

/// How long the head of the line may wait while others barge in before a free lock is kept
/// for it. Short enough that no waiter waits much longer than this plus one turn of the line;
/// long enough that a contended lock mostly changes hands without a pub/sub round trip.
pub(crate) const STARVATION: Duration = Duration::from_millis(50);

/// How often a waiter refreshes its place (by attempting again) at the least.
pub(crate) const LINE_REFRESH: Duration = Duration::from_secs(1);

/// Lua helpers, for scripts that also define `now` (see [`NOW`]). `q` is the line (member =
/// waiter, score = when it joined), `d` the deadlines of the places (score = when it lapses).
/// `line_admits` says whether a free lock may go to `w` now (see [`STARVATION`]);
/// `line_wake` publishes a release addressed to the head of the line (`released:{waiter}`),
/// so that one waiter wakes per release instead of all of them, or to everyone
/// (`released`) when nobody is in line.
pub(crate) const LINE_LUA: &str = r"
local function line_reap(q, d, now)
  local gone = redis.call('ZRANGEBYSCORE', d, '-inf', now)
  for _, w in ipairs(gone) do redis.call('ZREM', q, w) end
  if #gone > 0 then redis.call('ZREMRANGEBYSCORE', d, '-inf', now) end
end
local function line_head(q)
  return redis.call('ZRANGE', q, 0, 0)[1]
end
local function line_admits(q, w, now, starve)
  local head = line_head(q)
  if not head or head == w then return true, head end
  return now - tonumber(redis.call('ZSCORE', q, head)) < starve, head
end
local function line_join(q, d, w, now, ttl)
  if not redis.call('ZSCORE', q, w) then redis.call('ZADD', q, now, w) end
  redis.call('ZADD', d, now + ttl, w)
  redis.call('PEXPIRE', q, ttl)
  redis.call('PEXPIRE', d, ttl)
end
local function line_leave(q, d, w)
  redis.call('ZREM', q, w)
  redis.call('ZREM', d, w)
end
local function line_wake(q, d, channel, now)
  line_reap(q, d, now)
  local head = line_head(q)
  if head then
    redis.call('PUBLISH', channel, 'released:' .. head)
  else
    redis.call('PUBLISH', channel, 'released')
  end
end
local function line_lapse(d, w, now)
  local at = redis.call('ZSCORE', d, w)
  if not at then return 0 end
  return tonumber(at) - now
end
";

/// KEYS: line, deadlines. ARGV: waiter, channel. Leaves the line; if the waiter was at its
/// head, wakes the new head (the lock may be free and kept for it).
static LEAVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{NOW}{LINE_LUA}
local was_head = line_head(KEYS[1]) == ARGV[1]
line_leave(KEYS[1], KEYS[2], ARGV[1])
if was_head then line_wake(KEYS[1], KEYS[2], ARGV[2], now) end
return 1
"
    ))
});

/// The line's keys and the channel its waiters listen on.
#[derive(Clone, Debug)]
pub(crate) struct LineKeys {
    pub line: String,
    pub deadlines: String,
    pub channel: String,
}

impl LineKeys {
    /// The line of the lock with `keys` (same hash tag).
    pub(super) fn for_lock(keys: &super::keys::LockKeys) -> LineKeys {
        LineKeys {
            line: keys.part("line"),
            deadlines: keys.part("line:deadlines"),
            channel: keys.channel.clone(),
        }
    }
}

/// Takes `waiter` out of the line.
pub(crate) async fn leave(conn: Conn, keys: &LineKeys, waiter: &str) {
    let _: crate::Result<i64> = call(
        &LEAVE,
        conn,
        &[&keys.line, &keys.deadlines],
        &[waiter.to_string(), keys.channel.clone()],
    )
    .await;
}

/// Leaves the line when dropped armed (in a spawned task): the clean-up of a waiting call that
/// timed out, failed or was cancelled.
pub(crate) struct LeaveOnDrop {
    pub conn: Conn,
    pub keys: Arc<LineKeys>,
    pub waiter: String,
    pub armed: bool,
}

impl Drop for LeaveOnDrop {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            let (conn, keys, waiter) = (
                self.conn.clone(),
                Arc::clone(&self.keys),
                std::mem::take(&mut self.waiter),
            );
            self.conn
                .spawn_cleanup(&runtime, async move { leave(conn, &keys, &waiter).await });
        }
    }
}
