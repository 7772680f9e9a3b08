//! Lock-delay on ZooKeeper (Chubby's): after a holder *failed* rather than released, nobody is
//! granted the lock until the delay has passed, so the old holder's in-flight writes land
//! before a new holder starts.
//!
//! A failure and a clean release look the same to a waiter (the node is gone), so holders with
//! lock-delay keep a *release record* in the lock directory's own data:
//!
//! ```text
//! lockkeeper lock-delay
//! held _c_…-lock-0000000007
//! released _c_…-lock-0000000005 _c_…-lock-0000000006
//! ```
//!
//! - on grant a holder sets the `held` line to its node, and is granted only once that landed;
//! - a clean release is one multi: delete the node and add it to the `released` line (the last
//!   [`KEPT`] names). A waiter with lock-delay that gives up (a timeout, a dropped future)
//!   leaves the same way: it never held, so nothing of it can be in flight.
//!
//! The multi is atomic and writes the record at the version it read, so a waiter that sees a
//! node gone and reads the directory after that finds the node named, and releases that race
//! retry instead of overwriting each other. The record lives in the data of the directory the
//! queue nodes are listed from: no extra node appears among the children, so neither
//! lockkeeper's sort nor Curator's (which sorts every child by what follows its lock name) ever
//! meets it, and Curator never reads the directory's data.
//!
//! A waiter with lock-delay about to be granted checks the nodes it saw vanish ahead of it (the
//! ones its rule named for it to watch), plus the record's `held` node when that node is gone and would have kept
//! it out: each one the record does not name as released counts as failed, and the grant waits
//! until the delay has passed since the waiter saw it gone. Invariant: a waiter queued when a
//! holder fails is granted no sooner than `delay` after it could see the holder's node gone.
//! Holders that never write the record (Curator's, or lockkeeper handles without lock-delay)
//! are therefore always treated as failed: the safe side.

use std::collections::{HashMap, VecDeque};
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use lockkeeper_zk_client::MultiWriteError;
use tokio::time::Instant;

use crate::error::{Error, Result};
use crate::zk::node::look;
use crate::zk::session::{Generation, is_connection_loss};

const HEADER: &str = "lockkeeper lock-delay";
const HELD: &str = "held ";
const RELEASED: &str = "released ";
/// How many released names a record keeps: more than the releases that can race between a
/// waiter seeing its predecessor gone and reading the record.
pub(crate) const KEPT: usize = 32;
/// How often a record update is retried when another one changed the record first.
const UPDATE_ATTEMPTS: u32 = 16;

/// What a lock directory's data records (empty for data lockkeeper did not write: an empty
/// directory node, or a Curator-made one).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Record {
    /// The node last granted; it may since have failed.
    pub held: Option<String>,
    /// The nodes last released cleanly, oldest first.
    released: VecDeque<String>,
}

impl Record {
    pub(crate) fn parse(data: &[u8]) -> Record {
        let mut record = Record::default();
        let Ok(text) = std::str::from_utf8(data) else {
            return record;
        };
        let mut lines = text.lines();
        if lines.next() != Some(HEADER) {
            return record;
        }
        for line in lines {
            if let Some(name) = line.strip_prefix(HELD) {
                record.held = Some(name.to_owned());
            } else if let Some(names) = line.strip_prefix(RELEASED) {
                record.released.extend(
                    names
                        .split(' ')
                        .filter(|n| !n.is_empty())
                        .map(str::to_owned),
                );
            }
        }
        record
    }

    fn encode(&self) -> Vec<u8> {
        let mut text = String::from(HEADER);
        if let Some(held) = &self.held {
            text.push('\n');
            text.push_str(HELD);
            text.push_str(held);
        }
        if !self.released.is_empty() {
            text.push('\n');
            text.push_str(RELEASED);
            text.push_str(&Vec::from(self.released.clone()).join(" "));
        }
        text.into_bytes()
    }

    pub(crate) fn released(&self, name: &str) -> bool {
        self.released.iter().any(|released| released == name)
    }

    fn add_released(&mut self, name: &str) {
        if !self.released(name) {
            self.released.push_back(name.to_owned());
        }
        while self.released.len() > KEPT {
            self.released.pop_front();
        }
    }
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
        None => Record::default(),
    })
}

/// Records that `node` was just granted. A grant waits for it: a waiter arriving after this
/// holder failed learns of the failure from this line alone. `NotHeld` when the directory is
/// gone (and `node` with it).
pub(crate) async fn note_held(generation: &Generation, node: &str) -> Result<()> {
    let (_, name) = split(node);
    update(generation, node, None, |record| {
        record.held = Some(name.to_owned());
    })
    .await
}

/// Deletes `node` and records its clean release, in one multi. `NotHeld` when the node was
/// known to be gone before (the same rule as a plain delete in `node.rs`: after an attempt
/// whose answer was lost, NoNode counts as released).
pub(crate) async fn release_recorded(generation: &Generation, node: &str) -> Result<()> {
    let (_, name) = split(node);
    update(generation, node, Some(node), |record| {
        record.add_released(name);
    })
    .await
}

