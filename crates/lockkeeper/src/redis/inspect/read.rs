//! The inspection's one round trip: a read-only script over every key of every lock kind of a
//! name, and the parse of its answer into participants.
//!
//! Invariant: the script reads and never writes, and reads all keys in one atomic step along
//! with the server's clock, so what is expired is judged against the same instant for every
//! key (see the parent module).

use std::sync::LazyLock;
use std::time::Duration;

use redis::{Script, Value};

use super::{Inspection, Kind, Participant, State};
use crate::fencing::FencingToken;
use crate::redis::client::Redis;
use crate::redis::conn::unexpected_reply;
use crate::redis::keys::LockKeys;
use crate::redis::line::LineKeys;
use crate::redis::script::{NOW, call};
use crate::{Error, Result};

/// The keys of every lock kind called one name, in the order the script reads them.
pub(super) struct NameKeys {
    pub lease: LockKeys,
    pub lease_line: LineKeys,
    pub reentrant: LockKeys,
    pub reentrant_line: LineKeys,
    pub readers: String,
    pub writer: String,
    pub intent: String,
    pub rw: LockKeys,
    pub semaphore: LockKeys,
    pub semaphore_line: LineKeys,
}

impl NameKeys {
    /// The keys as the recipes name them (see each recipe's constructor on [`Redis`]).
    pub(super) fn new(prefix: &str, name: &str) -> NameKeys {
        let lease = LockKeys::new(prefix, "lease", name);
        let reentrant = LockKeys::new(prefix, "reentrant", name);
        let rw = LockKeys::new(prefix, "rw", name);
        let semaphore = LockKeys::new(prefix, "semaphore", name);
        NameKeys {
            lease_line: LineKeys::for_lock(&lease),
            reentrant_line: LineKeys::for_lock(&reentrant),
            readers: rw.part("readers"),
            writer: rw.part("writer"),
            intent: rw.part("intent"),
            semaphore_line: LineKeys::for_lock(&semaphore),
            lease,
            reentrant,
            rw,
            semaphore,
        }
    }

    fn in_script_order(&self) -> [&str; 16] {
        [
            &self.lease.main,
            &self.lease.fence,
            &self.lease_line.line,
            &self.lease_line.deadlines,
            &self.reentrant.main,
            &self.reentrant.fence,
            &self.reentrant_line.line,
            &self.reentrant_line.deadlines,
            &self.readers,
            &self.writer,
            &self.intent,
            &self.rw.fence,
            &self.semaphore.main,
            &self.semaphore.fence,
            &self.semaphore_line.line,
            &self.semaphore_line.deadlines,
        ]
    }
}

/// KEYS: see [`NameKeys::in_script_order`]. Answers 21 values: the server's clock (ms); the
/// lease lock's token, PTTL, counter, line and line deadlines; the reentrant lock's hash,
/// PTTL, counter, line and deadlines; the readers, the writer's token and PTTL, the intent's
/// token and PTTL, the counter; the permits, counter, line and deadlines. Sorted sets come
/// `WITHSCORES`; a missing string is nil.
static READ: LazyLock<Script> = LazyLock::new(|| {
    Script::new(&format!(
        r"{NOW}
local function z(key) return redis.call('ZRANGE', key, 0, -1, 'WITHSCORES') end
local function get(key) return redis.call('GET', key) end
local function pttl(key) return redis.call('PTTL', key) end
return {{
  now,
  get(KEYS[1]), pttl(KEYS[1]), get(KEYS[2]), z(KEYS[3]), z(KEYS[4]),
  redis.call('HGETALL', KEYS[5]), pttl(KEYS[5]), get(KEYS[6]), z(KEYS[7]), z(KEYS[8]),
  z(KEYS[9]), get(KEYS[10]), pttl(KEYS[10]), get(KEYS[11]), pttl(KEYS[11]), get(KEYS[12]),
  z(KEYS[13]), get(KEYS[14]), z(KEYS[15]), z(KEYS[16])
}}
"
    ))
});

