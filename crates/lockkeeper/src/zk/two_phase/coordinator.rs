//! The writing side of two-phase commit: the coordinator's proposal and its watch on the votes,
//! the one create that writes a decision, recovery by a new coordinator, a site's vote, and
//! removing a finished transaction.
//!
//! The coordinator holds one children watch on `votes` and one exists watch on `decision` (so a
//! recovery that decides first ends its wait). Per round it lists the votes, reads each new one
//! once (its data, czxid and version), notes the vanished ones, and decides as soon as the votes
//! allow: abort at once, commit only after reading every vote back and in a multi that checks
//! the count of casts on `votes` and each vote's version (the argument is in the parent
//! module's docs). A site's cast writes its vote and that count in one multi. The coordinator
//! owns no ephemeral node, so when its session ends it carries on watching from the next one.

use std::collections::BTreeMap;
use std::time::Duration;

use lockkeeper_zk_client::{CreateMode, CreateOptions, MultiWriteError};

use super::{
    AbortReason, DECISION, Outcome, SITES, TwoPhase, VOTES, Vote, count, parse_sites,
    read_decision, validate_name,
};
use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::zk::node::{create_parents, look};
use crate::zk::session::Generation;

/// How often a create that finds the transaction path missing creates it and tries again (a
/// container parent can be reaped between the two).
const MAX_PARENT_ATTEMPTS: u32 = 3;

impl TwoPhase {
    /// Proposes `tx_id` to `sites` with `payload` and waits for the decision: commit once every
    /// site has voted commit; abort as soon as one votes abort, one's commit vote vanishes
    /// (its session ended), or `vote_timeout` passes with a vote missing. Returns the decision
    /// written, which is another coordinator's if [`recover`](TwoPhase::recover) got there
    /// first.
    ///
    /// If this future is dropped (or the process dies) before the decision, the transaction
    /// stays undecided until someone calls [`recover`](TwoPhase::recover).
    ///
    /// [`Error::InvalidArgument`] for a malformed or duplicate site, no sites or a zero
    /// timeout; [`Error::Conflict`] for a `tx_id` that exists already (proposed before, or
    /// recovered).
    pub async fn propose(
        &self,
        tx_id: &str,
        sites: &[&str],
        payload: &[u8],
        vote_timeout: Duration,
    ) -> Result<Outcome> {
        let tx = self.tx_path(tx_id)?;
        if sites.is_empty() {
            return Err(Error::InvalidArgument(format!(
                "sites of {tx:?}: at least one is needed"
            )));
        }
        for (i, site) in sites.iter().enumerate() {
            validate_name("site", site, &tx)?;
            if sites[..i].contains(site) {
                return Err(Error::InvalidArgument(format!(
                    "site {site:?} of {tx:?}: named twice"
                )));
            }
        }
        if vote_timeout.is_zero() {
            return Err(Error::InvalidArgument(format!(
                "vote timeout of {tx:?}: must be greater than zero"
            )));
        }
        let deadline = Deadline::after(vote_timeout)?;
        let token = uuid::Uuid::new_v4().to_string();
        let mut listing = token.clone();
        for site in sites {
            listing.push('\n');
            listing.push_str(site);
        }
        // Retried in the next session if this one ends: the token tells our proposal apart.
        loop {
            let generation = self.session.connected_generation().await?;
            match self
                .write_proposal(&generation, &tx, payload, listing.as_bytes(), &token)
                .await
            {
                Err(Error::SessionLost) => continue,
                written => break written?,
            }
        }
        let sites: Vec<String> = sites.iter().map(|s| (*s).to_owned()).collect();
        self.collect_votes(&tx, &sites, deadline).await
    }

    /// Creates the transaction node, `sites` and `votes` in one multi. A retry that finds them
    /// checks the token: ours means the lost attempt went through.
    async fn write_proposal(
        &self,
        generation: &Generation,
        tx: &str,
        payload: &[u8],
        listing: &[u8],
        token: &str,
    ) -> Result<()> {
        let persistent = CreateOptions::new(CreateMode::Persistent);
        let (sites_node, votes_node) = (format!("{tx}/{SITES}"), format!("{tx}/{VOTES}"));
        let (persistent, sites_node, votes_node) = (&persistent, &sites_node, &votes_node);
        for _ in 0..=MAX_PARENT_ATTEMPTS {
            let written = generation
                .retry(|client| async move {
                    let mut multi = client.multi();
                    multi.add_create(tx, payload, persistent)?;
                    multi.add_create(sites_node, listing, persistent)?;
                    multi.add_create(votes_node, b"", persistent)?;
                    first_op_failure(multi.commit().await)
                })
                .await?;
            match written {
                None => return Ok(()),
                Some(lockkeeper_zk_client::Error::NoNode) => {
                    create_parents(&generation.client()?, &self.path).await?;
                }
                Some(_) => {
                    let ours = match look(generation, sites_node, false).await? {
                        Some((data, _, _)) => parse_sites(&data, tx)
                            .map(|(found, _)| found == token)
                            .unwrap_or(false),
                        None => false,
                    };
                    if ours {
                        return Ok(());
                    }
                    return Err(Error::Conflict {
                        path: tx.to_owned(),
                        why: "the transaction exists already (proposed before, or decided by \
                              recover)"
                            .into(),
                    });
                }
            }
        }
        Err(Error::Zk(lockkeeper_zk_client::Error::NoNode))
    }

