//! The reads of an inspection: directory listings and node stats, in as few round trips as
//! the listing's length allows.
//!
//! A node that goes away between the listing and the read of its stat (a waiter giving up, a
//! holder releasing) is simply left out: an inspection is a snapshot taken over two round
//! trips, and a node gone by the second was gone a moment after the first.

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use lockkeeper_zk_client::{Client, MultiReadResult, Stat};

use crate::error::{Error, Result};
use crate::fencing::FencingToken;
use crate::zk::locks::line::{LOCK_MARKER, Line};
use crate::zk::session::Generation;

use super::names::{MARKERS, classify};
use super::{Participant, State};

/// Nodes read per multi-read: keeps each reply far below the 1 MB frame limit.
const CHUNK: usize = 200;

/// The children of each directory in one multi-read; `None` for a directory that is missing.
pub(super) async fn list(
    generation: &Generation,
    dirs: &[&str],
) -> Result<Vec<Option<Vec<String>>>> {
    let results = generation
        .retry(|client| async move {
            let mut reader = client.multi_read();
            for dir in dirs {
                reader.add_get_children(dir)?;
            }
            reader.commit().await
        })
        .await?;
    results
        .into_iter()
        .map(|result| match result {
            MultiReadResult::Children { children } => Ok(Some(children)),
            MultiReadResult::Error {
                err: lockkeeper_zk_client::Error::NoNode,
            } => Ok(None),
            MultiReadResult::Error { err } => Err(Error::Zk(err)),
            other => Err(unexpected(&other)),
        })
        .collect()
}

/// Reads the nodes `names` of `dir` and returns them sorted in queue order, leaving out the
/// ones that no longer exist. `prefix` is the directory relative to the inspected path.
pub(super) async fn read(
    generation: &Generation,
    dir: &str,
    prefix: &str,
    names: Vec<String>,
) -> Result<Vec<Participant>> {
    let queue = Line {
        dir: dir.to_owned(),
        marker: LOCK_MARKER,
        markers: MARKERS,
    };
    let mut names = queue.sort(names);
    // Unsequenced nodes (a simple lock's node, strays) after the queue, in name order.
    names.sort_by_key(|name| classify(name).1.is_none());
    let now = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or_default();
    let mut participants = Vec::with_capacity(names.len());
    for chunk in names.chunks(CHUNK) {
        let paths: Vec<String> = chunk.iter().map(|name| format!("{dir}/{name}")).collect();
        let results = read_chunk(generation, &paths).await?;
        for ((name, path), result) in chunk.iter().zip(paths).zip(results) {
            let Some((data, stat)) = result else {
                continue; // gone since the listing
            };
            let (kind, sequence) = classify(name);
            participants.push(Participant {
                name: match prefix {
                    "" => name.clone(),
                    prefix => format!("{prefix}/{name}"),
                },
                path,
                kind,
                sequence,
                session_id: stat.ephemeral_owner,
                fencing_token: FencingToken::new(stat.czxid as u64),
                age: age(now, &stat),
                data: String::from_utf8_lossy(&data).into_owned(),
                state: State::Unknown,
            });
        }
    }
    Ok(participants)
}

/// Data and stat of each path in one multi-read; `None` for a node that no longer exists.
pub(super) async fn read_chunk(
    generation: &Generation,
    paths: &[String],
) -> Result<Vec<Option<(Vec<u8>, Stat)>>> {
    let results = generation
        .retry(|client: Client| async move {
            let mut reader = client.multi_read();
            for path in paths {
                reader.add_get_data(path)?;
            }
            reader.commit().await
        })
        .await?;
    if results.len() != paths.len() {
        return Err(Error::Zk(lockkeeper_zk_client::Error::Protocol(format!(
            "a multi-read of {} nodes answered {} results",
            paths.len(),
            results.len()
        ))));
    }
    results
        .into_iter()
        .map(|result| match result {
            MultiReadResult::Data { data, stat } => Ok(Some((data, stat))),
            MultiReadResult::Error {
                err: lockkeeper_zk_client::Error::NoNode,
            } => Ok(None),
            MultiReadResult::Error { err } => Err(Error::Zk(err)),
            other => Err(unexpected(&other)),
        })
        .collect()
}

fn unexpected(result: &MultiReadResult) -> Error {
    Error::Zk(lockkeeper_zk_client::Error::Protocol(format!(
        "unexpected multi-read result {result:?}"
    )))
}

fn age(now: Duration, stat: &Stat) -> Duration {
    let created = Duration::from_millis(stat.ctime.max(0) as u64);
    now.saturating_sub(created)
}

/// Reads below the listing that a server cannot stage: a node deleted between the two.
#[cfg(test)]
mod tests {
    use super::*;
    use crate::zk::session::Session;

    /// A node listed but deleted before its stat is read (a waiter that gave up) is left out,
    /// not an error: the listing is taken, one of its nodes deleted, then the stats are read.
    #[tokio::test]
    async fn a_node_deleted_after_the_listing_is_skipped() {
        use lockkeeper_zk_client::{CreateMode, CreateOptions};
        for server in lockkeeper_testkit::both() {
            let name = server.name();
            let session = Session::connect(&server.connect_string()).await.unwrap();
            let guard = session
                .mutex("/inspect/gone")
                .unwrap()
                .lock()
                .await
                .unwrap();
            let client = session.client().unwrap();
            let options = CreateOptions::new(CreateMode::EphemeralSequential);
            let (_, leaving) = client
                .create("/inspect/gone/_c_x-lock-", b"", &options)
                .await
                .unwrap();
            let listing = client.list_children("/inspect/gone").await.unwrap();
            assert_eq!(listing.len(), 2, "{name}: {listing:?}");
            client.delete(&leaving, None).await.unwrap();
            let found = read(&session.generation(), "/inspect/gone", "", listing)
                .await
                .unwrap_or_else(|e| panic!("{name}: {e}"));
            let paths: Vec<&str> = found.iter().map(|p| p.path.as_str()).collect();
            assert_eq!(paths, [guard.node()], "{name}");
            guard.release().await.unwrap();
        }
    }
}
