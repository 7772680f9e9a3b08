//! The votes standing when a two-phase commit was decided, read from Keeper's transaction
//! log: the server's own total order, in which each vote node was created, then deleted (or
//! ended with its session), and the decision created, each at one zxid. What the sites
//! believe they cast is not what stood: a commit vote vanishes with its site's session.
//!
//! Layout read (`lockkeeper::zk::TwoPhase`'s): `PATH/TX` (the proposal), `PATH/TX/votes/SITE`
//! (data `commit` or `abort`; a commit vote is ephemeral), `PATH/TX/decision`.

use std::collections::HashMap;

use lockkeeper_server::Txn;

use crate::check::two_phase::Vote;

/// Per site of `sites`, its vote standing when `PATH/TX/decision` was created; `None` when
/// the history does not show the transaction from its proposal to its decision (a log
/// purged after a snapshot, or no decision yet), so nothing can be said.
pub(crate) fn at_decision(
    history: &[(i64, Txn)],
    path: &str,
    tx: &str,
    sites: &[String],
) -> Option<Vec<(String, Vote)>> {
    let proposal = format!("{path}/{tx}");
    let votes_dir = format!("{proposal}/votes/");
    let decision = format!("{proposal}/decision");
    let mut proposed = false;
    // Vote node path -> (its owner session, 0 if persistent; its data).
    let mut standing: HashMap<String, (i64, Vec<u8>)> = HashMap::new();
    for (_, txn) in history {
        let mut flat = Vec::new();
        flatten(txn, &mut flat);
        for txn in flat {
            match txn {
                Txn::Create { path, .. } if *path == proposal => proposed = true,
                Txn::Create { path, .. } if *path == decision => {
                    if !proposed {
                        return None;
                    }
                    let votes = sites
                        .iter()
                        .map(|site| {
                            let vote = match standing.get(&format!("{votes_dir}{site}")) {
                                Some((_, data)) if data == b"commit" => Vote::Commit,
                                Some((_, data)) if data == b"abort" => Vote::Abort,
                                _ => Vote::Missing,
                            };
                            (site.clone(), vote)
                        })
                        .collect();
                    return Some(votes);
                }
                Txn::Create {
                    path,
                    data,
                    ephemeral_owner,
                    ..
                } if path.starts_with(&votes_dir) => {
                    let data = data.as_ref().map(|d| d.to_vec()).unwrap_or_default();
                    standing.insert(path.clone(), (*ephemeral_owner, data));
                }
                Txn::Delete { path } => {
                    standing.remove(path);
                }
                Txn::CloseSession { session_id } => {
                    standing.retain(|_, (owner, _)| owner != session_id);
                }
                _ => {}
            }
        }
    }
    None
}

/// A txn and, for a multi, its parts, in the order they apply.
fn flatten<'a>(txn: &'a Txn, out: &mut Vec<&'a Txn>) {
    match txn {
        Txn::Multi(parts) => parts.iter().for_each(|part| flatten(part, out)),
        other => out.push(other),
    }
}

#[cfg(test)]
mod tests {
    use bytes::Bytes;

    use super::*;

    fn create(path: &str, data: &'static [u8], owner: i64) -> Txn {
        Txn::Create {
            path: path.into(),
            data: Some(Bytes::from_static(data)),
            acl: Vec::new(),
            ephemeral_owner: owner,
        }
    }

    fn sites() -> Vec<String> {
        vec!["a".into(), "b".into()]
    }

    #[test]
    fn a_commit_vote_whose_session_ended_before_the_decision_did_not_stand() {
        let history: Vec<(i64, Txn)> = [
            create("/2pc/tx", b"p", 0),
            create("/2pc/tx/votes/a", b"commit", 7),
            create("/2pc/tx/votes/b", b"commit", 8),
            Txn::CloseSession { session_id: 7 },
            Txn::Multi(vec![
                Txn::Check {
                    path: "/2pc/tx/votes".into(),
                },
                create("/2pc/tx/decision", b"commit", 0),
            ]),
        ]
        .into_iter()
        .enumerate()
        .map(|(i, txn)| (i as i64 + 1, txn))
        .collect();
        assert_eq!(
            at_decision(&history, "/2pc", "tx", &sites()),
            Some(vec![
                ("a".into(), Vote::Missing),
                ("b".into(), Vote::Commit)
            ])
        );
    }

    #[test]
    fn an_abort_vote_stands_and_a_vote_cast_again_counts() {
        let history: Vec<(i64, Txn)> = [
            create("/2pc/tx", b"p", 0),
            create("/2pc/tx/votes/a", b"commit", 7),
            Txn::CloseSession { session_id: 7 },
            create("/2pc/tx/votes/a", b"abort", 0),
            create("/2pc/tx/votes/b", b"commit", 8),
            create("/2pc/tx/decision", b"abort", 0),
        ]
        .into_iter()
        .enumerate()
        .map(|(i, txn)| (i as i64 + 1, txn))
        .collect();
        assert_eq!(
            at_decision(&history, "/2pc", "tx", &sites()),
            Some(vec![("a".into(), Vote::Abort), ("b".into(), Vote::Commit)])
        );
    }

    #[test]
    fn a_history_without_the_proposal_or_the_decision_says_nothing() {
        let no_proposal = vec![(1, create("/2pc/tx/decision", b"commit", 0))];
        assert_eq!(at_decision(&no_proposal, "/2pc", "tx", &sites()), None);
        let undecided = vec![(1, create("/2pc/tx", b"p", 0))];
        assert_eq!(at_decision(&undecided, "/2pc", "tx", &sites()), None);
    }
}
