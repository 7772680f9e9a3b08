//! Running the lock scripts: one call shape for every recipe, and the common Lua fragments.
//!
//! Scripts go out as `EVALSHA` and fall back to `EVAL` (loading the script) when the server
//! does not know them yet, so a restarted or failed-over server needs no preparation. In a
//! cluster the first key routes the call; all keys of a lock share its hash tag, hence a slot.

use redis::{FromRedisValue, Script};

use super::conn::Conn;
use crate::Result;

/// The server's clock in milliseconds, as a Lua local `now`. Expiry scores (read-write lock
/// readers, semaphore permits) are compared against the server's clock, never a client's, so
/// that clients whose clocks disagree still agree on who expired.
pub(crate) const NOW: &str = "local t = redis.call('TIME')\n\
     local now = tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)\n";

/// Runs `script` with `keys` and `args`.
pub(crate) async fn call<T: FromRedisValue>(
    script: &Script,
    mut conn: Conn,
    keys: &[&str],
    args: &[String],
) -> Result<T> {
    let mut invocation = script.prepare_invoke();
    for key in keys {
        invocation.key(*key);
    }
    for arg in args {
        invocation.arg(arg.as_str());
    }
    Ok(invocation.invoke_async(&mut conn).await?)
}
