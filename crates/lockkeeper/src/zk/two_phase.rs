//! Two-phase commit, as the ZooKeeper recipes document describes it with both of its own
//! improvements: each site votes in a node it creates itself (a commit vote is ephemeral, so a
//! site that dies is seen to die), and only the coordinator watches the votes (so a vote wakes
//! one process, not every site). Curator and kazoo have no such recipe; the layout is ours.
//!
//! Layout under the transaction path `PATH`, for a transaction `TX`:
//! - `PATH/TX`: persistent, the proposal's payload. `PATH/TX/sites`: persistent, the proposal's
//!   token (a uuid) and the participating sites, one a line. `PATH/TX/votes`: persistent, the
//!   parent of the votes; its data version counts the votes cast. The coordinator creates the
//!   three in one multi, so a site sees a proposal whole or not at all.
//! - `PATH/TX/votes/SITE`: the site's vote, `commit` (ephemeral) or `abort` (persistent),
//!   created in one multi with an empty write to `votes` (the count).
//! - `PATH/TX/decision`: persistent, written once, with a create that fails if it exists:
//!   `commit`, or `abort` and the reason. It is the single point of truth: whoever loses the
//!   race to create it reads the winner's decision and reports that.
//!
//! Invariants:
//! - **Commit follows the votes standing when it is written, never a vote that was.** The
//!   coordinator reads each vote as it comes (its data, czxid and version). Once every site's
//!   vote has been read as `commit`, it reads them back: first the version `V` of `votes` (the
//!   count of casts), then each vote's stat, which must be the node it read (the same czxid:
//!   not deleted and created again) unchanged (the same version). Then it writes commit in one
//!   multi: check `votes` at `V`, check each vote at the version read, create `decision`.
//!   Why that is atomic against the server: the multi applies at one point of the server's
//!   total order. There `votes` is still at `V`, so no vote was cast since `V` was read; every
//!   vote node the multi finds was therefore there when it was read back (creating one again
//!   takes a cast), and the read-back found each to be the node first read as `commit`. So at
//!   that point every site has a live commit vote, the very one counted; an ephemeral vote
//!   that exists there has a session alive there. The count is needed because a multi can
//!   check a version but not a czxid: a vote deleted and created again between the read-back
//!   and the multi has the version read. Whatever fails (a check, a vote gone or another node)
//!   sends the coordinator round again; a vote that vanished is never a commit vote: a counted
//!   one that vanished, even if its site voted again since, aborts (`Died`). This holds for
//!   votes cast by this module: a vote node created by hand, without the count, is outside it.
//! - **Never commit after an abort vote.** An abort vote is persistent, so it cannot vanish
//!   unread, and a vote is a create, so a site cannot turn an abort into a commit in place; the
//!   read-back and the multi above make sure an abort cast in place of a counted commit (the
//!   site died and came back) is not outrun.
//! - **Everyone learns the same decision**: sites wait on the decision node (one exists watch
//!   each), never on each other's votes.
//! - **Aborting is always safe**: no vote in `vote_timeout` means abort (`TimedOut`); a new
//!   coordinator ([`TwoPhase::recover`]) writes abort when no decision was written, and if the
//!   proposal itself was never written it writes the transaction node too, so a paused old
//!   coordinator cannot propose it afterwards.
//!
//! What a site's death or session expiry does to its commit vote (an abort vote is persistent
//! and outlives both):
//! - **Before the decision**: the vote vanishes when the server ends the session (at the
//!   session timeout after the site died or was cut off, at once if it closed it), and the
//!   transaction aborts: `Died` if the coordinator had read the vote, `TimedOut` if not. (A
//!   site that comes back in a new session and votes again before the coordinator read its
//!   first vote is counted by the new one, which stands or vanishes the same way.)
//! - **During the decision**: the session's end and the commit multi are two transactions in
//!   the server's total order, and one comes first. Session first: abort. Commit first: commit
//!   stands, although the vote vanishes right after. The site cannot tell which from its side
//!   (a paused process does not even know its session ended), so a site that voted commit must
//!   stay able to commit until it reads the decision: [`Proposal::wait`] carries on in the
//!   session's next generation, and [`TwoPhase::decision`] answers after a restart.
//! - **After the decision**: nothing changes; the decision stays until
//!   [`TwoPhase::forget`], and the site reads it when it comes back.
//!
//! Who dies when, and what everyone learns:
//!
//! | dies | when | what the others learn |
//! |------|------|-----------------------|
//! | coordinator | before its proposal | nothing to join; [`recover`](TwoPhase::recover) writes abort (`Recovered`); waiting sites read it |
//! | coordinator | after the proposal, before the decision | sites vote and wait; `recover` writes abort (`Recovered`) |
//! | coordinator | after the decision | every site reads it; `recover` returns it |
//! | site | before it joins or votes | the coordinator decides abort at the vote timeout (`TimedOut`) |
//! | site | after a commit vote, before the decision | its vote vanishes with its session: abort (`Died`), unless commit was written first |
//! | site | after an abort vote | the vote is persistent: abort (`Voted`) |
//! | site | after the decision | the others have it; the site reads it again when it comes back |
//!
//! Each row is a test that SIGKILLs that process at that step (`tests/two_phase/faults.rs`);
//! the votes that change between the coordinator's read and its decision are tests that
//! freeze the coordinator there (`tests/two_phase/races.rs`), one per check above.
//! The coordinator owns no ephemeral node, so when its own session ends it carries on in the
//! next one (its proposal is retried under its token, the decision create is read back).
//!
//! Nothing here cleans up by itself: sites that come back must be able to read the decision, so
//! the transaction stays until [`TwoPhase::forget`] removes it.

