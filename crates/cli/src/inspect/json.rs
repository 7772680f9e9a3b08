//! `inspect --json`: an inspection as one JSON object, for scripts and monitoring.
//!
//! One object per inspection (one line each under `--watch`), with the participants split by
//! verdict and each one's fields named as the table's columns are. The field names are part of
//! the command's interface: add fields, never rename them.
//!
//! On Redis, `holders` and `waiters` entries keep the fields of the first Redis output (`kind`,
//! `key`, `value`: the holder, `count`, `ttl_ms`: -1 without expiry, `token`) and add `state`,
//! `latest_token` and `waited_ms`; `kinds` names the lock kinds found.

use lockkeeper::zk::{Inspection, Layout, Participant, State};
use serde_json::{Value, json};

/// The inspection of a ZooKeeper lock path.
pub(crate) fn zk(inspection: &Inspection) -> Value {
    let (kind, max_leases) = match inspection.layout {
        Layout::Missing => ("missing", None),
        Layout::Lock => ("lock", None),
        Layout::Election => ("election", None),
        Layout::Semaphore { max_leases } => ("semaphore", max_leases),
        Layout::KazooSemaphore { max_leases } => ("kazoo-semaphore", max_leases),
        _ => ("unknown", None),
    };
    let of = |state: State| -> Vec<Value> {
        inspection
            .participants
            .iter()
            .filter(|p| p.state == state)
            .map(participant)
            .collect()
    };
    json!({
        "backend": "zk",
        "path": inspection.path,
        "kind": kind,
        "max_leases": max_leases,
        "holders": of(State::Holds),
        "waiters": of(State::Waits),
        "unknown": of(State::Unknown),
    })
}

fn participant(p: &Participant) -> Value {
    json!({
        "state": p.state.to_string(),
        "kind": p.kind.to_string(),
        "sequence": p.sequence,
        "session": p.session_hex(),
        "age_ms": u64::try_from(p.age.as_millis()).unwrap_or(u64::MAX),
        "token": p.fencing_token.get(),
        "data": p.data,
        "node": p.path,
        "name": p.name,
    })
}

/// The inspection of an etcd lock name.
#[cfg(feature = "etcd")]
pub(crate) fn etcd(inspection: &lockkeeper::etcd::Inspection) -> Value {
    use lockkeeper::etcd::State;
    let of = |state: State| -> Vec<Value> {
        inspection
            .with_state(state)
            .map(|p| {
                json!({
                    "state": p.state.to_string(),
                    "kind": p.kind.to_string(),
                    "token": p.fencing_token.get(),
                    "lease": format!("{:x}", p.lease),
                    "ttl_s": p.ttl_left.map(|t| t.as_secs()),
                    "value": String::from_utf8_lossy(&p.value),
                    "key": p.key,
                })
            })
            .collect()
    };
    json!({
        "backend": "etcd",
        "name": inspection.name,
        "holders": of(State::Holds),
        "waiters": of(State::Waits),
        "unknown": of(State::Unknown),
    })
}

/// The inspection of a Redis lock name (every lock kind under it).
pub(crate) fn redis(inspection: &lockkeeper::redis::Inspection) -> Value {
    use lockkeeper::redis::Participant;
    let entry = |p: &Participant| -> Value {
        let ms = |d: std::time::Duration| u64::try_from(d.as_millis()).unwrap_or(u64::MAX);
        json!({
            "state": p.state.to_string(),
            "kind": p.kind.to_string(),
            "key": p.key,
            "value": p.owner,
            "count": p.count,
            "ttl_ms": p.ttl_left.map_or(-1, |t| i64::try_from(ms(t)).unwrap_or(i64::MAX)),
            "token": p.fencing_token.map(lockkeeper::FencingToken::get),
            "latest_token": p.latest_token.map(lockkeeper::FencingToken::get),
            "waited_ms": p.waited.map(ms),
        })
    };
    let kinds: Vec<String> = inspection.kinds().iter().map(ToString::to_string).collect();
    json!({
        "backend": "redis",
        "name": inspection.name,
        "kinds": kinds,
        "holders": inspection.holders().map(entry).collect::<Vec<_>>(),
        "waiters": inspection.waiters().map(entry).collect::<Vec<_>>(),
    })
}
