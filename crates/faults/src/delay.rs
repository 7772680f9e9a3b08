//! A slow link without `netem` (this kernel has none): the `delay` subcommand, run inside a
//! host's network namespace, takes the packets an iptables `NFQUEUE` rule hands it and lets
//! each through after a latency plus a random jitter, in the order they came (a later packet
//! never overtakes an earlier one, so TCP sees a slow link, not a reordering one).
//!
//! Invariants: every packet it took gets its verdict (accept) once due; it runs until killed
//! (the orchestrator kills it by PID when the fault ends), and the rule that feeds it is added
//! with `--queue-bypass`, so once it is gone packets pass untouched.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use rand::Rng;

/// Holds every packet of netfilter queue `queue` for `latency` plus up to `jitter`, then
/// accepts it; returns only on an error.
pub(crate) fn run(queue: u16, latency: Duration, jitter: Duration) -> std::io::Result<()> {
    let mut nfq = nfq::Queue::open()?;
    nfq.bind(queue)?;
    nfq.set_nonblocking(true);
    let mut rng = rand::thread_rng();
    let mut held: VecDeque<(Instant, nfq::Message)> = VecDeque::new();
    let mut last = Instant::now();
    loop {
        loop {
            match nfq.recv() {
                Ok(message) => {
                    let extra = if jitter.is_zero() {
                        Duration::ZERO
                    } else {
                        rng.gen_range(Duration::ZERO..=jitter)
                    };
                    let due = (Instant::now() + latency + extra).max(last);
                    last = due;
                    held.push_back((due, message));
                }
                Err(err) if err.kind() == std::io::ErrorKind::WouldBlock => break,
                Err(err) => return Err(err),
            }
        }
        while held.front().is_some_and(|(due, _)| *due <= Instant::now()) {
            if let Some((_, mut message)) = held.pop_front() {
                message.set_verdict(nfq::Verdict::Accept);
                nfq.verdict(message)?;
            }
        }
        std::thread::sleep(Duration::from_micros(500));
    }
}