mod coordinator;

use std::time::Duration;

use lockkeeper_zk_client::EventType;

use crate::deadline::Deadline;
use crate::error::{Error, Result};
use crate::zk::node::look;
use crate::zk::path::{node_name_problem, validate_node_path};
use crate::zk::session::{Generation, Session};

/// The children of a transaction node (see the module docs).
const SITES: &str = "sites";
const VOTES: &str = "votes";
const DECISION: &str = "decision";

impl Session {
    /// A [`TwoPhase`] handle for the transactions under `path`. [`Error::InvalidArgument`]
    /// for a malformed path.
    pub fn two_phase(&self, path: &str) -> Result<TwoPhase> {
        validate_node_path("transaction path", path)?;
        Ok(TwoPhase {
            session: self.clone(),
            path: path.to_owned(),
        })
    }
}

/// Two-phase commit over the transactions under one path: a coordinator
/// [`propose`](TwoPhase::propose)s, sites [`join`](TwoPhase::join) and vote, anyone reads the
/// [`decision`](TwoPhase::decision), a new coordinator [`recover`](TwoPhase::recover)s.
///
/// The decision is written once and is the same for everyone. Commit is written only while
/// every site's commit vote that the coordinator counted is still standing, checked in the
/// same atomic write, so it never commits over an abort vote or over a vote that vanished.
///
/// When a site dies or its session expires:
/// - before the decision, its commit vote vanishes with its session and the transaction
///   aborts (an abort vote is persistent and counts whatever happens to the site);
/// - at the same moment, the server's order decides: if the commit was applied before the
///   session's end, it stands. A site cannot tell which from its side, so once it has voted
///   commit it must keep itself able to commit until it reads the decision
///   ([`Proposal::wait`] carries on in the session's next generation;
///   [`decision`](TwoPhase::decision) answers after a restart);
/// - after the decision, nothing changes: the decision stays until
///   [`forget`](TwoPhase::forget).
///
/// A coordinator that dies leaves the transaction undecided until
/// [`recover`](TwoPhase::recover) writes abort.
#[derive(Clone, Debug)]
pub struct TwoPhase {
    session: Session,
    path: String,
}

/// A site's vote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Vote {
    /// The site can commit, and will if the decision says so.
    Commit,
    /// The site cannot commit: the transaction aborts.
    Abort,
}