    /// The coordinator's wait: one children watch on `votes`, each vote read once as it
    /// comes, and every vote read back once more before commit (see the module docs).
    async fn collect_votes(
        &self,
        tx: &str,
        sites: &[String],
        deadline: Deadline,
    ) -> Result<Outcome> {
        let votes_node = format!("{tx}/{VOTES}");
        let votes_node = votes_node.as_str();
        let decision_node = format!("{tx}/{DECISION}");
        // The votes read so far: what each said, and which node said it.
        let mut seen: BTreeMap<String, Seen> = BTreeMap::new();
        // A round ended by the session's end starts again in the next one: the coordinator owns
        // no ephemeral node, and writing the decision is idempotent (a create, read back).
        'round: loop {
            let generation = self.session.connected_generation().await?;
            // Watching the decision too: a recovery that decides meanwhile ends the wait.
            let decision_node = decision_node.as_str();
            let watched = generation
                .retry(|client| async move {
                    let decided = client.check_and_watch_stat(decision_node).await?;
                    let listed = client.list_and_watch_children(votes_node).await?;
                    Ok((decided, listed))
                })
                .await;
            let ((decided, decision_watch), (names, watcher)) = match watched {
                Ok(watched) => watched,
                Err(Error::SessionLost) => continue,
                Err(err) => return Err(err),
            };
            if decided.is_some() {
                match read_decision(&generation, tx).await {
                    Ok(Some(outcome)) => return Ok(outcome),
                    Ok(None) => return Err(Error::Zk(lockkeeper_zk_client::Error::NoNode)),
                    Err(Error::SessionLost) => continue,
                    Err(err) => return Err(err),
                }
            }
            let mut verdict = None;
            // A commit vote read before and no longer listed: its site died. (Not a safety
            // check, the read-back and the multi are; this one aborts without waiting for the
            // other votes.)
            for (site, read) in &seen {
                if read.vote == Vote::Commit && !names.contains(site) {
                    verdict = Some(AbortReason::Died(site.clone()));
                }
            }
            for site in sites {
                if verdict.is_some() || seen.contains_key(site) || !names.contains(site) {
                    continue;
                }
                let read = match look(&generation, &format!("{votes_node}/{site}"), false).await {
                    Ok(read) => read,
                    Err(Error::SessionLost) => continue 'round,
                    Err(err) => return Err(err),
                };
                match read {
                    // Listed, then gone: it voted commit and died.
                    None => verdict = Some(AbortReason::Died(site.clone())),
                    Some((data, stat, _)) => {
                        let vote = if data == Vote::Commit.encode() {
                            Vote::Commit
                        } else {
                            // An abort, or anything else: only a clear commit counts as one.
                            Vote::Abort
                        };
                        seen.insert(
                            site.clone(),
                            Seen {
                                vote,
                                czxid: stat.czxid,
                                version: stat.version,
                            },
                        );
                    }
                }
            }
            if verdict.is_none()
                && let Some((site, _)) = seen.iter().find(|(_, read)| read.vote == Vote::Abort)
            {
                verdict = Some(AbortReason::Voted(site.clone()));
            }
            let mut decision = verdict.map(|reason| (Outcome::Abort(reason), Vec::new()));
            if decision.is_none() && seen.len() == sites.len() {
                // Every site's vote was read as commit: read them back before writing commit.
                decision = match read_back(&generation, votes_node, &seen).await {
                    Ok(ReadBack::Standing(checks)) => Some((Outcome::Commit, checks)),
                    Ok(ReadBack::Vanished(site)) => {
                        Some((Outcome::Abort(AbortReason::Died(site)), Vec::new()))
                    }
                    Ok(ReadBack::Rewritten(site)) => {
                        // Not the recipe's doing, but not the vote read either: read it anew.
                        seen.remove(&site);
                        continue 'round;
                    }
                    Err(Error::SessionLost) => continue 'round,
                    Err(err) => return Err(err),
                };
            }
            if decision.is_none() {
                tokio::select! {
                    event = watcher.changed() => count(&generation, event.event_type),
                    event = decision_watch.changed() => count(&generation, event.event_type),
                    () = deadline.sleep() => {
                        let missing =
                            sites.iter().filter(|s| !seen.contains_key(*s)).cloned().collect();
                        decision = Some((Outcome::Abort(AbortReason::TimedOut(missing)), Vec::new()));
                    }
                    () = generation.ended() => {}
                }
            }
            let Some((outcome, checks)) = decision else {
                continue;
            };
            match decide(&generation, tx, &outcome, &checks).await {
                Ok(decided) => return Ok(decided),
                // The session ended, or a vote was cast or went between the read-back and the
                // multi: the next round sees which.
                Err(
                    Error::SessionLost
                    | Error::Zk(
                        lockkeeper_zk_client::Error::NoNode
                        | lockkeeper_zk_client::Error::BadVersion,
                    ),
                ) => {}
                Err(err) => return Err(err),
            }
        }
    }

    /// For a new coordinator: the decision on `tx_id` if one was written, else writes abort
    /// ([`AbortReason::Recovered`]) and returns it. If `tx_id` was never proposed, the
    /// transaction node is created with the decision, so the old coordinator cannot propose it
    /// afterwards.
    pub async fn recover(&self, tx_id: &str) -> Result<Outcome> {
        let tx = self.tx_path(tx_id)?;
        let generation = self.session.connected_generation().await?;
        let outcome = Outcome::Abort(AbortReason::Recovered);
        let persistent = CreateOptions::new(CreateMode::Persistent);
        let decision = format!("{tx}/{DECISION}");
        let data = outcome.encode();
        let (tx_ref, persistent, decision_ref, data_ref) = (&tx, &persistent, &decision, &data);
        for _ in 0..=MAX_PARENT_ATTEMPTS {
            let written = generation
                .retry(|client| async move {
                    let mut multi = client.multi();
                    multi.add_create(tx_ref, b"", persistent)?;
                    multi.add_create(decision_ref, data_ref, persistent)?;
                    first_op_failure(multi.commit().await)
                })
                .await?;
            match written {
                None => return Ok(outcome),
                Some(lockkeeper_zk_client::Error::NoNode) => {
                    create_parents(&generation.client()?, &self.path).await?;
                }
                // The transaction exists (or a lost attempt of ours made it): decide in it.
                Some(_) => return decide(&generation, &tx, &outcome, &[]).await,
            }
        }
        Err(Error::Zk(lockkeeper_zk_client::Error::NoNode))
    }
}

