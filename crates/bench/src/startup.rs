//! Time from spawning a server to its first accepted session: the start-up figure of
//! `lockkeeper-bench --compare`, and the wait before any other measurement.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use futures::future::{AbortHandle, Abortable};
use futures::stream::FuturesUnordered;
use futures::{FutureExt, StreamExt};
use lockkeeper_zk_client as zk;

use super::BoxError;
use super::process::ChildServer;
use super::stats;
use super::workload::close_session;

/// Pending session attempts beyond which the oldest is abandoned.
const MAX_ATTEMPTS_IN_FLIGHT: usize = 32;

/// Bound on one session attempt.
const ATTEMPT_LIMIT: Duration = Duration::from_secs(5);

/// Pause between the starts of two session attempts: 1% of the time waited so far, at least a
/// millisecond. The figure is then never off by more than about 1%, and a slow starter is not
/// slowed further by a flood of connections it has to turn away.
fn attempt_period(waited: Duration) -> Duration {
    (waited / 100).max(Duration::from_millis(1))
}

/// One try at a session: handshake, then a request that must be answered.
async fn try_session(addr: &str) -> Result<zk::Client, zk::Error> {
    // The client retries a refusing host until its connection timeout; the attempts overlap
    // anyway, so an early one that is refused and retries only adds chances.
    let client = zk::Client::connector()
        .session_timeout(Duration::from_secs(10))
        .connect(addr)
        .await?;
    client.check_stat("/").await?;
    Ok(client)
}

/// Polls `server` until a session is established and a request on it is answered; returns the
/// time since spawn.
///
/// Attempts overlap: new ones start (see [`attempt_period`]) while earlier ones are still
/// pending, and past [`MAX_ATTEMPTS_IN_FLIGHT`] the oldest is abandoned. A server may accept a TCP
/// connection early in its start-up and never answer it (Apache ZooKeeper does so with the
/// connections that arrive just after it binds its port; later ones are closed until it is ready,
/// then served). Waiting for such an attempt to time out would add seconds that say nothing about
/// when the server became ready.
pub(crate) async fn first_session(
    server: &mut ChildServer,
    limit: Duration,
) -> Result<Duration, BoxError> {
    let addr = server.addr().to_string();
    let deadline = server.spawned_at() + limit;
    let mut attempts = FuturesUnordered::new();
    // Abort handles of the pending attempts, oldest first, with the attempt's number.
    let mut pending: VecDeque<(u64, AbortHandle)> = VecDeque::new();
    let mut launched = 0u64;
    let mut next_attempt = Instant::now();
    loop {
        let now = Instant::now();
        if now >= next_attempt {
            if pending.len() >= MAX_ATTEMPTS_IN_FLIGHT
                && let Some((_, oldest)) = pending.pop_front()
            {
                oldest.abort();
            }
            let (handle, registration) = AbortHandle::new_pair();
            let id = launched;
            launched += 1;
            let attempt = tokio::time::timeout(ATTEMPT_LIMIT, try_session(&addr));
            attempts.push(Abortable::new(attempt, registration).map(move |outcome| (id, outcome)));
            pending.push_back((id, handle));
            next_attempt = now + attempt_period(now - server.spawned_at());
        }
        tokio::select! {
            Some((id, outcome)) = attempts.next() => {
                if let Ok(Ok(Ok(client))) = outcome {
                    let elapsed = server.spawned_at().elapsed();
                    close_session(client).await;
                    return Ok(elapsed);
                }
                pending.retain(|(pending_id, _)| *pending_id != id);
            }
            _ = tokio::time::sleep_until(next_attempt.into()) => {}
        }
        if let Some(status) = server.exited() {
            return Err(format!(
                "{} exited ({status}) before accepting a session; its last output:\n{}",
                server.kind(),
                server.log_tail(20)
            )
            .into());
        }
        if Instant::now() >= deadline {
            return Err(format!(
                "{} accepted no session within {}; its last output:\n{}",
                server.kind(),
                stats::fmt_duration(limit),
                server.log_tail(20)
            )
            .into());
        }
    }
}

#[cfg(test)]
mod tests {
    use super::super::process::tests::{script_launcher, spawn_script};
    use super::*;

    #[tokio::test]
    async fn a_server_that_never_listens_is_given_up_on_in_time() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut server = spawn_script(&script_launcher(dir.path(), "exec sleep 60"));
        let started = Instant::now();
        let err = first_session(&mut server, Duration::from_millis(500))
            .await
            .expect_err("nothing listens");
        assert!(
            err.to_string().contains("accepted no session within"),
            "{err}"
        );
        assert!(started.elapsed() < Duration::from_secs(10));
    }

    #[tokio::test]
    async fn a_server_that_exits_is_reported_with_its_output() {
        let dir = tempfile::tempdir().expect("tempdir");
        let mut server = spawn_script(&script_launcher(dir.path(), "echo cannot bind >&2; exit 2"));
        let err = first_session(&mut server, Duration::from_secs(30))
            .await
            .expect_err("server exits");
        let text = err.to_string();
        assert!(text.contains("exited"), "{text}");
        assert!(text.contains("cannot bind"), "{text}");
    }
}