/// The decision on a transaction, the same for everyone who reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Every site voted commit, and each of those votes, the very node read, was still
    /// standing when commit was written.
    Commit,
    /// The transaction aborted, and why.
    Abort(AbortReason),
}

/// Why a transaction aborted.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum AbortReason {
    /// This site voted abort (the first one the coordinator read).
    Voted(String),
    /// These sites had not voted when the vote timeout ran out.
    TimedOut(Vec<String>),
    /// This site's commit vote, read by the coordinator, vanished with its session before the
    /// decision (even if the site voted again in a new session since).
    Died(String),
    /// A new coordinator found no decision and decided abort.
    Recovered,
}

impl std::fmt::Display for Outcome {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Outcome::Commit => write!(f, "commit"),
            Outcome::Abort(AbortReason::Voted(site)) => write!(f, "abort: {site} voted abort"),
            Outcome::Abort(AbortReason::TimedOut(sites)) => {
                write!(f, "abort: no vote in time from {}", sites.join(", "))
            }
            Outcome::Abort(AbortReason::Died(site)) => {
                write!(f, "abort: {site} died before the decision")
            }
            Outcome::Abort(AbortReason::Recovered) => {
                write!(f, "abort: decided by a recovering coordinator")
            }
        }
    }
}

impl Outcome {
    /// Whether this is [`Outcome::Commit`].
    pub fn is_commit(&self) -> bool {
        *self == Outcome::Commit
    }

    /// The decision node's data: a first line `commit` or `abort`, then the reason's fields.
    fn encode(&self) -> Vec<u8> {
        let lines: Vec<String> = match self {
            Outcome::Commit => vec!["commit".into()],
            Outcome::Abort(AbortReason::Voted(site)) => {
                vec!["abort".into(), "voted".into(), site.clone()]
            }
            Outcome::Abort(AbortReason::TimedOut(sites)) => {
                let mut lines = vec!["abort".into(), "timed-out".into()];
                lines.extend(sites.iter().cloned());
                lines
            }
            Outcome::Abort(AbortReason::Died(site)) => {
                vec!["abort".into(), "died".into(), site.clone()]
            }
            Outcome::Abort(AbortReason::Recovered) => vec!["abort".into(), "recovered".into()],
        };
        lines.join("\n").into_bytes()
    }

    /// Parses a decision node's data; `None` if it is not a decision this module writes.
    fn decode(data: &[u8]) -> Option<Outcome> {
        let text = std::str::from_utf8(data).ok()?;
        let mut lines = text.split('\n');
        let one = |mut lines: std::str::Split<'_, char>| {
            let site = lines.next()?.to_owned();
            lines.next().is_none().then_some(site)
        };
        match (lines.next()?, lines.next()) {
            ("commit", None) => Some(Outcome::Commit),
            ("abort", Some("voted")) => one(lines).map(|s| Outcome::Abort(AbortReason::Voted(s))),
            ("abort", Some("died")) => one(lines).map(|s| Outcome::Abort(AbortReason::Died(s))),
            ("abort", Some("timed-out")) => Some(Outcome::Abort(AbortReason::TimedOut(
                lines.map(str::to_owned).collect(),
            ))),
            ("abort", Some("recovered")) if lines.next().is_none() => {
                Some(Outcome::Abort(AbortReason::Recovered))
            }
            _ => None,
        }
    }
}

impl Vote {
    fn encode(self) -> &'static [u8] {
        match self {
            Vote::Commit => b"commit",
            Vote::Abort => b"abort",
        }
    }
}

/// Checks a transaction id or a site name: one node name by ZooKeeper's path rules (no
/// control characters among them), so that it can be a path segment and a line of the `sites`
/// node.
fn validate_name(what: &str, name: &str, path: &str) -> Result<()> {
    match node_name_problem(name) {
        Some(why) => Err(Error::InvalidArgument(format!(
            "{what} {name:?} under {path:?}: {why}"
        ))),
        None => Ok(()),
    }
}

