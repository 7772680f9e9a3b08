//! Checkers: one per recipe family, each a pure function from a recorded history to the
//! problems in it, so each can be shown catching the violation it exists for (its tests feed
//! it one) before it is trusted with a scenario's history.
//!
//! - [`exclusion`]: locks, write locks, semaphores with N leases, leaders: never more than N
//!   inside at the resource; accepted tokens never go down; a leader's term tokens rise.
//! - [`two_phase`]: no commit unless every standing vote was commit; one outcome for all.
//!   [`standing`] reads the votes standing at each decision from the servers' transaction log
//!   (Keeper's, or Apache ZooKeeper's through [`zk_log`]).
//!   [`standing`] reads the votes standing at each decision from the servers' transaction log
//!   (Keeper's, or Apache ZooKeeper's through [`zk_log`]).
//! - [`barrier`]: nobody passes before N entered; no round overtakes the one before.
//! - [`queue`]: every acknowledged put taken at least once; duplicates counted.
//! - [`cache`]: after the fault heals, every tree cache holds the server's tree and every
//!   name watch the name's address.
//! - [`counter`]: linearizability of increments, reads and compare-and-sets: Wing and Gong's
//!   search with Lowe's memoization, the algorithm of Knossos and Porcupine, written here over
//!   the counter's own model.

//!
//! The exclusion checker runs on every lock scenario's resource, the counter checker on the
//! `atomic-long` scenarios, the queue checker on the `queue` scenarios, the two-phase commit
//! checker on the `two-phase` scenarios, the barrier checker on the `double-barrier` scenarios,
//! the cache checker on the `tree-cache` scenarios.

pub(crate) mod barrier;
pub(crate) mod cache;
pub(crate) mod counter;
pub(crate) mod exclusion;
pub(crate) mod queue;
pub(crate) mod standing;
pub(crate) mod two_phase;
pub(crate) mod zk_log;
