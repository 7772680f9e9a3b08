//! `lockkeeper lock` as an operator runs it: the built binary as real processes against Keeper,
//! Apache ZooKeeper, redis-server (single, Sentinel and Cluster) and Curator's
//! `InterProcessMutex`.
//!
//! What is pinned, a module each: mutual exclusion among concurrent `lockkeeper lock` processes
//! and Curator holders (`exclusion`: an O_EXCL marker file that two holders at once would
//! collide on); that a lost lock stops the command's whole process group and exits 76 naming
//! the cause, and what is not a loss (`loss`: a holder frozen past its session or lease, a
//! revocation, a deleted node, SIGKILL after `--kill-after`, signal forwarding, a server
//! restart, a semaphore lease that is not asked but can be forced); the exit codes
//! (`exit_codes`); a server killed or frozen under a `--timeout` wait or a running command
//! (`backend_faults`); what the messages say (`messages`); the other lock kinds and backends
//! (`shapes`: semaphore, read-write, Sentinel, Cluster); etcd (`etcd`, with the `etcd`
//! feature: exclusion among commands and with `etcdctl lock`, loss, unreachable members). The
//! processes and their bounded waits are in `support`.
//!
//! Every wait is bounded: a process that does not finish in time is killed (by its PID) and the
//! test fails with what it printed.

mod backend_faults;
#[cfg(feature = "etcd")]
mod etcd;
mod exclusion;
mod exit_codes;
/// Keeper as a process of its own (`lockkeeper serve`), which a test can SIGKILL (the module
/// allows its own unused parts).
#[path = "../support/mod.rs"]
mod keeper_process;
mod loss;
mod messages;
mod shapes;
mod support;
mod tls;