/// Reads every kind's keys of `name` in one script and judges them.
pub(super) async fn inspect(redis: &Redis, name: &str) -> Result<Inspection> {
    let keys = NameKeys::new(redis.prefix(), name);
    let answer: Vec<Value> = call(&READ, redis.conn(), &keys.in_script_order(), &[]).await?;
    let answer: [Value; 21] = answer.try_into().map_err(|answer: Vec<Value>| {
        Error::from(unexpected_reply(
            "the inspection script answered the wrong number of values",
            answer.len(),
        ))
    })?;
    let [
        now,
        lease,
        lease_pttl,
        lease_fence,
        lease_line,
        lease_deadlines,
        reentrant,
        reentrant_pttl,
        reentrant_fence,
        reentrant_line,
        reentrant_deadlines,
        readers,
        writer,
        writer_pttl,
        intent,
        intent_pttl,
        rw_fence,
        permits,
        semaphore_fence,
        semaphore_line,
        semaphore_deadlines,
    ] = answer;
    let now = int(&now, "TIME", "the server's clock")?;
    let mut holders = Vec::new();
    let mut waiters = Vec::new();
    let holder = |kind, key: &str, owner: String, count, fencing_token, latest_token, ttl_left| {
        Participant {
            kind,
            state: State::Holds,
            key: key.to_owned(),
            owner,
            count,
            fencing_token,
            latest_token,
            ttl_left,
            waited: None,
        }
    };

    // The lease lock: the key's token; the counter's value is its token.
    let fence = token(&lease_fence, &keys.lease.fence)?;
    if let Some(owner) = text(&lease, &keys.lease.main)? {
        let ttl = ttl(int(&lease_pttl, "PTTL", &keys.lease.main)?);
        holders.push(holder(
            Kind::Lease,
            &keys.lease.main,
            owner,
            1,
            fence,
            fence,
            ttl,
        ));
    }
    line(
        Kind::Lease,
        &keys.lease_line,
        now,
        fence,
        (&lease_line, &lease_deadlines),
        &mut waiters,
    )?;

    // The reentrant lock: owner id → hold count; one owner at a time holds.
    let fence = token(&reentrant_fence, &keys.reentrant.fence)?;
    let ttl_left = ttl(int(&reentrant_pttl, "PTTL", &keys.reentrant.main)?);
    for (owner, count) in pairs(&reentrant, &keys.reentrant.main)? {
        let count = count
            .parse::<u64>()
            .map_err(|_| unexpected_reply("a reentrant hold count is not a number", &count))?;
        holders.push(holder(
            Kind::Reentrant,
            &keys.reentrant.main,
            owner,
            count,
            fence,
            fence,
            ttl_left,
        ));
    }
    line(
        Kind::Reentrant,
        &keys.reentrant_line,
        now,
        fence,
        (&reentrant_line, &reentrant_deadlines),
        &mut waiters,
    )?;

    // The read-write lock: live readers (token → lease end), the writer, a waiting writer.
    let fence = token(&rw_fence, &keys.rw.fence)?;
    for (owner, ends) in scored(&readers, &keys.readers)? {
        if ends > now {
            let ttl_left = Some(Duration::from_millis((ends - now) as u64));
            holders.push(holder(
                Kind::Read,
                &keys.readers,
                owner,
                1,
                None,
                fence,
                ttl_left,
            ));
        }
    }
    if let Some(owner) = text(&writer, &keys.writer)? {
        let ttl = ttl(int(&writer_pttl, "PTTL", &keys.writer)?);
        holders.push(holder(
            Kind::Write,
            &keys.writer,
            owner,
            1,
            fence,
            fence,
            ttl,
        ));
    }
    if let Some(owner) = text(&intent, &keys.intent)? {
        waiters.push(Participant {
            state: State::Waits,
            fencing_token: None,
            ttl_left: ttl(int(&intent_pttl, "PTTL", &keys.intent)?),
            ..holder(Kind::Write, &keys.intent, owner, 1, None, fence, None)
        });
    }

    // The semaphore: live permits `id:i` → lease end, one entry per acquisition id.
    let fence = token(&semaphore_fence, &keys.semaphore.fence)?;
    let mut acquisitions: Vec<(String, u64, i64)> = Vec::new();
    for (member, ends) in scored(&permits, &keys.semaphore.main)? {
        if ends <= now {
            continue;
        }
        let id = member
            .rsplit_once(':')
            .map_or(member.as_str(), |(id, _)| id);
        match acquisitions.iter_mut().find(|(seen, _, _)| seen == id) {
            Some((_, count, last)) => {
                *count += 1;
                *last = (*last).max(ends);
            }
            None => acquisitions.push((id.to_owned(), 1, ends)),
        }
    }
    for (id, count, ends) in acquisitions {
        let ttl_left = Some(Duration::from_millis((ends - now) as u64));
        holders.push(holder(
            Kind::Permit,
            &keys.semaphore.main,
            id,
            count,
            None,
            fence,
            ttl_left,
        ));
    }
    line(
        Kind::Permit,
        &keys.semaphore_line,
        now,
        fence,
        (&semaphore_line, &semaphore_deadlines),
        &mut waiters,
    )?;

    holders.append(&mut waiters);
    Ok(Inspection {
        name: name.to_owned(),
        participants: holders,
    })
}

