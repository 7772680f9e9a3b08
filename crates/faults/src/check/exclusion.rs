//! Mutual exclusion at the resource, for locks, write locks, semaphores with N leases and
//! leaders: never more than N holders inside at once, and, where tokens fence, no accepted
//! write with a token below the highest accepted before it; for leaders, each term's token
//! above the previous term's.
//!
//! The history is what the resource saw, in its own order (it handles one request at a time,
//! so its order is a total order of the events).

/// One event at the resource, in the order it happened there.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Event {
    /// `client` began a turn (a term, for a leader) with `token`.
    Enter {
        /// Who.
        client: String,
        /// Its fencing token, if the lock has one.
        token: Option<u64>,
    },
    /// `client`'s turn ended (its `exit`, or its connection closed).
    Exit {
        /// Who.
        client: String,
    },
    /// A write the resource accepted (every fence took it), with the writer's token.
    Accepted {
        /// Who.
        client: String,
        /// Its token.
        token: u64,
    },
}

/// What went wrong, each with the index of the event that showed it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Problem {
    /// More than the allowed holders inside at once.
    TooMany {
        /// The event.
        at: usize,
        /// Who was inside.
        inside: Vec<String>,
    },
    /// A write accepted with a token below one accepted before it.
    TokenWentDown {
        /// The event.
        at: usize,
        /// The highest accepted before it.
        highest: u64,
        /// The token accepted.
        token: u64,
    },
    /// A turn began with a token not above the previous turn's (leaders: tokens rise per
    /// term).
    TermNotAbove {
        /// The event.
        at: usize,
        /// The previous turn's token.
        previous: u64,
        /// This turn's token.
        token: u64,
    },
}

/// Checks `events` against `holders` allowed at once; `terms_rise`: each turn's token must be
/// above the previous turn's (a leader's new term), not only at least it.
pub(crate) fn check(events: &[Event], holders: usize, terms_rise: bool) -> Vec<Problem> {
    let mut problems = Vec::new();
    let mut inside: Vec<&str> = Vec::new();
    let mut highest: Option<u64> = None;
    let mut last_term: Option<u64> = None;
    for (at, event) in events.iter().enumerate() {
        match event {
            Event::Enter { client, token } => {
                if !inside.contains(&client.as_str()) {
                    inside.push(client);
                }
                if inside.len() > holders {
                    problems.push(Problem::TooMany {
                        at,
                        inside: inside.iter().map(|c| (*c).to_owned()).collect(),
                    });
                }
                if let Some(token) = *token {
                    if terms_rise
                        && let Some(previous) = last_term
                        && token <= previous
                    {
                        problems.push(Problem::TermNotAbove {
                            at,
                            previous,
                            token,
                        });
                    }
                    last_term = Some(last_term.map_or(token, |p| p.max(token)));
                }
            }
            Event::Exit { client } => inside.retain(|c| c != client),
            Event::Accepted { token, .. } => {
                if let Some(high) = highest
                    && *token < high
                {
                    problems.push(Problem::TokenWentDown {
                        at,
                        highest: high,
                        token: *token,
                    });
                }
                highest = Some(highest.map_or(*token, |h| h.max(*token)));
            }
        }
    }
    problems
}

#[cfg(test)]
mod tests {
    use super::*;

    fn enter(client: &str, token: u64) -> Event {
        Event::Enter {
            client: client.into(),
            token: Some(token),
        }
    }
    fn exit(client: &str) -> Event {
        Event::Exit {
            client: client.into(),
        }
    }
    fn accepted(client: &str, token: u64) -> Event {
        Event::Accepted {
            client: client.into(),
            token,
        }
    }

    #[test]
    fn turns_one_after_another_pass() {
        let events = [
            enter("a", 1),
            accepted("a", 1),
            accepted("a", 1),
            exit("a"),
            enter("b", 2),
            accepted("b", 2),
            exit("b"),
        ];
        assert_eq!(check(&events, 1, true), []);
    }

    #[test]
    fn two_leaders_at_once_are_caught() {
        let events = [enter("a", 1), enter("b", 2), exit("a"), exit("b")];
        assert_eq!(
            check(&events, 1, true),
            [Problem::TooMany {
                at: 1,
                inside: vec!["a".into(), "b".into()]
            }]
        );
        // A semaphore of two allows it.
        assert_eq!(check(&events, 2, false), []);
    }

    #[test]
    fn an_accepted_write_with_a_lower_token_is_caught() {
        let events = [accepted("b", 5), accepted("a", 4)];
        assert_eq!(
            check(&events, 1, false),
            [Problem::TokenWentDown {
                at: 1,
                highest: 5,
                token: 4
            }]
        );
    }

    #[test]
    fn a_term_that_reuses_a_token_is_caught_for_leaders_only() {
        let events = [enter("a", 3), exit("a"), enter("b", 3), exit("b")];
        assert_eq!(
            check(&events, 1, true),
            [Problem::TermNotAbove {
                at: 2,
                previous: 3,
                token: 3
            }]
        );
        assert_eq!(check(&events, 1, false), []);
    }
}