/// What one versioned write of the record came to.
enum Written {
    Done,
    /// Someone else changed the record since we read it: read it again.
    Raced,
    /// The node to delete, or the directory, was not there.
    NoNode,
}

/// Reads the record of `node`'s directory, changes it with `change` and writes it back at the
/// version read, deleting `delete` in the same multi; again if another update came first.
async fn update(
    generation: &Generation,
    node: &str,
    delete: Option<&str>,
    change: impl Fn(&mut Record),
) -> Result<()> {
    let (dir, _) = split(node);
    // Set when an attempt's answer was lost: from then on the delete may have happened.
    let unanswered = AtomicBool::new(false);
    for _ in 0..UPDATE_ATTEMPTS {
        let Some((data, stat, _)) = look(generation, dir, false).await? else {
            // No directory, so no node in it either: gone before us, or by our unanswered
            // delete.
            return match delete {
                Some(_) if unanswered.load(Ordering::Acquire) => Ok(()),
                _ => Err(Error::NotHeld),
            };
        };
        let mut record = Record::parse(&data);
        change(&mut record);
        let data = record.encode();
        let (data, version) = (&data, stat.version);
        let unanswered_ref = &unanswered;
        let written = generation
            .retry(|client| async move {
                let mut multi = client.multi();
                if let Some(delete) = delete {
                    multi.add_delete(delete, None)?;
                }
                multi.add_set_data(dir, data, Some(version))?;
                match multi.commit().await {
                    Ok(_) => Ok(Written::Done),
                    Err(MultiWriteError::OperationFailed {
                        source: lockkeeper_zk_client::Error::NoNode,
                        ..
                    }) => Ok(Written::NoNode),
                    Err(MultiWriteError::OperationFailed {
                        source: lockkeeper_zk_client::Error::BadVersion,
                        ..
                    }) => Ok(Written::Raced),
                    Err(err) => {
                        let err = lockkeeper_zk_client::Error::from(err);
                        if is_connection_loss(&err) {
                            unanswered_ref.store(true, Ordering::Release);
                        }
                        Err(err)
                    }
                }
            })
            .await;
        let maybe_done = unanswered.load(Ordering::Acquire);
        match written {
            Ok(Written::Done) => return Ok(()),
            Ok(Written::Raced) => continue,
            // A grant's session ended: it holds nothing.
            Err(Error::SessionLost) if delete.is_none() => return Err(Error::SessionLost),
            Ok(Written::NoNode) | Err(Error::SessionLost) if maybe_done && delete.is_some() => {
                return Ok(());
            }
            Ok(Written::NoNode) | Err(Error::SessionLost) => return Err(Error::NotHeld),
            Err(err) => return Err(err),
        }
    }
    // Raced every time (a storm of releases). A release's node must still go; unrecorded, it
    // only makes a waiter wait the delay. A grant is not recorded, so it is refused.
    match delete {
        Some(delete) => crate::zk::node::delete_node(generation, delete).await,
        None => Err(Error::RetriesExhausted {
            attempts: UPDATE_ATTEMPTS,
            last: lockkeeper_zk_client::Error::BadVersion,
        }),
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
    fn records_round_trip_and_foreign_data_is_empty() {
        let mut record = Record {
            held: Some("_c_a-lock-0000000002".into()),
            ..Record::default()
        };
        record.add_released("_c_b-lock-0000000001");
        let parsed = Record::parse(&record.encode());
        assert_eq!(parsed, record);
        assert!(parsed.released("_c_b-lock-0000000001"));
        assert!(!parsed.released("_c_a-lock-0000000002"));
        assert_eq!(Record::parse(b""), Record::default());
        assert_eq!(Record::parse(b"held x"), Record::default());
        assert_eq!(Record::parse(&[0xff, 0xfe]), Record::default());
    }

    #[test]
    fn a_record_keeps_the_last_releases() {
        let mut record = Record::default();
        for i in 0..KEPT + 5 {
            record.add_released(&format!("n{i}"));
        }
        assert!(!record.released("n4"));
        assert!(record.released("n5"));
        assert!(record.released(&format!("n{}", KEPT + 4)));
    }

    #[test]
    fn only_unreleased_vanished_nodes_delay() {
        let mut vanished = Vanished::default();
        vanished.saw("a");
        let delay = Duration::from_secs(1);
        let mut record = Record::default();
        assert!(vanished.delayed_until(&record, delay).is_some());
        record.add_released("b");
        assert!(vanished.delayed_until(&record, delay).is_some());
        record.add_released("a");
        assert!(vanished.delayed_until(&record, delay).is_none());
    }

    #[test]
    fn splits_node_paths() {
        assert_eq!(split("/locks/a/_c_x-lock-1"), ("/locks/a", "_c_x-lock-1"));
        assert_eq!(split("/_c_x-lock-1"), ("/", "_c_x-lock-1"));
    }
}
