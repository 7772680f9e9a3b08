//! Lock-delay on ZooKeeper (Chubby's): after a holder *failed* rather than released, nobody is
//! granted the lock until the delay has passed, so the old holder's in-flight writes land
//! before a new holder starts.
//!
//! A failure and a clean release look the same to a waiter (the node is gone), so a holder
//! with lock-delay says which it was in the lock directory's own data, the *release record*:
//!
//! - on grant it writes `lockkeeper held {name}` there (one setData, best effort);
//! - a clean release is one multi: delete its node and write `lockkeeper released {name}`.
//!   The multi is atomic, so a waiter that sees the node gone and reads the directory after
//!   that sees the record of that very release.
//!
//! The record lives in the data of the directory the queue nodes are listed from: no extra
//! node appears among the children, so neither lockkeeper's sort nor Curator's (which sorts
//! every child by what follows its lock name) ever meets it, and Curator never reads the
//! directory's data.
//!
//! A waiter with lock-delay about to be granted checks the nodes it saw vanish ahead of it (the
//! ones it watched), plus the record's `held` node when that node is gone and would have kept
//! it out: each one not named by a `released` record counts as failed, and the grant waits
//! until the delay has passed since the waiter saw it gone. Invariant: nothing is granted
//! sooner than `delay` after this process could see a failed holder's node gone. Holders that
//! never write the record (Curator's, or lockkeeper handles without lock-delay) are therefore
//! always treated as failed: the safe side.
//!
//! The record holds one event, the last. Releases that race (readers of one read-write lock)
//! may overwrite each other's record; a waiter then delays after a clean release: again the
//! safe side.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::time::Instant;
use zookeeper_client::MultiWriteError;

use crate::error::{Error, Result};
use crate::zk::node::look;
use crate::zk::session::{Generation, is_connection_loss};

const HELD: &str = "lockkeeper held ";
const RELEASED: &str = "lockkeeper released ";

/// The last event a lock directory's data records.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Record {
    /// Granted to this node (a child name); it may since have failed.
    Held(String),
    /// This node was released cleanly.
    Released(String),
    /// Nothing lockkeeper wrote (an empty directory node, or a Curator-made one).
    Unknown,
}

impl Record {
    pub(crate) fn parse(data: &[u8]) -> Record {
        let Ok(text) = std::str::from_utf8(data) else {
            return Record::Unknown;
        };
        if let Some(name) = text.strip_prefix(HELD) {
            Record::Held(name.to_owned())
        } else if let Some(name) = text.strip_prefix(RELEASED) {
            Record::Released(name.to_owned())
        } else {
            Record::Unknown
        }
    }

    fn released(&self, name: &str) -> bool {
        matches!(self, Record::Released(released) if released == name)
    }
}

fn held_record(name: &str) -> Vec<u8> {
    format!("{HELD}{name}").into_bytes()
}

fn released_record(name: &str) -> Vec<u8> {
    format!("{RELEASED}{name}").into_bytes()
}

/// `(directory, child name)` of a lock node's full path.
pub(crate) fn split(node: &str) -> (&str, &str) {
    match node.rsplit_once('/') {
        Some(("", name)) => ("/", name),
        Some((dir, name)) => (dir, name),
        None => ("/", node),
    }
}

/// Reads the release record of the lock directory `dir`.
pub(crate) async fn read(generation: &Generation, dir: &str) -> Result<Record> {
    Ok(match look(generation, dir, false).await? {
        Some((data, _, _)) => Record::parse(&data),
        None => Record::Unknown,
    })
}

/// Records that `node` was just granted. Best effort: without it only a waiter arriving after
/// this holder failed (rather than one already queued) would miss the delay.
pub(crate) async fn note_held(generation: &Generation, node: &str) {
    let (dir, name) = split(node);
    let record = held_record(name);
    let record = &record;
    let written = generation
        .retry(|client| async move { client.set_data(dir, record, None).await })
        .await;
    if let Err(err) = written {
        tracing::debug!(node, %err, "could not record a lock-delay grant");
    }
}

/// Deletes `node` and records its clean release, in one multi. `NotHeld` when the node was
/// known to be gone before (the same rule as a plain delete in `node.rs`: after an attempt
/// whose answer was lost, NoNode counts as released).
pub(crate) async fn release_recorded(generation: &Generation, node: &str) -> Result<()> {
    let (dir, name) = split(node);
    let record = released_record(name);
    let record = &record;
    let unanswered = AtomicBool::new(false);
    let deleted = generation
        .retry(|client| {
            let unanswered = &unanswered;
            async move {
                let mut multi = client.new_multi_writer();
                multi.add_delete(node, None)?;
                multi.add_set_data(dir, record, None)?;
                match multi.commit().await {
                    Ok(_) => Ok(true),
                    Err(MultiWriteError::OperationFailed {
                        source: zookeeper_client::Error::NoNode,
                        ..
                    }) => Ok(false),
                    Err(err) => {
                        let err = zookeeper_client::Error::from(err);
                        if is_connection_loss(&err) {
                            unanswered.store(true, Ordering::Release);
                        }
                        Err(err)
                    }
                }
            }
        })
        .await;
    let maybe_deleted = unanswered.load(Ordering::Acquire);
    match deleted {
        Ok(true) => Ok(()),
        Ok(false) | Err(Error::SessionLost) if maybe_deleted => Ok(()),
        Ok(false) | Err(Error::SessionLost) => Err(Error::NotHeld),
        Err(err) => Err(err),
    }
}

/// The nodes a waiter saw vanish ahead of it, with when it first saw each gone.
#[derive(Debug, Default)]
pub(crate) struct Vanished {
    seen: HashMap<String, Instant>,
}

impl Vanished {
    /// Notes that `name` was seen gone now (the first sighting counts).
    pub(crate) fn saw(&mut self, name: &str) {
        self.seen
            .entry(name.to_owned())
            .or_insert_with(Instant::now);
    }

    /// Until when a grant must wait: `delay` after the latest sighting of a vanished node that
    /// `record` does not name as cleanly released. `None` when nothing failed.
    pub(crate) fn delayed_until(&self, record: &Record, delay: Duration) -> Option<Instant> {
        self.seen
            .iter()
            .filter(|(name, _)| !record.released(name))
            .map(|(_, seen)| *seen + delay)
            .max()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn records_round_trip_and_foreign_data_is_unknown() {
        assert_eq!(
            Record::parse(&held_record("_c_a-lock-0000000001")),
            Record::Held("_c_a-lock-0000000001".into())
        );
        assert_eq!(
            Record::parse(&released_record("_c_a-lock-0000000001")),
            Record::Released("_c_a-lock-0000000001".into())
        );
        assert_eq!(Record::parse(b""), Record::Unknown);
        assert_eq!(Record::parse(&[0xff, 0xfe]), Record::Unknown);
    }

    #[test]
    fn only_unreleased_vanished_nodes_delay() {
        let mut vanished = Vanished::default();
        vanished.saw("a");
        let delay = Duration::from_secs(1);
        assert!(
            vanished
                .delayed_until(&Record::Released("a".into()), delay)
                .is_none()
        );
        assert!(
            vanished
                .delayed_until(&Record::Released("b".into()), delay)
                .is_some()
        );
        assert!(vanished.delayed_until(&Record::Unknown, delay).is_some());
    }

    #[test]
    fn splits_node_paths() {
        assert_eq!(split("/locks/a/_c_x-lock-1"), ("/locks/a", "_c_x-lock-1"));
        assert_eq!(split("/_c_x-lock-1"), ("/", "_c_x-lock-1"));
    }
}
