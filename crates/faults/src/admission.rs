//! Who is inside the resource, for a lock that admits `capacity` holders at once (1, or N for a
//! semaphore of N leases): the unfenced side's overlaps and the stale writes.
//!
//! Invariants: a client is inside from its enter until its exit (or its connection's end);
//! an enter while `capacity` others are inside overlaps each of their turns, each counted once;
//! `recent` holds the last `capacity` distinct clients to enter, the latest last.

use std::collections::{HashMap, VecDeque};

/// A client inside.
#[derive(Clone, Copy, Debug)]
struct Inside {
    /// Whether its turn was overlapped (counted once).
    overlapped: bool,
    /// The token it entered with, if its lock has tokens.
    token: Option<u64>,
}

/// The clients inside and the latest to enter.
#[derive(Debug)]
pub(crate) struct Admission {
    capacity: usize,
    inside: HashMap<String, Inside>,
    recent: VecDeque<String>,
}

impl Admission {
    /// For a lock of `capacity` holders at once (at least 1).
    pub(crate) fn new(capacity: usize) -> Admission {
        Admission {
            capacity: capacity.max(1),
            inside: HashMap::new(),
            recent: VecDeque::new(),
        }
    }

    /// How many holders the lock admits at once.
    pub(crate) fn capacity(&self) -> usize {
        self.capacity
    }

    /// `client` enters with `token`; returns how many turns this overlapped that were not
    /// overlapped before.
    pub(crate) fn enter(&mut self, client: &str, token: Option<u64>) -> u64 {
        let mut overlapped = 0;
        let others = self.inside.keys().filter(|other| *other != client).count();
        if others >= self.capacity {
            for (other, inside) in &mut self.inside {
                if other != client && !inside.overlapped {
                    inside.overlapped = true;
                    overlapped += 1;
                }
            }
        }
        let entered = Inside {
            overlapped: false,
            token,
        };
        self.inside.insert(client.to_owned(), entered);
        self.recent.retain(|c| c != client);
        self.recent.push_back(client.to_owned());
        if self.recent.len() > self.capacity {
            self.recent.pop_front();
        }
        overlapped
    }

    /// `client` is out.
    pub(crate) fn exit(&mut self, client: &str) {
        self.inside.remove(client);
    }

    /// The latest client to enter, if it is still inside.
    pub(crate) fn holder(&self) -> Option<&str> {
        self.recent
            .back()
            .map(String::as_str)
            .filter(|latest| self.inside.contains_key(*latest))
    }

    /// Whether `client` is among the last clients to enter, as many as the lock admits: the
    /// lock has not passed on past it.
    pub(crate) fn is_recent(&self, client: &str) -> bool {
        self.recent.iter().any(|c| c == client)
    }

    /// Whether `client`'s write is stale: the lock passed on past it. With one holder at a
    /// time, someone entered after it. With several, it is not inside, or it is one of those
    /// inside beyond what the lock admits with the lowest tokens (granted first, so theirs are
    /// the leases that lapsed); without tokens, its turn was overlapped.
    pub(crate) fn is_stale(&self, client: &str) -> bool {
        if self.capacity == 1 {
            return self.recent.back().map(String::as_str) != Some(client);
        }
        let Some(inside) = self.inside.get(client) else {
            return true;
        };
        match inside.token {
            Some(token) => {
                let newer = self
                    .inside
                    .values()
                    .filter(|other| other.token.is_some_and(|t| t > token))
                    .count();
                newer >= self.capacity
            }
            None => inside.overlapped,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn one_holder_a_second_enter_overlaps_and_makes_the_first_stale() {
        let mut lock = Admission::new(1);
        assert_eq!(lock.enter("a", Some(1)), 0);
        assert!(!lock.is_stale("a"));
        assert_eq!(lock.holder(), Some("a"));
        assert_eq!(lock.enter("b", Some(2)), 1, "a's turn overlapped");
        assert!(lock.is_stale("a") && !lock.is_stale("b"));
        assert_eq!(lock.enter("c", Some(3)), 1, "b's; a's counted already");
        lock.exit("c");
        assert_eq!(lock.holder(), None, "the latest left");
        assert!(!lock.is_recent("b") && lock.is_recent("c"));
    }

    #[test]
    fn two_holders_a_third_overlaps_and_the_lowest_token_is_stale() {
        let mut lock = Admission::new(2);
        assert_eq!(lock.enter("a", Some(1)), 0);
        assert_eq!(lock.enter("b", Some(2)), 0, "two are allowed");
        assert!(!lock.is_stale("a") && !lock.is_stale("b"));
        assert!(lock.is_recent("a"));
        assert_eq!(lock.enter("c", Some(3)), 2, "a third overlaps both");
        assert!(lock.is_stale("a"), "its lease lapsed: two newer inside");
        assert!(!lock.is_stale("b") && !lock.is_stale("c"));
        assert!(!lock.is_recent("a"), "two entered after it");
        lock.exit("a");
        assert!(lock.is_stale("a"), "not inside");
        assert_eq!(
            lock.enter("d", Some(4)),
            1,
            "c's turn; b's was counted already"
        );
    }

    #[test]
    fn without_tokens_an_overlapped_turn_is_stale() {
        let mut lock = Admission::new(2);
        lock.enter("a", None);
        lock.enter("b", None);
        assert!(!lock.is_stale("a"));
        lock.enter("c", None);
        assert!(lock.is_stale("a") && lock.is_stale("b") && !lock.is_stale("c"));
    }
}
