//! Linearizability of a counter's history (`SharedCount`, `AtomicLong`): is there one order of
//! the operations, each taking effect at a single moment between its call and its answer, in
//! which every answer is what a single counter would have given?
//!
//! The search is Wing and Gong's, with Lowe's memoization (the "WGL" checker Knossos and
//! Porcupine use): repeatedly pick an operation that may take effect next (no other remaining
//! operation answered before it was called), apply it to the model, keep going while its answer
//! matches, and back up otherwise; a (set of operations done, counter value) pair already
//! explored is not explored again. An operation whose answer never came (a timeout, a crash)
//! may have taken effect at any moment after its call, or never: it answers nothing and is
//! never required.
//!
//! Histories are small (a scenario's few clients each making a few calls between faults), so
//! the set of operations done is a 128-bit mask: at most [`MAX_OPS`] operations per check.

use std::collections::HashSet;

/// The most operations one check takes.
pub(crate) const MAX_OPS: usize = 128;

/// One call to the counter.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Op {
    /// Read the value.
    Get,
    /// Add `delta` (an increment is `Add(1)`).
    Add(i64),
    /// Set to `new` if the value is `expected`.
    CompareAndSet {
        /// The value it must have.
        expected: i64,
        /// The value to set.
        new: i64,
    },
}

/// What the counter answered.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Answer {
    /// `Get`, or `Add` answering the value after the addition.
    Value(i64),
    /// `CompareAndSet`: whether it set the value.
    Set(bool),
    /// No answer (timed out, the client died, the connection was lost): it may or may not
    /// have taken effect.
    Unknown,
}

/// One operation of the history: when it was called and answered (any clock common to all
/// the clients, e.g. the orchestrator's; `answered` is ignored for an unknown answer).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Call {
    /// Who called (for the report).
    pub client: u32,
    /// What it asked.
    pub op: Op,
    /// When it was called.
    pub called: u64,
    /// When it was answered.
    pub answered: u64,
    /// What it answered.
    pub answer: Answer,
}

/// Why a history is not linearizable, or could not be checked.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Problem {
    /// No order explains the answers; the longest prefix any order explained, and the calls
    /// none could place next.
    NotLinearizable {
        /// How many operations the best attempt placed.
        placed: usize,
        /// The calls that could not be placed after it.
        stuck: Vec<Call>,
    },
    /// More than [`MAX_OPS`] operations.
    TooLong(usize),
}

/// Checks `history` of a counter that starts at `initial`.
pub(crate) fn check(initial: i64, history: &[Call]) -> Result<(), Problem> {
    if history.len() > MAX_OPS {
        return Err(Problem::TooLong(history.len()));
    }
    // Every call with an answer must be placed; unknown ones may be left out.
    let required: u128 = history
        .iter()
        .enumerate()
        .filter(|(_, c)| c.answer != Answer::Unknown)
        .fold(0, |mask, (i, _)| mask | (1 << i));
    let mut search = Search {
        history,
        required,
        seen: HashSet::new(),
        best: (0, 0),
    };
    if search.explore(0, initial) {
        return Ok(());
    }
    let (placed_mask, _) = search.best;
    let stuck = history
        .iter()
        .enumerate()
        .filter(|(i, c)| placed_mask & (1 << i) == 0 && c.answer != Answer::Unknown)
        .map(|(_, c)| *c)
        .collect();
    Err(Problem::NotLinearizable {
        placed: placed_mask.count_ones() as usize,
        stuck,
    })
}

struct Search<'a> {
    history: &'a [Call],
    required: u128,
    seen: HashSet<(u128, i64)>,
    /// The mask that placed the most operations, and its value.
    best: (u128, i64),
}

impl Search<'_> {
    /// Whether the calls not in `done` can all be placed (the unknown ones optionally) starting
    /// from `value`.
    fn explore(&mut self, done: u128, value: i64) -> bool {
        if done & self.required == self.required {
            return true;
        }
        if !self.seen.insert((done, value)) {
            return false;
        }
        if done.count_ones() > self.best.0.count_ones() {
            self.best = (done, value);
        }
        // The earliest answer among the calls still to place: a call may go next only if it
        // was called before that (else that call answered before it began).
        let horizon = self
            .history
            .iter()
            .enumerate()
            .filter(|(i, c)| done & (1 << i) == 0 && c.answer != Answer::Unknown)
            .map(|(_, c)| c.answered)
            .min()
            .unwrap_or(u64::MAX);
        for (i, call) in self.history.iter().enumerate() {
            let bit = 1u128 << i;
            if done & bit != 0 || call.called > horizon {
                continue;
            }
            if let Some(next) = apply(value, call) {
                if self.explore(done | bit, next) {
                    return true;
                }
            }
        }
        false
    }
}

