//! The Redis fence: a Redis-held resource whose writes go through one Lua script that compares
//! the writer's token with the resource's highest, and stores both the token and the value
//! when it is not lower. Redis runs a script atomically, so no other command lands between the
//! check and the write.
//!
//! Key layout (`PREFIX` is the handle's key prefix, `lockkeeper` by default):
//! - `PREFIX:fence:{resource}`: the highest token accepted, as a decimal string;
//! - `PREFIX:fence:{resource}:value`: the value of the last accepted write (a string).
//!
//! The resource id is the hash tag, so both keys share a Redis Cluster slot. Neither key
//! expires: a token that vanished would let an older writer in again. Tokens are compared as
//! decimal strings (longer is larger, then lexically), never as Lua numbers, which are doubles
//! and lose precision above 2^53.

use std::sync::LazyLock;

use ::redis::Script;

use super::{Outcome, check_resource};
use crate::redis::Redis;
use crate::{Error, FencingToken, Result};

/// KEYS: token, value. ARGV: token, value. `{1, token}` when written, `{0, highest}` when
/// refused.
static WRITE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local highest = redis.call('GET', KEYS[1])
local token = ARGV[1]
if highest and (#highest > #token or (#highest == #token and highest > token)) then
  return {0, highest}
end
redis.call('SET', KEYS[1], token)
redis.call('SET', KEYS[2], ARGV[2])
return {1, token}
",
    )
});

/// KEYS: token, value. Both read in one step, so the value is the one written with the token.
static READ: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local token = redis.call('GET', KEYS[1])
if not token then return {} end
return {token, redis.call('GET', KEYS[2]) or ''}
",
    )
});

/// Fenced values held in Redis, one per resource id.
///
/// ```no_run
/// # async fn demo(guard: lockkeeper::redis::LeaseGuard) -> lockkeeper::Result<()> {
/// use lockkeeper::fence::{Outcome, RedisFence};
/// use lockkeeper::redis::Redis;
///
/// let store = Redis::connect("redis://127.0.0.1:6379").await?;
/// let fence = RedisFence::new(&store);
/// match fence.write("orders", guard.fencing_token(), b"v2").await? {
///     Outcome::Accepted => {}
///     Outcome::Refused { highest } => eprintln!("a newer holder ({highest}) wrote first"),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisFence {
    redis: Redis,
    prefix: String,
}

impl RedisFence {
    /// A fence on the Redis (server, cluster or Sentinel master) behind `redis`, with its key
    /// prefix. The resource's Redis need not be the lock's.
    pub fn new(redis: &Redis) -> RedisFence {
        RedisFence {
            redis: redis.clone(),
            prefix: redis.prefix().to_owned(),
        }
    }

    /// The key holding `resource`'s highest token.
    pub fn token_key(&self, resource: &str) -> String {
        format!("{}:fence:{{{resource}}}", self.prefix)
    }

    /// The key holding `resource`'s value.
    pub fn value_key(&self, resource: &str) -> String {
        format!("{}:value", self.token_key(resource))
    }

    /// Stores `value` for `resource` if `token` is at least the highest token seen for it, and
    /// records `token` as the highest, in one script. [`Error::InvalidArgument`] for an empty
    /// resource id or one with braces; [`Error::Redis`] if Redis failed (the write may or may
    /// not have happened if the answer was lost; repeating it with the same token is safe).
    pub async fn write(
        &self,
        resource: &str,
        token: FencingToken,
        value: &[u8],
    ) -> Result<Outcome> {
        check(resource)?;
        let (written, token_seen): (i64, String) = WRITE
            .key(self.token_key(resource))
            .key(self.value_key(resource))
            .arg(token.get().to_string())
            .arg(value)
            .invoke_async(&mut self.redis.conn())
            .await?;
        if written == 1 {
            return Ok(Outcome::Accepted);
        }
        Ok(Outcome::Refused {
            highest: parse_token(&self.token_key(resource), &token_seen)?,
        })
    }

    /// The highest token accepted for `resource` and the value written with it; `None` if
    /// nothing was written yet.
    pub async fn read(&self, resource: &str) -> Result<Option<(FencingToken, Vec<u8>)>> {
        check(resource)?;
        let found: Vec<Vec<u8>> = READ
            .key(self.token_key(resource))
            .key(self.value_key(resource))
            .invoke_async(&mut self.redis.conn())
            .await?;
        let mut found = found.into_iter();
        let (Some(token), Some(value)) = (found.next(), found.next()) else {
            return Ok(None);
        };
        let token = String::from_utf8_lossy(&token);
        Ok(Some((
            parse_token(&self.token_key(resource), &token)?,
            value,
        )))
    }
}

/// A resource id is also the keys' hash tag: braces would end it early (see `redis::keys`).
fn check(resource: &str) -> Result<()> {
    check_resource("fence resource id", resource)?;
    if resource.contains(['{', '}']) {
        return Err(Error::InvalidArgument(format!(
            "fence resource id {resource:?} must not contain '{{' or '}}': it becomes the Redis \
             Cluster hash tag"
        )));
    }
    Ok(())
}

/// A token read back from `key`; something else written there is reported, not trusted.
fn parse_token(key: &str, text: &str) -> Result<FencingToken> {
    text.parse().map(FencingToken::new).map_err(|_| {
        Error::Redis(::redis::RedisError::from((
            ::redis::ErrorKind::UnexpectedReturnType,
            "a fence's token key holds something other than a token",
            format!("{key} = {text:?}"),
        )))
    })
}
