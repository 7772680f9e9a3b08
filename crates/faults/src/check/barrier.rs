//! Barriers and double barriers: nobody passes before N have entered its round, and (double
//! barrier) no member of round k+1 passes while a member of round k is still inside.
//!
//! The history is in one total order (the orchestrator's clock, or the servers' zxids).

/// One event of a member.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// `member` entered round `round` (its node was created).
    Enter {
        /// Who.
        member: String,
        /// Which round.
        round: u32,
    },
    /// `member`'s `enter` returned: it passed the barrier.
    Pass {
        /// Who.
        member: String,
        /// Which round.
        round: u32,
    },
    /// `member` left round `round` (its `leave` returned, or it died).
    Leave {
        /// Who.
        member: String,
        /// Which round.
        round: u32,
    },
}

/// What went wrong.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Problem {
    /// A member passed before `size` members had entered its round.
    EarlyPass {
        /// The event.
        at: usize,
        /// Who.
        member: String,
        /// How many had entered.
        entered: usize,
    },
    /// A member of round `round` passed while `inside` of an earlier round were inside.
    Overtook {
        /// The event.
        at: usize,
        /// Who.
        member: String,
        /// Its round.
        round: u32,
        /// Members of earlier rounds still inside.
        inside: Vec<String>,
    },
}

/// Checks `events` of a barrier of `size`.
pub(crate) fn check(events: &[Event], size: usize) -> Vec<Problem> {
    use std::collections::BTreeMap;
    let mut entered: BTreeMap<u32, Vec<&str>> = BTreeMap::new();
    let mut inside: BTreeMap<u32, Vec<&str>> = BTreeMap::new();
    let mut problems = Vec::new();
    for (at, event) in events.iter().enumerate() {
        match event {
            Event::Enter { member, round } => {
                entered.entry(*round).or_default().push(member);
                inside.entry(*round).or_default().push(member);
            }
            Event::Pass { member, round } => {
                let count = entered.get(round).map_or(0, Vec::len);
                if count < size {
                    problems.push(Problem::EarlyPass {
                        at,
                        member: member.clone(),
                        entered: count,
                    });
                }
                let earlier: Vec<String> = inside
                    .range(..*round)
                    .flat_map(|(_, members)| members.iter().map(|m| (*m).to_owned()))
                    .collect();
                if !earlier.is_empty() {
                    problems.push(Problem::Overtook {
                        at,
                        member: member.clone(),
                        round: *round,
                        inside: earlier,
                    });
                }
            }
            Event::Leave { member, round } => {
                if let Some(members) = inside.get_mut(round) {
                    members.retain(|m| m != member);
                }
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enter(m: &str, round: u32) -> Event {
        Event::Enter {
            member: m.into(),
            round,
        }
    }
    fn pass(m: &str, round: u32) -> Event {
        Event::Pass {
            member: m.into(),
            round,
        }
    }
    fn leave(m: &str, round: u32) -> Event {
        Event::Leave {
            member: m.into(),
            round,
        }
    }

    #[test]
    fn two_honest_rounds_pass() {
        let events = [
            enter("a", 0),
            enter("b", 0),
            pass("a", 0),
            pass("b", 0),
            leave("a", 0),
            leave("b", 0),
            enter("c", 1),
            enter("d", 1),
            pass("c", 1),
            pass("d", 1),
        ];
        assert_eq!(check(&events, 2), []);
    }

    #[test]
    fn a_lone_member_passing_a_barrier_of_two_is_caught() {
        // The fault issue 31 fixed: a `ready` left behind let the next round's lone member in.
        let events = [enter("c", 1), pass("c", 1)];
        assert_eq!(
            check(&events, 2),
            [Problem::EarlyPass {
                at: 1,
                member: "c".into(),
                entered: 1
            }]
        );
    }

    #[test]
    fn a_member_passing_while_the_previous_round_is_inside_is_caught() {
        let events = [
            enter("a", 0),
            enter("b", 0),
            pass("a", 0),
            pass("b", 0),
            leave("a", 0),
            enter("c", 1),
            enter("d", 1),
            pass("c", 1),
        ];
        assert!(matches!(
            check(&events, 2).as_slice(),
            [Problem::Overtook { member, inside, .. }] if member == "c" && inside == &["b"]
        ));
    }
}