/// A vote as the coordinator read it: what it said, and which node said it (a node deleted
/// and created again has another czxid; one rewritten in place, another version).
#[derive(Clone, Copy, Debug)]
struct Seen {
    vote: Vote,
    czxid: i64,
    version: i32,
}

/// What reading the commit votes back found.
#[derive(Debug)]
enum ReadBack {
    /// Every vote is the node read as commit, unchanged: the commit multi's checks, the count
    /// of casts on `votes` first.
    Standing(Vec<(String, i32)>),
    /// This site's vote is gone, or is another node than the one read as commit: the commit
    /// vote it cast vanished with its session.
    Vanished(String),
    /// This site's vote node was written in place since it was read.
    Rewritten(String),
}

/// Reads back the commit votes in `seen` (every site's) before the commit: first the count of
/// casts (the version of `votes`), then each vote's identity. The multi that writes commit
/// checks that count and each vote's version, so it applies only if no vote was cast since
/// the count was read, and then every vote node it finds is the one read back here (a node
/// created again would have taken a cast). See the module docs for the whole argument.
async fn read_back(
    generation: &Generation,
    votes_node: &str,
    seen: &BTreeMap<String, Seen>,
) -> Result<ReadBack> {
    let stat = |node: String| {
        generation.retry(move |client| {
            let node = node.clone();
            async move { client.check_stat(&node).await }
        })
    };
    let Some(votes) = stat(votes_node.to_owned()).await? else {
        return Err(Error::Zk(lockkeeper_zk_client::Error::NoNode));
    };
    let mut checks = vec![(votes_node.to_owned(), votes.version)];
    for (site, read) in seen {
        let node = format!("{votes_node}/{site}");
        match stat(node.clone()).await? {
            Some(now) if now.czxid != read.czxid => return Ok(ReadBack::Vanished(site.clone())),
            Some(now) if now.version != read.version => {
                return Ok(ReadBack::Rewritten(site.clone()));
            }
            Some(_) => checks.push((node, read.version)),
            None => return Ok(ReadBack::Vanished(site.clone())),
        }
    }
    Ok(ReadBack::Standing(checks))
}

