//! The read-write lock's Lua scripts. Readers are a sorted set (token -> lease end, server ms)
//! whose expired members every script drops first; the writer is a `SET NX PX` key; a waiting
//! writer's mark (`intent`) holds new readers back.

use std::sync::LazyLock;
use std::time::Duration;

use redis::Script;

use crate::redis::script::NOW;

/// How long a waiting writer's mark lives, and how often the writer refreshes it (by trying
/// again) while it waits.
pub(super) const INTENT_TTL: Duration = Duration::from_secs(3);
pub(super) const INTENT_REFRESH: Duration = Duration::from_secs(1);

/// KEYS: readers, writer, intent, fence. ARGV: token, ttl. `{1, fence}` or `{0, wait ms}`.
pub(super) static READ_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{NOW}
local ttl = tonumber(ARGV[2])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local writer = redis.call('PTTL', KEYS[2])
if writer ~= -2 then return {{0, writer}} end
local intent = redis.call('PTTL', KEYS[3])
if intent ~= -2 then return {{0, intent}} end
redis.call('ZADD', KEYS[1], now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
return {{1, redis.call('INCR', KEYS[4])}}
"
    ))
});

/// KEYS: readers, writer, intent, fence. ARGV: token, ttl, intent ttl (0: leave no mark).
pub(super) static WRITE_ACQUIRE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{NOW}
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
local function mark()
  if tonumber(ARGV[3]) > 0 then redis.call('SET', KEYS[3], ARGV[1], 'PX', ARGV[3]) end
end
local writer = redis.call('PTTL', KEYS[2])
if writer ~= -2 then
  mark()
  return {{0, writer}}
end
local first = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
if #first > 0 then
  mark()
  return {{0, tonumber(first[2]) - now}}
end
redis.call('SET', KEYS[2], ARGV[1], 'PX', ARGV[2])
if redis.call('GET', KEYS[3]) == ARGV[1] then redis.call('DEL', KEYS[3]) end
return {{1, redis.call('INCR', KEYS[4])}}
"
    ))
});

/// KEYS: readers. ARGV: token, ttl. 1 if still a live reader (and renewed).
pub(super) static READ_RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{NOW}
local ttl = tonumber(ARGV[2])
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if not score or tonumber(score) <= now then return 0 end
redis.call('ZADD', KEYS[1], 'XX', now + ttl, ARGV[1])
if redis.call('PTTL', KEYS[1]) < ttl then redis.call('PEXPIRE', KEYS[1], ttl) end
return 1
"
    ))
});

/// KEYS: readers. ARGV: token, channel. 1 if it was a live reader. The last reader out tells
/// the waiters.
pub(crate) static READ_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{NOW}
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
local held = score and tonumber(score) > now
redis.call('ZREM', KEYS[1], ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) == 0 then redis.call('PUBLISH', ARGV[2], 'released') end
if held then return 1 end
return 0
"
    ))
});

/// KEYS: writer. ARGV: token, ttl.
pub(super) static WRITE_RENEW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
",
    )
});

/// KEYS: writer. ARGV: token, channel.
pub(crate) static WRITE_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], 'released')
  return 1
end
return 0
",
    )
});

/// KEYS: intent. ARGV: token, channel. A writer that stops waiting takes its mark back and
/// wakes the readers it held up.
pub(super) static INTENT_WITHDRAW: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  redis.call('DEL', KEYS[1])
  redis.call('PUBLISH', ARGV[2], 'released')
  return 1
end
return 0
",
    )
});