/// The counter's value after `call` from `value`, if its answer is what the counter would
/// have answered.
fn apply(value: i64, call: &Call) -> Option<i64> {
    let (next, answer) = match call.op {
        Op::Get => (value, Answer::Value(value)),
        Op::Add(delta) => {
            let next = value.wrapping_add(delta);
            (next, Answer::Value(next))
        }
        Op::CompareAndSet { expected, new } => {
            if value == expected {
                (new, Answer::Set(true))
            } else {
                (value, Answer::Set(false))
            }
        }
    };
    match call.answer {
        Answer::Unknown => Some(next),
        given if given == answer => Some(next),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn call(client: u32, op: Op, called: u64, answered: u64, answer: Answer) -> Call {
        Call {
            client,
            op,
            called,
            answered,
            answer,
        }
    }

    #[test]
    fn concurrent_increments_in_either_order_are_linearizable() {
        let history = [
            call(1, Op::Add(1), 0, 10, Answer::Value(2)),
            call(2, Op::Add(1), 1, 9, Answer::Value(1)),
            call(3, Op::Get, 11, 12, Answer::Value(2)),
        ];
        assert_eq!(check(0, &history), Ok(()));
    }

    #[test]
    fn a_stale_read_after_an_acknowledged_increment_is_caught() {
        // The increment answered 1 at time 5; a read called at 6 cannot see 0.
        let history = [
            call(1, Op::Add(1), 0, 5, Answer::Value(1)),
            call(2, Op::Get, 6, 7, Answer::Value(0)),
        ];
        match check(0, &history) {
            Err(Problem::NotLinearizable { placed, stuck }) => {
                assert_eq!(placed, 1);
                assert_eq!(stuck, vec![history[1]]);
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn the_calls_reported_stuck_are_the_unplaced_ones_wherever_they_stand() {
        // The stale read listed first: the increment (second) is placed, the read is not.
        let history = [
            call(2, Op::Get, 6, 7, Answer::Value(0)),
            call(1, Op::Add(1), 0, 5, Answer::Value(1)),
        ];
        assert_eq!(
            check(0, &history),
            Err(Problem::NotLinearizable {
                placed: 1,
                stuck: vec![history[0]]
            })
        );
    }

    #[test]
    fn a_call_made_the_instant_another_is_answered_is_concurrent_with_it() {
        let history = [
            call(1, Op::Add(1), 0, 5, Answer::Value(1)),
            call(2, Op::Get, 5, 6, Answer::Value(0)),
        ];
        assert_eq!(check(0, &history), Ok(()));
    }

    #[test]
    fn a_lost_increment_is_caught() {
        // Two acknowledged increments from 0 cannot both answer 1.
        let history = [
            call(1, Op::Add(1), 0, 10, Answer::Value(1)),
            call(2, Op::Add(1), 1, 9, Answer::Value(1)),
        ];
        assert!(matches!(
            check(0, &history),
            Err(Problem::NotLinearizable { .. })
        ));
    }

    #[test]
    fn an_unanswered_call_may_or_may_not_have_happened() {
        let timed_out = call(1, Op::Add(5), 0, 0, Answer::Unknown);
        let happened = [timed_out, call(2, Op::Get, 10, 11, Answer::Value(5))];
        assert_eq!(check(0, &happened), Ok(()));
        let did_not = [timed_out, call(2, Op::Get, 10, 11, Answer::Value(0))];
        assert_eq!(check(0, &did_not), Ok(()));
        // But not half: 3 is neither.
        let neither = [timed_out, call(2, Op::Get, 10, 11, Answer::Value(3))];
        assert!(check(0, &neither).is_err());
    }

    #[test]
    fn compare_and_set_answers_follow_the_value() {
        let history = [
            call(
                1,
                Op::CompareAndSet {
                    expected: 0,
                    new: 7,
                },
                0,
                5,
                Answer::Set(true),
            ),
            call(
                2,
                Op::CompareAndSet {
                    expected: 0,
                    new: 9,
                },
                1,
                6,
                Answer::Set(false),
            ),
            call(3, Op::Get, 7, 8, Answer::Value(7)),
        ];
        assert_eq!(check(0, &history), Ok(()));
        // Both cannot have set it from 0.
        let both = [
            call(
                1,
                Op::CompareAndSet {
                    expected: 0,
                    new: 7,
                },
                0,
                5,
                Answer::Set(true),
            ),
            call(
                2,
                Op::CompareAndSet {
                    expected: 0,
                    new: 9,
                },
                1,
                6,
                Answer::Set(true),
            ),
        ];
        assert!(check(0, &both).is_err());
    }

    #[test]
    fn a_long_history_is_checked_in_bounded_time() {
        // 3 clients x 40 increments, each overlapping the others: the memo keeps it small.
        let mut history = Vec::new();
        for step in 0..40u64 {
            for client in 0..3u32 {
                let n = step as i64 * 3 + i64::from(client) + 1;
                history.push(call(
                    client,
                    Op::Add(1),
                    step * 10,
                    step * 10 + 9,
                    Answer::Value(n),
                ));
            }
        }
        assert_eq!(check(0, &history), Ok(()));
        assert_eq!(
            check(0, &[history.clone(), history.clone()].concat()),
            Err(Problem::TooLong(240))
        );
        // Exactly the most a check takes.
        let longest: Vec<Call> = (0..MAX_OPS as u64)
            .map(|n| {
                call(
                    0,
                    Op::Add(1),
                    n * 10,
                    n * 10 + 5,
                    Answer::Value(n as i64 + 1),
                )
            })
            .collect();
        assert_eq!(check(0, &longest), Ok(()));
    }
}