impl TwoPhase {
    /// The parent of the transaction nodes.
    pub fn path(&self) -> &str {
        &self.path
    }

    fn tx_path(&self, tx_id: &str) -> Result<String> {
        validate_name("transaction id", tx_id, &self.path)?;
        Ok(format!("{}/{tx_id}", self.path))
    }

    /// The decision on `tx_id`, if one was written; never waits. For anyone, a site that comes
    /// back after a crash included.
    pub async fn decision(&self, tx_id: &str) -> Result<Option<Outcome>> {
        let tx = self.tx_path(tx_id)?;
        let generation = self.session.connected_generation().await?;
        read_decision(&generation, &tx).await
    }

    /// Joins `tx_id` as `site`, waiting until it is proposed (or decided). The proposal carries
    /// the payload; vote on it with [`Proposal::vote`]. [`Error::InvalidArgument`] if `site` is
    /// not one of the proposal's sites.
    pub async fn join(&self, tx_id: &str, site: &str) -> Result<Proposal> {
        let proposal = self.join_until(tx_id, site, Deadline::Never).await?;
        proposal.ok_or(Error::SessionLost)
    }

    /// [`join`](TwoPhase::join), waiting at most `timeout`: `None` if nothing was proposed in
    /// time. A zero timeout is refused.
    pub async fn join_timeout(
        &self,
        tx_id: &str,
        site: &str,
        timeout: Duration,
    ) -> Result<Option<Proposal>> {
        self.join_until(tx_id, site, Deadline::after(timeout)?)
            .await
    }

    /// Watches `sites` and `decision` until one exists: the proposal is written whole (one
    /// multi), and a transaction decided by [`recover`](TwoPhase::recover) before it was
    /// proposed has a decision and never a proposal.
    async fn join_until(
        &self,
        tx_id: &str,
        site: &str,
        deadline: Deadline,
    ) -> Result<Option<Proposal>> {
        let tx = self.tx_path(tx_id)?;
        validate_name("site", site, &tx)?;
        let sites_node = format!("{tx}/{SITES}");
        let decision_node = format!("{tx}/{DECISION}");
        loop {
            let generation = tokio::select! {
                generation = self.session.connected_generation() => generation?,
                () = deadline.sleep() => return Ok(None),
            };
            let (sites_node, decision_node) = (sites_node.as_str(), decision_node.as_str());
            let watched = generation
                .retry(|client| async move {
                    let sites = client.check_and_watch_stat(sites_node).await?;
                    let decision = client.check_and_watch_stat(decision_node).await?;
                    Ok((sites, decision))
                })
                .await;
            let ((sites, sites_watch), (decision, decision_watch)) = match watched {
                Ok(watched) => watched,
                Err(Error::SessionLost) => continue,
                Err(err) => return Err(err),
            };
            if sites.is_some() || decision.is_some() {
                return self
                    .read_proposal(&generation, tx_id, &tx, site)
                    .await
                    .map(Some);
            }
            tokio::select! {
                event = sites_watch.changed() => count(&generation, event.event_type),
                event = decision_watch.changed() => count(&generation, event.event_type),
                () = deadline.sleep() => return Ok(None),
                () = generation.ended() => {}
            }
        }
    }

    async fn read_proposal(
        &self,
        generation: &Generation,
        tx_id: &str,
        tx: &str,
        site: &str,
    ) -> Result<Proposal> {
        let mut proposal = Proposal {
            session: self.session.clone(),
            tx: tx.to_owned(),
            tx_id: tx_id.to_owned(),
            site: site.to_owned(),
            payload: Vec::new(),
            sites: Vec::new(),
            decided: None,
        };
        let Some((listing, _, _)) = look(generation, &format!("{tx}/{SITES}"), false).await? else {
            // Decided without a proposal (recovered): nothing to vote on.
            proposal.decided = read_decision(generation, tx).await?;
            return Ok(proposal);
        };
        proposal.sites = parse_sites(&listing, tx)?.1;
        if !proposal.sites.iter().any(|s| s == site) {
            return Err(Error::InvalidArgument(format!(
                "site {site:?}: not one of the sites of {tx:?} ({})",
                proposal.sites.join(", ")
            )));
        }
        if let Some((payload, _, _)) = look(generation, tx, false).await? {
            proposal.payload = payload;
        }
        Ok(proposal)
    }

