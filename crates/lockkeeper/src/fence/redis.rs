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
//!
//! # The limit: the fence remembers only what its Redis remembers
//!
//! The highest token is a key in the same Redis, so the fence is exactly as durable as that
//! Redis. When the key is lost, the fence has forgotten the token and accepts the next write
//! whatever its token, an older holder's included. That happens:
//! - when a server without persistence restarts (or one with `appendfsync everysec` or `no`
//!   loses the machine, and with it the last writes);
//! - at a failover to a replica the latest writes had not reached: replication is
//!   asynchronous, and the old master's persistence does not help once the replica is master;
//! - when the key is evicted (a `maxmemory-policy` of `allkeys-*`) or deleted (`FLUSHALL`).
//!
//! This is the resource's own gap, besides the one the Redis locks' tokens have (see
//! [`crate::redis`]): it defeats fencing whatever lock issued the tokens, ZooKeeper's included.
//!
//! Invariant: a fence is built only on servers that say they fsync every write before
//! acknowledging it (`appendonly yes` with `appendfsync always`, read with `CONFIG GET` from
//! every primary when the fence is built), or when the caller opted out by name
//! ([`RedisFenceBuilder::accept_unpersisted_server`]); otherwise [`Error::NotDurable`] names
//! the server and what it said. Settings that cannot be read (`CONFIG` renamed, disabled or
//! denied, as managed services do) are unknown, and refused the same way. The check covers
//! restarts only: it cannot see replicas, later `CONFIG SET`s, eviction or a failover to a
//! master built differently. A resource that must survive failover belongs where a write is
//! replicated before it is acknowledged: the [`sql`](super::sql) fence on PostgreSQL with
//! synchronous replication, or [`ZkFence`](super::ZkFence).

use std::collections::HashMap;
use std::sync::LazyLock;

use ::redis::{FromRedisValue, Script, Value};

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
/// The fence forgets its highest tokens whenever its Redis loses them (a restart without
/// persistence, a failover to a replica that missed the latest writes, eviction): it then
/// accepts older tokens again. So [`RedisFence::new`] refuses a server that does not fsync
/// every write. That check covers restarts only: no setting closes the failover gap, and
/// eviction (`maxmemory-policy allkeys-*`) or `FLUSHALL` forget tokens too, so keep a resource
/// that must survive a failover in PostgreSQL or ZooKeeper.
///
/// ```no_run
/// # async fn demo(guard: lockkeeper::redis::LeaseGuard) -> lockkeeper::Result<()> {
/// use lockkeeper::fence::{Outcome, RedisFence};
/// use lockkeeper::redis::Redis;
///
/// let store = Redis::connect("redis://127.0.0.1:6379").await?;
/// // Error::NotDurable unless the server runs with appendonly yes + appendfsync always.
/// let fence = RedisFence::new(&store).await?;
/// match fence.write("orders", guard.fencing_token(), b"v2").await? {
///     Outcome::Accepted => {}
///     Outcome::Refused { highest } => eprintln!("a newer holder ({highest}) wrote first"),
/// }
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RedisFence {
    redis: Redis,
    prefix: String,
}

/// How to build a [`RedisFence`]: checked against the server's persistence unless told
/// otherwise.
#[derive(Clone, Debug)]
#[must_use = "a builder does nothing until built"]
pub struct RedisFenceBuilder {
    redis: Redis,
    accept_unpersisted: bool,
}

impl RedisFence {
    /// A fence on the Redis (server, cluster or Sentinel master) behind `redis`, with its key
    /// prefix. The resource's Redis need not be the lock's.
    ///
    /// Asks every primary for its persistence settings first, because a fence on a server
    /// that loses writes at a restart would let older tokens in afterwards:
    /// [`Error::NotDurable`], naming the server and its settings, unless every one runs with
    /// `appendonly yes` and `appendfsync always`; also when `CONFIG GET` is refused (renamed or
    /// disabled), since the settings are then unknown. [`Error::Redis`] if a server could not
    /// be asked. To build on such a server anyway, see
    /// [`RedisFenceBuilder::accept_unpersisted_server`].
    pub async fn new(redis: &Redis) -> Result<RedisFence> {
        RedisFence::builder(redis).build().await
    }

