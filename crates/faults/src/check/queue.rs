//! Queues: every acknowledged `put` is taken at least once (none lost across consumer kills,
//! server restarts and partitions); items taken more than once are reported (at-least-once
//! delivery allows them, so they are counted, not failed).

use std::collections::HashMap;

/// What a queue's history showed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct Report {
    /// Acknowledged puts never taken.
    pub lost: Vec<String>,
    /// Items taken more than once, with how many times.
    pub duplicates: Vec<(String, usize)>,
    /// Items taken that no put of the history made (a put whose acknowledgement was lost
    /// may still have happened: not a problem, counted for the report).
    pub unacknowledged_taken: usize,
}

impl Report {
    /// Whether the history breaks the queue's promise (a lost item).
    pub(crate) fn violated(&self) -> bool {
        !self.lost.is_empty()
    }
}

/// Checks a queue's history: the payloads whose `put` was acknowledged, the payloads whose
/// `put` got no answer (may or may not be in the queue), and every payload taken, in any order.
pub(crate) fn check(acknowledged: &[String], unanswered: &[String], taken: &[String]) -> Report {
    let mut times: HashMap<&str, usize> = HashMap::new();
    for item in taken {
        *times.entry(item).or_default() += 1;
    }
    let lost = acknowledged
        .iter()
        .filter(|item| !times.contains_key(item.as_str()))
        .cloned()
        .collect();
    let mut duplicates: Vec<(String, usize)> = times
        .iter()
        .filter(|(_, n)| **n > 1)
        .map(|(item, n)| ((*item).to_owned(), *n))
        .collect();
    duplicates.sort();
    let unacknowledged_taken = times
        .keys()
        .filter(|item| {
            !acknowledged.iter().any(|a| a == *item) && unanswered.iter().any(|u| u == *item)
        })
        .count();
    Report {
        lost,
        duplicates,
        unacknowledged_taken,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn items(names: &[&str]) -> Vec<String> {
        names.iter().map(|n| (*n).to_owned()).collect()
    }

    #[test]
    fn every_item_taken_once_passes() {
        let report = check(&items(&["a", "b"]), &[], &items(&["b", "a"]));
        assert_eq!(report, Report::default());
        assert!(!report.violated());
    }

    #[test]
    fn a_lost_item_is_caught_and_duplicates_are_counted() {
        let report = check(
            &items(&["a", "b", "c"]),
            &items(&["d"]),
            // "z" was put by nobody here: it is not an unanswered put taken.
            &items(&["a", "a", "c", "d", "z"]),
        );
        assert!(report.violated());
        assert_eq!(report.lost, ["b"]);
        assert_eq!(report.duplicates, [("a".to_owned(), 2)]);
        assert_eq!(report.unacknowledged_taken, 1);
    }
}
