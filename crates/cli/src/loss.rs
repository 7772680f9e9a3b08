//! Why a lock or leadership was lost, in words an operator can act on: this process was paused
//! past its deadline, the server was not heard from until the local deadline passed (the
//! session or lease could not be renewed), the node or key was deleted behind the holder, or
//! the session expired. "Lost" alone sends an operator looking at the wrong machine.
//!
//! The guards only say *that* the lock is lost, so the cause is established here, from what
//! this process can see without the guard's help: [`observe`] waits for the loss while it
//! samples the guard's local deadline and the clock (a gap between two samples far longer than
//! their period is a pause of the whole process: SIGSTOP, a stalled VM), and after the loss
//! the backend is asked (within [`ASK_LIMIT`]) whether the node or key is still there.
//!
//! Invariants: deriving the cause never delays the loss's consequences by more than
//! [`ASK_LIMIT`]; a cause is named only from evidence (a pause measured, a deadline seen
//! passed, the backend's answer), otherwise the message says the cause is not known.

use std::future::Future;
use std::time::Duration;

use lockkeeper::FencingToken;
use lockkeeper::zk::Session;
use tokio::time::Instant;

/// How often the local deadline and the clock are sampled while the lock is held.
const TICK: Duration = Duration::from_millis(100);

/// A gap between samples at least this long is this process having been paused.
const PAUSE: Duration = Duration::from_secs(1);

/// A pause that ended this long before the loss was reported still explains it (the loss is
/// noticed at the first look after the resume, which may be a heartbeat's round trip later).
const PAUSE_RECENT: Duration = Duration::from_secs(5);

/// How long asking the backend about the node or key may take after a loss.
pub(crate) const ASK_LIMIT: Duration = Duration::from_secs(1);

/// What was seen up to the loss.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Observed {
    /// When the loss was reported.
    pub at: Instant,
    /// The last local deadline the guard gave before the loss.
    pub valid_until: Option<Instant>,
    /// The longest pause of this process that ended within [`PAUSE_RECENT`] of the loss (or
    /// that the loss itself ended).
    pub paused: Option<Duration>,
}

/// Waits for `lost`, sampling `valid_until` and the clock meanwhile; see the module docs.
/// `since` is when watching began (the grant, before the command was started): a pause
/// between then and this future's first poll counts as one too.
pub(crate) async fn observe(
    lost: impl Future<Output = ()>,
    valid_until: impl Fn() -> Option<Instant>,
    since: Instant,
) -> Observed {
    tokio::pin!(lost);
    let mut last_tick = since;
    let mut until = valid_until();
    let mut pause: Option<(Duration, Instant)> = None;
    loop {
        tokio::select! {
            // On a resume both are ready: the loss first, so the gap is still measurable.
            biased;
            () = &mut lost => break,
            () = tokio::time::sleep(TICK) => {
                let now = Instant::now();
                let gap = now - last_tick;
                if gap >= PAUSE {
                    pause = Some((gap, now));
                }
                last_tick = now;
                if let Some(now_until) = valid_until() {
                    until = Some(now_until);
                }
            }
        }
    }
    let at = Instant::now();
    let gap = at - last_tick;
    let paused = if gap >= PAUSE {
        Some(gap)
    } else {
        pause
            .filter(|(_, ended)| at - *ended <= PAUSE_RECENT)
            .map(|(gap, _)| gap)
    };
    Observed {
        at,
        valid_until: until,
        paused,
    }
}

impl Observed {
    /// The cause this process can name by itself: a pause of its own, or its local deadline
    /// passed without the backend renewing it. `grant` names what ran out ("ZooKeeper session",
    /// "Redis lease", "etcd lease"); `unheard` says what that means on this backend.
    pub(crate) fn local_cause(&self, grant: &str, unheard: &str) -> Option<String> {
        if let Some(paused) = self.paused {
            return Some(format!(
                "local deadline passed: this process was paused for {:.1}s (SIGSTOP, a stalled \
                 machine), past the end of its {grant}, which may have been given to someone \
                 else meanwhile",
                paused.as_secs_f64()
            ));
        }
        match self.valid_until {
            Some(until) if until <= self.at => Some(format!(
                "local deadline passed: {unheard}, so the {grant} may have ended on the server"
            )),
            _ => None,
        }
    }
}

/// The cause of a ZooKeeper loss that [`Observed::local_cause`] did not explain: asks the
/// server (within [`ASK_LIMIT`]) whether `node`, granted with `token`, is still there.
pub(crate) async fn zk_cause(session: &Session, node: &str, token: FencingToken) -> String {
    use lockkeeper::zk::ConnectionState;
    const EXPIRED: &str = "the ZooKeeper session expired: the server ended it, and the lock node \
                           with it";
    if matches!(
        session.state(),
        ConnectionState::Lost | ConnectionState::Closed
    ) {
        return EXPIRED.to_owned();
    }
    let Ok(client) = session.client() else {
        return EXPIRED.to_owned();
    };
    match tokio::time::timeout(ASK_LIMIT, client.check_stat(node)).await {
        Ok(Ok(None)) => format!(
            "the lock node {node} was deleted by another client (an operator's delete, \
             `lockkeeper revoke --force`, or another tool): the lock is lost"
        ),
        Ok(Ok(Some(stat))) if stat.czxid as u64 != token.get() => format!(
            "the lock node {node} was deleted and created anew by another session: the lock is \
             lost"
        ),
        Ok(Ok(Some(_))) => "the ZooKeeper connection was suspended and the session could not \
                            be trusted any more (its lock node is still there): the lock is \
                            given up"
            .to_owned(),
        Ok(Err(lockkeeper_zk_client::Error::SessionExpired)) => EXPIRED.to_owned(),
        Ok(Err(err)) => format!(
            "the ZooKeeper session could not be trusted any more, and asking the server about \
             {node} failed ({err}): the lock is given up"
        ),
        Err(_) => format!(
            "the ZooKeeper server did not answer within {ASK_LIMIT:?} (unreachable), so the \
             session may have expired: the lock is given up"
        ),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_deadline_seen_passed_is_named() {
        let until = Instant::now() + Duration::from_millis(150);
        let observed = observe(
            tokio::time::sleep_until(until),
            || Some(until),
            Instant::now(),
        )
        .await;
        let cause = observed
            .local_cause("lease", "nothing heard")
            .expect("a cause");
        assert!(cause.contains("local deadline passed"), "{cause}");
        assert!(!cause.contains("paused"), "{cause}");
    }

    /// A pause between the grant and the first look (the process stopped while its command
    /// was starting) is still this process's pause.
    #[tokio::test]
    async fn a_pause_before_the_first_look_counts() {
        let since = Instant::now() - Duration::from_secs(3);
        let until = Instant::now() + Duration::from_secs(60);
        let observed = observe(std::future::ready(()), || Some(until), since).await;
        let cause = observed
            .local_cause("lease", "nothing heard")
            .expect("a cause");
        assert!(cause.contains("this process was paused for 3."), "{cause}");
    }

    #[tokio::test]
    async fn a_loss_inside_the_deadline_is_not_explained_locally() {
        let until = Instant::now() + Duration::from_secs(60);
        let lost = tokio::time::sleep(Duration::from_millis(150));
        let observed = observe(lost, || Some(until), Instant::now()).await;
        assert_eq!(observed.local_cause("lease", "nothing heard"), None);
    }
}
