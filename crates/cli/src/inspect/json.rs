//! `inspect --json`: an inspection as one JSON object, for scripts and monitoring.
//!
//! One object per inspection (one line each under `--watch`), with the participants split by
//! verdict and each one's fields named as the table's columns are. The field names are part of
//! the command's interface: add fields, never rename them.

use lockkeeper::zk::{Inspection, Layout, Participant, State};
use serde_json::{Value, json};

/// The inspection of a ZooKeeper lock path.
pub fn zk(inspection: &Inspection) -> Value {
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
pub fn etcd(inspection: &lockkeeper::etcd::Inspection) -> Value {
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
