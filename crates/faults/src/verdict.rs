//! The verdict on one row: did the scenario test what it claims, and did anything happen that
//! the documentation does not predict?
//!
//! A row is, in this order of precedence:
//! - **violation**: a fence's history check failed (its accepted tokens went down, or its store
//!   does not hold the last accepted write); or a fence accepted a stale write, the resource's
//!   history broke exclusion (an accepted write's token below an earlier one, a leader's term
//!   token not above the last), or two clients were inside at once, on a row whose backend
//!   promises otherwise and that is not in [`EXPECTED`];
//! - **vacuous**: the fault makes zombies ([`Fault::makes_zombies`]) and was injected, but no
//!   stale write was attempted: the fences were never tested;
//! - **expected**: something a lock cannot prevent happened where [`EXPECTED`] predicts it,
//!   quoting the documentation's passage that says so;
//! - **pass**.
//!
//! A run fails on any violation or vacuous row.

use crate::backend::BackendKind;
use crate::kind::Kind;
use crate::scenario::{Fault, Row};

/// What may happen on a row without it being a fault of lockkeeper's, and the documentation's
/// passage that predicts it.
pub(crate) struct Expectation {
    /// Which rows.
    pub applies: fn(BackendKind, Kind, Fault) -> bool,
    /// Whether fences may accept stale writes there (the backend's tokens went back).
    pub stale_accepted: bool,
    /// Whether two clients may be inside at once there (unfenced).
    pub overlaps: bool,
    /// The page of the documentation that predicts it, from the repository's root.
    pub page: &'static str,
    /// The sentence there that predicts it, quoted (a test checks it is there).
    pub quote: &'static str,
}

/// The short list of outcomes the documentation predicts.
pub(crate) const EXPECTED: &[Expectation] = &[
    Expectation {
        applies: |_, k, f| k.holders() > 1 && f.makes_zombies(),
        stale_accepted: true,
        overlaps: true,
        page: "docs/safety.md",
        quote: "a semaphore of N leases hands out N tokens at once, so no single fence refuses \
                 its paused holder's late writes",
    },
    Expectation {
        applies: |b, _, f| b.is_sentinel() && matches!(f, Fault::Server | Fault::PauseAndServer),
        stale_accepted: true,
        overlaps: true,
        page: "docs/guide/redis.md",
        quote: "A failover, or a restart without persistence, can lose the latest acquisition \
                 and set the fencing counter back, and then fencing no longer protects.",
    },
    Expectation {
        applies: |b, _, f| b.is_sentinel() && f == Fault::SplitBrain,
        stale_accepted: true,
        overlaps: true,
        page: "docs/guide/redis.md",
        quote: "the other side's sentinels promote the replica, whose token counter then \
                 repeats the old master's: two holders at once, and fences accept both",
    },
    Expectation {
        applies: |b, _, f| {
            b == BackendKind::Redlock && matches!(f, Fault::Server | Fault::PauseAndServer)
        },
        // No token: whatever a second holder's predecessor writes late reaches the resource.
        stale_accepted: true,
        overlaps: true,
        page: "docs/guide/redis.md",
        quote: "a master that crashes and comes back empty before the TTL passes lets a second \
                 client in while the first still holds the lock.",
    },
    Expectation {
        applies: |b, _, _| b == BackendKind::Redlock,
        stale_accepted: true,
        overlaps: true,
        page: "docs/guide/redis.md",
        quote: "there is **no fencing token**",
    },
    Expectation {
        applies: |b, _, f| !b.is_zookeeper() && !b.is_etcd() && f == Fault::ServerClock,
        stale_accepted: false,
        overlaps: true,
        page: "docs/guide/redis.md",
        quote: "A server clock stepped ahead (an NTP step, `date -s`) expires the lease at once; \
                 the holder finds out at its next renewal (within ttl/3) and `lost()` fires, but \
                 until then another client may get in.",
    },
];

/// The verdict on one row.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    /// Nothing unpredicted happened, and the row tested what it claims.
    Pass,
    /// Something a lock cannot prevent happened where the documentation predicts it: the page
    /// and the sentence that do.
    Expected {
        /// The page, from the repository's root.
        page: &'static str,
        /// The sentence.
        quote: &'static str,
    },
    /// A zombie fault without a stale attempt: nothing was tested.
    Vacuous,
    /// Something happened that the documentation does not predict.
    Violation(String),
}

impl Verdict {
    /// Whether the run fails on it.
    pub(crate) fn fails(&self) -> bool {
        matches!(self, Verdict::Vacuous | Verdict::Violation(_))
    }

