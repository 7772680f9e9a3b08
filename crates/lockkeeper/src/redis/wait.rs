//! Waiting for a lock without polling: try; if busy, subscribe, try again, then sleep until a
//! release is published or the current holder's lease would run out, whichever comes first.
//!
//! Every attempt runs in a task of its own. If the caller's future is dropped while an attempt
//! is on the wire, the task still sees the answer, and if the attempt won the lock it gives it
//! back at once: a cancelled `lock()` leaves nothing behind on the server.
//!
//! A timed wait is bounded as a whole (see [`crate::deadline`]): every request it sends must be
//! answered by [`WITHDRAWAL`] past the deadline, and the last attempt, made at the deadline,
//! doubles as the proof that the server still answers. So `Ok(None)` means the server said
//! "busy" at the deadline; a server that stopped answering is an error saying so, however
//! long the connection's own response timeout is.

use std::future::Future;
use std::time::Duration;

use redis::RedisError;
use tokio::sync::oneshot;
use tokio::time::Instant;

use super::conn::Conn;
use super::pubsub::Subscriber;
use crate::Result;
use crate::deadline::WITHDRAWAL;

/// What one attempt found.
pub(crate) enum Attempt<T> {
    /// The lock is ours.
    Acquired(T),
    /// Busy; the holder's lease ends in this long, if the server said.
    Busy(Option<Duration>),
}

/// How long to sleep when the server could not say when the lock frees up (a key without
/// expiry, say). Releases still wake the waiter at once; this only bounds a missed message.
const UNKNOWN_EXPIRY_WAIT: Duration = Duration::from_secs(1);

/// Runs one attempt in its own task. If the caller stops waiting (drops this future) before
/// the answer, `undo` gets the answer: it gives an acquisition back (and a waiter's place in
/// line).
pub(crate) async fn cancel_safe<T, A, U, UF>(conn: &Conn, attempt: A, undo: U) -> Result<Attempt<T>>
where
    T: Send + 'static,
    A: Future<Output = Result<Attempt<T>>> + Send + 'static,
    U: FnOnce(Attempt<T>) -> UF + Send + 'static,
    UF: Future<Output = ()> + Send + 'static,
{
    let (tx, rx) = oneshot::channel();
    // Counted as clean-up: an abandoned attempt's undo is what `Redis::close` waits for.
    conn.spawn_cleanup(&tokio::runtime::Handle::current(), async move {
        let outcome = attempt.await;
        if let Err(Ok(abandoned)) = tx.send(outcome) {
            undo(abandoned).await;
        }
    });
    match rx.await {
        Ok(outcome) => outcome,
        Err(_) => Err(RedisError::from((
            redis::ErrorKind::Client,
            "the lock attempt task ended without an answer",
        ))
        .into()),
    }
}

/// Tries until acquired or `deadline` (none: forever). `me` is the caller's place in the
/// lock's line (empty for locks without one): releases addressed to another waiter do not
/// wake it.
///
/// The first attempt goes out at once, so an uncontended lock costs one round trip. If it
/// finds the lock busy, the waiter subscribes to `channel` and only then tries again and
/// sleeps: a release that happened before the subscription was confirmed is seen by that
/// attempt, and one after it wakes the sleep, so none is missed.
pub(crate) async fn acquire<T, F, Fut>(
    subscriber: &Subscriber,
    channel: &str,
    me: &str,
    deadline: Option<Instant>,
    mut attempt: F,
) -> Result<Option<T>>
where
    F: FnMut() -> Fut,
    Fut: Future<Output = Result<Attempt<T>>>,
{
    let by = deadline.map(|deadline| deadline + WITHDRAWAL);
    if let Attempt::Acquired(held) = answered(by, "to an attempt", attempt()).await? {
        return Ok(Some(held));
    }
    let subscribe = async { Ok(subscriber.subscribe(channel).await?) };
    let mut subscription = answered(by, "to the subscription", subscribe).await?;
    loop {
        let retry_after = match answered(by, "to an attempt", attempt()).await? {
            Attempt::Acquired(held) => return Ok(Some(held)),
            Attempt::Busy(retry_after) => retry_after,
        };
        let now = Instant::now();
        if deadline.is_some_and(|deadline| now >= deadline) {
            return Ok(None);
        }
        // A little past the holder's expiry, plus jitter so that waiters of one lock do not
        // all arrive in the same instant.
        let jitter = Duration::from_micros(rand::random::<u64>() % 3000);
        let mut wake = now + retry_after.unwrap_or(UNKNOWN_EXPIRY_WAIT) + jitter;
        if let Some(deadline) = deadline {
            wake = wake.min(deadline);
        }
        // A release addressed to another waiter (the head of the line) is not ours to act
        // on: only one waiter wakes per release.
        loop {
            tokio::select! {
                addressee = subscription.changed() => match addressee {
                    Some(addressee) if !me.is_empty() && *addressee != *me => continue,
                    _ => break,
                },
                _ = tokio::time::sleep_until(wake) => break,
            }
        }
    }
}

/// `request`'s answer, if it comes by `by` (no bound without one); past it, the error of a
/// server that stopped answering, a timeout naming what went unanswered.
async fn answered<T>(
    by: Option<Instant>,
    what: &str,
    request: impl Future<Output = Result<T>>,
) -> Result<T> {
    let Some(by) = by else {
        return request.await;
    };
    match tokio::time::timeout_at(by, request).await {
        Ok(answer) => answer,
        Err(_) => Err(RedisError::from(std::io::Error::new(
            std::io::ErrorKind::TimedOut,
            format!(
                "the server is unreachable: no answer {what} within {WITHDRAWAL:?} of the \
                 deadline"
            ),
        ))
        .into()),
    }
}

/// The deadline `timeout` from now; a zero timeout is refused.
pub(crate) fn deadline_in(timeout: Duration) -> Result<Instant> {
    if timeout.is_zero() {
        return Err(crate::Error::InvalidArgument(
            "timeout must be greater than zero (use try_lock for a single attempt)".into(),
        ));
    }
    Ok(Instant::now() + timeout)
}