/// The live places of a line (deadline still ahead), in join order, as waiters of `kind`.
fn line(
    kind: Kind,
    keys: &LineKeys,
    now: i64,
    latest_token: Option<FencingToken>,
    (line, deadlines): (&Value, &Value),
    waiters: &mut Vec<Participant>,
) -> Result<()> {
    let deadlines = scored(deadlines, &keys.deadlines)?;
    for (waiter, joined) in scored(line, &keys.line)? {
        let Some((_, lapses)) = deadlines.iter().find(|(w, _)| *w == waiter) else {
            continue;
        };
        if *lapses <= now {
            continue;
        }
        waiters.push(Participant {
            kind,
            state: State::Waits,
            key: keys.line.clone(),
            owner: waiter,
            count: 1,
            fencing_token: None,
            latest_token,
            ttl_left: Some(Duration::from_millis((lapses - now) as u64)),
            waited: Some(Duration::from_millis(
                now.saturating_sub(joined).max(0) as u64
            )),
        });
    }
    Ok(())
}

/// A `PTTL` answer as what is left: `None` without expiry (-1) or when gone (-2).
fn ttl(pttl: i64) -> Option<Duration> {
    u64::try_from(pttl).ok().map(Duration::from_millis)
}

/// A string value (nil: `None`); anything else is an error naming `key`.
fn text(value: &Value, key: &str) -> Result<Option<String>> {
    match value {
        Value::Nil => Ok(None),
        Value::BulkString(bytes) => Ok(Some(String::from_utf8_lossy(bytes).into_owned())),
        Value::SimpleString(s) => Ok(Some(s.clone())),
        Value::Int(n) => Ok(Some(n.to_string())),
        other => Err(wrong(key, "a string", other)),
    }
}

/// An integer answer of `what` about `key`.
fn int(value: &Value, what: &str, key: &str) -> Result<i64> {
    match value {
        Value::Int(n) => Ok(*n),
        other => Err(wrong(key, &format!("an integer {what} answer"), other)),
    }
}

/// A fencing counter's value (missing: `None`).
fn token(value: &Value, key: &str) -> Result<Option<FencingToken>> {
    match text(value, key)? {
        None => Ok(None),
        Some(text) => text
            .parse::<u64>()
            .ok()
            .filter(|v| *v > 0)
            .map(|v| Some(FencingToken::new(v)))
            .ok_or_else(|| wrong(key, "a positive fencing counter", value)),
    }
}

/// A flat array of (field, value) pairs, as `HGETALL` and `ZRANGE … WITHSCORES` answer.
fn pairs(value: &Value, key: &str) -> Result<Vec<(String, String)>> {
    let Value::Array(items) = value else {
        return Err(wrong(key, "an array", value));
    };
    if items.len() % 2 != 0 {
        return Err(wrong(key, "an even number of items", value));
    }
    items
        .chunks(2)
        .map(|pair| {
            let field = text(&pair[0], key)?.ok_or_else(|| wrong(key, "a field", value))?;
            let value = text(&pair[1], key)?.ok_or_else(|| wrong(key, "a value", value))?;
            Ok((field, value))
        })
        .collect()
}

/// A sorted set's members and integer scores (server ms), in score order.
fn scored(value: &Value, key: &str) -> Result<Vec<(String, i64)>> {
    pairs(value, key)?
        .into_iter()
        .map(|(member, score)| {
            let score = score
                .parse::<f64>()
                .map_err(|_| wrong(key, "a numeric score", value))?;
            Ok((member, score as i64))
        })
        .collect()
}

/// The error for an answer about `key` that is not `expected`: the key's content is not what
/// the recipes write (another program's key of the same name, or a corrupted one).
fn wrong(key: &str, expected: &str, got: &Value) -> Error {
    Error::from(redis::RedisError::from((
        redis::ErrorKind::UnexpectedReturnType,
        "unexpected content in a lock key",
        format!("{key}: expected {expected}, got {got:?}"),
    )))
}
