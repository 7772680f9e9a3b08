//! Two-phase commit: no site commits unless every site's vote standing at the decision was
//! commit, and every site that learns an outcome learns the same one.

/// A site's vote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Vote {
    /// Ready to commit.
    Commit,
    /// Refuses.
    Abort,
    /// No standing vote at the decision (never cast, or it vanished with its session).
    Missing,
}

/// An outcome a site learned.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Outcome {
    /// Committed.
    Commit,
    /// Aborted.
    Abort,
}

/// One transaction's history: the votes standing when the coordinator decided (read from the
/// servers' history, not from what the sites believe), and what each site learned (`None`:
/// it learned nothing, e.g. it died first).
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Transaction {
    /// Per site: its standing vote at the decision.
    pub votes: Vec<(String, Vote)>,
    /// Per site: what it learned.
    pub learned: Vec<(String, Option<Outcome>)>,
}

/// What went wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Problem {
    /// A site learned commit while a standing vote was not commit.
    CommitOverVote {
        /// The site that learned commit.
        site: String,
        /// The site whose vote was not commit, and its vote.
        voter: String,
        /// That vote.
        vote: Vote,
    },
    /// Two sites learned different outcomes.
    Disagree {
        /// One site and its outcome.
        one: (String, Outcome),
        /// The other.
        other: (String, Outcome),
    },
}

/// Checks one transaction.
pub(crate) fn check(tx: &Transaction) -> Vec<Problem> {
    let mut problems = Vec::new();
    let first = tx
        .learned
        .iter()
        .find_map(|(site, outcome)| outcome.map(|o| (site.clone(), o)));
    for (site, outcome) in &tx.learned {
        let Some(outcome) = *outcome else { continue };
        if let Some((first_site, first_outcome)) = &first
            && *first_outcome != outcome
        {
            problems.push(Problem::Disagree {
                one: (first_site.clone(), *first_outcome),
                other: (site.clone(), outcome),
            });
        }
        if outcome == Outcome::Commit
            && let Some((voter, vote)) = tx.votes.iter().find(|(_, v)| *v != Vote::Commit)
        {
            problems.push(Problem::CommitOverVote {
                site: site.clone(),
                voter: voter.clone(),
                vote: *vote,
            });
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tx(votes: &[(&str, Vote)], learned: &[(&str, Option<Outcome>)]) -> Transaction {
        Transaction {
            votes: votes.iter().map(|(s, v)| ((*s).into(), *v)).collect(),
            learned: learned.iter().map(|(s, o)| ((*s).into(), *o)).collect(),
        }
    }

    #[test]
    fn a_unanimous_commit_and_an_abort_pass() {
        let yes = [("a", Vote::Commit), ("b", Vote::Commit)];
        let all = [("a", Some(Outcome::Commit)), ("b", Some(Outcome::Commit))];
        assert_eq!(check(&tx(&yes, &all)), []);
        let no = [("a", Vote::Abort), ("b", Vote::Commit)];
        let aborted = [("a", Some(Outcome::Abort)), ("b", None)];
        assert_eq!(check(&tx(&no, &aborted)), []);
    }

    #[test]
    fn a_commit_over_an_abort_vote_is_caught() {
        let votes = [("a", Vote::Abort), ("b", Vote::Commit)];
        let learned = [("a", Some(Outcome::Commit)), ("b", Some(Outcome::Commit))];
        let problems = check(&tx(&votes, &learned));
        assert_eq!(problems.len(), 2, "{problems:?}");
        assert!(problems.iter().all(|p| matches!(
            p,
            Problem::CommitOverVote { voter, vote: Vote::Abort, .. } if voter == "a"
        )));
    }

    #[test]
    fn a_commit_over_a_vanished_vote_is_caught() {
        let votes = [("a", Vote::Missing), ("b", Vote::Commit)];
        let learned = [("b", Some(Outcome::Commit))];
        assert!(matches!(
            check(&tx(&votes, &learned)).as_slice(),
            [Problem::CommitOverVote {
                vote: Vote::Missing,
                ..
            }]
        ));
    }

    #[test]
    fn sites_that_learn_different_outcomes_are_caught() {
        let votes = [("a", Vote::Abort), ("b", Vote::Commit)];
        let learned = [("a", Some(Outcome::Abort)), ("b", Some(Outcome::Commit))];
        let problems = check(&tx(&votes, &learned));
        assert!(
            problems
                .iter()
                .any(|p| matches!(p, Problem::Disagree { .. })),
            "{problems:?}"
        );
    }
}
