//! The recipes document's confirmation: being first in the queue does not mean a participant
//! knows it leads, let alone that it has finished taking over. So a new leader marks, in a
//! node of its own, that it has, and followers can wait for that mark.
//!
//! The mark is the ephemeral node `{path}-confirmed`, a sibling of the election path (the
//! latch path must hold latch nodes only, as Curator requires), whose data is
//! `{fencing token} {id}`. A mark counts only while its token is the current leader's: one
//! left by a deposed leader names an older token, so followers ignore it, and the next
//! leader's confirmation replaces it.

use lockkeeper_zk_client::{CreateMode, OneshotWatcher};

use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::zk::leader::{Candidate, LeaderLatch, Leadership};
use crate::zk::node::{create_unless_exists, look};
use crate::zk::session::Generation;

/// Attempts at replacing a mark that changes under us (only a deposed leader's late mark can).
const MARK_ATTEMPTS: usize = 5;

/// The path of the election's confirmation mark.
fn mark_path(election: &str) -> String {
    format!("{election}-confirmed")
}

/// The token a mark's data names, if it is well formed.
fn marked_token(data: &[u8]) -> Option<u64> {
    let text = std::str::from_utf8(data).ok()?;
    text.split(' ').next()?.parse().ok()
}

impl Leadership {
    /// Marks that this leader has finished taking over (loaded its state, fenced its
    /// resources), for followers waiting in [`LeaderLatch::confirmed_leader`].
    /// [`Error::NotLeader`] if this participant no longer leads.
    pub async fn confirm(&self) -> Result<()> {
        if !self.is_leader() {
            return Err(Error::NotLeader);
        }
        let generation = self.generation();
        let path = mark_path(self.latch().path());
        let data = format!("{} {}", self.fencing_token(), self.latch().id()).into_bytes();
        for _ in 0..MARK_ATTEMPTS {
            if create_unless_exists(generation, &path, &data, CreateMode::Ephemeral).await? {
                return Ok(());
            }
            // A mark exists: ours (a retried create that went through, or a second confirm),
            // to update; or a deposed leader's, to replace.
            let Some((_, stat, _)) = look(generation, &path, false).await? else {
                continue;
            };
            let client = generation.client()?;
            let outcome = if stat.ephemeral_owner == generation.session_id() {
                client
                    .set_data(&path, &data, Some(stat.version))
                    .await
                    .map(|_| true)
            } else {
                client
                    .delete(&path, Some(stat.version))
                    .await
                    .map(|()| false)
            };
            match outcome {
                Ok(true) => return Ok(()),
                Ok(false) => {}
                Err(
                    lockkeeper_zk_client::Error::NoNode | lockkeeper_zk_client::Error::BadVersion,
                ) => {}
                Err(err) => return Err(Error::Zk(err)),
            }
        }
        Err(Error::Conflict {
            path,
            why: "the confirmation mark kept changing under this leader; another process writes \
                  it"
            .into(),
        })
    }
}

impl LeaderLatch {
    /// Waits until the current leader has [confirmed](Leadership::confirm) that it took
    /// over, and returns it. Does not join the election.
    pub async fn confirmed_leader(&self) -> Result<Candidate> {
        let leader = self.wait_confirmed(Deadline::Never).await?;
        leader.ok_or(Error::SessionLost)
    }

    /// [`confirmed_leader`](LeaderLatch::confirmed_leader), waiting at most `timeout`; `None`
    /// if no leader confirmed in time.
    pub async fn confirmed_leader_timeout(
        &self,
        timeout: std::time::Duration,
    ) -> Result<Option<Candidate>> {
        self.wait_confirmed(Deadline::after(timeout)?).await
    }

    async fn wait_confirmed(&self, deadline: Deadline) -> Result<Option<Candidate>> {
        let mark = mark_path(self.path());
        loop {
            let generation = self.session.connected_generation().await?;
            // Watches are set before the reads they guard are compared, so a change after
            // the reads always wakes us.
            let (marked, mark_watch) = watch_node(&generation, &mark).await?;
            let leader = self.leader().await?;
            let leader_watch = match &leader {
                Some(leader) => watch_node(&generation, &leader.node).await?.1,
                None => watch_children(&generation, self.path()).await?,
            };
            if let (Some(leader), Some(token)) = (&leader, marked.as_deref().and_then(marked_token))
            {
                if token == leader.fencing_token.get() {
                    return Ok(Some(leader.clone()));
                }
            }
            if deadline.passed() {
                return Ok(None);
            }
            tokio::select! {
                _ = mark_watch.changed() => {}
                _ = leader_watch.changed() => {}
                () = deadline.sleep() => return Ok(None),
                () = generation.ended() => {}
            }
        }
    }
}

/// Reads `path` with a watch that fires when it is created, changed or deleted.
async fn watch_node(
    generation: &Generation,
    path: &str,
) -> Result<(Option<Vec<u8>>, OneshotWatcher)> {
    generation
        .retry(|client| async move {
            match client.get_and_watch_data(path).await {
                Ok((data, _, watcher)) => Ok((Some(data), watcher)),
                Err(lockkeeper_zk_client::Error::NoNode) => {
                    let (_, watcher) = client.check_and_watch_stat(path).await?;
                    Ok((None, watcher))
                }
                Err(err) => Err(err),
            }
        })
        .await
}

/// A watch that fires when the election gets a first participant (its children change, or it
/// is created).
async fn watch_children(generation: &Generation, path: &str) -> Result<OneshotWatcher> {
    generation
        .retry(|client| async move {
            match client.list_and_watch_children(path).await {
                Ok((_, watcher)) => Ok(watcher),
                Err(lockkeeper_zk_client::Error::NoNode) => {
                    let (_, watcher) = client.check_and_watch_stat(path).await?;
                    Ok(watcher)
                }
                Err(err) => Err(err),
            }
        })
        .await
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_mark_names_its_token() {
        assert_eq!(marked_token(b"4294967301 billing-1"), Some(4294967301));
        assert_eq!(marked_token(b"garbage"), None);
        assert_eq!(marked_token(&[0xff, 0x20]), None);
        assert_eq!(mark_path("/e/leader"), "/e/leader-confirmed");
    }
}