    /// Removes `tx_id` and everything under it, once every site has learned the decision (a
    /// site that reads no decision afterwards cannot tell an aborted transaction from one never
    /// proposed). Removing a transaction that does not exist is not an error.
    pub async fn forget(&self, tx_id: &str) -> Result<()> {
        let tx = self.tx_path(tx_id)?;
        let generation = self.session.connected_generation().await?;
        coordinator::remove_tree(&generation, &tx).await
    }
}

/// A proposal as a site sees it: the payload, the sites, and the site's own vote to cast.
#[derive(Debug)]
pub struct Proposal {
    session: Session,
    tx: String,
    tx_id: String,
    site: String,
    payload: Vec<u8>,
    sites: Vec<String>,
    /// Set when the transaction was decided without a proposal (by recovery).
    decided: Option<Outcome>,
}

impl Proposal {
    /// The transaction's id.
    pub fn tx_id(&self) -> &str {
        &self.tx_id
    }

    /// This site's name.
    pub fn site(&self) -> &str {
        &self.site
    }

    /// What the coordinator proposed (empty for a transaction decided before it was proposed).
    pub fn payload(&self) -> &[u8] {
        &self.payload
    }

    /// Every site that must vote commit for the transaction to commit.
    pub fn sites(&self) -> &[String] {
        &self.sites
    }

    /// Casts `vote` and waits for the decision.
    pub async fn vote(&self, vote: Vote) -> Result<Outcome> {
        self.cast(vote).await?;
        self.wait().await
    }

    /// Casts `vote` without waiting. A commit vote lasts as long as this site's session: if the
    /// session ends before the decision, the vote goes and the transaction aborts; if the
    /// decision came first, it stands. Either can be the case when the session ends, so keep
    /// the site able to commit until [`wait`](Proposal::wait) or
    /// [`TwoPhase::decision`] says. Voting twice is [`Error::Conflict`] (a vote is written
    /// once).
    pub async fn cast(&self, vote: Vote) -> Result<()> {
        if self.decided.is_some() {
            return Ok(());
        }
        let generation = self.session.connected_generation().await?;
        coordinator::cast(&generation, &self.tx, &self.site, vote).await
    }

    /// Waits for the decision.
    pub async fn wait(&self) -> Result<Outcome> {
        let outcome = self.wait_until(Deadline::Never).await?;
        outcome.ok_or(Error::SessionLost)
    }

    /// Waits at most `timeout` for the decision: `None` if none was written in time (the
    /// coordinator may have died: a new one calls [`TwoPhase::recover`]). A zero timeout is
    /// refused.
    pub async fn wait_timeout(&self, timeout: Duration) -> Result<Option<Outcome>> {
        self.wait_until(Deadline::after(timeout)?).await
    }

    async fn wait_until(&self, deadline: Deadline) -> Result<Option<Outcome>> {
        if let Some(outcome) = &self.decided {
            return Ok(Some(outcome.clone()));
        }
        let node = format!("{}/{DECISION}", self.tx);
        let node = node.as_str();
        loop {
            let generation = tokio::select! {
                generation = self.session.connected_generation() => generation?,
                () = deadline.sleep() => return Ok(None),
            };
            let watched = generation
                .retry(|client| async move { client.check_and_watch_stat(node).await })
                .await;
            let (stat, watcher) = match watched {
                Ok(watched) => watched,
                Err(Error::SessionLost) => continue,
                Err(err) => return Err(err),
            };
            if stat.is_some() {
                match read_decision(&generation, &self.tx).await {
                    Ok(Some(outcome)) => return Ok(Some(outcome)),
                    // Forgotten between the two reads: nothing more will be written.
                    Ok(None) => return Err(Error::Zk(lockkeeper_zk_client::Error::NoNode)),
                    Err(Error::SessionLost) => continue,
                    Err(err) => return Err(err),
                }
            }
            tokio::select! {
                event = watcher.changed() => count(&generation, event.event_type),
                () = deadline.sleep() => return Ok(None),
                () = generation.ended() => {}
            }
        }
    }
}