/// Writes `outcome` as the decision of `tx`, in one multi with a version check of each of
/// `checks` (for commit: the count of casts on `votes`, then each vote, from [`read_back`]); if
/// a decision exists already, returns that one instead. A failed check is
/// `Error::Zk(NoNode | BadVersion)`.
async fn decide(
    generation: &Generation,
    tx: &str,
    outcome: &Outcome,
    checks: &[(String, i32)],
) -> Result<Outcome> {
    let persistent = CreateOptions::new(CreateMode::Persistent);
    let decision = format!("{tx}/{DECISION}");
    let data = outcome.encode();
    let (persistent, decision_ref, data) = (&persistent, &decision, &data);
    let failure = generation
        .retry(|client| async move {
            let mut multi = client.multi();
            for (node, version) in checks {
                multi.add_check_version(node, *version)?;
            }
            multi.add_create(decision_ref, data, persistent)?;
            match multi.commit().await {
                Ok(_) => Ok(None),
                Err(MultiWriteError::OperationFailed { index, source }) => {
                    Ok(Some((index, source)))
                }
                Err(MultiWriteError::RequestFailed { source }) => Err(source),
            }
        })
        .await?;
    match failure {
        None => Ok(outcome.clone()),
        Some((index, lockkeeper_zk_client::Error::NodeExists)) if index == checks.len() => {
            // Someone decided first (or our lost attempt did): theirs stands.
            read_decision(generation, tx)
                .await?
                .ok_or(Error::Zk(lockkeeper_zk_client::Error::NoNode))
        }
        Some((_, source)) => Err(Error::Zk(source)),
    }
}

/// A multi's outcome for a retry loop: `None` if it went through, the failed operation's error
/// if the server refused one (an answer, not retried), connection losses as errors (retried).
fn first_op_failure<T>(
    result: std::result::Result<T, MultiWriteError>,
) -> std::result::Result<Option<lockkeeper_zk_client::Error>, lockkeeper_zk_client::Error> {
    match result {
        Ok(_) => Ok(None),
        Err(MultiWriteError::OperationFailed { source, .. }) => Ok(Some(source)),
        Err(MultiWriteError::RequestFailed { source }) => Err(source),
    }
}

/// Writes `site`'s vote under `tx`: commit as an ephemeral node (it must be alive at the
/// decision), abort as a persistent one (it must never vanish), in one multi with a write to
/// `votes` that counts the cast in its version (the coordinator's commit checks that count:
/// see the module docs). A retry that finds the node checks it is this vote of this session.
pub(super) async fn cast(generation: &Generation, tx: &str, site: &str, vote: Vote) -> Result<()> {
    let votes = format!("{tx}/{VOTES}");
    let node = format!("{votes}/{site}");
    let mode = match vote {
        Vote::Commit => CreateMode::Ephemeral,
        Vote::Abort => CreateMode::Persistent,
    };
    let options = CreateOptions::new(mode);
    let data = vote.encode();
    let (votes_ref, node_ref, options) = (&votes, &node, &options);
    let written = generation
        .retry(|client| async move {
            let mut multi = client.multi();
            multi.add_create(node_ref, data, options)?;
            multi.add_set_data(votes_ref, b"", None)?;
            first_op_failure(multi.commit().await)
        })
        .await?;
    match written {
        None => return Ok(()),
        Some(lockkeeper_zk_client::Error::NodeExists) => {}
        Some(err) => return Err(Error::Zk(err)),
    }
    let ours = match look(generation, &node, false).await? {
        Some((found, stat, _)) => {
            found == data
                && (vote == Vote::Abort || stat.ephemeral_owner == generation.session_id())
        }
        None => false,
    };
    if ours {
        Ok(())
    } else {
        Err(Error::Conflict {
            why: format!("site {site:?} of {tx:?} has voted already"),
            path: node,
        })
    }
}

/// Deletes `node` and everything under it, children first; missing nodes are fine.
pub(super) async fn remove_tree(generation: &Generation, node: &str) -> Result<()> {
    let children = generation
        .retry(|client| async move {
            match client.list_children(node).await {
                Err(lockkeeper_zk_client::Error::NoNode) => Ok(Vec::new()),
                other => other,
            }
        })
        .await?;
    for child in children {
        Box::pin(remove_tree(generation, &format!("{node}/{child}"))).await?;
    }
    generation
        .retry(|client| async move {
            match client.delete(node, None).await {
                Ok(()) | Err(lockkeeper_zk_client::Error::NoNode) => Ok(()),
                Err(err) => Err(err),
            }
        })
        .await
}
