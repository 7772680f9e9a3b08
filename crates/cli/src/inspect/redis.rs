//! A Redis lock's holder, read from the keys of the lockkeeper Redis layouts: the lease lock
//! (`PREFIX:lease:{NAME}`, a string whose value is the holder's token) and the reentrant lock
//! (`PREFIX:reentrant:{NAME}`, a hash of owner id to hold count), with the remaining TTL and
//! the lock's fencing counter (`…:fence`, the last token issued: the holder's, while held).
//!
//! Redis keeps no queue of waiters on the server for these locks, so only holders are shown.
//! Reads are separate commands, not one script: an inspection is a snapshot for people, and a
//! key that changes between two reads shows as whichever state each read saw.

use std::collections::HashMap;
use std::time::Duration;

use lockkeeper::redis::{DEFAULT_PREFIX, Redis};
use serde_json::{Value, json};

use crate::backend::Failure;

/// The kinds of Redis lock this command reads, as their keys name them.
const KINDS: [&str; 2] = ["lease", "reentrant"];

/// One held Redis lock key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Holder {
    /// `lease` or `reentrant`.
    pub kind: &'static str,
    /// The lock's key.
    pub key: String,
    /// The holder: the lease token, or the reentrant lock's owner id.
    pub value: String,
    /// How many times the owner holds it (1 for a lease lock).
    pub count: i64,
    /// Time to live left, as `PTTL` answered (ms; -1 without expiry).
    pub ttl_ms: i64,
    /// The last fencing token issued for the lock (the holder's), if any.
    pub token: Option<u64>,
}

/// Checks a Redis lock name as the library does: braces would end the hash tag.
pub fn check_name(name: &str) -> Result<(), Failure> {
    if name.is_empty() || name.contains(['{', '}']) {
        return Err(Failure::usage(format!(
            "lock name {name:?}: must be non-empty and contain no '{{' or '}}'"
        )));
    }
    Ok(())
}

/// The key of the lock `name` of `kind`, as the library names it.
pub fn key(kind: &str, name: &str) -> String {
    format!("{DEFAULT_PREFIX}:{kind}:{{{name}}}")
}

/// The holders of every Redis lock kind named `name` (usually none or one).
pub async fn holders(redis: &Redis, name: &str) -> Result<Vec<Holder>, lockkeeper::Error> {
    let mut found = Vec::new();
    for kind in KINDS {
        let key = key(kind, name);
        let owners: Vec<(String, i64)> = if kind == "lease" {
            let value: Option<Vec<u8>> = redis.command(redis::cmd("GET").arg(&key)).await?;
            value
                .map(|v| vec![(String::from_utf8_lossy(&v).into_owned(), 1)])
                .unwrap_or_default()
        } else {
            let pairs: HashMap<Vec<u8>, i64> =
                redis.command(redis::cmd("HGETALL").arg(&key)).await?;
            pairs
                .into_iter()
                .map(|(owner, count)| (String::from_utf8_lossy(&owner).into_owned(), count))
                .collect()
        };
        if owners.is_empty() {
            continue;
        }
        let ttl_ms: i64 = redis.command(redis::cmd("PTTL").arg(&key)).await?;
        let token: Option<u64> = redis
            .command(redis::cmd("GET").arg(format!("{key}:fence")))
            .await?;
        for (value, count) in owners {
            found.push(Holder {
                kind,
                key: key.clone(),
                value,
                count,
                ttl_ms,
                token,
            });
        }
    }
    Ok(found)
}

/// Deletes `holder`'s key only if it still holds through it (same lease token, or the same
/// single owner of a reentrant lock), and wakes the lock's waiters as a release does. `true`
/// if it deleted.
pub async fn delete_if_still(redis: &Redis, holder: &Holder) -> Result<bool, lockkeeper::Error> {
    // The compare and the delete in one script, so a holder that released (and perhaps a new
    // one that took the lock) in between is never deleted by mistake.
    const SCRIPT: &str = r"
local same
if ARGV[3] == 'lease' then
  same = redis.call('GET', KEYS[1]) == ARGV[1]
else
  local owners = redis.call('HKEYS', KEYS[1])
  same = #owners == 1 and owners[1] == ARGV[1]
end
if not same then return 0 end
redis.call('DEL', KEYS[1])
redis.call('PUBLISH', ARGV[2], 'released')
return 1";
    let deleted: i64 = redis
        .command(
            redis::cmd("EVAL")
                .arg(SCRIPT)
                .arg(1)
                .arg(&holder.key)
                .arg(&holder.value)
                .arg(format!("{}:released", holder.key))
                .arg(holder.kind),
        )
        .await?;
    Ok(deleted == 1)
}

/// The holders as a table for people.
pub fn table(name: &str, holders: &[Holder]) -> String {
    if holders.is_empty() {
        return format!("{name}: not held (no lease or reentrant lock key)");
    }
    let mut out = format!("{name}: {} holding", holders.len());
    let rows: Vec<[String; 5]> =
        std::iter::once(["KIND", "KEY", "TTL", "TOKEN", "HOLDER"].map(str::to_owned))
            .chain(holders.iter().map(|h| {
                [
                    h.kind.to_owned(),
                    h.key.clone(),
                    ttl(h.ttl_ms),
                    h.token.map_or_else(|| "-".to_owned(), |t| t.to_string()),
                    if h.count > 1 {
                        format!("{} (x{})", h.value, h.count)
                    } else {
                        h.value.clone()
                    },
                ]
            }))
            .collect();
    let mut widths = [0; 5];
    for row in &rows {
        for (width, cell) in widths.iter_mut().zip(row) {
            *width = (*width).max(cell.chars().count());
        }
    }
    for row in &rows {
        let mut line = String::new();
        for (cell, width) in row.iter().zip(widths) {
            line.push_str(&format!("{cell:<width$}  "));
        }
        out.push('\n');
        out.push_str(line.trim_end());
    }
    out
}

fn ttl(ms: i64) -> String {
    match ms {
        ..0 => "none".to_owned(),
        ms => format!("{:.1}s", Duration::from_millis(ms as u64).as_secs_f64()),
    }
}

/// The holders as one JSON object.
pub fn json(name: &str, holders: &[Holder]) -> Value {
    let holders: Vec<Value> = holders
        .iter()
        .map(|h| {
            json!({
                "kind": h.kind,
                "key": h.key,
                "value": h.value,
                "count": h.count,
                "ttl_ms": h.ttl_ms,
                "token": h.token,
            })
        })
        .collect();
    json!({ "backend": "redis", "name": name, "holders": holders })
}