/// Counts a watch that fired for a change (not for the session's end).
fn count(generation: &Generation, event: EventType) {
    if event != EventType::Session {
        generation.count_notification();
    }
}

/// Reads the decision under the transaction node `tx`. Data this module did not write is an
/// error naming the node rather than a guess.
async fn read_decision(generation: &Generation, tx: &str) -> Result<Option<Outcome>> {
    let node = format!("{tx}/{DECISION}");
    let Some((data, _, _)) = look(generation, &node, false).await? else {
        return Ok(None);
    };
    Outcome::decode(&data)
        .map(Some)
        .ok_or_else(|| Error::Corrupt {
            path: node.clone(),
            why: format!("not a two-phase commit decision ({} bytes)", data.len()),
        })
}

/// Parses the `sites` node: the proposal's token, then one site a line.
fn parse_sites(data: &[u8], tx: &str) -> Result<(String, Vec<String>)> {
    let malformed = || Error::Corrupt {
        path: format!("{tx}/{SITES}"),
        why: "not a two-phase commit proposal".into(),
    };
    let text = std::str::from_utf8(data).map_err(|_| malformed())?;
    let mut lines = text.split('\n');
    let token = lines.next().ok_or_else(malformed)?.to_owned();
    let sites: Vec<String> = lines.map(str::to_owned).collect();
    if sites.is_empty() {
        return Err(malformed());
    }
    Ok((token, sites))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn outcomes_round_trip() {
        for outcome in [
            Outcome::Commit,
            Outcome::Abort(AbortReason::Voted("a".into())),
            Outcome::Abort(AbortReason::TimedOut(vec!["a".into(), "b".into()])),
            Outcome::Abort(AbortReason::Died("c".into())),
            Outcome::Abort(AbortReason::Recovered),
        ] {
            assert_eq!(Outcome::decode(&outcome.encode()), Some(outcome));
        }
        assert_eq!(Outcome::decode(b"commit\nextra"), None);
        assert_eq!(Outcome::decode(b"\xff"), None);
        assert_eq!(Outcome::decode(b"abort\nvoted"), None);
        // A reason with one field takes exactly one.
        assert_eq!(Outcome::decode(b"abort\nvoted\na\nb"), None);
        assert_eq!(Outcome::decode(b"abort\ndied\na\nb"), None);
        assert_eq!(Outcome::decode(b"abort\nrecovered\na"), None);
    }

    #[test]
    fn outcomes_say_why() {
        let said = |outcome: Outcome| outcome.to_string();
        assert_eq!(said(Outcome::Commit), "commit");
        assert_eq!(
            said(Outcome::Abort(AbortReason::Voted("a".into()))),
            "abort: a voted abort"
        );
        assert_eq!(
            said(Outcome::Abort(AbortReason::TimedOut(vec![
                "a".into(),
                "b".into()
            ]))),
            "abort: no vote in time from a, b"
        );
        assert_eq!(
            said(Outcome::Abort(AbortReason::Died("c".into()))),
            "abort: c died before the decision"
        );
        assert_eq!(
            said(Outcome::Abort(AbortReason::Recovered)),
            "abort: decided by a recovering coordinator"
        );
    }

    #[test]
    fn names_are_single_segments() {
        assert!(validate_name("site", "a/b", "/tx").is_err());
        assert!(validate_name("site", "", "/tx").is_err());
        assert!(validate_name("site", "a\nb", "/tx").is_err());
        assert!(validate_name("site", "site-1", "/tx").is_ok());
    }
}