    /// A builder for a fence on `redis`, for the choices [`RedisFence::new`] does not make.
    pub fn builder(redis: &Redis) -> RedisFenceBuilder {
        RedisFenceBuilder {
            redis: redis.clone(),
            accept_unpersisted: false,
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

impl RedisFenceBuilder {
    /// Builds the fence without asking the server how it persists, accepting that a restart
    /// (or failover, or eviction) that loses the fence's keys makes it accept older tokens.
    ///
    /// For when that is known and acceptable, or the check cannot see the truth: tests and
    /// development servers; a value that is only a cache of something fenced elsewhere; a
    /// managed Redis that hides `CONFIG` but whose persistence was checked another way (its
    /// console, its provider's guarantees). Name the reason where you call it.
    ///
    /// ```no_run
    /// # async fn demo(store: lockkeeper::redis::Redis) -> lockkeeper::Result<()> {
    /// use lockkeeper::fence::RedisFence;
    ///
    /// // A cache rebuilt from the database at every restart: forgetting tokens with it is fine.
    /// let fence = RedisFence::builder(&store)
    ///     .accept_unpersisted_server()
    ///     .build()
    ///     .await?;
    /// # let _ = fence;
    /// # Ok(()) }
    /// ```
    pub fn accept_unpersisted_server(mut self) -> RedisFenceBuilder {
        self.accept_unpersisted = true;
        self
    }

    /// The fence, after the persistence check unless it was opted out of; the errors are
    /// [`RedisFence::new`]'s.
    pub async fn build(self) -> Result<RedisFence> {
        if !self.accept_unpersisted {
            check_durable(&self.redis).await?;
        }
        Ok(RedisFence {
            prefix: self.redis.prefix().to_owned(),
            redis: self.redis,
        })
    }
}

/// The settings that make every acknowledged write survive a restart of the server.
const DURABLE: [(&str, &str); 2] = [("appendonly", "yes"), ("appendfsync", "always")];

/// Asks each primary behind `redis` for its append-only settings; the first one that does
/// not fsync every write, or does not say, is [`Error::NotDurable`].
async fn check_durable(redis: &Redis) -> Result<()> {
    // One pattern rather than two names: CONFIG GET takes several names only from Redis 7.
    let mut ask = ::redis::cmd("CONFIG");
    ask.arg("GET").arg("append*");
    for (address, answer) in redis.conn().ask_each_primary(&ask).await {
        let found = match answer {
            Ok(settings) => match not_durable(settings) {
                None => continue,
                Some(found) => found,
            },
            // The server answered, with an error: CONFIG is renamed, disabled or denied.
            Err(err) if err.code().is_some() => format!(
                "settings unknown: CONFIG GET failed ({err}); CONFIG may be renamed or \
                 disabled"
            ),
            // It could not be asked at all: that is no answer about its settings.
            Err(err) => return Err(Error::Redis(err)),
        };
        return Err(Error::NotDurable { address, found });
    }
    Ok(())
}

/// `None` if a `CONFIG GET append*` answer shows the durable settings; otherwise what it
/// shows (`appendonly no, appendfsync everysec`).
fn not_durable(answer: Value) -> Option<String> {
    let shown = format!("{answer:?}");
    let Ok(settings) = HashMap::<String, String>::from_redis_value(answer) else {
        return Some(format!("settings unknown: CONFIG GET answered {shown}"));
    };
    let durable = DURABLE.iter().all(|(name, want)| {
        settings
            .get(*name)
            .is_some_and(|value| value.eq_ignore_ascii_case(want))
    });
    if durable {
        return None;
    }
    let found: Vec<String> = DURABLE
        .iter()
        .map(|(name, _)| match settings.get(*name) {
            Some(value) => format!("{name} {value}"),
            None => format!("{name} not reported"),
        })
        .collect();
    Some(found.join(", "))
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