    /// The table's word.
    pub(crate) fn word(&self) -> String {
        match self {
            Verdict::Pass => "pass".into(),
            Verdict::Expected { .. } => "expected".into(),
            Verdict::Vacuous => "VACUOUS".into(),
            Verdict::Violation(what) => format!("VIOLATION: {what}"),
        }
    }
}

/// Judges `row`.
pub(crate) fn judge(row: &Row) -> Verdict {
    let (backend, fault) = (row.scenario.backend, row.scenario.fault);
    let kind = row.scenario.kind;
    let expected = EXPECTED.iter().find(|e| (e.applies)(backend, kind, fault));
    let counts = &row.counts;
    if !row.fence_problems.is_empty() {
        return Verdict::Violation(row.fence_problems.join("; "));
    }
    // Without a token there is no fence: every stale write reached the resource.
    let accepted: u64 = if counts.fenced {
        counts.stale.accepted.iter().sum()
    } else {
        counts.stale.attempted
    };
    if !row.history_problems.is_empty() && !expected.is_some_and(|e| e.stale_accepted) {
        return Verdict::Violation(row.history_problems.join("; "));
    }
    if accepted > 0 && !expected.is_some_and(|e| e.stale_accepted) {
        return Verdict::Violation(format!(
            "fences accepted stale writes ({:?} by local, redis, postgres, sqlite, zk)",
            counts.stale.accepted
        ));
    }
    // Two holders at once without a zombie or a clock: the lock itself failed.
    let overlap_possible = fault.makes_zombies()
        || matches!(fault, Fault::Cut | Fault::ClientClock)
        || expected.is_some_and(|e| e.overlaps);
    if counts.overlaps > 0 && !overlap_possible {
        return Verdict::Violation(format!("{} overlaps", counts.overlaps));
    }
    if row.struck && fault.makes_zombies() && counts.stale.attempted == 0 {
        return Verdict::Vacuous;
    }
    match expected {
        Some(e) if (e.stale_accepted && accepted > 0) || (e.overlaps && counts.overlaps > 0) => {
            Verdict::Expected {
                page: e.page,
                quote: e.quote,
            }
        }
        _ => Verdict::Pass,
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::kind::Kind;
    use crate::resource::{Counts, Stale};
    use crate::scenario::Scenario;

    fn row(backend: BackendKind, fault: Fault, counts: Counts) -> Row {
        Row {
            scenario: Scenario {
                backend,
                kind: backend.kinds()[0],
                fault,
            },
            seed: 1,
            counts,
            took: Duration::from_secs(1),
            struck: true,
            fence_problems: Vec::new(),
            history_problems: Vec::new(),
            notes: Vec::new(),
        }
    }

    fn zombie_refused() -> Counts {
        let mut counts = Counts {
            fenced: true,
            overlaps: 1,
            ..Counts::default()
        };
        counts.stale.attempted = 2;
        counts.stale.refused = 2;
        counts
    }

    /// Each expectation quotes a sentence its page says, word for word (line breaks aside).
    #[test]
    fn every_expectation_quotes_its_page() {
        let words = |text: &str| text.split_whitespace().collect::<Vec<_>>().join(" ");
        let root = std::path::Path::new(env!("CARGO_MANIFEST_DIR")).join("../..");
        for expectation in EXPECTED {
            let page = std::fs::read_to_string(root.join(expectation.page))
                .unwrap_or_else(|e| panic!("{}: {e}", expectation.page));
            assert!(
                words(&page).contains(&words(expectation.quote)),
                "not in {}: {:?}",
                expectation.page,
                expectation.quote
            );
        }
    }

    #[test]
    fn a_semaphores_unfenced_zombie_is_expected_but_too_many_inside_without_one_is_not() {
        let mut zombie = Counts {
            overlaps: 3,
            ..Counts::default()
        };
        zombie.stale.attempted = 2;
        let mut paused = row(BackendKind::Keeper, Fault::Pause, zombie.clone());
        paused.scenario.kind = Kind::Semaphore2;
        assert!(
            matches!(judge(&paused), Verdict::Expected { quote, .. } if quote.contains("N tokens")),
            "{:?}",
            judge(&paused)
        );
        // Three inside with no fault that makes zombies: the semaphore failed.
        let mut calm = row(BackendKind::Keeper, Fault::Server, zombie);
        calm.scenario.kind = Kind::Semaphore2;
        assert!(matches!(judge(&calm), Verdict::Violation(_)));
    }

    #[test]
    fn a_refused_zombie_passes_and_an_accepted_one_is_a_violation() {
        let keeper = BackendKind::Keeper;
        assert_eq!(
            judge(&row(keeper, Fault::Pause, zombie_refused())),
            Verdict::Pass
        );
        let mut accepted = zombie_refused();
        accepted.stale.accepted[1] = 1;
        assert!(matches!(
            judge(&row(keeper, Fault::Pause, accepted.clone())),
            Verdict::Violation(what) if what.contains("stale")
        ));
        // Predicted on a Sentinel failover.
        assert!(matches!(
            judge(&row(BackendKind::Sentinel, Fault::Server, accepted)),
            Verdict::Expected { .. }
        ));
    }

    #[test]
    fn a_zombie_fault_without_a_stale_attempt_is_vacuous() {
        let counts = Counts {
            fenced: true,
            overlaps: 1,
            ..Counts::default()
        };
        assert_eq!(
            judge(&row(BackendKind::Etcd, Fault::Pause, counts.clone())),
            Verdict::Vacuous
        );
        // Not when the fault never struck (the table says "not injected"), nor for faults
        // that make no zombie.
        let mut missed = row(BackendKind::Etcd, Fault::Pause, counts.clone());
        missed.struck = false;
        assert_eq!(judge(&missed), Verdict::Pass);
        assert_eq!(
            judge(&row(BackendKind::Etcd, Fault::Kill, Counts::default())),
            Verdict::Pass
        );
    }

    #[test]
    fn two_holders_without_a_zombie_are_a_violation_unless_predicted() {
        let counts = Counts {
            overlaps: 1,
            ..Counts::default()
        };
        assert!(judge(&row(BackendKind::Zookeeper, Fault::Kill, counts.clone())).fails());
        assert!(judge(&row(BackendKind::Redis, Fault::None, counts.clone())).fails());
        assert!(matches!(
            judge(&row(BackendKind::Redlock, Fault::Server, counts.clone())),
            Verdict::Expected { .. }
        ));
        assert_eq!(
            judge(&row(BackendKind::Keeper, Fault::Cut, counts)),
            Verdict::Pass
        );
        assert_eq!(Kind::Redlock, BackendKind::Redlock.kinds()[0]);
    }

    #[test]
    fn a_broken_resource_history_is_a_violation_unless_tokens_may_go_back() {
        let mut bad = row(BackendKind::Etcd, Fault::Pause, zombie_refused());
        bad.history_problems = vec!["TermNotAbove".into()];
        assert!(judge(&bad).fails());
        bad.scenario.backend = BackendKind::Sentinel;
        bad.scenario.fault = Fault::Server;
        assert!(!judge(&bad).fails());
    }

    #[test]
    fn stale_writes_without_a_token_are_accepted_and_only_redlock_is_excused() {
        let unfenced = Counts {
            overlaps: 1,
            stale: Stale {
                attempted: 3,
                ..Stale::default()
            },
            ..Counts::default()
        };
        assert!(matches!(
            judge(&row(BackendKind::Redlock, Fault::Pause, unfenced.clone())),
            Verdict::Expected { quote, .. } if quote.contains("no fencing token")
        ));
        // A backend with tokens that presented none would be a violation.
        assert!(judge(&row(BackendKind::Keeper, Fault::Pause, unfenced)).fails());
    }

    #[test]
    fn stale_writes_accepted_alone_are_what_a_failover_is_expected_for() {
        let mut accepted = Counts {
            fenced: true,
            ..Counts::default()
        };
        accepted.stale.attempted = 1;
        accepted.stale.accepted = [1; 5];
        assert!(matches!(
            judge(&row(BackendKind::Sentinel, Fault::Server, accepted)),
            Verdict::Expected { .. }
        ));
    }

    #[test]
    fn a_predicted_row_where_nothing_happened_is_a_pass() {
        // A Sentinel failover that lost no token and let nobody in: nothing to excuse.
        let calm = Counts {
            fenced: true,
            ..Counts::default()
        };
        assert_eq!(
            judge(&row(BackendKind::Sentinel, Fault::Server, calm.clone())),
            Verdict::Pass
        );
        // Overlaps alone, where only overlaps are predicted: expected, not a pass.
        let overlapped = Counts {
            overlaps: 1,
            ..calm
        };
        assert!(matches!(
            judge(&row(BackendKind::Redis, Fault::ServerClock, overlapped)),
            Verdict::Expected { .. }
        ));
    }

    #[test]
    fn a_fence_history_problem_is_a_violation_everywhere() {
        let mut bad = row(BackendKind::Sentinel, Fault::Server, zombie_refused());
        bad.fence_problems = vec!["redis: accepted token 4 after 5".into()];
        assert!(matches!(judge(&bad), Verdict::Violation(what) if what.contains("token 4")));
    }
}
